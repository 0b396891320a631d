# Session 42 device script, run 7 (the final code): `vlc groundtruth` of COMMIT against session 41's
# final library (vlc_s41: 1cfe34d's, built with session 42's inert VLC_PROF_SKIP_SELECT switch, unset
# here) on CUDA, WGPU and CPU (all cores), 1,000,000 x 384 synthetic vectors, 10,000 queries (session
# 41's run 2 data), k 100 and 10, GPU runs twice in turn after a warm-up; every list compared with
# COMMIT's CUDA lists. Then COMMIT's CUDA and WGPU test executables.
# Carry: .carry/s47.tar.xz (vlc, vlc_s41, cuda_unit, cuda_conformance, cuda_search,
# wgpu_conformance, wgpu_search) and .gl.
# Usage: bash bench/results/h100/session42_final.sh COMMIT
set -u
tar -C .carry -xJf .carry/s47.tar.xz; export PATH=$PWD/.carry/s47:$PATH
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
for v in vlc_s41 vlc; do for b in cuda wgpu; do $v groundtruth $T/small.npy $T/smallq.npy -o $T/warm.npy --backend $b -k 100 -q > /dev/null 2>&1; done; done
run() { echo "\$ $1 groundtruth base.npy query.npy -o $2.npy --backend $3 -k $4"; timeout 100 /usr/bin/time -f "  %e s wall, %M KB peak" $1 groundtruth $T/base.npy $T/query.npy -o $T/$2.npy --backend $3 -k $4 --json 2>&1 | grep -E '"seconds"|"rescanned"|wall|rror'; }
for k in 100 10; do
  echo "== 1,000,000 x 384, 10,000 queries, k $k"
  for b in cuda wgpu; do for rep in 1 2; do run vlc_s41 s41_$b$k $b $k; run vlc new_$b$k $b $k; done; done
  run vlc_s41 s41_cpu$k cpu $k; run vlc new_cpu$k cpu $k
  for r in s41_cuda s41_wgpu s41_cpu new_wgpu new_cpu; do for f in npy distances.npy; do cmp -s $T/new_cuda$k.$f $T/$r$k.$f && echo "  $r$k $f: identical to new_cuda$k" || echo "  $r$k $f: DIFFERS from new_cuda$k"; done; done
done
echo "== test executables (COMMIT's)"
t() { echo "\$ $*"; env "$@" 2>&1 | grep -E "conformance on|test result|FAILED|panicked" | sort | uniq -c; }
t cuda_unit; t cuda_conformance --nocapture; t VLC_CUDA_SMALL_WORK=0 cuda_conformance --nocapture; t cuda_search
t wgpu_conformance --nocapture; t VLC_WGPU_COOP=0 wgpu_conformance --nocapture; t wgpu_search
