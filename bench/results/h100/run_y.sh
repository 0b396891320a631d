#!/bin/bash
# Device check (run Y) of the second review commit (one FP16 GEMM helper for FP32 and FP16 tiles):
# conformance as is, with VLC_CUDA_SMALL_WORK=0 and in FP16, then 1M x 384 (4096 anchors, 20
# iterations) training, default and FP16, 10K x 128 (256 anchors, 30 iterations), test-cuda and
# gpu_build (default and FP16: the FP16 GEMM with an FP32 tile in the assignment of all points).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
conf() { .carry/conf_cuda --nocapture 2>&1 | grep -E "test result|panicked|conformance on" -A3 | sort | uniq -c; }
echo "== conformance cuda"; conf
echo "== conformance cuda, VLC_CUDA_SMALL_WORK=0"; VLC_CUDA_SMALL_WORK=0 conf
echo "== conformance cuda, VLC_CUDA_PRECISION=fp16"; VLC_CUDA_PRECISION=fp16 conf
fmt='import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1]); p=r["phase_seconds"]
print(sys.argv[1], "total %.4f loop %.4f energy %.6f" % (r["seconds"], r["loop_seconds"], r["final_energy"]), " ".join("%s %.4f" % kv for kv in sorted(p.items())), "merges", r["merges"], "splits", r["splits"], "reseeds", r["reseeds"])'
python3 bench/gpu_bench.py --vlc .carry/vlc --data /tmp/x.npy 2>&1 | tail -3
echo "== train-bench 1M x 384, 4096 anchors, 20 iterations"
for i in 1 2; do .carry/vlc train-bench /tmp/x.npy --backend cuda --warmup --anchors 4096 --iterations 20 --json 2>/dev/null | python3 -c "$fmt" mixed; VLC_CUDA_PRECISION=fp16 .carry/vlc train-bench /tmp/x.npy --backend cuda --warmup --anchors 4096 --iterations 20 --json 2>/dev/null | python3 -c "$fmt" fp16; done
python3 -c "
import numpy as np
rng=np.random.default_rng(1); c=rng.normal(size=(256,128)).astype(np.float32); x=(c[rng.integers(0,256,10000)]+0.3*rng.normal(size=(10000,128))).astype(np.float32); np.save('/tmp/s.npy',x)"
echo "== train-bench 10K x 128, 256 anchors, 30 iterations"
for i in 1 2 3; do .carry/vlc train-bench /tmp/s.npy --backend cuda --warmup --anchors 256 --iterations 30 --json 2>/dev/null | python3 -c "$fmt" small; done
echo "== test-cuda --large"; .carry/vlc test-cuda --large 2>&1 | tail -3
echo "== gpu_build, default and VLC_CUDA_PRECISION=fp16"; bash bench/gpu_build.sh .carry/vlc 2>&1 | tail -2; VLC_CUDA_PRECISION=fp16 bash bench/gpu_build.sh .carry/vlc 2>&1 | grep "^cuda"
