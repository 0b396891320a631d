#!/bin/bash
# Device check (run R2) of the final review commit (split_lists reads back its sides, counts and
# means with one wait): conformance as is and with VLC_CUDA_SMALL_WORK=0, then 1M x 384 (4096
# anchors, 20 iterations) and 10K x 128 (256 anchors, 30 iterations) training, test-cuda --large.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
conf() { .carry/conf_cuda --nocapture 2>&1 | grep -E "test result|panicked|conformance on" -A3 | sort | uniq -c; }
echo "== conformance cuda"; conf
echo "== conformance cuda, VLC_CUDA_SMALL_WORK=0"; VLC_CUDA_SMALL_WORK=0 conf
fmt='import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1]); p=r["phase_seconds"]
print(sys.argv[1], "total %.4f loop %.4f energy %.6f" % (r["seconds"], r["loop_seconds"], r["final_energy"]), " ".join("%s %.4f" % kv for kv in sorted(p.items())), "merges", r["merges"], "splits", r["splits"], "reseeds", r["reseeds"])'
python3 bench/gpu_bench.py --vlc .carry/vlc --data /tmp/x.npy 2>&1 | tail -3
echo "== train-bench 1M x 384, 4096 anchors, 20 iterations"
for i in 1 2 3; do .carry/vlc train-bench /tmp/x.npy --backend cuda --warmup --anchors 4096 --iterations 20 --json 2>/dev/null | python3 -c "$fmt" mixed; done
python3 -c "
import numpy as np
rng=np.random.default_rng(1); c=rng.normal(size=(256,128)).astype(np.float32); x=(c[rng.integers(0,256,10000)]+0.3*rng.normal(size=(10000,128))).astype(np.float32); np.save('/tmp/s.npy',x)"
echo "== train-bench 10K x 128, 256 anchors, 30 iterations"
for i in 1 2 3; do .carry/vlc train-bench /tmp/s.npy --backend cuda --warmup --anchors 256 --iterations 30 --json 2>/dev/null | python3 -c "$fmt" small; done
echo "== test-cuda --large"; .carry/vlc test-cuda --large 2>&1 | tail -3
