set -u
tar -C .carry -xJf .carry/bin.tar.xz; B=.carry/bin; D=.carry/dev; export PATH=$PWD/$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== tests at d864e24 (--test-threads 1)"
for t in cuda_unit cuda_conf wgpu_conf; do echo "\$ $t"; $t --test-threads 1 2>&1 | grep -E "test result|panicked"; done
for t in cuda_search wgpu_search; do echo "\$ $t --nocapture (lowest three overlaps)"; $t --test-threads 1 --nocapture 2>&1 | grep -E "overlap" | awk '{print $NF, $0}' | sort -n | head -3 | cut -d' ' -f2-; $t --test-threads 1 2>&1 | grep -E "test result|panicked"; done
echo "== 1M x 384 as in session36_run_final.sh, searched by d864e24 on the CPU (16 threads), CUDA and WGPU"
python3 bench/make_synthetic.py /tmp/big --n 1000000 --dim 384 --seed 11
vlc build /tmp/big/base.npy -o /tmp/big/pcaq5.vlc --codec pcaq5 --backend cuda -q 2>&1 | grep -E "backend|file"
echo '$ NPROBE=8,32 bash bench/gpu_search_check.sh vlc /tmp/big/query.npy /tmp/big/groundtruth.npy pcaq5.vlc'
NPROBE=8,32 bash bench/gpu_search_check.sh vlc /tmp/big/query.npy /tmp/big/groundtruth.npy /tmp/big/pcaq5.vlc 2>&1 | grep -v "^search backend"
