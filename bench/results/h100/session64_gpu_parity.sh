# Session 64 device script, third call: the CPU's batches now rank anchors with the index's own
# packing at every batch size (cdecabc), and the GPU conformance and search tests compare the
# GPUs' searches with the CPU's. COMMIT's CUDA and WGPU test executables, with the three lowest
# shares of the CPU's ids.
# Carry: .carry/s100.tar.xz (stripped test executables and vlc of COMMIT) and .gl.
# Usage: bash bench/results/h100/session64_gpu_parity.sh COMMIT
set -u
tar -C .carry -xJf .carry/s100.tar.xz; B=$PWD/.carry/s100
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
for x in wgpu_conformance wgpu_search cuda_conformance cuda_search; do
  echo "\$ $x"; $B/$x --nocapture --test-threads 1 > $x.out 2>&1; echo "exit $?"
  grep -E "conformance on|test result|FAILED|panicked|SKIPPED|skipped" $x.out | sort | uniq -c
  grep -o "overlap [0-9.]*" $x.out | sort -k2 -n | uniq -c | head -3
done
