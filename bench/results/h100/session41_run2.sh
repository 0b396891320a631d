# Session 41 device script, run 2: `vlc groundtruth` of COMMIT against the build before session 41 (vlc_old,
# 302c6dc's library) on CPU (all cores), CUDA and WGPU on 1,000,000 x 384 synthetic vectors (as run 1), after a
# small warm-up run per GPU backend (so that NVRTC's compilation and the kernel cache do not fall on either side).
# Carry: .carry/gpu41b.tar.xz (vlc of COMMIT, vlc_old) and .gl.
# Usage: bash bench/results/h100/session41_run2.sh COMMIT
set -u
tar -C .carry -xJf .carry/gpu41b.tar.xz; B=.carry/gpu41b; export PATH=$PWD/$B:$PATH
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
np.save(sys.argv[1] + "/small.npy", x[:20_000]); np.save(sys.argv[1] + "/smallq.npy", q[:100])
PY
for v in vlc_old vlc; do for b in cuda wgpu; do $v groundtruth $T/small.npy $T/smallq.npy -o $T/warm.npy --backend $b -k 100 -q > /dev/null 2>&1; done; done
run() { echo "\$ $1 groundtruth base.npy query.npy -o $2.npy --backend $3 -k $4"; timeout 200 /usr/bin/time -f "  %e s wall, %M KB peak" $1 groundtruth $T/base.npy $T/query.npy -o $T/$2.npy --backend $3 -k $4 --json 2>&1 | grep -E '"seconds"|"rescanned"|wall|rror'; }
for k in 100 10; do
  echo "== 1,000,000 x 384, 10,000 queries, k $k"
  for b in cpu cuda wgpu; do run vlc_old old_$b$k $b $k; run vlc new_$b$k $b $k; done
  for r in old_cpu old_cuda old_wgpu new_cuda new_wgpu; do for f in npy distances.npy; do cmp -s $T/new_cpu$k.$f $T/$r$k.$f && echo "  $r$k $f: identical to new_cpu$k" || echo "  $r$k $f: DIFFERS from new_cpu$k"; done; done
done
