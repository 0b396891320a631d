#!/bin/bash
# Device check (run M): trimming thresholds and split cuts on the GPU, staged read-backs. Conformance
# (CUDA, WGPU), 1M x 384 training CUDA and WGPU (same run) against PyTorch, test-cuda --large.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
[ -f /usr/share/vulkan/icd.d/nvidia_icd.json ] || export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== conformance cuda"; .carry/conf_cuda --nocapture 2>&1 | grep -E "test result|panicked|SKIPPED|conformance on" -A3 | sort | uniq -c
echo "== conformance wgpu"; .carry/conf_wgpu --nocapture 2>&1 | grep -E "test result|panicked|SKIPPED|conformance on" -A3 | sort | uniq -c
echo "== conformance wgpu (VLC_WGPU_BOUNDS=0)"; VLC_WGPU_BOUNDS=0 .carry/conf_wgpu 2>&1 | grep -E "test result|panicked" -A3
echo "== conformance wgpu (VLC_WGPU_COOP=0)"; VLC_WGPU_COOP=0 .carry/conf_wgpu 2>&1 | grep -E "test result|panicked" -A3
echo "== search tests wgpu"; .carry/search_wgpu 2>&1 | grep -E "test result|panicked"
python3 bench/gpu_bench.py --vlc .carry/vlc --data /tmp/x.npy 2>&1 | tail -3
run() { .carry/vlc train-bench /tmp/x.npy --backend $1 --warmup --anchors 4096 --iterations 20 --json 2>/tmp/err | python3 -c "
import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1]); p=r['phase_seconds']
print('$1', 'total %.3f loop %.3f energy %.6f' % (r['seconds'], r['loop_seconds'], r['final_energy']), ' '.join('%s %.3f' % kv for kv in sorted(p.items())))"; }
echo "== train-bench 1M x 384, 4096 anchors, 20 iterations"
run cuda; run wgpu; run cuda; run wgpu; run cuda; run wgpu
echo "== test-cuda --large"; .carry/vlc test-cuda --large 2>&1 | tail -3
python3 -c "
import numpy as np
rng=np.random.default_rng(1); c=rng.normal(size=(256,128)).astype(np.float32); x=(c[rng.integers(0,256,10000)]+0.3*rng.normal(size=(10000,128))).astype(np.float32); np.save('/tmp/s.npy',x)"
echo "== train-bench 10K x 128, 256 anchors, 30 iterations"
for i in 1 2; do .carry/vlc train-bench /tmp/s.npy --backend cuda --warmup --anchors 256 --iterations 30 --json | python3 -c "
import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1]); p=r['phase_seconds']
print('cuda', 'total %.4f loop %.4f energy %.6f' % (r['seconds'], r['loop_seconds'], r['final_energy']), ' '.join('%s %.4f' % kv for kv in sorted(p.items())))"; done
