# Session 41 device script, run 1: every GPU test of COMMIT, then `vlc groundtruth` of COMMIT against the
# build before it (vlc_old, 302c6dc's library) on CPU (all cores), CUDA and WGPU on 1,000,000 x 384 synthetic
# vectors (as session 40's runs 3-5), and CPU training with 16,384 anchors (200,000 of those rows).
# Carry: .carry/gpu41.tar.xz (vlc and the GPU test executables of COMMIT, vlc_old) and .gl.
# Usage: bash bench/results/h100/session41_run1.sh COMMIT
set -u
tar -C .carry -xJf .carry/gpu41.tar.xz; B=.carry/gpu41; export PATH=$PWD/$B:$PATH
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
np.save(sys.argv[1] + "/base200k.npy", x[:200_000])
PY
run() { echo "\$ $1 groundtruth base.npy query.npy -o $2.npy --backend $3 -k 100"; timeout 200 /usr/bin/time -f "  %e s wall, %M KB peak" $1 groundtruth $T/base.npy $T/query.npy -o $T/$2.npy --backend $3 -k 100 --json 2>&1 | grep -E '"seconds"|"rescanned"|wall|rror'; }
echo "== 1,000,000 x 384, 10,000 queries, k 100"
for b in cpu cuda wgpu; do run vlc_old old_$b $b; run vlc new_$b $b; done
for r in old_cpu old_cuda old_wgpu new_cuda new_wgpu; do for f in npy distances.npy; do cmp -s $T/new_cpu.$f $T/$r.$f && echo "  $r $f: identical to new_cpu" || echo "  $r $f: DIFFERS from new_cpu"; done; done
echo "== CPU training, 200,000 x 384, 16,384 anchors, all cores"
for v in vlc_old vlc; do
  echo "\$ $v build base200k.npy --anchors 16384 --codec rabitq1 --backend cpu"
  timeout 240 $v build $T/base200k.npy -o $T/$v.vlc --anchors 16384 --codec rabitq1 --backend cpu -q 2>&1 | grep -E "build time|training|rror"
done
vlc info $T/vlc.vlc | grep -E "training|META"; vlc info $T/vlc_old.vlc | grep -E "training|META"
m=$(vlc info $T/vlc.vlc | awk '/META/ {print $3}')
cmp <(head -c $m $T/vlc.vlc | tail -c +257) <(head -c $m $T/vlc_old.vlc | tail -c +257) && echo "  sections before META identical"
