#!/usr/bin/env bash
# On the device machine: `vlc build` of N x DIM clustered vectors with the 1-bit codec, on CUDA
# and on the CPU, timed after the input is in memory (the JSON's build_seconds).
# Usage: bash bench/gpu_build.sh VLC_BINARY [N] [DIM]
set -euo pipefail
vlc=${1:?usage: bench/gpu_build.sh VLC_BINARY [N] [DIM]}
n=${2:-1000000}
dim=${3:-384}
data=/tmp/vlc_build_$n.npy
python3 - "$n" "$dim" "$data" <<'PY'
import sys, numpy as np
n, d, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = np.random.default_rng(0)
c = rng.standard_normal((4096, d), dtype=np.float32)
x = c[rng.integers(0, 4096, n)] + 0.5 * rng.standard_normal((n, d), dtype=np.float32)
np.save(path, x)
PY
for backend in cuda cpu; do
  "$vlc" build "$data" -o /tmp/vlc_build_$backend.vlc --codec rabitq1 --backend "$backend" --json \
    | python3 -c "import json,sys; r=json.load(sys.stdin); print(f\"{r['backend']:<5} build {r['build_seconds']:.2f} s (train {r['train_seconds']:.2f}, assign {r['assign_seconds']:.2f}, encode {r['encode_seconds']:.2f}); {r['anchors']} anchors, {r['bytes_per_vector']:.1f} B/vector\")"
done
