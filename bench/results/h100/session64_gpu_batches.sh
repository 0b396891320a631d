# Session 64 device script, second call: why 50,000 pcaq3 queries took seconds in one `vlc search` call and
# a fraction of a second in batches of 4,096 (session64_gpu.sh). `vlc eval --batch-size` (search time only, fastest of
# 3 passes) on CUDA and WGPU at batch sizes 0 (every query in one call), 40,960, 16,384, 4,096 and 1,024, pcaq3 and
# rabitq1, nprobe 64, 50,000 queries (the dev set's 10,000 five times); then `vlc search` timed twice per batch size.
# Carry as session64_gpu.sh (COMMIT 01f9fc7). Usage: bash bench/results/h100/session64_gpu_batches.sh
set -u
tar -C .carry -xJf .carry/s98.tar.xz; tar -C .carry -xJf .carry/s99.tar.xz
O=$PWD/.carry/s98/vlc_old; N=$PWD/.carry/s99/vlc; D=$PWD/.carry/s98/dev
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
T=$(mktemp -d)
python3 -c "import numpy as np, sys; np.save(sys.argv[3], np.concatenate([np.load(sys.argv[1])] * 5)); np.save(sys.argv[4], np.concatenate([np.load(sys.argv[2])] * 5))" $D/q.npy $D/gt10.npy $T/q5.npy $T/g5.npy
for backend in cuda wgpu; do for name in pcaq3 rabitq1; do for bs in 0 40960 16384 4096 1024; do
  echo "-- $name $backend batch $bs"; $N eval $D/$name.vlc --queries $T/q5.npy --groundtruth $T/g5.npy --nprobe 64 --repeat 3 --batch-size $bs --backend $backend 2>&1 | sed -n '3,$p'
done; done; done
for bs in 0 4096; do /usr/bin/time -f "search pcaq3 cuda batch $bs: %e s" $N search $D/pcaq3.vlc $T/q5.npy --nprobe 64 --backend cuda --batch-size $bs -o $T/h.npy 2>&1 | grep -E "search pcaq3|error"; done
for bs in 0 4096; do /usr/bin/time -f "search pcaq3 cuda batch $bs: %e s" $N search $D/pcaq3.vlc $T/q5.npy --nprobe 64 --backend cuda --batch-size $bs -o $T/h.npy 2>&1 | grep -E "search pcaq3|error"; done
