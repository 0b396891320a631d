set -u
tar -C .carry -xJf .carry/bin.tar.xz; B=.carry/bin; D=.carry/dev; export PATH=$PWD/$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== tests (--test-threads 1)"
for t in wgpu_conf cuda_conf cuda_unit; do echo "\$ $t"; $t --test-threads 1 2>&1 | grep -E "test result|panicked|SKIP"; done
echo "\$ VLC_CUDA_SMALL_WORK=0 cuda_conf"; VLC_CUDA_SMALL_WORK=0 cuda_conf --test-threads 1 2>&1 | grep -E "test result|panicked"
for t in wgpu_search cuda_search; do echo "\$ $t --nocapture (lowest overlaps; the 800-d case)"; $t --test-threads 1 --nocapture 2>&1 | grep -E "overlap" | awk '{print $NF, $0}' | sort -n | head -3 | cut -d' ' -f2-; $t --test-threads 1 --nocapture 2>&1 | grep -E "dim 800|test result|panicked"; done
echo "== 1M x 384 (made and built as in session36_run_final.sh)"
[ -f /tmp/big/base.npy ] && echo "(already made on this machine)" || python3 bench/make_synthetic.py /tmp/big --n 1000000 --dim 384 --seed 11
for c in pcaq2 pcaq5; do [ -f /tmp/big/$c.vlc ] && { echo "(/tmp/big/$c.vlc already built on this machine)"; continue; }; vlc build /tmp/big/base.npy -o /tmp/big/$c.vlc --codec $c --backend cuda -q 2>&1 | grep -E "backend|file"; done
echo "== 'vlc' = 226aaf6 (tables in workgroup memory), 'vlc_prev' = efc7ba5; WGPU, two rounds alternated"
for round in 1 2; do
for v in vlc vlc_prev; do
echo "== $v (round $round)"
for i in $D/p64.vlc $D/p5.vlc; do echo "\$ $v eval $(basename $i) --nprobe 16,128,512 --backend wgpu --repeat 3"; $v eval $i --queries $D/q.npy --groundtruth $D/gt10.npy --nprobe 16,128,512 --backend wgpu --repeat 3 2>&1 | grep -v "^search backend" | tail -3; done
for c in pcaq2 pcaq5; do echo "\$ $v eval $c.vlc (1M) --nprobe 8,32,128 --backend wgpu --repeat 3"; $v eval /tmp/big/$c.vlc --queries /tmp/big/query.npy --groundtruth /tmp/big/groundtruth.npy --nprobe 8,32,128 --backend wgpu --repeat 3 2>&1 | grep -v "^search backend" | tail -3; done
done; done
echo "== CUDA for reference (226aaf6)"
for i in $D/p64.vlc $D/p5.vlc; do echo "\$ vlc eval $(basename $i) --nprobe 16,128,512 --backend cuda --repeat 3"; vlc eval $i --queries $D/q.npy --groundtruth $D/gt10.npy --nprobe 16,128,512 --backend cuda --repeat 3 2>&1 | grep -v "^search backend" | tail -3; done
for c in pcaq2 pcaq5; do echo "\$ vlc eval $c.vlc (1M) --nprobe 8,32,128 --backend cuda --repeat 3"; vlc eval /tmp/big/$c.vlc --queries /tmp/big/query.npy --groundtruth /tmp/big/groundtruth.npy --nprobe 8,32,128 --backend cuda --repeat 3 2>&1 | grep -v "^search backend" | tail -3; done
