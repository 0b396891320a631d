#!/usr/bin/env bash
# One search call per query (`vlc eval --batch-size 1 --threads 1`, as an application that
# answers its users one at a time asks) and all queries in one call, with the `vlc` of
# BASE_REV and of this checkout, on one index (built by this checkout's `vlc` with
# BUILD_ARGS; both versions read it). Rounds alternate A, B, A, B, since a shared machine's
# speed drifts within minutes; recall must agree, QPS is what is compared. BASE_REV is checked
# out once in a git worktree under ${TMPDIR:-/tmp} (kept, with its build, for reruns).
# Usage: bash bench/eval_ab.sh BASE_REV DATASET_DIR "NPROBES" [BUILD_ARGS...]
# e.g.   bash bench/eval_ab.sh 41f662f ../shared/data/debian-minilm 16,64 --codec pcaq1
# BATCHES (environment, default "1 all") names the queries per call timed, e.g. "32 all".
set -euo pipefail
base=${1:?usage: bench/eval_ab.sh BASE_REV DATASET_DIR NPROBES [BUILD_ARGS...]}
data=${2:?give the dataset directory (base.npy, query.npy or queries.npy, groundtruth.npy)}
nprobe=${3:?give the nprobe values, e.g. 16,64}
shift 3
args=("$@"); [ ${#args[@]} -gt 0 ] || args=(--codec pcaq1)
cd "$(dirname "$0")/.."
source bench/ab_common.sh
$B build "$data/base.npy" -o "$T/i.vlc" "${args[@]}" --backend cpu -q | grep -E "anchors|codec|file"
for round in 1 2 3; do
  for side in A B; do
    v=$A; [ $side = B ] && v=$B
    for batch in ${BATCHES:-1 all}; do
      size=(); [ $batch != all ] && size=(--batch-size "$batch")
      echo "== $side, round $round, queries per call: $batch"
      $v eval "$T/i.vlc" --queries "$q" --groundtruth "$data/groundtruth.npy" \
        --nprobe "$nprobe" --threads 1 --repeat 3 "${size[@]}" | sed -n '3,$p'
    done
  done
done
