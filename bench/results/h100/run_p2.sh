#!/bin/bash
# Probe (run P2): each backend call of a warm training, 1M x 384 (4096 anchors, 20 iterations)
# and 10K x 128 (256 anchors, 30 iterations); host costs of an anchor upload.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "
import numpy as np
rng=np.random.default_rng(0); c=rng.standard_normal((4096,384),dtype=np.float32); l=rng.integers(0,4096,1000000)
x=c[l]+0.5*rng.standard_normal((1000000,384),dtype=np.float32); np.save('/tmp/x.npy',x)
rng=np.random.default_rng(1); c=rng.normal(size=(256,128)).astype(np.float32); x=(c[rng.integers(0,256,10000)]+0.3*rng.normal(size=(10000,128))).astype(np.float32); np.save('/tmp/s.npy',x)"
echo "== iteration_probe 1M x 384, 4096 anchors, 20 iterations"
VLC_PROBE_DATA=/tmp/x.npy .carry/iteration_probe 1000000 384 4096 10 20 2>&1
echo "== iteration_probe 10K x 128, 256 anchors, 30 iterations"
VLC_PROBE_DATA=/tmp/s.npy .carry/iteration_probe 10000 128 256 100 30 2>&1
