#!/bin/bash
# Device check (runs O, O2): near-ties of the TF32 assignment re-ranked exactly in FP32
# (nearest2_scatter). CUDA conformance, gpu_bench (run O added --cpu-reference), train-bench repeats.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== conformance cuda"; .carry/conf_cuda --nocapture 2>&1 | grep -E "test result|panicked|SKIPPED|conformance on" -A3 | sort | uniq -c
python3 bench/gpu_bench.py --vlc .carry/vlc --data /tmp/x.npy 2>&1 | tail -4
run() { $1 train-bench $2 --backend $3 --warmup --anchors $4 --iterations $5 --json 2>/tmp/err | python3 -c "
import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1]); p=r['phase_seconds']
print('$1 $3', 'total %.4f loop %.4f energy %.6f' % (r['seconds'], r['loop_seconds'], r['final_energy']), ' '.join('%s %.3f' % kv for kv in sorted(p.items())))" || cat /tmp/err; }
echo "== train-bench 1M x 384, 4096 anchors, 20 iterations"
for i in 1 2 3; do run .carry/vlc /tmp/x.npy cuda 4096 20; done
echo "== test-cuda --large"; .carry/vlc test-cuda --large 2>&1 | tail -3
