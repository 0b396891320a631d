set -u
tar -C .carry -xJf .carry/bin.tar.xz; B=.carry/bin; D=.carry/dev; export PATH=$PWD/$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo '$ bash bench/gpu_search_check.sh vlc q.npy gt10.npy p64.vlc p2.vlc p5.vlc'
bash bench/gpu_search_check.sh vlc $D/q.npy $D/gt10.npy $D/p64.vlc $D/p2.vlc $D/p5.vlc 2>&1 | grep -v "^search backend"
