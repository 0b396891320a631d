#!/usr/bin/env bash
# How well pcaq's first stage (the fast scan that fills the candidate pool) ranks, for two vlc
# binaries side by side: per dataset and rate, the widths of the axes and recall@10 at
# nprobe 16 with a pool of 30 (first stage matters) and the default pool of 10·k, and the QPS
# of each (one search thread; run it on a quiet machine).
# Usage: bash bench/first_stage_check.sh OLD_VLC NEW_VLC DATASET_DIR... (RATES="pcaq5 pcaq7.5")
# SHARED_INDEX=1: build each index once, with OLD_VLC, and search it with both binaries (for a
# change to search alone, where both would build the same file).
set -euo pipefail
old=${1:?usage: bench/first_stage_check.sh OLD_VLC NEW_VLC DATASET_DIR...}
new=${2:?usage: bench/first_stage_check.sh OLD_VLC NEW_VLC DATASET_DIR...}
shift 2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
recall() { "$1" eval "$T/i.vlc" --queries "$2" --groundtruth "$3" --nprobe 16 --rerank "$4" --threads 1 | tail -1 | awk '{print $3 " at " $5 " QPS"}'; }
echo "dataset rate binary | widths | recall@10 pool 30 | recall@10 default pool"
for data in "$@"; do
  q=$data/query.npy; [ -f "$q" ] || q=$data/queries.npy
  for rate in ${RATES:-pcaq5 pcaq7.5}; do
    for bin in "$old" "$new"; do
      if [ -z "${SHARED_INDEX:-}" ] || [ "$bin" = "$old" ]; then
        "$bin" build "$data/base.npy" -o "$T/i.vlc" --codec "$rate" --backend cpu -q >/dev/null
      fi
      widths=$("$bin" info "$T/i.vlc" | grep ' bits ' | sed 's/ *bits *//')
      echo "$(basename "$data") $rate $bin | $widths | $(recall "$bin" "$q" "$data/groundtruth.npy" 30) | $(recall "$bin" "$q" "$data/groundtruth.npy" 0)"
    done
  done
done
