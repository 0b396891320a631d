# Session 52 device script, third run: Criterion's anchor-ranking group (1,024 x 384 anchors:
# random queries at nprobe 64; the repo's 200 real queries against 1,024 of its sample's
# documents at nprobe 8) on the GPU machine's Xeon, pinned to one core, as an AVX2-only CPU
# (AMX, VNNI and AVX-512 off: 8-bit anchors rank in two passes), then with VLC_NO_AVX2_INT8=1
# as well (every case on the f32 GEMM), then as it is (AMX).
# Carry: .carry/s74.tar.xz (COMMIT's kernels bench executable, stripped). Run from the repo's
# root (the bench reads data/sample).
# Usage: bash bench/results/h100/session52_anchor_ranking_xeon.sh COMMIT
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
grep -m1 'model name' /proc/cpuinfo
rm -rf /tmp/b && mkdir /tmp/b && tar -C /tmp/b -xJf .carry/s74.tar.xz
k="taskset -c 3 /tmp/b/kernels --bench anchor.ranking,.1024 --warm-up-time 1 --measurement-time 4 --noplot"
show() { grep -E "^anchor|time:"; }
echo "== AVX2-only (two passes)"; VLC_NO_AMX=1 VLC_NO_VNNI=1 VLC_NO_AVX512=1 $k 2>&1 | show
echo "== AVX2-only, VLC_NO_AVX2_INT8=1 (f32 GEMM)"; VLC_NO_AMX=1 VLC_NO_VNNI=1 VLC_NO_AVX512=1 VLC_NO_AVX2_INT8=1 $k 2>&1 | show
echo "== as it is (AMX)"; $k 2>&1 | show
