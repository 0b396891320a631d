#!/bin/bash
# Device check (run V): FP16 assignment GEMMs with an FP16 tile in the bounded path
# (VLC_CUDA_PRECISION=fp16). Conformance default, FP16 with every shape large
# (VLC_CUDA_SMALL_WORK=0) and TF32 likewise; then 1M x 384 (4096 anchors, 20 iterations)
# TF32 (default) and FP16 alternating, and the small case. .carry/vlc_prev is run T's binary.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== conformance cuda"; .carry/conf_cuda 2>&1 | grep -E "test result|panicked" -A3
echo "== conformance cuda, fp16, VLC_CUDA_SMALL_WORK=0"; VLC_CUDA_PRECISION=fp16 VLC_CUDA_SMALL_WORK=0 .carry/conf_cuda 2>&1 | grep -E "test result|panicked" -A3
echo "== conformance cuda, VLC_CUDA_SMALL_WORK=0"; VLC_CUDA_SMALL_WORK=0 .carry/conf_cuda 2>&1 | grep -E "test result|panicked" -A3
fmt='import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1]); p=r["phase_seconds"]
print(sys.argv[1], "total %.4f loop %.4f energy %.6f" % (r["seconds"], r["loop_seconds"], r["final_energy"]), " ".join("%s %.4f" % kv for kv in sorted(p.items())), "merges", r["merges"], "splits", r["splits"], "reseeds", r["reseeds"])'
large() { .carry/$1 train-bench /tmp/x.npy --backend cuda --warmup --anchors 4096 --iterations 20 --json 2>/dev/null | python3 -c "$fmt" $1-${VLC_CUDA_PRECISION:-tf32}; }
python3 bench/gpu_bench.py --vlc .carry/vlc --data /tmp/x.npy 2>&1 | tail -2
echo "== train-bench 1M x 384, 4096 anchors, 20 iterations (tf32, fp16 alternating)"
for i in 1 2 3; do large vlc; VLC_CUDA_PRECISION=fp16 large vlc; done
large vlc_prev
python3 -c "
import numpy as np
rng=np.random.default_rng(1); c=rng.normal(size=(256,128)).astype(np.float32); x=(c[rng.integers(0,256,10000)]+0.3*rng.normal(size=(10000,128))).astype(np.float32); np.save('/tmp/s.npy',x)"
echo "== train-bench 10K x 128 (tf32, fp16)"
for i in 1 2; do .carry/vlc train-bench /tmp/s.npy --backend cuda --warmup --anchors 256 --iterations 30 --json 2>/dev/null | python3 -c "$fmt" small; VLC_CUDA_PRECISION=fp16 .carry/vlc train-bench /tmp/s.npy --backend cuda --warmup --anchors 256 --iterations 30 --json 2>/dev/null | python3 -c "$fmt" small-fp16; done
