# Session 53 device script: COMMIT's search buffers kept per thread, on the GPU machine's Xeon
# (Sapphire Rapids class: AMX, AVX-512 VNNI, AVX-VNNI), whose integer kernels this repo's VM
# (AMD Zen 3, AVX2 only) does not have. vlc-core's unit tests (the integer kernels' query
# split now keeps its buffers per thread, the AMX kernel borrows them), the search tests and
# tests/allocations.rs, with every kernel in turn: as it is (AMX ranks a batch, AVX-512 VNNI
# one query), AMX off, AMX and AVX-512 off (AVX-VNNI), and all three off (AVX2 only).
# Carry: .carry/s75.tar.xz (COMMIT's vlc-core lib, search and allocations test executables,
# stripped).
# Usage: bash bench/results/h100/session53_scratch_xeon.sh COMMIT
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
grep -m1 'model name' /proc/cpuinfo
grep -o -w 'amx_int8\|avx512_vnni\|avx_vnni' /proc/cpuinfo | sort | uniq -c
rm -rf /tmp/b && mkdir /tmp/b && tar -C /tmp/b -xJf .carry/s75.tar.xz
run() { echo "\$ $*"; "$@" 2>&1; }
for mode in "" "VLC_NO_AMX=1" "VLC_NO_AMX=1 VLC_NO_AVX512=1" "VLC_NO_AMX=1 VLC_NO_AVX512=1 VLC_NO_VNNI=1"; do
  echo "== ${mode:-as it is}"
  for t in vlc-lib search allocations; do
    env $mode /tmp/b/$t --test-threads 4 2>&1 | grep -E "SKIPPED|test result|FAILED|panicked|CPU kernels" | sed "s/^/$t: /"
  done
done
