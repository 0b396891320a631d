#!/usr/bin/env bash
# The Python package (crates/vlc-python): builds this machine's distributable wheel
# (tools/build_wheels.sh: manylinux2014, linked by zig), installs it into a virtual environment
# under target/ (numpy from PyPI), and runs its pytest suite and examples/sample.py there.
# On x86-64 it then tests the aarch64 wheel under qemu (tools/test_python_aarch64.sh).
# Usage: bash tools/test_python.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$PWD/target/python-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pytest numpy
wheel=$(bash tools/build_wheels.sh "$(uname -m)" target/wheels | tail -1)
"$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$wheel"
# From outside the source tree, so that the installed package is the one imported.
(cd target && "$venv/bin/python" -m pytest -q -rs ../crates/vlc-python/tests)
"$venv/bin/python" crates/vlc-python/examples/sample.py --threads 1
if [ "$(uname -m)" = x86_64 ]; then
  bash tools/test_python_aarch64.sh
fi
