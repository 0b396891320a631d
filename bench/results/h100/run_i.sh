#!/bin/bash
# Device-side trimmed accumulation + update for WGPU (fixed point), resident assignment, cached
# f16 copy of pinned points, staging-ring upload: conformance, assignment timing, 1M training.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
[ -f /usr/share/vulkan/icd.d/nvidia_icd.json ] || export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== conformance wgpu (f16 cooperative matrices)"; .carry/conf_wgpu 2>&1 | grep -E "^test |test result|panicked"
echo "== conformance wgpu (VLC_WGPU_COOP=0: FP32 kernels)"; VLC_WGPU_COOP=0 .carry/conf_wgpu 2>&1 | grep -E "test result|panicked"
echo "== search tests wgpu"; .carry/search_wgpu 2>&1 | grep -E "test result|panicked"
echo "== conformance cuda"; .carry/conf_cuda 2>&1 | grep -E "test result|panicked"
echo "== assign_bench 1M x 384, 4096 anchors (coop)"
.carry/assign_bench 1000000 384 4096 3 2>&1 | grep -v XDG
echo "== gpu_bench.py"
python3 bench/gpu_bench.py --vlc .carry/vlc --data /tmp/x.npy 2>&1 | tail -3
run() { .carry/vlc train-bench /tmp/x.npy --backend $1 --warmup --anchors 4096 --iterations 20 --json 2>/tmp/err | python3 -c "
import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1]); p=r['phase_seconds']
print('$1 $2', 'total %.3f loop %.3f energy %.6f' % (r['seconds'], r['loop_seconds'], r['final_energy']), ' '.join('%s %.3f' % kv for kv in sorted(p.items())))"; head -1 /tmp/err; }
echo "== train-bench 1M x 384, 4096 anchors, 20 iterations"
run wgpu ring; run cuda; run wgpu ring; VLC_WGPU_UPLOAD=mapped run wgpu mapped; run cuda
