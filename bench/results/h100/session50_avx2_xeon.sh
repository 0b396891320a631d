# Session 50 device script, third run: COMMIT's build on the GPU machine's Xeon with AMX, VNNI
# and AVX-512 turned off (VLC_NO_AMX=1 VLC_NO_VNNI=1 VLC_NO_AVX512=1), as on an AVX2-only CPU:
# one query per call (`vlc eval --batch-size 1 --threads 1`) on the AVX2 integer kernel against
# the f32 dot products (VLC_NO_AVX2_INT8=1 as well), alternated twice, at 1,024, 4,096 and
# 16,384 anchors of the 500,000 x 384 synthetic set of session50_one_query.sh (trained on CUDA).
# Carry: .carry/s69.tar.xz (the release `vlc` of COMMIT, stripped).
# Usage: bash bench/results/h100/session50_avx2_xeon.sh COMMIT
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
rm -rf /tmp/b && mkdir /tmp/b && tar -C /tmp/b -xJf .carry/s69.tar.xz
V=/tmp/b/vlc
run() { echo "\$ $*"; "$@" 2>&1; }
[ -f /tmp/syn/groundtruth.npy ] || run python3 bench/make_synthetic.py /tmp/syn --n 500000 --dim 384 --queries 2000 --seed 13 --clusters 3000
export VLC_NO_AMX=1 VLC_NO_VNNI=1 VLC_NO_AVX512=1
for a in 1024 4096 16384; do
  [ -f /tmp/s$a.vlc ] || run $V build /tmp/syn/base.npy -o /tmp/s$a.vlc --codec pcaq1 --anchors $a --backend cuda | tail -3
  e="$V eval /tmp/s$a.vlc --queries /tmp/syn/query.npy --groundtruth /tmp/syn/groundtruth.npy --nprobe 16,64 --threads 1 --repeat 2 --batch-size 1"
  for i in 1 2; do
    echo "== $a anchors: one query per call; AVX2 integer kernel"; run $e | sed -n '1p;2s/.*CPU kernels/CPU kernels/p;4,$p'
    echo "== $a anchors: one query per call; f32 (VLC_NO_AVX2_INT8=1)"; VLC_NO_AVX2_INT8=1 run $e | sed -n '1p;2s/.*CPU kernels/CPU kernels/p;4,$p'
  done
done
