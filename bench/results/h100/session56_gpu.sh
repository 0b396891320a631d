# Session 56 device script: the GPU backends on the current code, whose CPU search sessions 50 to
# 55 changed (one query at a time, two-pass anchor ranking, per-thread buffers, opening) while no
# GPU code changed. Part A: COMMIT's CUDA and WGPU test executables (unit, conformance, search,
# shaders). Part B: three dev-set indexes as COMMIT builds them (pcaq at 64 B/vector with int4
# anchors, pcaq3, rabitq1; the first 2,000 queries), searched on the CPU (all cores), CUDA and
# WGPU (bench/gpu_search_check.sh). Part C: anchor training on CUDA and WGPU against the CPU
# (vlc test-cuda / test-gpu --large).
# Carry: .carry/s79.tar.xz (stripped vlc and test executables of COMMIT; dev/p64.vlc,
# dev/pcaq3.vlc, dev/rabitq1.vlc, dev/q.npy, dev/gt10.npy) and .gl (the Vulkan loader).
# Usage: bash bench/results/h100/session56_gpu.sh COMMIT
set -u
tar -C .carry -xJf .carry/s79.tar.xz; B=$PWD/.carry/s79; D=$B/dev; export PATH=$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
echo "== Part A: test executables"
t() { echo "\$ $*"; env "$@" 2>&1 | grep -E "conformance on|test result|FAILED|panicked|SKIPPED|skipped" | sort | uniq -c; }
t cuda_unit --test-threads 1; t cuda_conformance --nocapture --test-threads 1; t cuda_search --test-threads 1
t wgpu_unit --test-threads 1; t wgpu_shaders --test-threads 1; t wgpu_conformance --nocapture --test-threads 1; t wgpu_search --test-threads 1
echo "== Part B: dev set (2,000 queries), CPU / CUDA / WGPU search"
NPROBE=16,128,1024 REPEAT=5 bash bench/gpu_search_check.sh vlc $D/q.npy $D/gt10.npy $D/p64.vlc $D/pcaq3.vlc $D/rabitq1.vlc
echo "== Part C: anchor training, GPU against CPU"
vlc test-cuda --large; vlc test-gpu --large
