set -u
tar -C .carry -xJf .carry/bin.tar.xz; B=.carry/bin; D=.carry/dev; export PATH=$PWD/$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo '$ cuda_unit; cuda_conf; VLC_CUDA_SMALL_WORK=0 cuda_conf; cuda_search --nocapture; wgpu_conf; wgpu_search --nocapture (all --test-threads 1)'
cuda_unit --test-threads 1 2>&1 | grep -E "test result|panicked"
cuda_conf --test-threads 1 2>&1 | grep -E "test result|panicked"
VLC_CUDA_SMALL_WORK=0 cuda_conf --test-threads 1 2>&1 | grep -E "test result|panicked"
cuda_search --test-threads 1 --nocapture 2>&1 | grep -E "^pcaq|test result|panicked" | grep -v "margin Some"
wgpu_conf --test-threads 1 2>&1 | grep -E "test result|panicked"
wgpu_search --test-threads 1 --nocapture 2>&1 | grep -E "^pcaq|test result|panicked" | grep -v "margin Some"
echo '$ vlc search p5.vlc q.npy --nprobe 64 --backend auto'
vlc search $D/p5.vlc $D/q.npy -k 10 --nprobe 64 --backend auto -o /tmp/auto.npy 2>&1 | grep -i backend
echo '$ bash bench/gpu_search_check.sh vlc q.npy gt10.npy p64.vlc p2.vlc p5.vlc'
bash bench/gpu_search_check.sh vlc $D/q.npy $D/gt10.npy $D/p64.vlc $D/p2.vlc $D/p5.vlc 2>&1 | grep -v "^search backend"
