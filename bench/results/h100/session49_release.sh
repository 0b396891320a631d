# Session 49 device script: the portable `vlc` binary of COMMIT (tools/build_release.sh x86_64:
# linked by zig against glibc 2.17, stripped) on the GPU machine: `vlc demo` on its CPU, the
# built-in CUDA and WGPU training checks (`vlc test-cuda --large`, `vlc test-gpu --large`), and
# the committed sample built with anchors trained on CUDA and searched on CUDA, WGPU and the CPU.
# Carry: target/release-archives (the archives) and .gl.
# Usage: bash bench/results/h100/session49_release.sh COMMIT
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
ldd --version | head -1
rm -rf /tmp/rel && mkdir /tmp/rel && tar -C /tmp/rel -xzf target/release-archives/vlc-*-x86_64-linux.tar.gz
V=$(ls /tmp/rel/*/vlc); ls -la $V; ldd $V
run() { echo "\$ $*"; "$@" 2>&1; }
run $V demo --examples 1
run $V test-cuda --large
run $V test-gpu --large
run $V groundtruth data/sample/base.npy data/sample/queries.npy -o /tmp/gt.npy -k 100
run $V build data/sample/base.npy -o /tmp/s.vlc --codec pcaq2 --backend cuda
for b in cpu cuda wgpu; do run $V eval /tmp/s.vlc --queries data/sample/queries.npy --groundtruth /tmp/gt.npy --nprobe 16,64 --backend $b; done
