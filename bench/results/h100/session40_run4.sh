# Session 40 device script, run 4: GPU tests of the WGPU radix-selection commit (CUDA and WGPU), then `vlc
# groundtruth` on WGPU and CUDA against the CPU on 1,000,000 x 384 synthetic vectors (as run 3).
# Carry: .carry/gpu40.tar.xz (vlc and the GPU test executables of COMMIT) and .gl.
# Usage: bash bench/results/h100/session40_run4.sh COMMIT
set -u
tar -C .carry -xJf .carry/gpu40.tar.xz; B=.carry/gpu40; export PATH=$PWD/$B:$PATH
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
x = c[r.integers(0, 1000, 1_000_000)] + 0.6 * r.standard_normal((1_000_000, 384)).astype(np.float32)
x /= np.linalg.norm(x, axis=1, keepdims=True)
q = x[r.integers(0, 1_000_000, 10_000)] + 0.3 * r.standard_normal((10_000, 384)).astype(np.float32)
q /= np.linalg.norm(q, axis=1, keepdims=True)
np.save(sys.argv[1] + "/base.npy", x); np.save(sys.argv[1] + "/query.npy", q)
PY
run() { echo "\$ vlc groundtruth base.npy query.npy -o $1.npy --backend $2 -k 100"; timeout 200 /usr/bin/time -f "  %e s wall, %M KB peak" vlc groundtruth $T/base.npy $T/query.npy -o $T/$1.npy --backend $2 -k 100 --json 2>&1 | grep -E '"seconds"|"rescanned"|wall|rror'; }
echo "== 1,000,000 x 384, 10,000 queries, k 100"
run cpu cpu; run cuda cuda; run wgpu wgpu
for b in cuda wgpu; do for f in npy distances.npy; do cmp -s $T/cpu.$f $T/$b.$f && echo "  $b $f: identical to cpu" || echo "  $b $f: DIFFERS from cpu"; done; done
