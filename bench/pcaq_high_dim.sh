#!/usr/bin/env bash
# pcaq build time at high dimensions, where its fit's eigendecomposition dominates: 2,000 Gaussian
# vectors per dimension, `vlc build --codec pcaq1 --backend cpu`, the build's own timing line.
# Usage: bash bench/pcaq_high_dim.sh [VLC_BINARY] [DIMS]   (defaults: target/release/vlc, "1536 2048 3072 4096")
set -euo pipefail
V=${1:-target/release/vlc}; dims=${2:-1536 2048 3072 4096}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
for d in $dims; do
  python3 -c "import numpy as np; np.save('$T/x.npy', np.random.default_rng($d).standard_normal((2000, $d)).astype(np.float32))"
  echo "$d-d: $("$V" build "$T/x.npy" -o "$T/i.vlc" --codec pcaq1 --backend cpu | grep 'build time' | sed 's/^ *//')"
done
