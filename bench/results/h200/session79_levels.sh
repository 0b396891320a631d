#!/usr/bin/env bash
# Session 79: scalar code levels made floats by a byte permute and an add instead of an
# integer-to-float conversion, and the weights read four a load, in CUDA's scan of sq8 and sq4
# codes. Several vlc binaries side by side on a GPU host (the first is the baseline): a synthetic
# set (bench/make_synthetic.py) of 200,000 x 384 with 2,000 queries, the default sq8 index and an
# sq4 one built on the CPU by the first binary, exact top 10 on CUDA. First `vlc search --nprobe
# 16` of the 2,000 queries by each binary on each backend: whether its ids and distances are
# byte for byte the first binary's. Then `vlc eval --nprobe 16,64 --repeat 3` one query per call
# (--batch-size 1 --threads 1, the first 500 queries) and in one batch of 2,000, the binaries
# alternating over ROUNDS rounds (a shared host's speed drifts).
# Usage: bash bench/results/h200/session79_levels.sh VLC_A VLC_B [VLC_C ...]
#   BACKENDS="cuda" (default; "cuda wgpu" for both), ROUNDS=2, N=200000, DIM=384
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: session79_levels.sh VLC_A VLC_B [VLC_C ...]"; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "binaries: $*"
python3 bench/make_synthetic.py "$T/d" --n "${N:-200000}" --dim "${DIM:-384}" --queries 2000 >/dev/null
"$1" build -q "$T/d/base.npy" -o "$T/sq8.vlc" --backend cpu >/dev/null
"$1" build -q "$T/d/base.npy" -o "$T/sq4.vlc" --codec sq4 --backend cpu >/dev/null
"$1" groundtruth -q "$T/d/base.npy" "$T/d/query.npy" -k 10 -o "$T/gt.npy" --backend cuda >/dev/null
python3 -c "import numpy as np; np.save('$T/q500.npy', np.load('$T/d/query.npy')[:500]); np.save('$T/gt500.npy', np.load('$T/gt.npy')[:500])"
for idx in sq8 sq4; do
  for backend in ${BACKENDS:-cuda}; do
    i=0
    for v in "$@"; do
      "$v" search "$T/$idx.vlc" "$T/d/query.npy" -k 10 --nprobe 16 --backend $backend -o "$T/r$i.npy" 2>/dev/null ||
        echo "$backend, $idx, $v: the search FAILED"
      i=$((i + 1))
    done
    python3 - "$T" $# "$backend, $idx" <<'PY'
import sys, numpy as np
t, n, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ids0, d0 = np.load(f"{t}/r0.npy"), np.load(f"{t}/r0.distances.npy")
for i in range(1, n):
    ids, d = np.load(f"{t}/r{i}.npy"), np.load(f"{t}/r{i}.distances.npy")
    print(f"{name}: binary {i + 1} against binary 1: identical {np.array_equal(ids, ids0) and np.array_equal(d, d0)}")
PY
  done
done
for round in $(seq 1 "${ROUNDS:-2}"); do
  for backend in ${BACKENDS:-cuda}; do
    for idx in sq8 sq4; do
      for v in "$@"; do
        echo "round $round, $v, $backend, $idx: vlc eval --nprobe 16,64 --repeat 3, one query per call (500), then a batch of 2,000"
        "$v" eval "$T/$idx.vlc" --queries "$T/q500.npy" --groundtruth "$T/gt500.npy" --nprobe 16,64 \
          --threads 1 --batch-size 1 --backend $backend --repeat 3 2>&1 | tail -2
        "$v" eval "$T/$idx.vlc" --queries "$T/d/query.npy" --groundtruth "$T/gt.npy" --nprobe 16,64 \
          --backend $backend --repeat 3 2>&1 | tail -2
      done
    done
  done
done
