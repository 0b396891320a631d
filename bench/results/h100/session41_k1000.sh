# Session 41 device script: every GPU test of COMMIT, then `vlc groundtruth -k 1000` (1,258 candidates per query and
# block, past the GPUs' 256-pick radix selection) on 200,000 x 384 synthetic vectors with 2,000 queries: the build
# before session 41 (vlc_old, 302c6dc's library: each GPU selects with a scan per pick) and COMMIT (the CPU ranks and
# says so), on CPU (all cores), CUDA and WGPU; then k 199 (256 candidates, the radix selection) with COMMIT.
# Carry: .carry/gpu41c.tar.xz (vlc and the GPU test executables of COMMIT, vlc_old) and .gl.
# Usage: bash bench/results/h100/session41_k1000.sh COMMIT
set -u
tar -C .carry -xJf .carry/gpu41c.tar.xz; B=.carry/gpu41c; export PATH=$PWD/$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
echo "== GPU tests (--test-threads 1)"
echo "\$ cuda_conf with VLC_CUDA_SMALL_WORK=0"; VLC_CUDA_SMALL_WORK=0 cuda_conf --test-threads 1 2>&1 | grep -E "test result|panicked"
for t in cuda_conf cuda_unit cuda_search wgpu_conf wgpu_search; do echo "\$ $t"; $t --test-threads 1 2>&1 | grep -E "test result|panicked|SKIP|conformance on"; done
T=$(mktemp -d)
python3 - "$T" <<'PY'
import sys, numpy as np
r = np.random.default_rng(40)
c = r.standard_normal((1000, 384)).astype(np.float32)
x = c[r.integers(0, 1000, 200_000)] + 0.6 * r.standard_normal((200_000, 384)).astype(np.float32)
x /= np.linalg.norm(x, axis=1, keepdims=True)
q = x[r.integers(0, 200_000, 2_000)] + 0.3 * r.standard_normal((2_000, 384)).astype(np.float32)
q /= np.linalg.norm(q, axis=1, keepdims=True)
np.save(sys.argv[1] + "/base.npy", x); np.save(sys.argv[1] + "/query.npy", q)
np.save(sys.argv[1] + "/small.npy", x[:20_000]); np.save(sys.argv[1] + "/smallq.npy", q[:100])
PY
for v in vlc_old vlc; do for b in cuda wgpu; do $v groundtruth $T/small.npy $T/smallq.npy -o $T/warm.npy --backend $b -k 100 -q > /dev/null 2>&1; done; done
run() { echo "\$ $1 groundtruth base.npy query.npy -o $2.npy --backend $3 -k $4"; timeout 200 $1 groundtruth $T/base.npy $T/query.npy -o $T/$2.npy --backend $3 -k $4 --json 2>&1 | grep -E '"seconds"|"rescanned"|backend"|note|rror'; }
echo "== 200,000 x 384, 2,000 queries, k 1000"
for b in cpu cuda wgpu; do run vlc_old old_$b $b 1000; run vlc new_$b $b 1000; done
vlc groundtruth $T/base.npy $T/query.npy -o $T/note.npy --backend cuda -k 1000 2>&1 | grep -E "note|exact"
for r in old_cpu old_cuda old_wgpu new_cuda new_wgpu; do for f in npy distances.npy; do cmp -s $T/new_cpu.$f $T/$r.$f && echo "  $r $f: identical to new_cpu" || echo "  $r $f: DIFFERS from new_cpu"; done; done
echo "== k 199 (256 candidates per block: the GPUs' own radix selection)"
for b in cpu cuda wgpu; do run vlc k199_$b $b 199; done
for r in k199_cuda k199_wgpu; do cmp -s $T/k199_cpu.npy $T/$r.npy && echo "  $r: identical to cpu" || echo "  $r: DIFFERS from cpu"; done
