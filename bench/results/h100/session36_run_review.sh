set -u
tar -C .carry -xJf .carry/bin.tar.xz; B=.carry/bin; D=.carry/dev; export PATH=$PWD/$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== tests at dbe834e (--test-threads 1)"
for t in cuda_unit cuda_conf wgpu_conf; do echo "\$ $t"; $t --test-threads 1 2>&1 | grep -E "test result|panicked"; done
echo "\$ VLC_CUDA_SMALL_WORK=0 cuda_conf"; VLC_CUDA_SMALL_WORK=0 cuda_conf --test-threads 1 2>&1 | grep -E "test result|panicked"
for t in cuda_search wgpu_search; do echo "\$ $t --nocapture (f16/f32 cases and lowest three overlaps)"; $t --test-threads 1 --nocapture 2>&1 | grep -E "overlap" | grep -E "f16|f32" | grep -v "margin Some"; $t --test-threads 1 --nocapture 2>&1 | grep -E "overlap" | awk '{print $NF, $0}' | sort -n | head -3 | cut -d' ' -f2-; $t --test-threads 1 2>&1 | grep -E "test result|panicked"; done
echo '$ bash bench/gpu_search_check.sh vlc q.npy gt10.npy p64.vlc (NPROBE=16,128)'
NPROBE=16,128 bash bench/gpu_search_check.sh vlc $D/q.npy $D/gt10.npy $D/p64.vlc 2>&1 | grep -v "^search backend"
