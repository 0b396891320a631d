#!/bin/bash
# On the device machine: the CUDA conformance suite and GPU search tests, bench/gpu_bench.py
# twice (VLC against PyTorch k-means, 1M x 384, 4,096 anchors, 20 iterations), reruns with the
# distance bounds on, off (VLC_CUDA_BOUNDS=0) and on, `vlc test-cuda --large` three times and
# bench/gpu_build.sh. Build here first and copy into .carry/ (git-ignored, carried):
#   cargo build --release -p vlc-cli && cargo test --release -p vlc-cuda --no-run
#   cp target/release/vlc .carry/vlc; cp target/release/deps/conformance-* .carry/conf_cuda;
#   cp target/release/deps/search-* .carry/search_cuda   (the executables, not the .d files)
# Usage: bash bench/gpu_training_check.sh   (writes gpu_N.jsonl under $OUT when set)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64
export VLC=.carry/vlc
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== conformance"; .carry/conf_cuda 2>&1 | grep -E "^test |test result"
echo "== search tests"; .carry/search_cuda 2>&1 | grep -E "test result"
for i in 1 2; do echo "== gpu_bench $i"; python3 bench/gpu_bench.py --vlc $VLC --data /tmp/x.npy --out $out/gpu_$i.jsonl 2>&1 | tail -3; done
echo "== reruns: bounds on, off, on"
bash bench/gpu_train_sweep.sh /tmp/x.npy default
VLC_CUDA_BOUNDS=0 bash bench/gpu_train_sweep.sh /tmp/x.npy default
bash bench/gpu_train_sweep.sh /tmp/x.npy default
echo "== test-cuda --large"; for i in 1 2 3; do $VLC test-cuda --large 2>&1 | grep "cuda "; done
echo "== vlc build 1M rabitq1"; bash bench/gpu_build.sh $VLC 2>&1 | tail -6
