# Session 45 device script: encoding after the level search's speed-up (codec/levels.rs), against
# the build before it, on the same machine in one run. 1,000,000 x 384 synthetic
# (bench/make_synthetic.py --seed 11, as in session 44), 4,096 anchors trained on CUDA, pcaq5 and
# pcaq1, built by BEFORE's vlc and then by COMMIT's; both pcaq5 indexes evaluated on the CPU
# (all cores) at nprobe 32 against the same ground truth.
# Carry: .carry/s50.tar.xz (s50/vlc_before: BEFORE's vlc; s50/vlc: COMMIT's; both stripped).
# Usage: bash bench/results/h100/session45_encode.sh BEFORE COMMIT
set -u
tar -C .carry -xJf .carry/s50.tar.xz; B=$PWD/.carry/s50
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "$(nproc) CPU cores; vlc_before from $1, vlc from $2"
python3 bench/make_synthetic.py /tmp/big --n 1000000 --dim 384 --seed 11 | tail -1
for codec in pcaq5 pcaq1; do
  for v in vlc_before vlc; do
    echo "\$ $v build /tmp/big/base.npy -o /tmp/big/$v.$codec.vlc --codec $codec --anchors 4096 --backend cuda -q"
    $B/$v build /tmp/big/base.npy -o /tmp/big/$v.$codec.vlc --codec $codec --anchors 4096 \
      --backend cuda -q 2>&1 | grep -E "file|build time" || true
  done
done
for v in vlc_before vlc; do
  echo "\$ vlc eval /tmp/big/$v.pcaq5.vlc --nprobe 32 --backend cpu"
  $B/vlc eval /tmp/big/$v.pcaq5.vlc --queries /tmp/big/query.npy --groundtruth /tmp/big/groundtruth.npy \
    --nprobe 32 --backend cpu 2>&1 | tail -3
done
