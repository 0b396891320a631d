#!/usr/bin/env bash
# Filtered search (`--allow-ids`) on the CPU, CUDA and WGPU side by side (session 68): for
# random subsets of the base (seed 0) of each share, the exact top 10 among the allowed vectors
# (`vlc groundtruth --allow-ids`), then `vlc eval --allow-ids --backend B --repeat R` per
# backend: recall@10 and queries/s of the fastest of R passes over every query in one batch
# (so neither the GPU copy of the index nor the first call's kernel load is timed; a filtered
# GPU search ranks the lists on the GPU, and on the CPU's cores only for the queries whose
# first lists hold too little). The
# unfiltered search of the same index is the first row. Then, at the first nprobe, how many of
# the CPU's top-10 ids each GPU returns per filter, and that every id it returns is allowed.
# Usage: bash bench/gpu_filtered_search.sh VLC DATA_DIR (base.npy and query.npy)
#   BUILD_ARGS="--codec rabitq1 --refine sq8" (default), SHARES="0.5 0.1 0.01 0.001",
#   NPROBE=16,64, BACKENDS="cpu cuda wgpu", REPEAT=5, BATCH_SIZE=0 (queries per search call,
#   0: all in one; 1 times them one at a time, as a server answering its users one by one).
set -euo pipefail
vlc=${1:?usage: bench/gpu_filtered_search.sh VLC DATA_DIR}
data=${2:?data dir with base.npy and query.npy}
backends=${BACKENDS:-cpu cuda wgpu}
nprobe=${NPROBE:-16,64}
first_nprobe=${nprobe%%,*}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# shellcheck disable=SC2086
"$vlc" build -q "$data/base.npy" -o "$T/index.vlc" ${BUILD_ARGS:---codec rabitq1 --refine sq8}
"$vlc" info "$T/index.vlc" | grep -E "vectors|anchors|codec" || true
"$vlc" groundtruth -q "$data/base.npy" "$data/query.npy" -k 10 -o "$T/gt_all.npy"
python3 - "$data/base.npy" "$T" ${SHARES:-0.5 0.1 0.01 0.001} <<'PY'
import sys
import numpy as np
n = np.load(sys.argv[1], mmap_mode="r").shape[0]
rng = np.random.default_rng(0)
for share in sys.argv[3:]:
    count = max(10, round(float(share) * n))
    np.save(f"{sys.argv[2]}/allowed_{share}.npy", np.sort(rng.choice(n, count, replace=False)).astype(np.int64))
PY
for share in all ${SHARES:-0.5 0.1 0.01 0.001}; do
  filter=()
  if [ "$share" != all ]; then
    filter=(--allow-ids "$T/allowed_$share.npy")
    "$vlc" groundtruth -q "$data/base.npy" "$data/query.npy" -k 10 "${filter[@]}" -o "$T/gt_$share.npy"
  fi
  for be in $backends; do
    echo "-- allowed: $share, backend $be"
    "$vlc" eval "$T/index.vlc" --queries "$data/query.npy" --groundtruth "$T/gt_$share.npy" \
      --nprobe "$nprobe" --backend "$be" --repeat "${REPEAT:-5}" --batch-size "${BATCH_SIZE:-0}" \
      "${filter[@]}"
    "$vlc" search "$T/index.vlc" "$data/query.npy" -k 10 --nprobe "$first_nprobe" --backend "$be" \
      "${filter[@]}" -o "$T/${be}_$share.npy" >/dev/null 2>&1
  done
done
python3 - "$T" "$first_nprobe" "$backends" ${SHARES:-0.5 0.1 0.01 0.001} <<'PY'
import sys
import numpy as np
folder, nprobe, backends, shares = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4:]
if backends[0] != "cpu":
    sys.exit(0)
for share in ["all", *shares]:
    cpu = np.load(f"{folder}/cpu_{share}.npy")
    allowed = None if share == "all" else np.load(f"{folder}/allowed_{share}.npy")
    for b in backends[1:]:
        ids = np.load(f"{folder}/{b}_{share}.npy")
        sets = np.mean([len(set(x[x >= 0]) & set(y[y >= 0])) / max(1, (x >= 0).sum()) for x, y in zip(cpu, ids)])
        outside = 0 if allowed is None else int((~np.isin(ids[ids >= 0], allowed)).sum())
        rows = int(((cpu >= 0).sum(1) != (ids >= 0).sum(1)).sum())
        print(f"allowed {share}, nprobe {nprobe}: {b} returns {sets:.5f} of the CPU's top-10 ids; "
              f"{outside} ids outside the filter; {rows} rows with another count of hits")
PY
