# Session 52 device script: COMMIT's two-pass batch anchor ranking on the GPU machine's Xeon
# with AMX, VNNI and AVX-512 turned off (VLC_NO_AMX=1 VLC_NO_VNNI=1 VLC_NO_AVX512=1), as on an
# AVX2-only Intel CPU (this repo's VM is an AMD Zen 3):
#   1. vlc-core's integer-kernel and CPU-backend unit tests and the search test that holds a
#      lone query's ranking to a batch's, with the Xeon as an AVX2-only CPU and then as it is
#      (where AMX ranks a batch and the two-pass tests say SKIPPED);
#   2. one thread, nprobe 8-128 with a pool of 30, a `pcaq0.5` index of 1,024 anchors on a
#      50,000 x 384 synthetic set: the two-pass ranking against the f32 GEMM it replaces
#      (VLC_NO_AVX2_INT8=1), alternated twice, then the Xeon's own AMX ranking once.
# Carry: .carry/s72.tar.xz (COMMIT's release `vlc` and vlc-core's lib and search test
# executables, stripped).
# Usage: bash bench/results/h100/session52_two_pass_xeon.sh COMMIT
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
grep -m1 'model name' /proc/cpuinfo
rm -rf /tmp/b && mkdir /tmp/b && tar -C /tmp/b -xJf .carry/s72.tar.xz
V=/tmp/b/vlc
run() { echo "\$ $*"; "$@" 2>&1; }
avx2_only() { VLC_NO_AMX=1 VLC_NO_VNNI=1 VLC_NO_AVX512=1 "$@"; }
echo "== tests, as an AVX2-only CPU"
avx2_only run /tmp/b/vlc-lib --test-threads 2 amx:: backend::cpu --nocapture | grep -E "^test |SKIPPED|test result"
avx2_only run /tmp/b/search --test-threads 2 one_query --nocapture | grep -E "^test |SKIPPED|test result"
echo "== tests, as it is"
run /tmp/b/vlc-lib --test-threads 2 amx:: backend::cpu --nocapture | grep -E "^test |SKIPPED|test result"
run /tmp/b/search --test-threads 2 one_query --nocapture | grep -E "^test |SKIPPED|test result"
[ -f /tmp/syn/groundtruth.npy ] || run python3 bench/make_synthetic.py /tmp/syn --n 50000 --dim 384 --queries 2000 --seed 7
[ -f /tmp/p05.vlc ] || run $V build /tmp/syn/base.npy -o /tmp/p05.vlc --codec pcaq0.5 --anchors 1024 | tail -3
e="$V eval /tmp/p05.vlc --queries /tmp/syn/query.npy --groundtruth /tmp/syn/groundtruth.npy --nprobe 8,16,32,64,128 --rerank 30 --threads 1 --repeat 3"
for i in 1 2; do
  echo "== AVX2-only: two passes"; avx2_only run $e | sed -n '1p;2s/.*CPU kernels/CPU kernels/p;4,$p'
  echo "== AVX2-only: f32 GEMM (VLC_NO_AVX2_INT8=1)"; VLC_NO_AVX2_INT8=1 avx2_only run $e | sed -n '1p;2s/.*CPU kernels/CPU kernels/p;4,$p'
done
echo "== as it is (AMX)"; run $e | sed -n '1p;2s/.*CPU kernels/CPU kernels/p;4,$p'
