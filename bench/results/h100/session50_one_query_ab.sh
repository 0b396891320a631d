# Session 50 device script, second run: with COMMIT's build, one query per call against 4,096 and
# 16,384 anchors (the set of session50_one_query.sh, made again if this machine lacks it) on
# the kernel it now picks for fewer than 16 rows beside AMX (AVX-512 VNNI) and on AMX's tiles
# (VLC_NO_VNNI=1), alternated three times.
# Carry: .carry/s67.tar.xz (the release `vlc` of COMMIT, stripped).
# Usage: bash bench/results/h100/session50_one_query_ab.sh COMMIT
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
rm -rf /tmp/b && mkdir /tmp/b && tar -C /tmp/b -xJf .carry/s67.tar.xz
V=/tmp/b/vlc
run() { echo "\$ $*"; "$@" 2>&1; }
[ -f /tmp/syn/groundtruth.npy ] || run python3 bench/make_synthetic.py /tmp/syn --n 500000 --dim 384 --queries 2000 --seed 13 --clusters 3000
for a in 4096 16384; do
  [ -f /tmp/s$a.vlc ] || run $V build /tmp/syn/base.npy -o /tmp/s$a.vlc --codec pcaq1 --anchors $a --backend cuda | tail -3
  e="$V eval /tmp/s$a.vlc --queries /tmp/syn/query.npy --groundtruth /tmp/syn/groundtruth.npy --nprobe 16,64 --threads 1 --repeat 2 --batch-size 1"
  for i in 1 2 3; do
    echo "== $a anchors: one query per call; default (VNNI)"; run $e | tail -2
    echo "== $a anchors: one query per call; VLC_NO_VNNI=1 (AMX)"; VLC_NO_VNNI=1 run $e | tail -2
  done
done
