#!/bin/bash
# Device check (runs T, U): small-iteration latency (10K x 128, 256 anchors, 30 iterations).
# Conformance, iteration_probe (driver latencies, each backend call, whole trainings) for this
# code and the previous commit's, train-bench of the small case new/old alternating, then
# 1M x 384 (4096 anchors, 20 iterations) new/old. .carry/*_old are the previous commit's builds.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== conformance cuda"; .carry/conf_cuda 2>&1 | grep -E "test result|panicked" -A3
python3 -c "
import numpy as np
rng=np.random.default_rng(1); c=rng.normal(size=(256,128)).astype(np.float32); x=(c[rng.integers(0,256,10000)]+0.3*rng.normal(size=(10000,128))).astype(np.float32); np.save('/tmp/s.npy',x)"
fmt='import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1]); p=r["phase_seconds"]
print(sys.argv[1], "total %.4f loop %.4f energy %.6f" % (r["seconds"], r["loop_seconds"], r["final_energy"]), " ".join("%s %.4f" % kv for kv in sorted(p.items())))'
small() { .carry/$1 train-bench /tmp/s.npy --backend cuda --warmup --anchors 256 --iterations 30 --json | python3 -c "$fmt" $1; }
large() { .carry/$1 train-bench /tmp/x.npy --backend cuda --warmup --anchors 4096 --iterations 20 --json | python3 -c "$fmt" $1; }
for p in iteration_probe iteration_probe_old; do echo "== $p"; .carry/$p; done
echo "== train-bench 10K x 128, 256 anchors, 30 iterations (new, old alternating)"
for i in 1 2 3 4 5; do small vlc; small vlc_old; done
echo "== test-cuda --large"; .carry/vlc test-cuda --large 2>&1 | tail -3
python3 bench/gpu_bench.py --vlc .carry/vlc --data /tmp/x.npy 2>&1 | tail -2
echo "== train-bench 1M x 384, 4096 anchors, 20 iterations (new, old alternating)"
for i in 1 2; do large vlc; large vlc_old; done
