# Session 42 device script, run 4 (the review's refactor of nearest.wgsl: `distances` and
# `nearest_fused_wide` share `stage_wide` and the `Block8` multiply-adds): COMMIT against vlc_prev
# (cdcc76b). FP32 training through `nearest_fused_wide` (VLC_WGPU_COOP=0: no tensor-core kernel),
# 200,000 x 384, 4,096 anchors, 20 iterations, and `vlc groundtruth --backend wgpu`, 1,000,000 x
# 384 (session 41's run 2 data), each twice in turn; then COMMIT's WGPU tests, with the
# cooperative-matrix kernel and without it.
# Carry: .carry/s45.tar.xz (vlc, vlc_prev, wgpu_conformance, wgpu_search) and .gl.
# Usage: bash bench/results/h100/session42_review.sh COMMIT
set -u
tar -C .carry -xJf .carry/s45.tar.xz; B=.carry/s45; export PATH=$PWD/$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
T=$(mktemp -d)
python3 - "$T" <<'PY'
import sys, numpy as np
r = np.random.default_rng(40)
c = r.standard_normal((1000, 384)).astype(np.float32)
x = c[r.integers(0, 1000, 1_000_000)] + 0.6 * r.standard_normal((1_000_000, 384)).astype(np.float32)
x /= np.linalg.norm(x, axis=1, keepdims=True)
q = x[r.integers(0, 1_000_000, 10_000)] + 0.3 * r.standard_normal((10_000, 384)).astype(np.float32)
q /= np.linalg.norm(q, axis=1, keepdims=True)
np.save(sys.argv[1] + "/base.npy", x); np.save(sys.argv[1] + "/query.npy", q)
np.save(sys.argv[1] + "/train.npy", x[:200_000])
np.save(sys.argv[1] + "/small.npy", x[:20_000]); np.save(sys.argv[1] + "/smallq.npy", q[:100])
PY
for v in vlc_prev vlc; do $v groundtruth $T/small.npy $T/smallq.npy -o $T/warm.npy --backend wgpu -k 100 -q > /dev/null 2>&1; VLC_WGPU_COOP=0 $v train-bench $T/small.npy --anchors 256 --iterations 2 --backend wgpu > /dev/null 2>&1; done
echo "== FP32 training on WGPU (VLC_WGPU_COOP=0), 200,000 x 384, 4,096 anchors, 20 iterations"
for rep in 1 2; do for v in vlc_prev vlc; do echo "\$ VLC_WGPU_COOP=0 $v train-bench train.npy --anchors 4096 --iterations 20 --backend wgpu"; VLC_WGPU_COOP=0 timeout 200 $v train-bench $T/train.npy --anchors 4096 --iterations 20 --backend wgpu 2>&1 | tail -1; done; done
echo "== ground truth on WGPU, 1,000,000 x 384, 10,000 queries, k 100"
run() { echo "\$ $1 groundtruth base.npy query.npy -o $2.npy --backend wgpu -k 100"; timeout 100 /usr/bin/time -f "  %e s wall, %M KB peak" $1 groundtruth $T/base.npy $T/query.npy -o $T/$2.npy --backend wgpu -k 100 --json 2>&1 | grep -E '"seconds"|"rescanned"|wall|rror'; }
for rep in 1 2; do run vlc_prev prev; run vlc new; done
for f in npy distances.npy; do cmp -s $T/prev.$f $T/new.$f && echo "  new $f: identical to prev" || echo "  new $f: DIFFERS from prev"; done
echo "== WGPU test executables (COMMIT's), as is and with VLC_WGPU_COOP=0"
for c in 1 0; do
  VLC_WGPU_COOP=$c wgpu_conformance --nocapture 2>&1 | grep -E "conformance on|test result|FAILED|panicked" | sort | uniq -c
  VLC_WGPU_COOP=$c wgpu_search 2>&1 | grep -E "test result|FAILED|panicked"
done
