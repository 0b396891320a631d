#!/usr/bin/env bash
# The best recall@10 at <= 64 bytes/vector on a dataset (issue #3, goal 1): pcaq at the largest
# bit budget that fits, with int8 and int4 anchors. Usage: bash bench/goal1_64B.sh DATASET_DIR
set -euo pipefail
data=${1:?usage: bench/goal1_64B.sh DATASET_DIR}
cd "$(dirname "$0")/.."
cargo build --release -q -p vlc-cli
V=target/release/vlc; T=$(mktemp -d)
q=$data/query.npy; [ -f "$q" ] || q=$data/queries.npy
for spec in "pcaq0.93 int8" "pcaq1 int4"; do
  set -- $spec
  echo "\$ vlc build $data/base.npy --codec $1 --anchor-precision $2 --backend cpu; vlc eval --nprobe 128,512,1024 --threads 1"
  $V build "$data/base.npy" -o "$T/i.vlc" --codec "$1" --anchor-precision "$2" --backend cpu -q | grep "file"
  $V eval "$T/i.vlc" --queries "$q" --groundtruth "$data/groundtruth.npy" --nprobe 128,512,1024 --threads 1 | tail -4
done
rm -rf "$T"
