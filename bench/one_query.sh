#!/usr/bin/env bash
# One query per search call (`vlc eval --batch-size 1 --threads 1`), as an application that
# answers its users one at a time asks, at several anchor counts, on each anchor-ranking kernel
# this CPU offers for one query: the default (AMX machines: AVX-512 VNNI; else VNNI or AVX-VNNI,
# else the AVX2 integer kernel), the AVX2 integer kernel (VLC_NO_VNNI=1 VLC_NO_AMX=1), and f32
# dot products (all integer kernels off: the ranking before session 50); then all queries in
# one call for comparison. Rounds alternate, since a shared machine's speed drifts.
# Usage: bash bench/one_query.sh DATASET_DIR "ANCHOR_COUNTS" [BUILD_ARGS...]
# e.g.   bash bench/one_query.sh ../shared/data/debian-minilm "256 1024 4096"
set -euo pipefail
data=${1:?usage: bench/one_query.sh DATASET_DIR "ANCHOR_COUNTS" [BUILD_ARGS...]}
counts=${2:?give the anchor counts, e.g. "256 1024 4096"}
shift 2
args=("$@"); [ ${#args[@]} -gt 0 ] || args=(--codec pcaq1)
cd "$(dirname "$0")/.."
cargo build --release -q -p vlc-cli
V=target/release/vlc; T=$(mktemp -d)
q=$data/query.npy; [ -f "$q" ] || q=$data/queries.npy
echo "$(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); commit $(git rev-parse --short HEAD)"
for a in $counts; do
  $V build "$data/base.npy" -o "$T/i.vlc" --anchors "$a" "${args[@]}" --backend cpu -q | grep -E "anchors|codec|file"
  e=("$V" eval "$T/i.vlc" --queries "$q" --groundtruth "$data/groundtruth.npy" --nprobe 16,64 --threads 1 --repeat 2)
  for round in 1 2; do
    echo "== $a anchors, round $round: one query per call, default kernel"
    "${e[@]}" --batch-size 1 | sed -n '1s/.*CPU kernels/CPU kernels/p;3,$p'
    echo "== $a anchors, round $round: one query per call, AVX2 integer kernel (VLC_NO_VNNI=1 VLC_NO_AMX=1)"
    VLC_NO_VNNI=1 VLC_NO_AMX=1 "${e[@]}" --batch-size 1 | sed -n '1s/.*CPU kernels/CPU kernels/p;3,$p'
    echo "== $a anchors, round $round: one query per call, f32 (VLC_NO_VNNI=1 VLC_NO_AMX=1 VLC_NO_AVX2_INT8=1)"
    VLC_NO_VNNI=1 VLC_NO_AMX=1 VLC_NO_AVX2_INT8=1 "${e[@]}" --batch-size 1 | sed -n '1s/.*CPU kernels/CPU kernels/p;3,$p'
  done
  echo "== $a anchors: all queries in one call, default kernel"
  "${e[@]}" | sed -n '3,$p'
done
rm -rf "$T"
