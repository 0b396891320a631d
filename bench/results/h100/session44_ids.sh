# Session 44 device script: ids coded by Elias-Fano per list (index format version 10) on the GPUs.
# Part A: COMMIT's CUDA and WGPU test executables. Part B: the dev set's pcaq index at 64 B/vector
# (int4 anchors) as COMMIT builds it (p64.vlc, format v10, Elias-Fano ids) and as 41c246d built it
# (p64v9.vlc, format v9, packed ids), searched on the CPU (all cores), CUDA and WGPU
# (bench/gpu_search_check.sh). Part C: 1,000,000 x 384 synthetic (bench/make_synthetic.py --seed
# 11), pcaq1 with 4,096 anchors built on CUDA: the bits its ids take, searched on the three backends.
# Carry: .carry/s49.tar.xz (vlc and test executables of COMMIT; dev/p64.vlc, dev/p64v9.vlc,
# dev/q.npy, dev/gt10.npy) and .gl.
# Usage: bash bench/results/h100/session44_ids.sh COMMIT
set -u
tar -C .carry -xJf .carry/s49.tar.xz; B=$PWD/.carry/s49; D=$B/dev; export PATH=$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
echo "== Part A: test executables"
t() { echo "\$ $*"; env "$@" 2>&1 | grep -E "conformance on|test result|FAILED|panicked" | sort | uniq -c; }
t cuda_unit --test-threads 1; t cuda_conformance --nocapture --test-threads 1; t cuda_search --test-threads 1
t wgpu_conformance --nocapture --test-threads 1; t wgpu_search --test-threads 1
echo "== Part B: dev set, v10 (Elias-Fano ids) and v9 (packed ids) files, CPU / CUDA / WGPU search"
vlc info $D/p64.vlc | grep -E "format|ids"; vlc info $D/p64v9.vlc | grep -E "format|ids"
NPROBE=128,1024 REPEAT=5 bash bench/gpu_search_check.sh vlc $D/q.npy $D/gt10.npy $D/p64.vlc $D/p64v9.vlc
echo "== Part C: 1,000,000 x 384, pcaq1, 4,096 anchors, built on CUDA"
python3 bench/make_synthetic.py /tmp/big --n 1000000 --dim 384 --seed 11 | tail -1
vlc build /tmp/big/base.npy -o /tmp/big/p1.vlc --codec pcaq1 --anchors 4096 --backend cuda -q 2>&1 | grep -E "file|build time" || true
vlc info /tmp/big/p1.vlc | grep -E "format|ids|file|IDEF"
NPROBE=32 REPEAT=3 bash bench/gpu_search_check.sh vlc /tmp/big/query.npy /tmp/big/groundtruth.npy /tmp/big/p1.vlc
