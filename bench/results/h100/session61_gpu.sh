# Session 61 device script: the CUDA search kernel's second stage scored by groups of lanes
# (ce1ee54: a power of two, 16+ bytes of the code each, for the pool and for the automatic
# pool's added candidates, staged per round). Part A: COMMIT's CUDA test executables (unit,
# with the NVRTC compile test of every kernel; conformance; search), against the CPU with the
# same parameters. Part B: WordLlama 128-d `rabitq1+sq8` (its 2,000 queries repeated five
# times, so that a pass takes long enough to time; the set where the automatic pool adds the
# most candidates): the CPU (all cores) for the reference recall, then CUDA with COMMIT's vlc
# and with ef2514e's (session 60's, one thread per candidate), three times in turn, with the
# automatic pool and with a fixed pool of 100; each figure the fastest of 10 passes. Part C:
# session 56's three dev-set index files (their 2,000 queries, likewise repeated), CUDA with
# both builds, twice in turn.
# Carry: .carry/s85.tar.xz (stripped vlc and test executables of COMMIT, vlc_old of ef2514e,
# dev/ as in session56_gpu.sh, wl/ the 128-d index, queries and top-10 truth).
# Usage: bash bench/results/h100/session61_gpu.sh COMMIT
set -u
tar -C .carry -xJf .carry/s85.tar.xz; B=$PWD/.carry/s85; D=$B/dev; W=$B/wl
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
echo "== Part A: test executables"
t() { echo "\$ $*"; "$@" 2>&1 | grep -E "NVRTC .* compiled search|spills checked|automatic pool|overlap 0\.9[0-8]|test result|FAILED|panicked|SKIPPED|skipped" | sort | uniq -c; }
t $B/cuda_unit --nocapture --test-threads 1; t $B/cuda_conformance --nocapture --test-threads 1; t $B/cuda_search --nocapture --test-threads 1
# The queries and their top-10 truth repeated five times (10,000 rows).
python3 -c "import numpy as np, sys; [np.save(sys.argv[i] + 'x5.npy', np.concatenate([np.load(sys.argv[i] + '.npy')] * 5)) for i in range(1, 5)]" $W/q $W/gt10 $D/q $D/gt10
ev() { local v=$1 index=$2 q=$3 g=$4 np=$5; shift 5; $B/$v eval $index --queries $q --groundtruth $g --nprobe $np --repeat 10 "$@" 2>&1 | sed -n '3,$p'; }
echo "== Part B: WordLlama 128-d, rabitq1+sq8 (10,000 queries: 2,000 five times)"
echo "-- cpu"; ev vlc $W/rabitq1_sq8.vlc $W/qx5.npy $W/gt10x5.npy 16,64,256,1024 --backend cpu
for round in 1 2 3; do
  for v in vlc vlc_old; do
    echo "-- $v, cuda, automatic pool (round $round)"; ev $v $W/rabitq1_sq8.vlc $W/qx5.npy $W/gt10x5.npy 16,64,256,1024 --backend cuda
    echo "-- $v, cuda, --rerank 100 (round $round)"; ev $v $W/rabitq1_sq8.vlc $W/qx5.npy $W/gt10x5.npy 16,64,256,1024 --backend cuda --rerank 100
  done
done
echo "== Part C: dev set (10,000 queries: 2,000 five times), cuda"
for round in 1 2; do for name in p64 pcaq3 rabitq1; do for v in vlc vlc_old; do
  echo "-- $name, $v (round $round)"; ev $v $D/$name.vlc $D/qx5.npy $D/gt10x5.npy 16,128,1024 --backend cuda
done; done; done
