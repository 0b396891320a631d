# Session 60 device script: the GPU backends' automatic candidate pool (`--rerank 0`: after
# rescoring the 10·k best, the kernels score the scanned lists' first stage again and rescore
# the candidates beyond the pool within three standard deviations of the first stage's error
# of the k-th best, as the CPU has done since session 59). Part A: COMMIT's CUDA and WGPU test
# executables (unit, conformance, search with the new automatic-pool check, shaders), whose
# reference is again the CPU with the same parameters. Part B: session 56's three dev-set
# index files (pcaq at 64 B/vector with int4 anchors, pcaq3, rabitq1; the first 2,000
# queries) on the CPU (all cores), CUDA and WGPU (bench/gpu_search_check.sh), then the same
# GPU searches with session 59's vlc (5bb3418, the fixed pool on the GPUs) for speed and
# recall. Part C: the same on WordLlama 128-d (`rabitq1+sq8`, 2,000 queries), where the first
# stage ranks poorly.
# Carry: .carry/s81.tar.xz (stripped vlc and test executables of COMMIT, vlc_old of 5bb3418,
# dev/ as in session56_gpu.sh, wl/ the 128-d index, queries and top-10 truth) and .gl (the
# Vulkan loader).
# Usage: bash bench/results/h100/session60_gpu.sh COMMIT (run on 6261276 without vlc_mid, on
# 59d7765 with it)
set -u
tar -C .carry -xJf .carry/s81.tar.xz; B=$PWD/.carry/s81; D=$B/dev; W=$B/wl; export PATH=$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
echo "== Part A: test executables"
t() { echo "\$ $*"; env "$@" 2>&1 | grep -E "conformance on|overlap 0\.9[0-8]|automatic pool|test result|FAILED|panicked|SKIPPED|skipped" | sort | uniq -c; }
t cuda_unit --test-threads 1; t cuda_conformance --nocapture --test-threads 1; t cuda_search --nocapture --test-threads 1
t wgpu_unit --test-threads 1; t wgpu_shaders --test-threads 1; t wgpu_conformance --nocapture --test-threads 1; t wgpu_search --nocapture --test-threads 1
echo "== Part A': the search tests' three lowest shares of the CPU's ids (of their cases)"
for x in cuda_search wgpu_search; do echo "\$ $x"; $x --nocapture --test-threads 1 2>&1 | grep -o "overlap [0-9.]*" | sort -k2 -n | uniq -c | head -3; echo "cases: $($x --nocapture --test-threads 1 2>&1 | grep -c "overlap [0-9.]*")"; done
# GPU searches with another build: `old`, session 59's vlc_old; where the carry has vlc_mid
# (6261276, the GPUs' automatic pool scoring every scanned list again), that one too.
other() { v=$1; label=$2; shift 2; for i in "${@:3}"; do for be in cuda wgpu; do echo "-- $(basename $i .vlc) on $be, $label"; $v eval $i --queries $1 --groundtruth $2 --nprobe $NPROBE --backend $be --repeat 5 2>&1 | sed -n '3,$p'; done; done; }
old() { other vlc_old "session 59's vlc (fixed pool on the GPUs)" "$@"; if [ -x $B/vlc_mid ]; then other vlc_mid "6261276 (every scanned list scored again)" "$@"; fi; }
echo "== Part B: dev set (2,000 queries), CPU / CUDA / WGPU search"
export NPROBE=16,128,1024; REPEAT=5 bash bench/gpu_search_check.sh vlc $D/q.npy $D/gt10.npy $D/p64.vlc $D/pcaq3.vlc $D/rabitq1.vlc
old $D/q.npy $D/gt10.npy $D/p64.vlc $D/pcaq3.vlc $D/rabitq1.vlc
echo "== Part C: WordLlama 128-d, rabitq1+sq8 (2,000 queries)"
export NPROBE=16,64,256,1024; REPEAT=5 bash bench/gpu_search_check.sh vlc $W/q.npy $W/gt10.npy $W/rabitq1_sq8.vlc
old $W/q.npy $W/gt10.npy $W/rabitq1_sq8.vlc
