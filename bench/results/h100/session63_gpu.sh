# Session 63 device script: step 4 of the automatic pool (CUDA and WGPU) skips the probed
# lists whose smallest first-stage estimate *outside the pool* is past the bound, where it
# took the smallest over every item (the pool's own entries included). Part A: COMMIT's CUDA
# and WGPU test executables (the search tests now also send a query past
# vlc::vectors::MAX_SQUARED_LENGTH, which must be refused, and one just within it, which must
# be answered in full), with the three lowest shares of the CPU's ids. Part B: WordLlama
# 128-d `rabitq1+sq8` (its 2,000 queries repeated five times), CUDA and WGPU, with the
# automatic pool and with a fixed pool of 100, COMMIT's vlc and 6b4d621's (session 62's last
# GPU build) in turn, three rounds. Part C: session 56's three dev-set indexes (queries
# likewise repeated), automatic pool, both backends, both builds, two rounds. Each figure the
# fastest of 10 passes.
# Carry: .carry/s98.tar.xz (stripped vlc and test executables of COMMIT, vlc_old of 6b4d621,
# dev/ and wl/ as in session62_gpu.sh) and .gl (the Vulkan loader).
# Usage: bash bench/results/h100/session63_gpu.sh COMMIT
set -u
tar -C .carry -xJf .carry/s98.tar.xz; B=$PWD/.carry/s98; D=$B/dev; W=$B/wl
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
echo "== Part A: test executables (and the three lowest shares of the CPU's ids)"
for x in wgpu_unit wgpu_shaders wgpu_conformance wgpu_search cuda_conformance cuda_search; do
  echo "\$ $x"; $B/$x --nocapture --test-threads 1 > $x.out 2>&1; echo "exit $?"
  grep -E "conformance on|automatic pool|test result|FAILED|panicked|SKIPPED|skipped" $x.out | sort | uniq -c
  grep -o "overlap [0-9.]*" $x.out | sort -k2 -n | uniq -c | head -3
done
python3 -c "import numpy as np, sys; [np.save(sys.argv[i] + 'x5.npy', np.concatenate([np.load(sys.argv[i] + '.npy')] * 5)) for i in range(1, 5)]" $W/q $W/gt10 $D/q $D/gt10
ev() { local v=$1 index=$2 q=$3 g=$4 np=$5; shift 5; $B/$v eval $index --queries $q --groundtruth $g --nprobe $np --repeat 10 "$@" 2>&1 | sed -n '3,$p'; }
echo "== Part B: WordLlama 128-d, rabitq1+sq8 (10,000 queries: 2,000 five times)"
for round in 1 2 3; do for backend in cuda wgpu; do for v in vlc vlc_old; do
  echo "-- $v, $backend, automatic pool (round $round)"; ev $v $W/rabitq1_sq8.vlc $W/qx5.npy $W/gt10x5.npy 16,64,256,1024 --backend $backend
  echo "-- $v, $backend, --rerank 100 (round $round)"; ev $v $W/rabitq1_sq8.vlc $W/qx5.npy $W/gt10x5.npy 16,64,256,1024 --backend $backend --rerank 100
done; done; done
echo "== Part C: dev set (10,000 queries: 2,000 five times), automatic pool"
for round in 1 2; do for backend in cuda wgpu; do for name in p64 pcaq3 rabitq1; do for v in vlc vlc_old; do
  echo "-- $name, $v, $backend (round $round)"; ev $v $D/$name.vlc $D/qx5.npy $D/gt10x5.npy 16,128,1024 --backend $backend
done; done; done; done
