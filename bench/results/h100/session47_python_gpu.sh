# Session 47 device script: GPU search from Python. The vlc_index wheel of COMMIT (abi3, CPython
# 3.11+) unpacked onto PYTHONPATH, with pytest's wheels: the package's pytest suite (its CUDA and
# WGPU search tests run here), then examples/backends.py on 200,000 x 384 with 10,000 queries:
# builds on the CPU, CUDA and WGPU, and the CPU-built index searched on each.
# Carry: .carry/s56.tar.xz (the wheel and pytest's wheels) and .gl.
# Usage: bash bench/results/h100/session47_python_gpu.sh COMMIT
set -u
tar -C .carry -xJf .carry/s56.tar.xz; B=$PWD/.carry/s56
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
python3 --version; python3 -c "import numpy; print('numpy', numpy.__version__)"
rm -rf /tmp/py && python3 -m zipfile -e $B/vlc_index-*.whl /tmp/py
for w in $B/pyt/*.whl; do python3 -m zipfile -e $w /tmp/py; done
export PYTHONPATH=/tmp/py
echo "\$ python3 -m pytest -q -rs crates/vlc-python/tests"
(cd /tmp && python3 -m pytest -q -rs -p no:cacheprovider $OLDPWD/crates/vlc-python/tests 2>&1 | tail -8)
echo "\$ python3 crates/vlc-python/examples/backends.py --n 200000 --queries 10000"
python3 crates/vlc-python/examples/backends.py --n 200000 --queries 10000 2>&1
