#!/usr/bin/env bash
# The Python package (crates/vlc-python): builds its wheel with maturin, installs it into a
# virtual environment under target/ (numpy from PyPI), and runs its pytest suite there.
# Usage: bash tools/test_python.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$PWD/target/python-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade "maturin>=1.9,<2" pytest numpy
rm -rf target/wheels
"$venv/bin/maturin" build --release -q -m crates/vlc-python/Cargo.toml -o target/wheels
"$venv/bin/python" -m pip install -q --force-reinstall --no-deps target/wheels/vlc_index-*.whl
# From outside the source tree, so that the installed package is the one imported.
(cd target && "$venv/bin/python" -m pytest -q -rs ../crates/vlc-python/tests)
"$venv/bin/python" crates/vlc-python/examples/sample.py --threads 1
