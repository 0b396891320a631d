#!/usr/bin/env bash
# Session 73: the GPU scan of a code of a byte or more per dimension (sq8, the default codec;
# sq4) by groups of lanes, two vlc binaries side by side on CUDA. On a GPU host, with stripped
# vlc binaries A and B: synthetic sets (bench/make_synthetic.py, 2,000 queries) of 1,000,000 x
# 128 and 200,000 x 384; indexes built by B on CUDA: sq8 and sq4 at 128 d, sq8 at 384 d, and
# rabitq1 + sq8 at 128 d (whose scan is unchanged: a control); exact top 10 on CUDA. Then
# `vlc eval --nprobe 16,64 --repeat 3` one query per call (--batch-size 1 --threads 1) and in
# one batch of 2,000, A and B alternating over two rounds (a shared host's speed drifts): recall
# must agree, queries/s and us/query are what is compared. Last, Nsight Compute's duration of
# the search kernel for lone queries on the sq8 indexes, A and B.
# Usage: bash bench/results/h100/session73_first_stage_groups.sh A_VLC B_VLC
set -uo pipefail
A=${1:?usage: session73_first_stage_groups.sh A_VLC B_VLC}
B=${2:?give the second vlc binary}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "A = $A, B = $B"
python3 bench/make_synthetic.py "$T/d128" --n 1000000 --dim 128 --queries 2000 >/dev/null
python3 bench/make_synthetic.py "$T/d384" --n 200000 --dim 384 --queries 2000 >/dev/null
build() { "$B" build -q "$T/$1/base.npy" -o "$T/$2.vlc" "${@:3}" --backend cuda >/dev/null; "$B" info "$T/$2.vlc" | grep -E "codec|refine"; }
build d128 sq8_128
build d128 sq4_128 --codec sq4
build d128 r1sq8_128 --codec rabitq1 --refine sq8
build d384 sq8_384
for d in d128 d384; do
  "$B" groundtruth -q "$T/$d/base.npy" "$T/$d/query.npy" -k 10 -o "$T/$d/gt.npy" --backend cuda >/dev/null
  python3 -c "import numpy as np; np.save('$T/$d/q20.npy', np.load('$T/$d/query.npy')[:20])"
done
for round in 1 2; do
  for idx in sq8_128 sq4_128 r1sq8_128 sq8_384; do
    d=d128; [ $idx = sq8_384 ] && d=d384
    for side in A B; do
      V=$A; [ $side = B ] && V=$B
      echo "round $round, $side, $idx: vlc eval --nprobe 16,64 --repeat 3, one query per call, then a batch of 2,000"
      "$V" eval "$T/$idx.vlc" --queries "$T/$d/query.npy" --groundtruth "$T/$d/gt.npy" --nprobe 16,64 \
        --threads 1 --batch-size 1 --backend cuda --repeat 3 2>&1 | tail -2
      "$V" eval "$T/$idx.vlc" --queries "$T/$d/query.npy" --groundtruth "$T/$d/gt.npy" --nprobe 16,64 \
        --backend cuda --repeat 3 2>&1 | tail -2
    done
  done
done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "no ncu"; exit 0; }
for idx in sq8_128 sq8_384; do
  d=d128; [ $idx = sq8_384 ] && d=d384
  for side in A B; do
    V=$A; [ $side = B ] && V=$B
    echo "$side, $idx: ncu --clock-control none --metrics gpu__time_duration.sum vlc search q20 --backend cuda --batch-size 1 --nprobe 16"
    timeout 240 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
      "$V" search "$T/$idx.vlc" "$T/$d/q20.npy" -k 10 --nprobe 16 --backend cuda --batch-size 1 \
      -o "$T/out.npy" 2>/dev/null | grep -E "search_queries|Kernel Name" > "$T/ncu.csv"
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
