#!/usr/bin/env bash
# Builds the Python package's wheels (crates/vlc-python) to install on other Linux machines:
# manylinux2014 wheels, which need glibc 2.17 or newer (any Linux distribution of the last ten
# years: Ubuntu 18.04+, Debian 10+, RHEL/Rocky 8+, Jetson Linux 32+) and CPython 3.11 or newer
# (one abi3 wheel serves every version), for x86-64 and for aarch64 (Jetson and other 64-bit ARM
# boards). The wheels are linked by zig (`maturin build --zig`, zig from PyPI's `ziglang`)
# against glibc 2.17's symbols, so they build on any host of either architecture, and each one
# is checked with auditwheel: the build fails unless its symbols fit manylinux_2_17.
#
# Usage: bash tools/build_wheels.sh [x86_64|aarch64|all] [OUTDIR]
#   (default: all, into target/wheels). Prints the path of each wheel built.
# Install one with `pip install vlc_index-*.whl` (NumPy comes from PyPI as its dependency).
# tools/test_python.sh tests this host's wheel, tools/test_python_aarch64.sh the aarch64 one
# under qemu; both run in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all}
out=${2:-target/wheels}
# shellcheck source=tools/cross_common.sh
source tools/cross_common.sh
pick_arches "$which" "bash tools/build_wheels.sh [x86_64|aarch64|all] [OUTDIR]"
venv=$PWD/target/python-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade "maturin>=1.9,<2" "ziglang>=0.13,<0.18" auditwheel
mkdir -p "$out"
for arch in $arches; do
  target=$arch-unknown-linux-gnu
  add_rust_target "$target"
  rm -f "$out"/vlc_index-*_"$arch".whl
  # maturin runs zig as `python -m ziglang` from the environment it runs in.
  PATH=$venv/bin:$PATH "$venv/bin/maturin" build --release -q -m crates/vlc-python/Cargo.toml \
    -o "$out" --zig --compatibility manylinux2014 --target "$target"
  wheel=$(ls "$out"/vlc_index-*-manylinux2014_"$arch".manylinux_2_17_"$arch".whl)
  report=$("$venv/bin/auditwheel" show "$wheel")
  if ! grep -q "\"manylinux_2_17_$arch\"" <<<"$report"; then
    echo "$report"
    echo "error: $wheel does not fit manylinux_2_17_$arch" >&2
    exit 1
  fi
  echo "$wheel"
done
