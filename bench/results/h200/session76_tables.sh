#!/usr/bin/env bash
# Session 76: WGPU search keeps the query's nibble tables (RaBitQ's; pcaq's two) in workgroup
# memory where they fit beside the candidate pool (`TABLE_SLOTS`), as CUDA keeps them in shared
# memory, instead of in the storage buffer's scratch. Two vlc binaries side by side on a GPU
# host, with stripped vlc binaries A and B: synthetic sets (bench/make_synthetic.py, 2,000
# queries) of 1,000,000 x 128, 200,000 x 384 and 100,000 x 768; indexes built by B on CUDA:
# rabitq1 + sq8 and pcaq2 at 128 d, pcaq1 and rabitq4 at 384 d, pcaq1 at 768 d (pcaq's two
# tables, 24 KiB, fit a 48 KiB adapter beside the usual pool), and sq8 at 128 d (no tables:
# a control); exact top 10 on CUDA. First, `vlc search --nprobe 16` of the 2,000 queries by
# A and B on each backend and by B on the CPU: the share of A's ids that B returns (per query,
# at any rank), and the largest distance difference relative to the distance where both
# return an id at the same rank, for B against A and for each against the CPU. Then `vlc eval
# --nprobe 16,64 --repeat 3` one query per call (--batch-size 1 --threads 1, the first 500
# queries) and in one batch of 2,000, A and B alternating over ROUNDS rounds (a shared host's
# speed drifts): recall and queries/s (us/query) are compared.
# Usage: bash bench/results/h200/session76_tables.sh A_VLC B_VLC
#   BACKENDS="wgpu" (default), ROUNDS=2, IDX (the indexes measured, of those built)
set -uo pipefail
A=${1:?usage: session76_tables.sh A_VLC B_VLC}
B=${2:?give the second vlc binary}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "A = $A, B = $B"
python3 bench/make_synthetic.py "$T/d128" --n 1000000 --dim 128 --queries 2000 >/dev/null
python3 bench/make_synthetic.py "$T/d384" --n 200000 --dim 384 --queries 2000 >/dev/null
python3 bench/make_synthetic.py "$T/d768" --n 100000 --dim 768 --queries 2000 >/dev/null
build() { "$B" build -q "$T/$1/base.npy" -o "$T/$2.vlc" "${@:3}" --backend cuda >/dev/null; echo "$2:"; "$B" info "$T/$2.vlc" | grep -E "codec|refine"; }
build d128 r1sq8_128 --codec rabitq1 --refine sq8
build d128 pcaq2_128 --codec pcaq2
build d384 pcaq1_384 --codec pcaq1
build d384 r4_384 --codec rabitq4
build d768 pcaq1_768 --codec pcaq1
build d128 sq8_128
for d in d128 d384 d768; do
  "$B" groundtruth -q "$T/$d/base.npy" "$T/$d/query.npy" -k 10 -o "$T/$d/gt.npy" --backend cuda >/dev/null
  python3 -c "import numpy as np; np.save('$T/$d/q500.npy', np.load('$T/$d/query.npy')[:500]); np.save('$T/$d/gt500.npy', np.load('$T/$d/gt.npy')[:500])"
done
IDX=${IDX:-"r1sq8_128 pcaq2_128 pcaq1_384 r4_384 pcaq1_768 sq8_128"}
dir_of() { case $1 in *_384) echo d384;; *_768) echo d768;; *) echo d128;; esac; }
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
  d=$(dir_of $idx)
  "$B" search "$T/$idx.vlc" "$T/$d/query.npy" -k 10 --nprobe 16 --backend cpu -o "$T/cpu.npy" 2>/dev/null
  for backend in ${BACKENDS:-wgpu}; do
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
  for backend in ${BACKENDS:-wgpu}; do
    for idx in $IDX; do
      d=$(dir_of $idx)
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
