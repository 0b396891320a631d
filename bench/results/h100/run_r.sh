#!/bin/bash
# Device check (runs R, S): WGPU's tensor-core assignment re-ranks near-ties exactly in FP32
# (nearest_coop.wgsl), as CUDA's nearest2_scatter does. Conformance (WGPU three ways, CUDA),
# WGPU search tests, 1M x 384 training WGPU and CUDA in the same run.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
[ -f /usr/share/vulkan/icd.d/nvidia_icd.json ] || export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== conformance cuda"; .carry/conf_cuda 2>&1 | grep -E "test result|panicked" -A3
echo "== conformance wgpu"; .carry/conf_wgpu --nocapture 2>&1 | grep -E "test result|panicked|SKIPPED|conformance on" -A3 | sort | uniq -c
echo "== conformance wgpu (VLC_WGPU_BOUNDS=0)"; VLC_WGPU_BOUNDS=0 .carry/conf_wgpu 2>&1 | grep -E "test result|panicked" -A3
echo "== conformance wgpu (VLC_WGPU_COOP=0)"; VLC_WGPU_COOP=0 .carry/conf_wgpu 2>&1 | grep -E "test result|panicked" -A3
echo "== search tests wgpu"; .carry/search_wgpu 2>&1 | grep -E "test result|panicked"
python3 bench/gpu_bench.py --vlc .carry/vlc --data /tmp/x.npy 2>&1 | tail -3
run() { .carry/vlc train-bench /tmp/x.npy --backend $1 --warmup --anchors 4096 --iterations 20 --json 2>/tmp/err | python3 -c "
import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1]); p=r['phase_seconds']
print('$1', 'total %.3f loop %.3f energy %.6f' % (r['seconds'], r['loop_seconds'], r['final_energy']), ' '.join('%s %.3f' % kv for kv in sorted(p.items())))" || cat /tmp/err; }
echo "== train-bench 1M x 384, 4096 anchors, 20 iterations"
run wgpu; run cuda; run wgpu; run cuda
echo "== VLC_WGPU_BOUNDS=0"; VLC_WGPU_BOUNDS=0 run wgpu
echo "== test-gpu --large"; .carry/vlc test-gpu --large 2>&1 | tail -3
