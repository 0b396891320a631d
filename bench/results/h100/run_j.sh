#!/bin/bash
# Run I plus distance bounds for the cooperative-matrix assignment of pinned points.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
[ -f /usr/share/vulkan/icd.d/nvidia_icd.json ] || export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== conformance wgpu (f16 cooperative matrices, bounds)"; .carry/conf_wgpu 2>&1 | grep -E "^test |test result|panicked" -A3
echo "== conformance wgpu (VLC_WGPU_BOUNDS=0)"; VLC_WGPU_BOUNDS=0 .carry/conf_wgpu 2>&1 | grep -E "test result|panicked" -A3
echo "== conformance wgpu (VLC_WGPU_COOP=0: FP32 kernels)"; VLC_WGPU_COOP=0 .carry/conf_wgpu 2>&1 | grep -E "test result|panicked" -A3
echo "== search tests wgpu"; .carry/search_wgpu 2>&1 | grep -E "test result|panicked"
echo "== assign_bench 1M x 384, 4096 anchors (FP32; coop, bounds off; then on: same anchors every call)"
VLC_WGPU_COOP=0 .carry/assign_bench 1000000 384 4096 1 2>&1 | grep -v XDG | tail -1
VLC_WGPU_BOUNDS=0 .carry/assign_bench 1000000 384 4096 3 2>&1 | grep -v XDG
.carry/assign_bench 1000000 384 4096 3 2>&1 | grep -v XDG | tail -2
echo "== gpu_bench.py"
python3 bench/gpu_bench.py --vlc .carry/vlc --data /tmp/x.npy 2>&1 | tail -3
run() { .carry/vlc train-bench /tmp/x.npy --backend $1 --warmup --anchors 4096 --iterations 20 --json 2>/tmp/err | python3 -c "
import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1]); p=r['phase_seconds']
print('$1 $2', 'total %.3f loop %.3f energy %.6f' % (r['seconds'], r['loop_seconds'], r['final_energy']), ' '.join('%s %.3f' % kv for kv in sorted(p.items())))"; head -1 /tmp/err; }
echo "== train-bench 1M x 384, 4096 anchors, 20 iterations"
run wgpu bounds; run cuda; run wgpu bounds; VLC_WGPU_BOUNDS=0 run wgpu no-bounds; run cuda; run wgpu bounds
