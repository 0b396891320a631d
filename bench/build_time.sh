#!/usr/bin/env bash
# Build time (anchor training and encoding, on the CPU with every core), file size and recall@10
# at nprobe 32 and 128 (one thread) of some codecs on a dataset, for this checkout and, when BASE_REV is
# given, for that commit too (built once in a git worktree under ${TMPDIR:-/tmp}, kept for reruns),
# and how many of the two builds' codes differ.
# Usage: bash bench/build_time.sh DATASET_DIR "CODEC ..." [BASE_REV]
# BUILD_ARGS adds build options to every build, e.g. BUILD_ARGS="--anchors 16384".
# e.g.   bash bench/build_time.sh ../shared/data/debian-minilm "pcaq3 rabitq4 pcaq7.5" ec03b12
set -euo pipefail
data=${1:?usage: bench/build_time.sh DATASET_DIR "CODEC ..." [BASE_REV]}
codecs=${2:?usage: bench/build_time.sh DATASET_DIR "CODEC ..." [BASE_REV]}
base=${3:-}
cd "$(dirname "$0")/.."
cargo build --release -q -p vlc-cli
binaries=("HEAD $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes'):$PWD/target/release/vlc")
if [ -n "$base" ]; then
  tree="${TMPDIR:-/tmp}/vlc-build-time-$(git rev-parse --short "$base")"
  [ -d "$tree" ] || git worktree add -q --detach "$tree" "$base"
  (cd "$tree" && cargo build --release -q -p vlc-cli)
  binaries=("$base:$tree/target/release/vlc" "${binaries[@]}")
fi
q=$data/query.npy; [ -f "$q" ] || q=$data/queries.npy
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
echo "$(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
for codec in $codecs; do
  for entry in "${binaries[@]}"; do
    label=${entry%%:*}; vlc=${entry#*:}
    echo "== $codec, $label: vlc build $data/base.npy --codec $codec --backend cpu ${BUILD_ARGS:-}; vlc eval --nprobe 32,128 --threads 1"
    # shellcheck disable=SC2086 # BUILD_ARGS is a list of options
    "$vlc" build "$data/base.npy" -o "$out/$label.vlc" --codec "$codec" --backend cpu ${BUILD_ARGS:-} -q | grep -E "file|build time"
    "$vlc" eval "$out/$label.vlc" --queries "$q" --groundtruth "$data/groundtruth.npy" --nprobe 32,128 --threads 1 | tail -3
  done
  if [ ${#binaries[@]} -eq 2 ]; then
    # The sections before META (which holds the build report, times included) byte for byte; the
    # header and section table hold META's checksum, so they are left out.
    a="$out/${binaries[0]%%:*}.vlc"; b="$out/${binaries[1]%%:*}.vlc"
    first=$("${binaries[1]#*:}" info "$b" | awk '/ offset / {print $3; exit}')
    meta=$("${binaries[1]#*:}" info "$b" | awk '/META/ {print $3}')
    if cmp -s <(head -c "$meta" "$a" | tail -c +$((first + 1))) <(head -c "$meta" "$b" | tail -c +$((first + 1))); then
      echo "  the two indexes' sections before META (from byte $first) are identical"
    else
      # How many codes differ (the CODE section, one row of code_size bytes per vector).
      python3 -c '
import json, subprocess, sys
import numpy as np
vlc, files = sys.argv[1], sys.argv[2:]
rows = []
for f in files:
    info = json.loads(subprocess.run([vlc, "info", f, "--json"], capture_output=True, check=True).stdout)
    code, size = next(s for s in info["sections"] if s["tag"] == "CODE"), info["code_size"]
    rows.append(np.fromfile(f, dtype=np.uint8, count=code["bytes"], offset=code["offset"]).reshape(-1, size))
a, b = rows
if a.shape != b.shape:
    print(f"  the two indexes differ before META, and their code sections have different shapes: {a.shape}, {b.shape}")
    sys.exit()
changed = (a != b).any(1)
each = (a != b)[changed].sum(1).mean() if changed.any() else 0
print(f"  the two indexes differ before META: {changed.sum()} of {len(changed)} codes, by {each:.1f} of {a.shape[1]} bytes on average")
' "${binaries[1]#*:}" "$a" "$b"
    fi
  fi
  rm -f "$out"/*.vlc
done
