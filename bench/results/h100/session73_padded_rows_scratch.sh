#!/usr/bin/env bash
# Session 73, a scratch experiment (not in the library): CUDA's scan of sq8 rows padded to 16
# bytes on the device and read 16 bytes a load. Build vlc from 413f5d0 with
# bench/results/h200/padded_rows_session73_scratch.patch applied (`git apply`), then on a GPU
# host: bash bench/results/h100/session73_padded_rows_scratch.sh VLC. The patched binary pads
# only where VLC_PAD is set, so one binary gives both sides: sq8 indexes of 1,000,000 x 128 and
# 200,000 x 384 synthetic sets (2,000 queries), the same-bytes check of `vlc search`, then
# `vlc eval --nprobe 16,64 --repeat 3` one query per call (the first 500 queries) and in one
# batch, padded or not alternating over two rounds.
set -u
V=$1
T=$(mktemp -d)
python3 bench/make_synthetic.py "$T/d128" --n 1000000 --dim 128 --queries 2000 >/dev/null
python3 bench/make_synthetic.py "$T/d384" --n 200000 --dim 384 --queries 2000 >/dev/null
$V build -q $T/d128/base.npy -o $T/sq8_128.vlc --backend cuda >/dev/null
$V build -q $T/d384/base.npy -o $T/sq8_384.vlc --backend cuda >/dev/null
for d in d128 d384; do
  $V groundtruth -q $T/$d/base.npy $T/$d/query.npy -k 10 -o $T/$d/gt.npy --backend cuda >/dev/null
  python3 -c "import numpy as np; np.save('$T/$d/q500.npy', np.load('$T/$d/query.npy')[:500]); np.save('$T/$d/gt500.npy', np.load('$T/$d/gt.npy')[:500])"
done
for idx in sq8_128 sq8_384; do
  d=d128; [ $idx = sq8_384 ] && d=d384
  $V search $T/$idx.vlc $T/$d/query.npy -k 10 --nprobe 16 --backend cuda -o $T/a.npy 2>/dev/null
  VLC_PAD=1 $V search $T/$idx.vlc $T/$d/query.npy -k 10 --nprobe 16 --backend cuda -o $T/b.npy 2>/dev/null
  cmp -s $T/a.npy $T/b.npy && echo "$idx same" || echo "$idx DIFFERENT"
done
for round in 1 2; do for idx in sq8_128 sq8_384; do for pad in no yes; do
  d=d128; [ $idx = sq8_384 ] && d=d384
  echo "round $round $idx pad=$pad"
  if [ $pad = yes ]; then export VLC_PAD=1; else unset VLC_PAD; fi
  $V eval $T/$idx.vlc --queries $T/$d/q500.npy --groundtruth $T/$d/gt500.npy --nprobe 16,64 --threads 1 --batch-size 1 --backend cuda --repeat 3 2>&1 | tail -2
  $V eval $T/$idx.vlc --queries $T/$d/query.npy --groundtruth $T/$d/gt.npy --nprobe 16,64 --backend cuda --repeat 3 2>&1 | tail -2
done; done; done
unset VLC_PAD
