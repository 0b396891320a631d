set -u
tar -C .carry -xJf .carry/bin.tar.xz; B=.carry/bin; export PATH=$PWD/$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T=/tmp/big
echo '$ python3 bench/make_synthetic.py /tmp/big --n 1000000 --dim 384 --seed 11'
/usr/bin/time -f "%e s" python3 bench/make_synthetic.py $T --n 1000000 --dim 384 --seed 11 2>&1 | tail -2
for c in pcaq2 pcaq5; do
  echo "\$ vlc build $T/base.npy -o $T/$c.vlc --codec $c --backend cuda"
  /usr/bin/time -f "%e s" vlc build $T/base.npy -o $T/$c.vlc --codec $c --backend cuda -q 2>&1 | grep -E "file|backend| s$"
done
echo '$ NPROBE=8,32,128 bash bench/gpu_search_check.sh vlc /tmp/big/query.npy /tmp/big/groundtruth.npy pcaq2.vlc pcaq5.vlc'
NPROBE=8,32,128 bash bench/gpu_search_check.sh vlc $T/query.npy $T/groundtruth.npy $T/pcaq2.vlc $T/pcaq5.vlc 2>&1 | grep -v "^search backend"
