#!/usr/bin/env bash
# Session 78: CUDA search launches of fewer queries than multiprocessors in blocks of 1,024
# threads (search.cu's `_wide` entry functions) against blocks of 256 (VLC_CUDA_WIDE_SEARCH=0),
# one vlc binary, on a GPU host. DIR holds base.npy, query.npy, groundtruth.npy (session 78:
# `python3 bench/make_synthetic.py DIR --n 60601 --dim 384 --queries 2000`, the dev set's shape).
# Indexes built on the CPU: the default `sq8`, `rabitq1 --refine sq8`, `pcaq1`. Then, for each,
# `vlc eval --backend cuda --nprobe 16,64 --repeat 3` with one query per call (--batch-size 1
# --threads 1), 32 per call and all in one call (which takes blocks of 256 either way: a
# control), narrow and wide alternating over two rounds; recall must agree.
# Usage: bash bench/results/h200/session78_wide_ab.sh VLC DIR
set -uo pipefail
V=${1:?usage: session78_wide_ab.sh VLC DIR}
D=${2:?give the directory of base.npy, query.npy, groundtruth.npy}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,multiprocessor_count --format=csv,noheader 2>/dev/null \
  || nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
"$V" build -q "$D/base.npy" -o "$T/sq8.vlc" --backend cpu >/dev/null
"$V" build -q "$D/base.npy" -o "$T/rabitq1_sq8.vlc" --codec rabitq1 --refine sq8 --backend cpu >/dev/null
"$V" build -q "$D/base.npy" -o "$T/pcaq1.vlc" --codec pcaq1 --backend cpu >/dev/null
for index in sq8 rabitq1_sq8 pcaq1; do
  "$V" info "$T/$index.vlc" | grep -E "codec|refine"
  for round in 1 2; do
    for mode in narrow wide; do
      wide=1; [ $mode = narrow ] && wide=0
      for batch in 1 32 0; do
        extra=(--batch-size "$batch"); [ "$batch" = 1 ] && extra+=(--threads 1)
        echo "== $index, round $round, $mode (VLC_CUDA_WIDE_SEARCH=$wide), queries per call: ${batch/#0/all}"
        VLC_CUDA_WIDE_SEARCH=$wide "$V" eval "$T/$index.vlc" --queries "$D/query.npy" \
          --groundtruth "$D/groundtruth.npy" --nprobe 16,64 --backend cuda --repeat 3 "${extra[@]}" 2>&1 | tail -2
      done
    done
  done
done
