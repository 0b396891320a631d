#!/usr/bin/env bash
# Session 75: a scalar primary code with global ranges (sq8, sq4 without a Jacobian) scored
# against the weights q ∘ step and <q, lo> (CUDA's `search_queries_weighted`, WGPU's `WEIGHTED`
# pipelines), as the CPU does, instead of q, lo and step per level. Two vlc binaries side by
# side on a GPU host, with stripped vlc binaries A and B: synthetic sets
# (bench/make_synthetic.py, 2,000 queries) of 1,000,000 x 128 and 200,000 x 384; indexes built
# by B on CUDA: sq8, sq4, sq8 with a Jacobian (the other kernel: a control), f16 (a control) at
# 128 d, sq8 at 384 d; exact top 10 on CUDA. First, `vlc search --nprobe 16` of the 2,000
# queries by A and B on each backend and by B on the CPU: the share of A's ids that B returns
# (per query, at any rank), and the largest distance difference relative to the distance where
# both return an id at the same rank, for B against A and for each against the CPU. Then `vlc
# eval --nprobe 16,64 --repeat 3` one query per call (--batch-size 1 --threads 1, the first 500
# queries) and in one batch of 2,000, A and B alternating over ROUNDS rounds (a shared host's
# speed drifts): recall and queries/s (us/query) are compared.
# Usage: bash bench/results/h200/session75_weights.sh A_VLC B_VLC
#   BACKENDS="cuda wgpu" (default), ROUNDS=2
set -uo pipefail
A=${1:?usage: session75_weights.sh A_VLC B_VLC}
B=${2:?give the second vlc binary}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "A = $A, B = $B"
python3 bench/make_synthetic.py "$T/d128" --n 1000000 --dim 128 --queries 2000 >/dev/null
python3 bench/make_synthetic.py "$T/d384" --n 200000 --dim 384 --queries 2000 >/dev/null
build() { "$B" build -q "$T/$1/base.npy" -o "$T/$2.vlc" "${@:3}" --backend cuda >/dev/null; "$B" info "$T/$2.vlc" | grep -E "codec|refine|jacobian"; }
build d128 sq8_128
build d128 sq4_128 --codec sq4
build d128 sq8j_128 --jacobian
build d128 f16_128 --codec f16
build d384 sq8_384
for d in d128 d384; do
  "$B" groundtruth -q "$T/$d/base.npy" "$T/$d/query.npy" -k 10 -o "$T/$d/gt.npy" --backend cuda >/dev/null
  python3 -c "import numpy as np; np.save('$T/$d/q500.npy', np.load('$T/$d/query.npy')[:500]); np.save('$T/$d/gt500.npy', np.load('$T/$d/gt.npy')[:500])"
done
IDX="sq8_128 sq4_128 sq8j_128 f16_128 sq8_384"
compare() {  # compare NAME X Y: ids shared and distance differences of two result files
  python3 - "$@" <<'PY'
import sys, numpy as np
name, x, y = sys.argv[1:4]
ix, iy = np.load(x), np.load(y)
dx = np.load(x.replace('.npy', '.distances.npy')); dy = np.load(y.replace('.npy', '.distances.npy'))
shared = np.mean([len(set(a) & set(b)) / max(len(set(a)), 1) for a, b in zip(ix, iy)])
same = ix == iy
rel = np.abs(dx - dy)[same] / np.maximum(np.abs(dx[same]), 1e-30)
print(f"{name}: ids shared {shared:.5f}, same id at the same rank {same.mean():.5f}, "
      f"largest relative distance difference there {rel.max():.2e}, identical {np.array_equal(ix, iy) and np.array_equal(dx, dy)}")
PY
}
for idx in $IDX; do
  d=d128; [ $idx = sq8_384 ] && d=d384
  "$B" search "$T/$idx.vlc" "$T/$d/query.npy" -k 10 --nprobe 16 --backend cpu -o "$T/cpu.npy" 2>/dev/null
  for backend in ${BACKENDS:-cuda wgpu}; do
    rm -f "$T/a.npy" "$T/b.npy"
    if "$A" search "$T/$idx.vlc" "$T/$d/query.npy" -k 10 --nprobe 16 --backend $backend -o "$T/a.npy" 2>/dev/null &&
       "$B" search "$T/$idx.vlc" "$T/$d/query.npy" -k 10 --nprobe 16 --backend $backend -o "$T/b.npy" 2>/dev/null; then
      compare "$backend, $idx, B against A" "$T/a.npy" "$T/b.npy"
      compare "$backend, $idx, A against the CPU" "$T/cpu.npy" "$T/a.npy"
      compare "$backend, $idx, B against the CPU" "$T/cpu.npy" "$T/b.npy"
    else
      echo "$backend, $idx: a search FAILED"
    fi
  done
done
for round in $(seq 1 ${ROUNDS:-2}); do
  for backend in ${BACKENDS:-cuda wgpu}; do
    for idx in $IDX; do
      d=d128; [ $idx = sq8_384 ] && d=d384
      for side in A B; do
        V=$A; [ $side = B ] && V=$B
        echo "round $round, $side, $backend, $idx: vlc eval --nprobe 16,64 --repeat 3, one query per call (500), then a batch of 2,000"
        "$V" eval "$T/$idx.vlc" --queries "$T/$d/q500.npy" --groundtruth "$T/$d/gt500.npy" --nprobe 16,64 \
          --threads 1 --batch-size 1 --backend $backend --repeat 3 2>&1 | tail -2
        "$V" eval "$T/$idx.vlc" --queries "$T/$d/query.npy" --groundtruth "$T/$d/gt.npy" --nprobe 16,64 \
          --backend $backend --repeat 3 2>&1 | tail -2
      done
    done
  done
done
