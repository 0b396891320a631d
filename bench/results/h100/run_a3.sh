#!/bin/bash
# Device check (run A3, session 14): what each bounded assignment of a 1M x 384 training does
# (VLC_CUDA_TRACE=1), then train-bench of both shapes alternating this code (.carry/vlc) with
# the session's starting commit 8310341 (.carry/vlc_prev) on the same machine.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "
import numpy as np
rng=np.random.default_rng(0); c=rng.standard_normal((4096,384),dtype=np.float32); l=rng.integers(0,4096,1000000)
x=c[l]+0.5*rng.standard_normal((1000000,384),dtype=np.float32); np.save('/tmp/x.npy',x)
rng=np.random.default_rng(1); c=rng.normal(size=(256,128)).astype(np.float32); x=(c[rng.integers(0,256,10000)]+0.3*rng.normal(size=(10000,128))).astype(np.float32); np.save('/tmp/s.npy',x)"
fmt='import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1]); p=r["phase_seconds"]
print(sys.argv[1], "total %.4f loop %.4f energy %.6f" % (r["seconds"], r["loop_seconds"], r["final_energy"]), " ".join("%s %.4f" % kv for kv in sorted(p.items())), "merges", r["merges"], "splits", r["splits"], "reseeds", r["reseeds"])'
echo "== VLC_CUDA_TRACE=1, 1M x 384 (second training)"
VLC_CUDA_TRACE=1 .carry/vlc train-bench /tmp/x.npy --backend cuda --warmup --anchors 4096 --iterations 20 --json 2>&1 >/dev/null | tail -17
large() { .carry/$1 train-bench /tmp/x.npy --backend cuda --warmup --anchors 4096 --iterations 20 --json 2>/dev/null | python3 -c "$fmt" $1; }
small() { .carry/$1 train-bench /tmp/s.npy --backend cuda --warmup --anchors 256 --iterations 30 --json 2>/dev/null | python3 -c "$fmt" $1; }
echo "== train-bench 1M x 384, 4096 anchors, 20 iterations (this code, 8310341)"
for i in 1 2 3 4; do large vlc; large vlc_prev; done
echo "== train-bench 10K x 128, 256 anchors, 30 iterations (this code, 8310341)"
for i in 1 2 3 4; do small vlc; small vlc_prev; done
