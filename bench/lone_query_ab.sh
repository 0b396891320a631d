#!/usr/bin/env bash
# One query per search call on one thread (`vlc eval --batch-size 1 --threads 1`, as an
# application answering its users one at a time asks), unfiltered and under random filters of
# each share (`--allow-ids`, subsets of the base drawn with seed 0), with two `vlc` binaries
# side by side on one index (built by B): A, B, and, where B_ENV is set, B again with those
# environment settings (e.g. B_ENV="VLC_HUGE_PAGES=0"). Rounds alternate, since a shared
# machine's speed drifts within minutes; recall must agree, us/query is what is compared.
# Binaries rather than revisions, so that it runs where no Rust toolchain is (a GPU host).
# Usage: bash bench/lone_query_ab.sh A_VLC B_VLC DATA_DIR [BUILD_ARGS...]
#   SHARES="0.01 0.001" (default), NPROBE=16, ROUNDS=3, REPEAT=3, B_ENV (unset: no third side)
# e.g.   B_ENV=VLC_HUGE_PAGES=0 bash bench/lone_query_ab.sh old/vlc target/release/vlc \
#          /tmp/syn1m --codec rabitq1 --refine sq8
set -euo pipefail
A=${1:?usage: bench/lone_query_ab.sh A_VLC B_VLC DATA_DIR [BUILD_ARGS...]}
B=${2:?give the second vlc binary}
data=${3:?give the dataset directory (base.npy, query.npy or queries.npy)}
shift 3
args=("$@"); [ ${#args[@]} -gt 0 ] || args=(--codec rabitq1 --refine sq8)
shares=${SHARES:-0.01 0.001}
q=$data/query.npy; [ -f "$q" ] || q=$data/queries.npy
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
echo "$(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); kernel $(uname -r); transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unknown)"
echo "A = $A, B = $B${B_ENV:+, C = B with $B_ENV}"
"$B" build -q "$data/base.npy" -o "$T/index.vlc" "${args[@]}" --backend cpu
"$B" info "$T/index.vlc" | grep -E "vectors|anchors|codec" || true
"$B" groundtruth -q "$data/base.npy" "$q" -k 10 -o "$T/gt_all.npy" >/dev/null
python3 - "$data/base.npy" "$T" $shares <<'PY'
import sys
import numpy as np
n = np.load(sys.argv[1], mmap_mode="r").shape[0]
rng = np.random.default_rng(0)
for share in sys.argv[3:]:
    count = max(10, round(float(share) * n))
    np.save(f"{sys.argv[2]}/allowed_{share}.npy", np.sort(rng.choice(n, count, replace=False)).astype(np.int64))
PY
for share in $shares; do
  "$B" groundtruth -q "$data/base.npy" "$q" -k 10 --allow-ids "$T/allowed_$share.npy" \
    -o "$T/gt_$share.npy" >/dev/null
done
sides="A B"; [ -n "${B_ENV:-}" ] && sides="A B C"
for round in $(seq "${ROUNDS:-3}"); do
  for side in $sides; do
    v=$A; envs=()
    [ "$side" != A ] && v=$B
    # shellcheck disable=SC2206
    [ "$side" = C ] && envs=($B_ENV)
    for share in all $shares; do
      filter=(); [ "$share" != all ] && filter=(--allow-ids "$T/allowed_$share.npy")
      line=$(env "${envs[@]}" "$v" eval "$T/index.vlc" --queries "$q" --groundtruth "$T/gt_$share.npy" \
        --nprobe "${NPROBE:-16}" --threads 1 --batch-size 1 --repeat "${REPEAT:-3}" "${filter[@]}" | tail -1)
      echo "round $round, $side, allowed $share: $line"
    done
  done
done
echo "columns: nprobe, recall@1, recall@10, recall@100, QPS, us/query"
