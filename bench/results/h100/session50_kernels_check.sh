# Session 50 device script: vlc-core's unit tests (the integer kernels among them), search tests
# and CPU conformance suite of COMMIT on the GPU machine's host CPU, which has AMX, AVX-512
# VNNI, AVX-VNNI and AVX2: the test that every integer kernel present gives the same products
# compares all four there. Then the amx and search tests again with AMX off (VLC_NO_AMX=1) and
# with the VNNI kernels off (VLC_NO_VNNI=1: AMX for batches and for one query; the AVX2 kernel
# ranks one query only where no other integer kernel runs).
# Carry: .carry/s68.tar.xz (the stripped test executables of COMMIT: core_unit, core_search,
# core_conformance).
# Usage: bash bench/results/h100/session50_kernels_check.sh COMMIT
set -u
echo "$(nproc) CPU cores; built from $1"; grep -m1 'model name' /proc/cpuinfo
grep -o -w 'amx_int8\|amx_tile\|avx512_vnni\|avx_vnni\|avx2' /proc/cpuinfo | sort | uniq -c
rm -rf /tmp/t && mkdir /tmp/t && tar -C /tmp/t -xJf .carry/s68.tar.xz
run() { echo "\$ $*"; "$@" 2>&1 | grep -E "^test |SKIPPED|test result|panicked"; }
run /tmp/t/core_unit --nocapture amx
run /tmp/t/core_unit
run /tmp/t/core_search --nocapture
run /tmp/t/core_conformance
echo "== VLC_NO_AMX=1"; VLC_NO_AMX=1 run /tmp/t/core_unit --nocapture amx
VLC_NO_AMX=1 run /tmp/t/core_search --nocapture one_query
echo "== VLC_NO_VNNI=1"; VLC_NO_VNNI=1 run /tmp/t/core_unit --nocapture amx
VLC_NO_VNNI=1 run /tmp/t/core_search --nocapture
