#!/usr/bin/env bash
# Time opening an index (`vlc info`: read, check and decode the file, which for `pcaq`
# orthonormalises its stored rotation) and building it, with the `vlc` of BASE_REV and of this
# checkout, on one index built by this checkout's `vlc` with BUILD_ARGS (both versions read
# it). Rounds alternate A, B, A, B, since a shared machine's speed drifts within minutes; each
# open is timed on one thread and on all. Also checks that both versions return the same
# neighbours and distances for the first 200 queries, and that the index A builds answers as
# B's does. BASE_REV is checked out once in a git worktree under ${TMPDIR:-/tmp} (kept, with
# its build, for reruns).
# Usage: bash bench/open_ab.sh BASE_REV DATASET_DIR [BUILD_ARGS...]
# e.g.   bash bench/open_ab.sh 4bcf63e /tmp/vlc/syn1536 --codec pcaq3
set -euo pipefail
base=${1:?usage: bench/open_ab.sh BASE_REV DATASET_DIR [BUILD_ARGS...]}
data=${2:?give the dataset directory (base.npy, query.npy or queries.npy)}
shift 2
args=("$@"); [ ${#args[@]} -gt 0 ] || args=(--codec pcaq3)
cd "$(dirname "$0")/.."
source bench/ab_common.sh
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
python3 -c "import numpy as np, sys; np.save(sys.argv[2], np.load(sys.argv[1])[:200].astype(np.float32))" "$q" "$T/q.npy"
for round in 1 2 3; do
  for side in A B; do
    v=$A; [ $side = B ] && v=$B
    s=$(now_ms)
    $v build "$data/base.npy" -o "$T/$side.vlc" "${args[@]}" --backend cpu -q > /dev/null
    echo "== $side, round $round: build $(( $(now_ms) - s )) ms"
  done
done
$B info "$T/B.vlc" | grep -E "vectors|codec|bits|file"
for round in 1 2 3; do
  for side in A B; do
    v=$A; [ $side = B ] && v=$B
    for threads in 1 "$(nproc)"; do
      s=$(now_ms)
      $v --threads "$threads" info "$T/B.vlc" > /dev/null
      echo "== $side, round $round, $threads thread(s): open $(( $(now_ms) - s )) ms"
    done
  done
done
for side in A B; do
  v=$A; [ $side = B ] && v=$B
  $v search "$T/B.vlc" "$T/q.npy" -k 100 --nprobe 32 -o "$T/hits_$side.npy" > /dev/null
done
$B search "$T/A.vlc" "$T/q.npy" -k 100 --nprobe 32 -o "$T/hits_built_by_A.npy" > /dev/null
python3 - "$T" <<'EOF'
import sys
import numpy as np
t = sys.argv[1]
ids = [np.load(f"{t}/hits_{s}.npy") for s in "AB"]
dist = [np.load(f"{t}/hits_{s}.distances.npy") for s in "AB"]
print(f"search of 200 queries, k 100, nprobe 32: the same ids {bool((ids[0] == ids[1]).all())}, "
      f"the same distances bit for bit {bool((dist[0] == dist[1]).all())}, "
      f"largest relative difference {float((abs(dist[0] - dist[1]) / abs(dist[1]).clip(1e-30)).max()):.2e}")
built = np.load(f"{t}/hits_built_by_A.npy"), np.load(f"{t}/hits_built_by_A.distances.npy")
print(f"the index A built, searched by B: the same ids {bool((built[0] == ids[1]).all())}, "
      f"the same distances bit for bit {bool((built[1] == dist[1]).all())}")
EOF
