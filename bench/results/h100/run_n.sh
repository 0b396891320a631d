#!/bin/bash
# Device check (run N) of the committed code, and the same workloads with the previous commit's
# binary (.carry/vlc_old, built from a73a025) on the same machine, alternating.
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
run() { $1 train-bench $2 --backend $3 --warmup --anchors $4 --iterations $5 --json 2>/tmp/err | python3 -c "
import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1]); p=r['phase_seconds']
print('$1 $3', 'total %.4f loop %.4f energy %.6f' % (r['seconds'], r['loop_seconds'], r['final_energy']), ' '.join('%s %.3f' % kv for kv in sorted(p.items())))" || cat /tmp/err; }
echo "== train-bench 1M x 384, 4096 anchors, 20 iterations (new, old alternating)"
for i in 1 2; do for b in cuda wgpu; do run .carry/vlc /tmp/x.npy $b 4096 20; run .carry/vlc_old /tmp/x.npy $b 4096 20; done; done
echo "== test-cuda --large"; .carry/vlc test-cuda --large 2>&1 | tail -3; .carry/vlc_old test-cuda --large 2>&1 | tail -3
python3 -c "
import numpy as np
rng=np.random.default_rng(1); c=rng.normal(size=(256,128)).astype(np.float32); x=(c[rng.integers(0,256,10000)]+0.3*rng.normal(size=(10000,128))).astype(np.float32); np.save('/tmp/s.npy',x)"
echo "== train-bench 10K x 128, 256 anchors, 30 iterations (new, old)"
for i in 1 2; do run .carry/vlc /tmp/s.npy cuda 256 30; run .carry/vlc_old /tmp/s.npy cuda 256 30; done
