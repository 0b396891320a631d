# Session 49 device script: the manylinux2014 x86-64 wheel of COMMIT (tools/build_wheels.sh,
# linked by zig against glibc 2.17) on the GPU machine. pip installs it from the file (pip
# checks its platform tags against this machine's glibc and CPython), then the package's
# pytest suite runs (its CUDA and WGPU search tests run here), then examples/backends.py on
# 200,000 x 384 with 10,000 queries: builds on the CPU, CUDA and WGPU, and the CPU-built index
# searched on each.
# Carry: .carry/s65.tar.xz (the wheel and pytest's wheels) and .gl.
# Usage: bash bench/results/h100/session49_wheel.sh COMMIT
set -u
tar -C .carry -xJf .carry/s65.tar.xz; B=$PWD/.carry/s65
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
python3 --version; ldd --version | head -1; python3 -c "import numpy; print('numpy', numpy.__version__)"
echo "\$ pip install --no-index --no-deps --target /tmp/py $(basename $B/vlc_index-*.whl) pytest"
rm -rf /tmp/py && python3 -m pip install -q --no-index --no-deps --target /tmp/py $B/vlc_index-*.whl $B/pyt/*.whl 2>&1 | tail -3
export PYTHONPATH=/tmp/py
echo "\$ python3 -m pytest -q -rs crates/vlc-python/tests"
(cd /tmp && python3 -m pytest -q -rs -p no:cacheprovider $OLDPWD/crates/vlc-python/tests 2>&1 | tail -8)
echo "\$ python3 crates/vlc-python/examples/backends.py --n 200000 --queries 10000"
python3 crates/vlc-python/examples/backends.py --n 200000 --queries 10000 2>&1
