# Session 43 device script: the current build's GPU figures for README's "Backends and GPUs" summary.
# Part A: anchor training, 1,000,000 x 384, 4,096 anchors, 20 iterations: VLC CUDA against PyTorch
# k-means FP32 and TF32 (bench/gpu_bench.py, same run), then VLC WGPU and CUDA twice each in turn on
# the same data (vlc train-bench --warmup). Part B: the dev set's pcaq index at 64 B/vector (int4
# anchors) and pcaq5, searched on the CPU (all cores), CUDA and WGPU (bench/gpu_search_check.sh,
# the fastest of ten passes). Part C: 1,000,000 x 384 synthetic (bench/make_synthetic.py --seed 11),
# pcaq5 built on CUDA, searched on the three backends.
# Carry: .carry/s48.tar.xz (vlc of COMMIT; dev/p64.vlc, dev/p5.vlc, dev/q.npy, dev/gt10.npy) and .gl.
# Usage: bash bench/results/h100/session43_current.sh COMMIT
set -u
tar -C .carry -xJf .carry/s48.tar.xz; B=$PWD/.carry/s48; D=$B/dev; export PATH=$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
echo "== Part A: training, VLC CUDA against PyTorch k-means (gpu_bench.py)"
python3 bench/gpu_bench.py --vlc $B/vlc --data /tmp/x.npy
for i in 1 2; do for be in wgpu cuda; do
  echo "vlc train-bench --backend $be ($i): $(vlc train-bench /tmp/x.npy --backend $be --warmup --anchors 4096 --iterations 20 --json 2>&1 | tail -1)"
done; done
echo "== Part B: dev set, CPU / CUDA / WGPU search"
bash bench/gpu_search_check.sh vlc $D/q.npy $D/gt10.npy $D/p64.vlc $D/p5.vlc
echo "== Part C: 1,000,000 x 384, pcaq5 built on CUDA"
python3 bench/make_synthetic.py /tmp/big --n 1000000 --dim 384 --seed 11 | tail -1
vlc build /tmp/big/base.npy -o /tmp/big/pcaq5.vlc --codec pcaq5 --backend cuda -q 2>&1 | grep -E "file|train|total" || true
NPROBE=8,32,128 bash bench/gpu_search_check.sh vlc /tmp/big/query.npy /tmp/big/groundtruth.npy /tmp/big/pcaq5.vlc
