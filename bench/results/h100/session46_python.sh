# Session 46 device script: the Python package and the CPU's small-batch search path on the GPUs.
# Part A: COMMIT's CUDA and WGPU test executables (their search tests hold the device's results to
# the CPU's, whose batches of fewer than 16 queries now take the one-query path). Part B: the
# vlc_index wheel (abi3, CPython 3.11+), unpacked onto PYTHONPATH: the sample example, then one
# synthetic set (200,000 x 384) built from Python on the CPU, CUDA and WGPU.
# Carry: .carry/s51.tar.xz (test executables and the wheel of COMMIT) and .gl.
# Usage: bash bench/results/h100/session46_python.sh COMMIT
set -u
tar -C .carry -xJf .carry/s51.tar.xz; B=$PWD/.carry/s51; export PATH=$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
echo "== Part A: test executables"
t() { echo "\$ $*"; env "$@" 2>&1 | grep -E "conformance on|test result|FAILED|panicked" | sort | uniq -c; }
t cuda_unit --test-threads 1; t cuda_conformance --nocapture --test-threads 1; t cuda_search --test-threads 1
t wgpu_unit --test-threads 1; t wgpu_conformance --nocapture --test-threads 1; t wgpu_search --test-threads 1
echo "== Part B: vlc_index"
python3 --version; python3 -c "import numpy; print('numpy', numpy.__version__)"
rm -rf /tmp/py && python3 -m zipfile -e $B/vlc_index-*.whl /tmp/py && export PYTHONPATH=/tmp/py
echo "\$ python3 crates/vlc-python/examples/sample.py --threads 1"
python3 crates/vlc-python/examples/sample.py --threads 1 2>&1 | head -6
echo "\$ python3 crates/vlc-python/examples/backends.py --n 200000"
python3 crates/vlc-python/examples/backends.py --n 200000 2>&1
