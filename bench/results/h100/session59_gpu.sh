# Session 59 device script: the GPU backends against the CPU's new automatic candidate pool
# (`--rerank 0` rescores the 10·k best and then the candidates within three standard
# deviations of the first stage's error; the GPUs still rescore the 10·k best). No GPU code
# changed. Part A: COMMIT's CUDA and WGPU test executables (unit, conformance, search,
# shaders), whose CPU references now use the automatic pool. Part B: session 56's three
# dev-set index files (pcaq at 64 B/vector with int4 anchors, pcaq3, rabitq1; the first 2,000
# queries) searched on the CPU (all cores), CUDA and WGPU (bench/gpu_search_check.sh).
# Carry: .carry/s80.tar.xz (stripped vlc and test executables of COMMIT; dev/ as in
# session56_gpu.sh) and .gl (the Vulkan loader).
# Usage: bash bench/results/h100/session59_gpu.sh COMMIT
set -u
tar -C .carry -xJf .carry/s80.tar.xz; B=$PWD/.carry/s80; D=$B/dev; export PATH=$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
echo "== Part A: test executables"
t() { echo "\$ $*"; env "$@" 2>&1 | grep -E "conformance on|overlap 0\.9[0-8]|test result|FAILED|panicked|SKIPPED|skipped" | sort | uniq -c; }
t cuda_unit --test-threads 1; t cuda_conformance --nocapture --test-threads 1; t cuda_search --test-threads 1
t wgpu_unit --test-threads 1; t wgpu_shaders --test-threads 1; t wgpu_conformance --nocapture --test-threads 1; t wgpu_search --test-threads 1
echo "== Part A': the search tests' three lowest shares of the CPU's ids (of their cases)"
for x in cuda_search wgpu_search; do echo "\$ $x"; $x --nocapture --test-threads 1 2>&1 | grep -o "overlap [0-9.]*" | sort -k2 -n | uniq -c | head -3; echo "cases: $($x --nocapture --test-threads 1 2>&1 | grep -c "overlap [0-9.]*")"; done
echo "== Part B: dev set (2,000 queries), CPU / CUDA / WGPU search"
NPROBE=16,128,1024 REPEAT=5 bash bench/gpu_search_check.sh vlc $D/q.npy $D/gt10.npy $D/p64.vlc $D/pcaq3.vlc $D/rabitq1.vlc
