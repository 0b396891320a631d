# Session 50 device script: one query per call (`vlc eval --batch-size 1 --threads 1`) on the GPU
# machine's host CPU, whose integer kernels are AMX and AVX-512 VNNI: the anchor ranking on AMX
# tiles, on VNNI (VLC_NO_AMX=1) and in f32 (VLC_NO_AMX=1 VLC_NO_VNNI=1, the ranking before
# session 50), against 1,024, 4,096 and 16,384 anchors of 500,000 synthetic 384-d vectors (trained
# on CUDA), and one call of all queries for comparison.
# Carry: .carry/s66.tar.xz (the release `vlc` of COMMIT, stripped).
# Usage: bash bench/results/h100/session50_one_query.sh COMMIT
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
grep -m1 'model name' /proc/cpuinfo
rm -rf /tmp/b && mkdir /tmp/b && tar -C /tmp/b -xJf .carry/s66.tar.xz
V=/tmp/b/vlc
run() { echo "\$ $*"; "$@" 2>&1; }
run python3 bench/make_synthetic.py /tmp/syn --n 500000 --dim 384 --queries 2000 --seed 13 --clusters 3000
for a in 1024 4096 16384; do
  run $V build /tmp/syn/base.npy -o /tmp/s$a.vlc --codec pcaq1 --anchors $a --backend cuda | tail -3
  e="$V eval /tmp/s$a.vlc --queries /tmp/syn/query.npy --groundtruth /tmp/syn/groundtruth.npy --nprobe 16,64 --threads 1 --repeat 2"
  echo "== $a anchors: one query per call; AMX"; run $e --batch-size 1 | tail -3
  echo "== $a anchors: one query per call; VNNI"; VLC_NO_AMX=1 run $e --batch-size 1 | tail -3
  echo "== $a anchors: one query per call; f32"; VLC_NO_AMX=1 VLC_NO_VNNI=1 run $e --batch-size 1 | tail -3
  echo "== $a anchors: all queries in one call; AMX"; run $e | tail -3
done
