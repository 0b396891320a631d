#!/usr/bin/env bash
# Build and evaluate every codec on a dataset directory holding base.npy, query.npy and
# groundtruth.npy; prints one JSON document per codec (build summary and eval sweep).
# Usage: bash bench/codecs.sh DATASET_DIR [OUT_DIR]
set -euo pipefail
data=${1:?usage: bench/codecs.sh DATASET_DIR [OUT_DIR]}
out=${2:-$(mktemp -d)}
cd "$(dirname "$0")/.."
cargo build --release -q -p vlc-cli
vlc=target/release/vlc
for spec in "anchor-only none" "rabitq1 none" "sq4 none" "sq8 none" "rabitq1 sq8"; do
  set -- $spec
  idx="$out/$1-$2.vlc"
  $vlc build "$data/base.npy" -o "$idx" --codec "$1" --refine "$2" --json
  $vlc eval "$idx" --queries "$data/query.npy" --groundtruth "$data/groundtruth.npy" --json
done
