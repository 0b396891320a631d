# Session 38 device script, run 3: the final build's GPU tests, the dev-set check against the CPU, and
# nprobe above the anchor count through the CLI on each GPU. Usage: bash bench/results/h100/session38_run3.sh COMMIT
set -u
tar -C .carry -xJf .carry/bin.tar.xz; B=.carry/bin; D=.carry/dev; export PATH=$PWD/$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== Part A: tests of $1 (--test-threads 1)"; echo "\$ cuda_conf with VLC_CUDA_SMALL_WORK=0"; VLC_CUDA_SMALL_WORK=0 cuda_conf --test-threads 1 2>&1 | grep -E "test result|panicked"
for t in wgpu_conf cuda_conf cuda_unit; do echo "\$ $t"; $t --test-threads 1 2>&1 | grep -E "test result|panicked|SKIP"; done
for t in wgpu_search cuda_search; do echo "\$ $t"; $t --test-threads 1 2>&1 | grep -E "^test |test result|panicked|SKIP"; done
echo "== Part B: through the CLI on each GPU against the CPU: p64 at nprobe 4096 (above its 1,024 anchors) against 1024, and k 250 on an index of 200 vectors (the first 200 dev queries, rabitq1; 100 queries)"
python3 -c "import numpy as np; q = np.load('$D/q.npy'); np.save('/tmp/s200.npy', q[:200]); np.save('/tmp/q100.npy', q[200:300])"
vlc build /tmp/s200.npy -o /tmp/s200.vlc --codec rabitq1 -q > /dev/null 2>&1
for be in cpu cuda wgpu; do
vlc search $D/p64.vlc $D/q.npy -k 10 --nprobe 1024 --backend $be -o /tmp/a_$be.npy >/dev/null 2>&1; vlc search $D/p64.vlc $D/q.npy -k 10 --nprobe 4096 --backend $be -o /tmp/b_$be.npy >/dev/null 2>&1
vlc search /tmp/s200.vlc /tmp/q100.npy -k 250 --backend $be -o /tmp/w_$be.npy >/dev/null 2>&1; echo "$be: k 250 exit $?"
done
python3 - <<'PY'
import numpy as np
for be in ["cpu", "cuda", "wgpu"]:
    a, b = np.load(f"/tmp/a_{be}.npy"), np.load(f"/tmp/b_{be}.npy")
    w, wd = np.load(f"/tmp/w_{be}.npy"), np.load(f"/tmp/w_{be}.distances.npy")
    c = np.load("/tmp/w_cpu.npy")
    print(f"{be}: nprobe 4096 ids equal nprobe 1024's: {np.array_equal(a, b)}; same as the CPU's at 1024: "
          f"{(a == np.load('/tmp/a_cpu.npy')).mean():.5f}; k 250 on 200 vectors: shape {w.shape}, every row all 200 ids: "
          f"{all(sorted(r[:200]) == list(range(200)) for r in w)}, columns 200-249 id -1 and distance inf: "
          f"{bool((w[:, 200:] == -1).all() and np.isinf(wd[:, 200:]).all())}, same ranks as the CPU's: {(w == c).mean():.4f}")
PY
echo "== Part C: $1 against the CPU on the dev set (REPEAT=10)"
NPROBE=16,128,512 bash bench/gpu_search_check.sh vlc $D/q.npy $D/gt10.npy $D/p64.vlc $D/p5.vlc 2>&1 | grep -v "^search backend"
