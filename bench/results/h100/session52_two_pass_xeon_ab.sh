# Session 52 device script, second run: why the two-pass ranking was slower than the f32 GEMM on
# the GPU machine's Xeon as an AVX2-only CPU (session52_two_pass_xeon.sh). With AMX, VNNI and
# AVX-512 off, pinned to one core:
#   1. Criterion's anchor-ranking group (1,024 x 384 anchors, 256 queries): the f32 GEMM and
#      the 8-bit anchors' two passes in one process, random queries at nprobe 64 and queries
#      near their anchors at nprobe 8;
#   2. `vlc eval` of session52_two_pass_xeon.sh's pcaq0.5 index (rebuilt if absent) at nprobe 8
#      and 16 with a pool of 30: two passes, then the GEMM (VLC_NO_AVX2_INT8=1), three rounds.
# Carry: .carry/s73.tar.xz (COMMIT's kernels bench executable and release `vlc`, stripped).
# Usage: bash bench/results/h100/session52_two_pass_xeon_ab.sh COMMIT
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
grep -m1 'model name' /proc/cpuinfo; grep -m1 -o 'avx512_vnni\|amx_int8' /proc/cpuinfo | head -2
rm -rf /tmp/b && mkdir /tmp/b && tar -C /tmp/b -xJf .carry/s73.tar.xz
V=/tmp/b/vlc
run() { echo "\$ $*"; "$@" 2>&1; }
export VLC_NO_AMX=1 VLC_NO_VNNI=1 VLC_NO_AVX512=1
run taskset -c 3 /tmp/b/kernels --bench "anchor ranking, 1024" --warm-up-time 1 --measurement-time 4 --noplot | grep -E "^anchor|time:|thrpt:"
[ -f /tmp/syn/groundtruth.npy ] || run python3 bench/make_synthetic.py /tmp/syn --n 50000 --dim 384 --queries 2000 --seed 7
[ -f /tmp/p05.vlc ] || run $V build /tmp/syn/base.npy -o /tmp/p05.vlc --codec pcaq0.5 --anchors 1024 | tail -3
e="taskset -c 3 $V eval /tmp/p05.vlc --queries /tmp/syn/query.npy --groundtruth /tmp/syn/groundtruth.npy --nprobe 8,16 --rerank 30 --threads 1 --repeat 5"
for i in 1 2 3; do
  echo "== two passes"; run $e | sed -n '1p;2s/.*CPU kernels/CPU kernels/p;4,$p'
  echo "== f32 GEMM (VLC_NO_AVX2_INT8=1)"; VLC_NO_AVX2_INT8=1 run $e | sed -n '1p;2s/.*CPU kernels/CPU kernels/p;4,$p'
done
