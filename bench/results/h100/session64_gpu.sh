# Session 64 device script: `vlc search` now reads its queries and writes its results a batch
# at a time (by default whole multiples of the library's 4,096-query block, 40,960 queries of
# 384-d). On CUDA and WGPU, COMMIT's vlc searches the dev set's pcaq3 and rabitq1 indexes with
# 50,000 queries (its 10,000 five times: two automatic batches) at nprobe 64, with
# --batch-size 0 (automatic), 4096 and 1000; each output is compared byte for byte with
# 6b4d621's vlc (session 62's GPU build, the queries read whole and searched in one call), and
# each pair's shares of equal ids and the largest distance difference are printed. Then the
# CPU's output of the same search for reference. Peak resident memory and wall time by GNU time.
# Carry: .carry/s98.tar.xz (vlc_old of 6b4d621 and dev/, as in session63_gpu.sh),
# .carry/s99.tar.xz (stripped vlc of COMMIT) and .gl (the Vulkan loader).
# Usage: bash bench/results/h100/session64_gpu.sh COMMIT
set -u
tar -C .carry -xJf .carry/s98.tar.xz; tar -C .carry -xJf .carry/s99.tar.xz
O=$PWD/.carry/s98/vlc_old; N=$PWD/.carry/s99/vlc; D=$PWD/.carry/s98/dev
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
T=$(mktemp -d)
python3 -c "import numpy as np, sys; np.save(sys.argv[2], np.concatenate([np.load(sys.argv[1])] * 5))" $D/q.npy $T/q5.npy
compare() {
  python3 - "$1" "$2" <<'PY'
import numpy as np, sys
a, b = sys.argv[1], sys.argv[2]
ia, ib = np.load(a + ".npy"), np.load(b + ".npy")
da, db = np.load(a + ".distances.npy"), np.load(b + ".distances.npy")
same = open(a + ".npy", "rb").read() == open(b + ".npy", "rb").read() and \
    open(a + ".distances.npy", "rb").read() == open(b + ".distances.npy", "rb").read()
print(f"   byte for byte {'the same' if same else 'different'}; equal ids {np.mean(ia == ib):.6f}; "
      f"largest distance difference {np.max(np.abs(da - db)):.3g}")
PY
}
for name in pcaq3 rabitq1; do for backend in cuda wgpu; do
  echo "== $name, $backend, nprobe 64, 50,000 queries"
  /usr/bin/time -f "   old (one call): %M KiB peak, %e s" $O search $D/$name.vlc $T/q5.npy --nprobe 64 --backend $backend -o $T/old.npy 2>&1 | grep -E "peak|error"
  for bs in 0 4096 1000; do
    /usr/bin/time -f "   --batch-size $bs: %M KiB peak, %e s" $N search $D/$name.vlc $T/q5.npy --nprobe 64 --backend $backend --batch-size $bs -o $T/new$bs.npy 2>&1 | grep -E "peak|error"
    compare $T/old $T/new$bs
  done
done
  echo "== $name, cpu (16 cores), against cuda's automatic batches"
  $N search $D/$name.vlc $T/q5.npy --nprobe 64 -o $T/cpu.npy 2>&1 | grep error
  $N search $D/$name.vlc $T/q5.npy --nprobe 64 --backend cuda -o $T/cuda.npy 2>&1 | grep error
  compare $T/cpu $T/cuda
done
