#!/usr/bin/env bash
# Peak memory of `vlc search` over a large queries file (session 64: the queries are read, and
# the results written, a batch at a time). Generates ROWS x DIM standard normal f32 vectors
# (seed 0), builds an sq8 index of 64 anchors over them on the CPU, and searches it with the
# same vectors as queries (k 10, nprobe 1, one .npy output), timed by GNU time: its peak
# resident memory and wall time, for each vlc binary given. Then checks that the binaries'
# outputs are byte for byte the same.
#
# Usage: bash bench/search_memory.sh [ROWS] [DIM] VLC [VLC ...]
#   e.g. bash bench/search_memory.sh 400000 384 /tmp/old/vlc target/release/vlc
set -euo pipefail
rows=${1:?rows}; dim=${2:?dim}; shift 2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 -c "import numpy as np; np.save('$tmp/x.npy', np.random.default_rng(0).standard_normal(($rows, $dim), dtype=np.float32))"
"$1" build "$tmp/x.npy" -o "$tmp/x.vlc" --codec sq8 --anchors 64 --backend cpu -q
echo "queries: $rows x $dim f32 ($(du -h "$tmp/x.npy" | cut -f1)); index $(du -h "$tmp/x.vlc" | cut -f1)"
n=0
for vlc in "$@"; do
  n=$((n + 1))
  /usr/bin/time -f "$vlc: peak resident %M KiB, %e s" "$vlc" search "$tmp/x.vlc" "$tmp/x.npy" \
    -k 10 --nprobe 1 -o "$tmp/hits$n.npy" 2>&1 | grep "peak resident"
done
for i in $(seq 2 $n); do
  cmp "$tmp/hits1.npy" "$tmp/hits$i.npy" && cmp "$tmp/hits1.distances.npy" "$tmp/hits$i.distances.npy" \
    && echo "binary $i: the same ids and distances as binary 1"
done
