#!/usr/bin/env bash
# Adaptive probing against fixed nprobe on one dataset, same index, same run, one thread:
# `vlc eval --nprobe ...` with fixed lists, then `--probe-margin ...` capped at the largest
# nprobe. Usage: bash bench/adaptive_probe.sh DATASET_DIR [CODEC_ARGS...]
# (default: --codec rabitq1 --refine sq8; e.g. --codec pcaq2)
set -euo pipefail
data=${1:?usage: bench/adaptive_probe.sh DATASET_DIR [CODEC_ARGS...]}
shift
args=("$@"); [ ${#args[@]} -gt 0 ] || args=(--codec rabitq1 --refine sq8)
cd "$(dirname "$0")/.."
cargo build --release -q -p vlc-cli
V=target/release/vlc; T=$(mktemp -d)
q=$data/query.npy; [ -f "$q" ] || q=$data/queries.npy
$V build "$data/base.npy" -o "$T/i.vlc" "${args[@]}" --backend cpu -q | grep -E "codec|file|anchors"
$V info "$T/i.vlc" | grep -E "training"
for run in "--nprobe 8,16,32,64,128,256,512" "--nprobe 512 --probe-margin 0.6,0.8,1,1.2,1.5"; do
  echo "\$ vlc eval --threads 1 --repeat 3 $run"
  # shellcheck disable=SC2086
  $V eval "$T/i.vlc" --queries "$q" --groundtruth "$data/groundtruth.npy" --threads 1 --repeat 3 $run | tail -n +2
done
rm -rf "$T"
