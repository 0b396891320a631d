#!/usr/bin/env bash
# CPU training with and without distance bounds (TrainParams::distance_bounds), interleaved
# runs of `vlc train-bench --backend cpu` on one input: seconds, the assignment's seconds, the
# final energy over every vector, and the points ranked against every anchor per iteration.
# Usage: bash bench/cpu_bounds_ab.sh VECTORS ANCHORS ITERATIONS [RUNS]
set -euo pipefail
input=${1:?usage: bench/cpu_bounds_ab.sh VECTORS ANCHORS ITERATIONS [RUNS]}
anchors=${2:?anchors}; iterations=${3:?iterations}; runs=${4:-3}
cd "$(dirname "$0")/.."
cargo build --release -q -p vlc-cli
echo "# $(git rev-parse --short HEAD): vlc train-bench $input --anchors $anchors --iterations $iterations --backend cpu [--no-distance-bounds], $(nproc) threads"
for r in $(seq "$runs"); do
  for flag in --no-distance-bounds ""; do
    target/release/vlc train-bench "$input" --anchors "$anchors" --iterations "$iterations" --backend cpu --json $flag 2>/dev/null | tail -1 |
      python3 -c "
import json, sys
d = json.loads(sys.stdin.read())
name = 'bounds   ' if d['ranked_history'] else 'no bounds'
ranked = d['ranked_history']
share = sum(ranked) / (d['vectors'] * len(ranked)) if ranked else 1.0
print(f\"run $r {name}: {d['seconds']:.3f} s (assign {d['phase_seconds']['assign']:.3f} s), energy {d['final_energy']:.9f}, ranked {share:.3f} of the point-iterations {ranked}\")"
  done
done
