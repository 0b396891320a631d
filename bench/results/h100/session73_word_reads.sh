#!/usr/bin/env bash
# Session 73: a lone thread (CUDA) or invocation (WGPU) reads a scanned code of a byte or more
# per dimension (sq8, the default codec; sq4, f16) a word at a time. Two vlc binaries side by
# side on a GPU host, with stripped vlc binaries A and B: synthetic sets
# (bench/make_synthetic.py, 2,000 queries) of 1,000,000 x 128 and 200,000 x 384; indexes built
# by B on CUDA: sq8, sq4 and f16 at 128 d, sq8 at 384 d, and rabitq1 + sq8 at 128 d (whose
# scan reads nibble tables and whose sq8 second stage is read by groups of lanes, as before:
# a control); exact top 10 on CUDA. First, whether A and B return the same ids and distances
# (`vlc search` of the 2,000 queries at nprobe 16, byte for byte, each backend). Then `vlc
# eval --nprobe 16,64 --repeat 3` one query per call (--batch-size 1 --threads 1, the first
# 500 queries) and in one batch of 2,000, A and B alternating over two rounds (a shared host's
# speed drifts), on CUDA and WGPU: recall must agree, queries/s and us/query are compared.
# Usage: bash bench/results/h100/session73_word_reads.sh A_VLC B_VLC
#   BACKENDS="cuda wgpu" (default), ROUNDS=2
set -uo pipefail
A=${1:?usage: session73_word_reads.sh A_VLC B_VLC}
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
build d128 f16_128 --codec f16
build d128 r1sq8_128 --codec rabitq1 --refine sq8
build d384 sq8_384
for d in d128 d384; do
  "$B" groundtruth -q "$T/$d/base.npy" "$T/$d/query.npy" -k 10 -o "$T/$d/gt.npy" --backend cuda >/dev/null
  python3 -c "import numpy as np; np.save('$T/$d/q500.npy', np.load('$T/$d/query.npy')[:500]); np.save('$T/$d/gt500.npy', np.load('$T/$d/gt.npy')[:500])"
done
IDX="sq8_128 sq4_128 f16_128 r1sq8_128 sq8_384"
for backend in ${BACKENDS:-cuda wgpu}; do
  for idx in $IDX; do
    d=d128; [ $idx = sq8_384 ] && d=d384
    rm -f "$T/a.npy" "$T/b.npy"
    "$A" search "$T/$idx.vlc" "$T/$d/query.npy" -k 10 --nprobe 16 --backend $backend -o "$T/a.npy" 2>/dev/null &&
    "$B" search "$T/$idx.vlc" "$T/$d/query.npy" -k 10 --nprobe 16 --backend $backend -o "$T/b.npy" 2>/dev/null
    if [ $? -ne 0 ]; then same="a search FAILED";
    elif cmp -s "$T/a.npy" "$T/b.npy"; then same="the same bytes"; else same="DIFFERENT"; fi
    echo "$backend, $idx: vlc search --nprobe 16 of A and B: $same"
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
