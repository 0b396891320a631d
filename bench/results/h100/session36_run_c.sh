set -u
tar -C .carry -xJf .carry/bin.tar.xz; B=.carry/bin; D=.carry/dev; export PATH=$PWD/$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in wgpu_conf wgpu_search; do echo "\$ $t"; $t --test-threads 1 2>&1 | grep -E "test result|panicked|SKIP"; done
[ -f /tmp/big/base.npy ] || python3 bench/make_synthetic.py /tmp/big --n 1000000 --dim 384 --seed 11
for c in pcaq2 pcaq5; do [ -f /tmp/big/$c.vlc ] || vlc build /tmp/big/base.npy -o /tmp/big/$c.vlc --codec $c --backend cuda -q 2>&1 | grep -E "backend|file"; done
for round in 1 2; do
for v in vlc vlc_prev; do
echo "== $v (round $round)"
for i in $D/p64.vlc $D/p5.vlc; do $v eval $i --queries $D/q.npy --groundtruth $D/gt10.npy --nprobe 16,128,512 --backend wgpu --repeat 3 2>&1 | grep -v "^search backend" | tail -3; done
for c in pcaq2 pcaq5; do $v eval /tmp/big/$c.vlc --queries /tmp/big/query.npy --groundtruth /tmp/big/groundtruth.npy --nprobe 8,32,128 --backend wgpu --repeat 3 2>&1 | grep -v "^search backend" | tail -3; done
done; done
