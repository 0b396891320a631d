# Session 38 device script: GPU tests of the new build, then new vs base (6904d94, the build before
# this session's GPU changes) on the dev set and a 1M x 384 set, alternated, then p64 at nprobe 512 in
# several processes with the GPU's clocks. Usage (device tool): bash bench/results/h100/session38_run.sh COMMIT
set -u
tar -C .carry -xJf .carry/bin.tar.xz; B=.carry/bin; D=.carry/dev; export PATH=$PWD/$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
clocks() { nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_throttle_reasons.active --format=csv,noheader | tr -d '\n'; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== Part A: tests of $1 (--test-threads 1)"; echo "\$ cuda_conf with VLC_CUDA_SMALL_WORK=0"; VLC_CUDA_SMALL_WORK=0 cuda_conf --test-threads 1 2>&1 | grep -E "test result|panicked"
for t in wgpu_conf cuda_conf cuda_unit; do echo "\$ $t"; $t --test-threads 1 2>&1 | grep -E "test result|panicked|SKIP"; done
for t in wgpu_search cuda_search; do echo "\$ $t --nocapture (lowest three overlaps; every test)"; $t --test-threads 1 --nocapture 2>&1 | grep -E "overlap" | awk '{print $NF, $0}' | sort -n | head -3 | cut -d' ' -f2-; $t --test-threads 1 2>&1 | grep -E "^test |test result|panicked|SKIP"; done
echo "== Part B: dev set, $1 ('vlc') and 6904d94 ('vlc_base'), two rounds alternated; eval --repeat 3 (the fastest of 3 passes)"
for round in 1 2; do for v in vlc vlc_base; do for be in cuda wgpu; do for i in p64 p5; do
echo "$v $be $i (round $round): $($v eval $D/$i.vlc --queries $D/q.npy --groundtruth $D/gt10.npy --nprobe 16,128,512 --backend $be --repeat 3 2>&1 | tail -3 | awk '{printf "%s %s %s | ", $1, $3, $5}')"
done; done; done; done
echo "== Part C: $1 against the CPU on the dev set"
NPROBE=16,128,512 BACKENDS="cpu cuda wgpu" bash bench/gpu_search_check.sh vlc $D/q.npy $D/gt10.npy $D/p64.vlc $D/p5.vlc 2>&1 | grep -v "^search backend"
echo "== Part D: p64 at nprobe 512, 16, 512, 128, 512 in one process, WGPU, shader disk cache off, six processes each; clocks before each"
for i in 1 2 3 4 5 6; do for v in vlc vlc_base; do
c=$(clocks); echo "$v #$i [$c]: $(__GL_SHADER_DISK_CACHE=0 $v eval $D/p64.vlc --queries $D/q.npy --groundtruth $D/gt10.npy --nprobe 512,16,512,128,512 --backend wgpu --repeat 2 2>&1 | tail -5 | awk '{printf "%s %s | ", $1, $5}')"
done; done
echo "== Part E: 1M x 384 (make_synthetic.py --n 1000000 --dim 384 --seed 11; indexes built with --backend cuda by vlc)"
[ -f /tmp/big/base.npy ] || python3 bench/make_synthetic.py /tmp/big --n 1000000 --dim 384 --seed 11 | tail -1
for c in pcaq2 pcaq5; do [ -f /tmp/big/$c.vlc ] || vlc build /tmp/big/base.npy -o /tmp/big/$c.vlc --codec $c --backend cuda -q 2>&1 | grep -E "file"; done
for round in 1 2; do for v in vlc vlc_base; do for be in cuda wgpu; do for c in pcaq2 pcaq5; do
echo "$v $be $c (round $round): $($v eval /tmp/big/$c.vlc --queries /tmp/big/query.npy --groundtruth /tmp/big/groundtruth.npy --nprobe 8,32,128 --backend $be --repeat 3 2>&1 | tail -3 | awk '{printf "%s %s %s | ", $1, $3, $5}')"
done; done; done; done
