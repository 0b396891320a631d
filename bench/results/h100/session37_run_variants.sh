set -u
tar -C .carry -xJf .carry/bin.tar.xz; B=.carry/bin; D=.carry/dev; export PATH=$PWD/$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== 1M x 384 (make_synthetic.py --n 1000000 --dim 384 --seed 11; built with --backend cuda by vlc_698e839)"
[ -f /tmp/big/base.npy ] && echo "(already made on this machine)" || python3 bench/make_synthetic.py /tmp/big --n 1000000 --dim 384 --seed 11
for c in pcaq2 pcaq5; do [ -f /tmp/big/$c.vlc ] && { echo "(/tmp/big/$c.vlc already built)"; continue; }; vlc_698e839 build /tmp/big/base.npy -o /tmp/big/$c.vlc --codec $c --backend cuda -q 2>&1 | grep -E "backend|file"; done
ROUNDS=${ROUNDS:-1}
for round in $(seq 1 $ROUNDS); do
for v in ${VARIANTS:-vlc_698e839 vlc_B vlc_C vlc_BC}; do
echo "== $v (round $round)"
i=$D/p64.vlc; echo "\$ $v eval $(basename $i) --nprobe 16,128,512 --backend wgpu --repeat 3"; $v eval $i --queries $D/q.npy --groundtruth $D/gt10.npy --nprobe 16,128,512 --backend wgpu --repeat 3 2>&1 | grep -v "^search backend" | tail -3
for c in pcaq2 pcaq5; do echo "\$ $v eval $c.vlc (1M) --nprobe 8,32,128 --backend wgpu --repeat 3"; $v eval /tmp/big/$c.vlc --queries /tmp/big/query.npy --groundtruth /tmp/big/groundtruth.npy --nprobe 8,32,128 --backend wgpu --repeat 3 2>&1 | grep -v "^search backend" | tail -3; done
done; done
