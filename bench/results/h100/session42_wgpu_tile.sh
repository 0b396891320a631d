# Session 42 device script: WGPU's tiled `distances` kernel (GEMM form, 128 x 128 per workgroup)
# against the one before (16 x 16, one output per invocation), in `vlc groundtruth` on 1,000,000 x
# 384 synthetic vectors (as session 41's run 2), with CUDA's lists as the reference; then the WGPU
# test executables. vlc_prof / vlc_old_prof: COMMIT's and the earlier library with one extra switch,
# VLC_PROF_SKIP_SELECT (skip the selection pass; output meaningless), to time the distance pass.
# Carry: .carry/s42.tar.xz (vlc, vlc_prof, vlc_old_prof, wgpu_conformance, wgpu_search) and .gl.
# Usage: bash bench/results/h100/session42_wgpu_tile.sh COMMIT
set -u
tar -C .carry -xJf .carry/s42.tar.xz; B=.carry/s42; export PATH=$PWD/$B:$PATH
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
for v in vlc_old_prof vlc_prof vlc; do for b in cuda wgpu; do $v groundtruth $T/small.npy $T/smallq.npy -o $T/warm.npy --backend $b -k 100 -q > /dev/null 2>&1; done; done
run() { echo "\$ ${PROF:+VLC_PROF_SKIP_SELECT=1 }$1 groundtruth base.npy query.npy -o $2.npy --backend $3 -k $4"; timeout 200 /usr/bin/time -f "  %e s wall, %M KB peak" $1 groundtruth $T/base.npy $T/query.npy -o $T/$2.npy --backend $3 -k $4 --json 2>&1 | grep -E '"seconds"|"rescanned"|wall|rror'; }
for k in 100 10; do
  echo "== 1,000,000 x 384, 10,000 queries, k $k"
  run vlc cuda$k cuda $k
  for rep in 1 2; do run vlc_old_prof old_wgpu$k wgpu $k; run vlc new_wgpu$k wgpu $k; done
  run vlc_prof prof_wgpu$k wgpu $k
  export PROF=1 VLC_PROF_SKIP_SELECT=1
  run vlc_old_prof old_skip$k wgpu $k; run vlc_prof new_skip$k wgpu $k
  unset PROF VLC_PROF_SKIP_SELECT
  for r in old_wgpu new_wgpu prof_wgpu; do for f in npy distances.npy; do cmp -s $T/cuda$k.$f $T/$r$k.$f && echo "  $r$k $f: identical to cuda$k" || echo "  $r$k $f: DIFFERS from cuda$k"; done; done
done
echo "== WGPU test executables (COMMIT's)"
wgpu_conformance 2>&1 | grep -E "conformance on|test result|FAILED|panicked" | sort | uniq -c
wgpu_search 2>&1 | grep -E "test result|FAILED|panicked"
