# Session 39 device script, run 1: GPU tests of the centring commit (conformance with indexes of data far
# from the origin), recall on data moved away from the origin with training and search on each GPU
# (bench/offset_check.py), and the dev-set check against the CPU. Usage: bash bench/results/h100/session39_run1.sh COMMIT
set -u
tar -C .carry -xJf .carry/bin.tar.xz; B=.carry/bin; D=.carry/dev; export PATH=$PWD/$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== Part A: tests of $1 (--test-threads 1)"; echo "\$ cuda_conf with VLC_CUDA_SMALL_WORK=0"; VLC_CUDA_SMALL_WORK=0 cuda_conf --test-threads 1 2>&1 | grep -E "test result|panicked"
for t in wgpu_conf cuda_conf cuda_unit; do echo "\$ $t"; $t --test-threads 1 2>&1 | grep -E "test result|panicked|SKIP"; done
for t in wgpu_search cuda_search; do echo "\$ $t (cases far from the origin listed)"; $t --test-threads 1 --nocapture 2>&1 | grep -E "^test |test result|panicked|SKIP|far from the origin"; done
echo "== Part B: data moved away from the origin, built (trained) and searched on each GPU"
for be in cuda wgpu; do echo "\$ python3 bench/offset_check.py --vlc vlc --backend $be --ratios 0,100,1000 --codecs sq8,rabitq1,pcaq3,rabitq1+sq8"
python3 bench/offset_check.py --vlc vlc --backend $be --ratios 0,100,1000 --codecs sq8,rabitq1,pcaq3,rabitq1+sq8; done
echo "== Part C: $1 against the CPU on the dev set (REPEAT=10)"
NPROBE=16,128 bash bench/gpu_search_check.sh vlc $D/q.npy $D/gt10.npy $D/p64.vlc $D/p5.vlc 2>&1 | grep -v "^search backend"
