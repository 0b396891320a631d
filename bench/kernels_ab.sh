#!/usr/bin/env bash
# The kernel micro-benchmarks (crates/vlc-core/benches/kernels.rs, this checkout's version) on the
# library of BASE_REV and then on this checkout, the second against the first (criterion's change
# and p-value). BASE_REV is checked out once in a git worktree under ${TMPDIR:-/tmp}, kept for reruns.
# Usage: bash bench/kernels_ab.sh BASE_REV [FILTER]
# e.g.   bash bench/kernels_ab.sh 7fb2dc8 "anchor ranking"
set -euo pipefail
base=${1:?usage: bench/kernels_ab.sh BASE_REV [FILTER]}
args=(); [ -z "${2:-}" ] || args=("$2")
cd "$(dirname "$0")/.."
here=$PWD
tree="${TMPDIR:-/tmp}/vlc-kernels-$(git rev-parse --short "$base")"
[ -d "$tree" ] || git worktree add -q --detach "$tree" "$base"
cp crates/vlc-core/benches/kernels.rs "$tree/crates/vlc-core/benches/kernels.rs"
echo "$(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
show() { grep -E "^[a-z].*/|time:|change:|improved|regressed|No change" || true; }
echo "== library of $base"
# Each tree builds in its own target directory (a shared one would take the other's library for
# fresh, by its files' times); the baseline is shared through CRITERION_HOME.
export CRITERION_HOME="$here/target/criterion"
[ ! -d "$CRITERION_HOME" ] || find "$CRITERION_HOME" -type d -name base -prune -exec rm -rf {} +
(cd "$tree" && cargo bench -q -p vlc-core --bench kernels -- "${args[@]}" --save-baseline base 2>&1 | show)
echo "== this checkout, $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes'), against it"
cargo bench -q -p vlc-core --bench kernels -- "${args[@]}" --baseline base 2>&1 | show
