#!/usr/bin/env bash
# Session 72: a lone query (one per search call) on the GPUs, two vlc binaries side by side.
# On a GPU host, with stripped vlc binaries A and B: a 1,000,000 x 128 synthetic set
# (bench/make_synthetic.py, 2,000 queries), `rabitq1 + sq8` built by B on CUDA, exact top 10
# unfiltered and under a random 1% filter (seed 0); then `vlc eval --batch-size 1 --threads 1
# --nprobe 16,64 --repeat 3` for each backend (CPU, CUDA, WGPU), A and B alternating over two
# rounds (a shared host's speed drifts); recall must agree, us/query is what is compared. Last,
# Nsight Compute's duration of the search kernel for 20 lone CUDA queries at nprobe 16, A and B.
# Usage: bash bench/results/h100/session72_lone_gpu_probe.sh A_VLC B_VLC
#   BACKENDS="cpu cuda wgpu" (default)
set -uo pipefail
A=${1:?usage: session72_lone_gpu_probe.sh A_VLC B_VLC}
B=${2:?give the second vlc binary}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "A = $A, B = $B"
python3 bench/make_synthetic.py "$T" --n 1000000 --dim 128 --queries 2000 >/dev/null
"$B" build -q "$T/base.npy" -o "$T/index.vlc" --codec rabitq1 --refine sq8 --backend cuda >/dev/null
"$B" info "$T/index.vlc" | grep -E "vectors|anchors|codec"
"$B" groundtruth -q "$T/base.npy" "$T/query.npy" -k 10 -o "$T/gt.npy" --backend cuda >/dev/null
python3 - "$T" <<'PY'
import sys
import numpy as np
t = sys.argv[1]
rng = np.random.default_rng(0)
np.save(f"{t}/allowed.npy", np.sort(rng.choice(1_000_000, 10_000, replace=False)).astype(np.int64))
np.save(f"{t}/q20.npy", np.load(f"{t}/query.npy")[:20])
PY
"$B" groundtruth -q "$T/base.npy" "$T/query.npy" -k 10 --allow-ids "$T/allowed.npy" -o "$T/gt1.npy" --backend cuda >/dev/null
for round in 1 2; do
  for backend in ${BACKENDS:-cpu cuda wgpu}; do
    for side in A B; do
      V=$A; [ $side = B ] && V=$B
      echo "round $round, $side, $backend: vlc eval --batch-size 1 --threads 1 --nprobe 16,64 --repeat 3 (unfiltered, then the 1% filter)"
      "$V" eval "$T/index.vlc" --queries "$T/query.npy" --groundtruth "$T/gt.npy" --nprobe 16,64 \
        --threads 1 --batch-size 1 --backend "$backend" --repeat 3 2>&1 | tail -2
      "$V" eval "$T/index.vlc" --queries "$T/query.npy" --groundtruth "$T/gt1.npy" --allow-ids "$T/allowed.npy" \
        --nprobe 16,64 --threads 1 --batch-size 1 --backend "$backend" --repeat 3 2>&1 | tail -2
    done
  done
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "no ncu"; exit 0; }
for side in A B; do
  V=$A; [ $side = B ] && V=$B
  for f in none allowed; do
    extra=(); [ $f = allowed ] && extra=(--allow-ids "$T/allowed.npy")
    echo "$side: ncu --clock-control none --metrics gpu__time_duration.sum vlc search q20 --backend cuda --batch-size 1 --nprobe 16 ${extra[*]}"
    timeout 240 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
      "$V" search "$T/index.vlc" "$T/q20.npy" -k 10 --nprobe 16 --backend cuda --batch-size 1 \
      "${extra[@]}" -o "$T/out.npy" 2>/dev/null | grep -E "search_queries|Kernel Name" > "$T/ncu.csv"
    python3 - "$T/ncu.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]
ui, vi = head.index("Metric Unit"), head.index("Metric Value")
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
ts = sorted(float(r[vi].replace(",", "")) * scale.get(r[ui], float("nan")) for r in rows[1:])
print(f"  search_queries: {len(ts)} launches, median {ts[len(ts) // 2]:.2f} us, min {ts[0]:.2f}, max {ts[-1]:.2f}")
PY
  done
done
