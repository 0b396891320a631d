#!/usr/bin/env bash
# `vlc add` against a build over everything: build an index of a set's first rows, add the
# rest with `vlc add`, and evaluate it beside an index built over all rows at once.
#
# Usage: bash bench/add_check.sh DATASET_DIR [ADDED_ROWS] [CODEC...]
#   DATASET_DIR holds base.npy, query.npy and groundtruth.npy (ids are base.npy's rows, which
#   `vlc add` keeps: row i of the added file gets id (rows built) + i).
#   ADDED_ROWS defaults to a sixth of the rows; CODEC defaults to "pcaq2" "rabitq1 --refine sq8".
set -euo pipefail
dir=$1
added=${2:-0}
shift $(( $# > 1 ? 2 : 1 ))
codecs=("$@")
[ ${#codecs[@]} -eq 0 ] && codecs=("pcaq2" "rabitq1 --refine sq8")
vlc=${VLC:-target/release/vlc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$dir/base.npy" "$work" "$added" <<'PY'
import sys, numpy as np
x = np.load(sys.argv[1], mmap_mode="r")
m = int(sys.argv[3]) or len(x) // 6
np.save(f"{sys.argv[2]}/first.npy", x[: len(x) - m])
np.save(f"{sys.argv[2]}/rest.npy", x[len(x) - m :])
print(f"{len(x) - m} rows built, {m} added ({sys.argv[1]})")
PY
echo "vlc: $("$vlc" --version), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
for codec in "${codecs[@]}"; do
    echo
    echo "## $codec"
    # shellcheck disable=SC2086
    "$vlc" build "$dir/base.npy" -o "$work/all.vlc" --codec $codec --quiet >/dev/null
    # shellcheck disable=SC2086
    "$vlc" build "$work/first.npy" -o "$work/grown.vlc" --codec $codec --quiet >/dev/null
    "$vlc" add "$work/grown.vlc" "$work/rest.npy" --quiet
    for index in all grown; do
        echo "$index:"
        "$vlc" --threads 1 eval "$work/$index.vlc" --queries "$dir/query.npy" \
            --groundtruth "$dir/groundtruth.npy" --nprobe 16,64,256
    done
done
