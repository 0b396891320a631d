# Session 42 device script, run 2: `vlc groundtruth` on WGPU, 1,000,000 x 384 synthetic vectors (as
# session 41's run 2), CUDA's lists as the reference: vlc_old (1cfe34d: 16 x 16 tile kernel), vlc_b779
# (b779001: GEMM-form 128 x 128 tile kernel), vlc (COMMIT: the same with the tile pooled). Where the
# time goes: vlc_prof is COMMIT with two extra switches that dispatch the distance pass
# (VLC_PROF_EXTRA_DIST=n) or the selection pass (VLC_PROF_EXTRA_SELECT=n) n more times (the same
# results; the added time is n passes'). Then COMMIT's WGPU test executables.
# Carry: .carry/s43.tar.xz (vlc, vlc_prof, vlc_b779, vlc_old, wgpu_conformance, wgpu_search) and .gl.
# Usage: bash bench/results/h100/session42_wgpu_tile2.sh COMMIT
set -u
tar -C .carry -xJf .carry/s43.tar.xz; B=.carry/s43; export PATH=$PWD/$B:$PATH
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
for v in vlc_old vlc_b779 vlc_prof vlc; do for b in cuda wgpu; do $v groundtruth $T/small.npy $T/smallq.npy -o $T/warm.npy --backend $b -k 100 -q > /dev/null 2>&1; done; done
run() { echo "\$ ${E:+$E }$1 groundtruth base.npy query.npy -o $2.npy --backend $3 -k $4"; env $E timeout 100 /usr/bin/time -f "  %e s wall, %M KB peak" $1 groundtruth $T/base.npy $T/query.npy -o $T/$2.npy --backend $3 -k $4 --json 2>&1 | grep -E '"seconds"|"rescanned"|wall|rror'; }
for k in 100 10; do
  echo "== 1,000,000 x 384, 10,000 queries, k $k"
  E= run vlc cuda$k cuda $k
  for rep in 1 2; do E= run vlc_old old$k wgpu $k; E= run vlc_b779 b779_$k wgpu $k; E= run vlc new$k wgpu $k; done
  E=VLC_PROF_EXTRA_DIST=1 run vlc_prof dist1_$k wgpu $k; E=VLC_PROF_EXTRA_DIST=4 run vlc_prof dist4_$k wgpu $k
  E=VLC_PROF_EXTRA_SELECT=1 run vlc_prof sel1_$k wgpu $k; E=VLC_PROF_EXTRA_SELECT=4 run vlc_prof sel4_$k wgpu $k
  for r in old b779_ new dist1_ dist4_ sel1_ sel4_; do for f in npy distances.npy; do cmp -s $T/cuda$k.$f $T/$r$k.$f && echo "  $r$k $f: identical to cuda$k" || echo "  $r$k $f: DIFFERS from cuda$k"; done; done
done
echo "== WGPU test executables (COMMIT's)"
wgpu_conformance 2>&1 | grep -E "conformance on|test result|FAILED|panicked" | sort | uniq -c
wgpu_search 2>&1 | grep -E "test result|FAILED|panicked"
