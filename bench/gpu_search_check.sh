#!/usr/bin/env bash
# The same index files searched on the CPU, CUDA and WGPU side by side: recall@10 and QPS per
# nprobe (`vlc eval --backend B --repeat 10`: the fastest of ten passes, so the GPU's first
# call, which loads its kernels, is not timed, nor are the slow spells that a shared GPU
# machine shows at times (bench/results/h100/session38_gpu_2026-11-26.log); the CPU on all
# cores), then, at nprobe 64, how
# many of the CPU's top-10 ids each GPU returns (as sets and at the same rank) and how far its
# distances are where both return the same id at the same rank.
# Usage: bash bench/gpu_search_check.sh VLC QUERIES GROUNDTRUTH INDEX...
#   NPROBE=16,64,128,512 (default), BACKENDS="cpu cuda wgpu" (default) and REPEAT=10 (default;
#   sessions before 38 used 3) to change the sweep.
set -euo pipefail
vlc=${1:?usage: bench/gpu_search_check.sh VLC QUERIES GROUNDTRUTH INDEX...}
queries=${2:?queries}
truth=${3:?groundtruth}
shift 3
backends=${BACKENDS:-cpu cuda wgpu}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for index in "$@"; do
  name=$(basename "$index" .vlc)
  "$vlc" info "$index" | grep -E "codec|bits|fast scan|file" || true
  for be in $backends; do
    echo "-- $name on $be"
    "$vlc" eval "$index" --queries "$queries" --groundtruth "$truth" --nprobe "${NPROBE:-16,64,128,512}" \
      --backend "$be" --repeat "${REPEAT:-10}"
    "$vlc" search "$index" "$queries" -k 10 --nprobe 64 --backend "$be" -o "$T/$be.npy" >/dev/null 2>&1
  done
  python3 - "$T" $backends <<'PY'
import sys
import numpy as np
folder, backends = sys.argv[1], sys.argv[2:]
ids = {b: np.load(f"{folder}/{b}.npy") for b in backends}
dists = {b: np.load(f"{folder}/{b}.distances.npy") for b in backends}
for b in backends[1:]:
    sets = np.mean([len(set(x) & set(y)) / len(x) for x, y in zip(ids["cpu"], ids[b])])
    same = ids["cpu"] == ids[b]
    rel = np.abs(dists["cpu"][same] - dists[b][same]) / (1 + np.abs(dists["cpu"][same]))
    print(f"{b} against cpu at nprobe 64: same top-10 sets {sets:.5f}, same rank {same.mean():.5f}, "
          f"largest relative distance difference where the same {rel.max():.2e}")
PY
done
