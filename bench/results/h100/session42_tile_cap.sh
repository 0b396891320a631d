# Session 42 device script, run 6: the pooled WGPU distance tile capped at 1 GiB (COMMIT) against
# no cap (vlc_prev, 94a17e0: ground truth's tile was 1.75 GB per block, 10,000 queries x 43,690
# rows), `vlc groundtruth --backend wgpu`, 1,000,000 x 384 (session 41's run 2 data), k 100 and
# 10, three times each in turn, lists compared; then COMMIT's WGPU tests (tensor-core kernel on
# and off).
# Carry: .carry/s46.tar.xz (vlc, vlc_prev, wgpu_conformance, wgpu_search) and .gl.
# Usage: bash bench/results/h100/session42_tile_cap.sh COMMIT
set -u
tar -C .carry -xJf .carry/s46.tar.xz; export PATH=$PWD/.carry/s46:$PATH
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
PY
for v in vlc_prev vlc; do $v groundtruth $T/base.npy $T/query.npy -o $T/w.npy --backend wgpu -k 100 -q > /dev/null 2>&1; done
run() { echo "\$ $1 groundtruth base.npy query.npy -o $2.npy --backend wgpu -k $3"; timeout 100 /usr/bin/time -f "  %e s wall, %M KB peak" $1 groundtruth $T/base.npy $T/query.npy -o $T/$2.npy --backend wgpu -k $3 --json 2>&1 | grep -E '"seconds"|wall|rror'; }
for k in 100 10; do
  echo "== 1,000,000 x 384, 10,000 queries, k $k"
  for rep in 1 2 3; do run vlc_prev prev$k $k; run vlc new$k $k; done
  for f in npy distances.npy; do cmp -s $T/prev$k.$f $T/new$k.$f && echo "  new$k $f: identical to prev$k" || echo "  new$k $f: DIFFERS from prev$k"; done
done
echo "== WGPU test executables (COMMIT's), as is and with VLC_WGPU_COOP=0"
for c in 1 0; do
  VLC_WGPU_COOP=$c wgpu_conformance --nocapture 2>&1 | grep -E "conformance on|test result|FAILED|panicked" | sort | uniq -c
  VLC_WGPU_COOP=$c wgpu_search 2>&1 | grep -E "test result|FAILED|panicked"
done
