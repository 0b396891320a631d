# Session 62 device script, second part: the WGPU search pipeline's per-list minima
# (LIST_MIN_SLOTS, 4 KiB of workgroup memory) only where the automatic pool uses them. Part A:
# COMMIT's WGPU test executables (unit, shaders, conformance, search). Part B: WordLlama 128-d
# `rabitq1+sq8` and session 56's three dev-set indexes (their 2,000 queries repeated five
# times), WGPU with a fixed pool of 100 (`--rerank 100`) and with the automatic pool, COMMIT's
# vlc and fb5ca3a's in turn, three rounds; each figure the fastest of 10 passes.
# Carry: .carry/s97.tar.xz (stripped vlc and WGPU test executables of COMMIT, vlc_old of
# fb5ca3a, dev/ and wl/ as in session62_gpu.sh) and .gl (the Vulkan loader).
# Usage: bash bench/results/h100/session62_list_min.sh COMMIT
set -u
tar -C .carry -xJf .carry/s97.tar.xz; B=$PWD/.carry/s97; D=$B/dev; W=$B/wl
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
echo "== Part A: test executables"
t() { echo "\$ $*"; "$@" 2>&1 | grep -E "automatic pool|test result|FAILED|panicked|SKIPPED|skipped" | sort | uniq -c; }
for x in wgpu_unit wgpu_shaders wgpu_conformance wgpu_search; do t $B/$x --nocapture --test-threads 1; done
python3 -c "import numpy as np, sys; [np.save(sys.argv[i] + 'x5.npy', np.concatenate([np.load(sys.argv[i] + '.npy')] * 5)) for i in range(1, 5)]" $W/q $W/gt10 $D/q $D/gt10
ev() { local v=$1 index=$2 q=$3 g=$4 np=$5; shift 5; $B/$v eval $index --queries $q --groundtruth $g --nprobe $np --repeat 10 --backend wgpu "$@" 2>&1 | sed -n '4,$p'; }
echo "== Part B: WGPU, 10,000 queries (2,000 five times)"
for round in 1 2 3; do for v in vlc vlc_old; do for pool in "--rerank 100" "--rerank 0"; do
  echo "-- $v wl $pool (round $round)"; ev $v $W/rabitq1_sq8.vlc $W/qx5.npy $W/gt10x5.npy 16,64,256,1024 $pool
  for name in p64 pcaq3 rabitq1; do echo "-- $v $name $pool (round $round)"; ev $v $D/$name.vlc $D/qx5.npy $D/gt10x5.npy 16,128,1024 $pool; done
done; done; done
