#!/usr/bin/env bash
# The Python package's aarch64 wheel (for Jetson and other 64-bit ARM boards), tested on an
# x86-64 machine: builds it (tools/build_wheels.sh aarch64), then runs its pytest suite and
# examples/sample.py on an aarch64 CPython under qemu's user-mode emulator. That CPython is
# Debian's (python3.11 and the libraries it needs, arm64 packages unpacked under
# target/aarch64-python/root, not installed); NumPy and pytest are PyPI's manylinux aarch64
# wheels, installed with the package under target/aarch64-python/site. Speed under emulation
# means nothing; this is about the wheel loading and giving the same answers. It needs root,
# apt-get and dpkg (to add the arm64 architecture and fetch the packages) and qemu-user: where
# they are missing it says SKIPPED (exit 0), so a machine without them does not pass silently.
# The GPU tests say SKIPPED under emulation (no driver).
# Usage: bash tools/test_python_aarch64.sh
set -euo pipefail
cd "$(dirname "$0")/.."
skip() { echo "aarch64 Python tests SKIPPED: $*"; exit 0; }
[ "$(uname -m)" = x86_64 ] || skip "this host is $(uname -m); tools/test_python.sh tests its own wheel"
base=$PWD/target/aarch64-python
root=$base/root
python=$root/usr/bin/python3.11
# Debian 12's names; another release may name them otherwise (the script then skips).
packages="python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libc6 libgcc-s1
  libstdc++6 zlib1g libexpat1 libffi8 libssl3 libbz2-1.0 liblzma5 libuuid1 libcrypt1
  libsqlite3-0 libncursesw6 libtinfo6 libreadline8 libnsl2 libtirpc3 libdb5.3"
can_install() { command -v apt-get >/dev/null && command -v dpkg >/dev/null && [ "$(id -u)" = 0 ]; }
if ! command -v qemu-aarch64 >/dev/null; then
  can_install || skip "qemu-user is not installed (and apt-get is not usable)"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq qemu-user >/dev/null; } ||
    skip "cannot install qemu-user"
fi
if [ ! -x "$python" ]; then
  can_install || skip "no aarch64 CPython under $root, and apt-get is not usable to fetch one"
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
    apt-get update -qq || skip "apt-get update failed after adding the arm64 architecture"
  fi
  rm -rf "$base/debs" "$root"
  mkdir -p "$base/debs" "$root"
  # shellcheck disable=SC2086 # one word per package
  (cd "$base/debs" && apt-get download -qq $(printf '%s:arm64 ' $packages) 2>/dev/null) ||
    skip "cannot download Debian's arm64 python3.11 packages"
  for deb in "$base"/debs/*.deb; do dpkg -x "$deb" "$root"; done
fi
emulate() { qemu-aarch64 -L "$root" "$python" "$@"; }
echo "aarch64 Python: $(emulate -c 'import platform, sys; print(sys.version.split()[0], platform.machine())') under qemu-aarch64"
wheel=$(bash tools/build_wheels.sh aarch64 target/wheels | tail -1)
site=$base/site
rm -rf "$site"
"$PWD/target/python-venv/bin/python" -m pip install -q --target "$site" --only-binary=:all: \
  --platform manylinux2014_aarch64 --python-version 3.11 --implementation cp numpy pytest "$wheel"
# From outside the source tree, so that the installed package is the one imported.
(cd target && PYTHONPATH=$site emulate -m pytest -q -rs -p no:cacheprovider ../crates/vlc-python/tests)
sample=$(PYTHONPATH=$site emulate crates/vlc-python/examples/sample.py --threads 1)
echo "$sample"
# The same build, recalls and answers as this host's wheel (tools/test_python.sh installs it
# into the virtual environment), speeds and times aside (and the file's size, whose META
# section records the build's times).
native=$PWD/target/python-venv/bin/python
if "$native" -c "import vlc_index" 2>/dev/null; then
  strip_times() {
    sed -E 's/ [0-9][0-9,]* queries\/s.*//; s/built in [0-9.]+ s/built/; s/reopened: [0-9,]+ bytes/reopened/'
  }
  if [ "$(strip_times <<<"$sample")" != "$("$native" crates/vlc-python/examples/sample.py --threads 1 | strip_times)" ]; then
    echo "error: the aarch64 wheel's sample differs from this host's" >&2
    exit 1
  fi
  echo "aarch64 wheel: the sample's recalls and answers are this host's"
else
  echo "aarch64 wheel: not compared (no vlc_index in target/python-venv; tools/test_python.sh installs it)"
fi
