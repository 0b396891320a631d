# Session 47 device script: COMMIT's CUDA and WGPU test executables (the CPU training they are
# held to now keeps distance bounds; the GPU backends keep their own), then CPU training with and
# without the bounds on this machine's cores (vlc train-bench, as bench/cpu_bounds_ab.sh runs it)
# on 200,000 x 384 synthetic vectors, 2,048 anchors, 14 iterations.
# Carry: .carry/s53.tar.xz (test executables and vlc of COMMIT) and .gl.
# Usage: bash bench/results/h100/session47_bounds.sh COMMIT
set -u
tar -C .carry -xJf .carry/s53.tar.xz; B=$PWD/.carry/s53; export PATH=$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
echo "== test executables"
t() { echo "\$ $*"; env "$@" 2>&1 | grep -E "conformance on|test result|FAILED|panicked" | sort | uniq -c; }
t cuda_unit --test-threads 1; t cuda_conformance --nocapture --test-threads 1; t cuda_search --test-threads 1
t wgpu_unit --test-threads 1; t wgpu_conformance --nocapture --test-threads 1; t wgpu_search --test-threads 1; t wgpu_shaders --test-threads 1
echo "== CPU training with and without distance bounds"
python3 bench/make_synthetic.py /tmp/syn --n 200000 --dim 384 --seed 5
for r in 1 2; do for flag in --no-distance-bounds ""; do
  vlc train-bench /tmp/syn/base.npy --anchors 2048 --iterations 14 --backend cpu --json $flag 2>/dev/null | tail -1 | python3 -c "
import json, sys
d = json.loads(sys.stdin.read()); r = d['ranked_history']
share = sum(r) / (d['vectors'] * len(r)) if r else 1.0
print(f\"run $r {'bounds   ' if r else 'no bounds'}: {d['seconds']:.3f} s (assign {d['phase_seconds']['assign']:.3f} s), energy {d['final_energy']:.9f}, ranked {share:.3f}\")"
done; done
echo "\$ vlc train-bench /tmp/syn/base.npy --anchors 2048 --iterations 14 --backend cuda --warmup"
vlc train-bench /tmp/syn/base.npy --anchors 2048 --iterations 14 --backend cuda --warmup 2>&1 | tail -3
