# Session 38 device script, run 2: new (COMMIT) vs base (6904d94) with the fastest of 10 passes, three
# rounds alternated, dev set and 1M x 384, CUDA and WGPU; then single passes of p64 at nprobe 512 on both
# backends with the GPU's clocks sampled every 100 ms. Usage: bash bench/results/h100/session38_run2.sh COMMIT
set -u
tar -C .carry -xJf .carry/bin.tar.xz; B=.carry/bin; D=.carry/dev; export PATH=$PWD/$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
row() { awk '{printf "%s %s %s | ", $1, $3, $5}'; }
echo "== Part F: single passes (--repeat 1) of p64 at nprobe 512, eight per process, WGPU then CUDA, two processes each binary; GPU sampled every 100 ms into $OUT/smi.csv; wall times (date +%s.%N) around each process"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,clocks_event_reasons.active --format=csv,noheader -lms 100 > $OUT/smi.csv 2>&1 &
SMI=$!
for be in wgpu cuda; do for i in 1 2; do for v in vlc vlc_base; do
t0=$(date +%H:%M:%S.%N); r=$($v eval $D/p64.vlc --queries $D/q.npy --groundtruth $D/gt10.npy --nprobe 512,512,512,512,512,512,512,512 --backend $be 2>&1 | tail -8 | awk '{printf "%s ", $5}'); t1=$(date +%H:%M:%S.%N)
echo "$v $be #$i [$t0 - $t1]: $r"
done; done; done
kill $SMI
echo "== Part G: $1 ('vlc') and 6904d94 ('vlc_base'), three rounds alternated; eval --repeat 10 (the fastest of 10 passes). Columns: nprobe, recall@10, QPS"
[ -f /tmp/big/base.npy ] || python3 bench/make_synthetic.py /tmp/big --n 1000000 --dim 384 --seed 11 | tail -1
for c in pcaq2 pcaq5; do [ -f /tmp/big/$c.vlc ] || vlc build /tmp/big/base.npy -o /tmp/big/$c.vlc --codec $c --backend cuda -q 2>&1 | grep -E "file"; done
for round in 1 2 3; do for v in vlc vlc_base; do for be in cuda wgpu; do
for i in p64 p5; do echo "$v $be $i (round $round): $($v eval $D/$i.vlc --queries $D/q.npy --groundtruth $D/gt10.npy --nprobe 16,128,512 --backend $be --repeat 10 2>&1 | tail -3 | row)"; done
for c in pcaq2 pcaq5; do echo "$v $be $c (1M, round $round): $($v eval /tmp/big/$c.vlc --queries /tmp/big/query.npy --groundtruth /tmp/big/groundtruth.npy --nprobe 8,32,128 --backend $be --repeat 10 2>&1 | tail -3 | row)"; done
done; done; done
