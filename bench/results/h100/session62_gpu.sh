# Session 62 device script: the WGPU search shader's second stage scored by groups of
# invocations (vlc::device_view::second_stage_group, CUDA's rule since session 61: a power of
# two, 16+ bytes of the code each), for the pool and for the automatic pool's added candidates,
# which step 4 now stages and rescores together. Part A: COMMIT's WGPU test executables (unit,
# shaders, conformance, search) and CUDA's conformance and search (whose group rule moved to
# vlc-core), against the CPU with the same parameters. Part B: WordLlama 128-d `rabitq1+sq8`
# (its 2,000 queries repeated five times, so that a pass takes long enough to time; the set
# where the automatic pool adds the most candidates): the CPU (all cores) for the reference
# recall, CUDA once, then WGPU with COMMIT's vlc and with c00c57b's (session 61's: one
# invocation per candidate), three times in turn, with the automatic pool and with a fixed
# pool of 100; each figure the fastest of 10 passes. Part C: session 56's three dev-set index
# files (their 2,000 queries, likewise repeated), WGPU with both builds, twice in turn.
# Carry: .carry/s92.tar.xz (stripped vlc and test executables of COMMIT, vlc_old of c00c57b,
# dev/ as in session56_gpu.sh, wl/ the 128-d index, queries and top-10 truth) and .gl (the
# Vulkan loader).
# Usage: bash bench/results/h100/session62_gpu.sh COMMIT
set -u
tar -C .carry -xJf .carry/s92.tar.xz; B=$PWD/.carry/s92; D=$B/dev; W=$B/wl
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
echo "== Part A: test executables"
t() { echo "\$ $*"; "$@" 2>&1 | grep -E "conformance on|automatic pool|test result|FAILED|panicked|SKIPPED|skipped" | sort | uniq -c; }
for x in wgpu_unit wgpu_shaders wgpu_conformance wgpu_search cuda_conformance cuda_search; do t $B/$x --nocapture --test-threads 1; done
echo "== Part A': the search and conformance tests' three lowest shares of the CPU's ids (of their cases)"
for x in wgpu_conformance wgpu_search cuda_conformance cuda_search; do echo "\$ $x"; $B/$x --nocapture --test-threads 1 2>&1 | grep -o "overlap [0-9.]*" | sort -k2 -n | uniq -c | head -3; echo "cases: $($B/$x --nocapture --test-threads 1 2>&1 | grep -c "overlap [0-9.]*")"; done
# The queries and their top-10 truth repeated five times (10,000 rows).
python3 -c "import numpy as np, sys; [np.save(sys.argv[i] + 'x5.npy', np.concatenate([np.load(sys.argv[i] + '.npy')] * 5)) for i in range(1, 5)]" $W/q $W/gt10 $D/q $D/gt10
ev() { local v=$1 index=$2 q=$3 g=$4 np=$5; shift 5; $B/$v eval $index --queries $q --groundtruth $g --nprobe $np --repeat 10 "$@" 2>&1 | sed -n '3,$p'; }
echo "== Part B: WordLlama 128-d, rabitq1+sq8 (10,000 queries: 2,000 five times)"
echo "-- cpu"; ev vlc $W/rabitq1_sq8.vlc $W/qx5.npy $W/gt10x5.npy 16,64,256,1024 --backend cpu
echo "-- cuda"; ev vlc $W/rabitq1_sq8.vlc $W/qx5.npy $W/gt10x5.npy 16,64,256,1024 --backend cuda
for round in 1 2 3; do
  for v in vlc vlc_old; do
    echo "-- $v, wgpu, automatic pool (round $round)"; ev $v $W/rabitq1_sq8.vlc $W/qx5.npy $W/gt10x5.npy 16,64,256,1024 --backend wgpu
    echo "-- $v, wgpu, --rerank 100 (round $round)"; ev $v $W/rabitq1_sq8.vlc $W/qx5.npy $W/gt10x5.npy 16,64,256,1024 --backend wgpu --rerank 100
  done
done
echo "== Part C: dev set (10,000 queries: 2,000 five times), wgpu"
for round in 1 2; do for name in p64 pcaq3 rabitq1; do for v in vlc vlc_old; do
  echo "-- $name, $v (round $round)"; ev $v $D/$name.vlc $D/qx5.npy $D/gt10x5.npy 16,128,1024 --backend wgpu
done; done; done
