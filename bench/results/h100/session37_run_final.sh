set -u
tar -C .carry -xJf .carry/bin.tar.xz; B=.carry/bin; D=.carry/dev; export PATH=$PWD/$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== Part A: tests (--test-threads 1)"; echo "\$ cuda_conf with VLC_CUDA_SMALL_WORK=0"; VLC_CUDA_SMALL_WORK=0 cuda_conf --test-threads 1 2>&1 | grep -E "test result|panicked"
for t in wgpu_conf cuda_conf cuda_unit; do echo "\$ $t"; $t --test-threads 1 2>&1 | grep -E "test result|panicked|SKIP"; done
for t in wgpu_search cuda_search; do echo "\$ $t --nocapture (lowest three overlaps; the pool placements)"; $t --test-threads 1 --nocapture 2>&1 | grep -E "overlap" | awk '{print $NF, $0}' | sort -n | head -3 | cut -d' ' -f2-; $t --test-threads 1 --nocapture 2>&1 | grep -E "pool \(|test result|panicked|SKIP"; done
echo "== Part B: dev set, new ($1) vs old (698e839) WGPU search"
echo '$ bash bench/gpu_search_check.sh vlc q.npy gt10.npy p64.vlc p5.vlc'
bash bench/gpu_search_check.sh vlc $D/q.npy $D/gt10.npy $D/p64.vlc $D/p5.vlc 2>&1 | grep -v "^search backend"
echo '$ BACKENDS=wgpu bash bench/gpu_search_check.sh vlc_old q.npy gt10.npy p64.vlc p5.vlc'
BACKENDS=wgpu bash bench/gpu_search_check.sh vlc_old $D/q.npy $D/gt10.npy $D/p64.vlc $D/p5.vlc 2>&1 | grep -v "^search backend"
echo "== Part C: 1M x 384"
echo '$ python3 bench/make_synthetic.py /tmp/big --n 1000000 --dim 384 --seed 11'
[ -f /tmp/big/base.npy ] && echo "(already made on this machine)" || python3 bench/make_synthetic.py /tmp/big --n 1000000 --dim 384 --seed 11
for c in pcaq2 pcaq5; do [ -f /tmp/big/$c.vlc ] && { echo "(/tmp/big/$c.vlc already built on this machine by the same command, by 698e839)"; continue; }; echo "\$ vlc build /tmp/big/base.npy -o /tmp/big/$c.vlc --codec $c --backend cuda"; vlc build /tmp/big/base.npy -o /tmp/big/$c.vlc --codec $c --backend cuda -q 2>&1 | grep -E "backend|file"; done
echo '$ NPROBE=8,32,128 bash bench/gpu_search_check.sh vlc /tmp/big/query.npy /tmp/big/groundtruth.npy pcaq2.vlc pcaq5.vlc'
NPROBE=8,32,128 bash bench/gpu_search_check.sh vlc /tmp/big/query.npy /tmp/big/groundtruth.npy /tmp/big/pcaq2.vlc /tmp/big/pcaq5.vlc 2>&1 | grep -v "^search backend"
echo '$ NPROBE=8,32,128 BACKENDS=wgpu bash bench/gpu_search_check.sh vlc_old /tmp/big/query.npy /tmp/big/groundtruth.npy pcaq2.vlc pcaq5.vlc'
NPROBE=8,32,128 BACKENDS=wgpu bash bench/gpu_search_check.sh vlc_old /tmp/big/query.npy /tmp/big/groundtruth.npy /tmp/big/pcaq2.vlc /tmp/big/pcaq5.vlc 2>&1 | grep -v "^search backend"
echo "== Part D: pool depth (vlc eval p5.vlc --rerank R: pool slots 512 / 1,024 / 2,048 for R = 0 / 500 / 1000), WGPU, new ($1) vs old (698e839), two processes each, NVIDIA shader disk cache off (__GL_SHADER_DISK_CACHE=0)"
for r in 0 500 1000; do for i in 1 2; do for v in vlc vlc_old; do echo "\$ __GL_SHADER_DISK_CACHE=0 $v eval p5.vlc --nprobe 16,128,512 --rerank $r --backend wgpu --repeat 3   (#$i)"; __GL_SHADER_DISK_CACHE=0 $v eval $D/p5.vlc --queries $D/q.npy --groundtruth $D/gt10.npy --nprobe 16,128,512 --rerank $r --backend wgpu --repeat 3 2>&1 | tail -3; done; done; done
echo "== Part E: p64.vlc at nprobe 512 (pool slots 1,024) in five processes each, shader disk cache off"
for i in 1 2 3 4 5; do for v in vlc vlc_old; do echo "$v #$i: $(__GL_SHADER_DISK_CACHE=0 $v eval $D/p64.vlc --queries $D/q.npy --groundtruth $D/gt10.npy --nprobe 16,512 --backend wgpu --repeat 3 2>&1 | tail -2 | tr '\n' '|')"; done; done
