#!/usr/bin/env bash
# On the device machine: the same index built with each backend (cpu, cuda, wgpu) from the
# committed sample, evaluated against exact neighbours; then 1M x 384 training on cuda and wgpu.
# Usage: bash bench/gpu_backends.sh VLC_BINARY
set -euo pipefail
vlc=${1:?usage: bench/gpu_backends.sh VLC_BINARY}
python3 - <<'PY'
import numpy as np
b = np.load("data/sample/base.npy").astype(np.float32); q = np.load("data/sample/queries.npy").astype(np.float32)
d = (q * q).sum(1)[:, None] - 2 * q @ b.T + (b * b).sum(1)[None, :]
np.save("/tmp/sample_gt.npy", np.argsort(d, 1)[:, :100].astype(np.int32))
PY
for backend in cpu cuda wgpu; do
  "$vlc" build data/sample/base.npy -o /tmp/sample_$backend.vlc --codec rabitq1 --refine sq8 --backend "$backend" -q >/dev/null
  echo "== $backend"
  "$vlc" eval /tmp/sample_$backend.vlc --queries data/sample/queries.npy --groundtruth /tmp/sample_gt.npy --nprobe 8,32
done
if [ -f /tmp/x.npy ]; then
  for backend in cuda wgpu; do
    "$vlc" train-bench /tmp/x.npy --backend "$backend" --anchors 4096 --iterations 20
  done
fi
