set -u
tar -C .carry -xJf .carry/bin.tar.xz; B=.carry/bin; D=.carry/dev; export PATH=$PWD/$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== tests at $1 (--test-threads 1)"; echo "\$ cuda_conf with VLC_CUDA_SMALL_WORK=0"; VLC_CUDA_SMALL_WORK=0 cuda_conf --test-threads 1 2>&1 | grep -E "test result|panicked"
for t in wgpu_conf cuda_conf cuda_unit; do echo "\$ $t"; $t --test-threads 1 2>&1 | grep -E "test result|panicked|SKIP"; done
for t in wgpu_search cuda_search; do echo "\$ $t --nocapture (lowest three overlaps; the pool placements)"; $t --test-threads 1 --nocapture 2>&1 | grep -E "overlap" | awk '{print $NF, $0}' | sort -n | head -3 | cut -d' ' -f2-; $t --test-threads 1 --nocapture 2>&1 | grep -E "pool \(|test result|panicked|SKIP"; done
echo '$ NPROBE=16,128,512 BACKENDS="cpu cuda wgpu" bash bench/gpu_search_check.sh vlc q.npy gt10.npy p64.vlc p5.vlc'
NPROBE=16,128,512 bash bench/gpu_search_check.sh vlc $D/q.npy $D/gt10.npy $D/p64.vlc $D/p5.vlc 2>&1 | grep -v "^search backend"
