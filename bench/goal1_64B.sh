#!/usr/bin/env bash
# The best recall@10 at <= 64 bytes/vector on a dataset (issue #3, goal 1): pcaq at the largest
# rate whose whole file fits 64 bytes per vector (vlc build --bytes-per-vector 64), with int8 and
# int4 anchors, probed at nprobe 128, 512 and 1024. Usage: bash bench/goal1_64B.sh DATASET_DIR
set -euo pipefail
data=${1:?usage: bench/goal1_64B.sh DATASET_DIR}
cd "$(dirname "$0")/.."
cargo build --release -q -p vlc-cli
V=target/release/vlc; T=$(mktemp -d)
q=$data/query.npy; [ -f "$q" ] || q=$data/queries.npy
for precision in int8 int4; do
  echo "\$ vlc build $data/base.npy --bytes-per-vector 64 --anchor-precision $precision --backend cpu; vlc eval --nprobe 128,512,1024 --threads 1"
  $V build "$data/base.npy" -o "$T/i.vlc" --bytes-per-vector 64 --anchor-precision "$precision" --backend cpu -q | grep -E "codec|file"
  $V eval "$T/i.vlc" --queries "$q" --groundtruth "$data/groundtruth.npy" --nprobe 128,512,1024 --threads 1 | tail -4
done
rm -rf "$T"
