# Session 51 device script: COMMIT's CUDA and WGPU search tests on the GPU machine, among them
# the conformance check that each GPU search refuses what the CPU's refuses, now also a zero
# query in a cosine index (named by its row, as the CPU names it).
# Carry: .carry/s70.tar.xz (the stripped test executables of COMMIT: cuda_search, wgpu_search)
# and .gl (the Vulkan loader, as the device README says).
# Usage: bash bench/results/h100/session51_zero_query.sh COMMIT [CARRY_NAME, default s70; s71 held 298fadb's]
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "built from $1"
rm -rf /tmp/t && mkdir /tmp/t && tar -C /tmp/t -xJf .carry/${2:-s70}.tar.xz
run() { echo "\$ $*"; "$@" 2>&1 | grep -E "^test |SKIPPED|skipped|test result|panicked"; }
run /tmp/t/cuda_search --test-threads 1
run /tmp/t/wgpu_search --test-threads 1
