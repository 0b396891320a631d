#!/usr/bin/env bash
# Portable `vlc` command-line binaries for Linux x86-64 and aarch64 (Jetson and other 64-bit
# ARM boards), to copy onto machines without a Rust toolchain. Each is linked by zig
# (cargo-zigbuild and zig from PyPI, into target/python-venv) against glibc 2.17's symbols, so
# it runs on any Linux with glibc 2.17 or newer (Ubuntu 18.04+, Debian 10+, RHEL 8+, Jetson
# Linux 32+). The CUDA and WGPU backends are in both; they load the driver's libraries at run
# time, so the same binary serves machines with and without a GPU.
#
# Each binary is checked before it is packed: it needs no glibc symbol newer than 2.17 (readelf),
# and `vlc demo` (build, measure and query the committed sample) runs on it, natively or under
# qemu-aarch64 with Debian's cross libc (tools/test_aarch64.sh installs both; without qemu the
# aarch64 demo says SKIPPED), and must print the recall table of this host's own release build.
#
# Usage: bash tools/build_release.sh [x86_64|aarch64|all] [OUTDIR]
#   (default: all, into target/release-archives). Prints the path of each archive:
#   vlc-VERSION-ARCH-linux.tar.gz, holding `vlc` and README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all}
out=${2:-target/release-archives}
# shellcheck source=tools/cross_common.sh
source tools/cross_common.sh
pick_arches "$which" "bash tools/build_release.sh [x86_64|aarch64|all] [OUTDIR]"
venv=$PWD/target/python-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade "cargo-zigbuild>=0.19,<0.25" "ziglang>=0.13,<0.18"
version=$(cargo metadata --no-deps --format-version 1 |
  python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "vlc-cli"))')
mkdir -p "$out"

# The recall columns (nprobe, recall@1, @10, @100) of `vlc demo`'s table, without the speed.
recall() { "$@" demo 2>&1 | awk '$1 ~ /^[0-9]+$/ && NF == 6 {print $1, $2, $3, $4}'; }
cargo build -q --release -p vlc-cli
reference=$(recall target/release/vlc)
[ -n "$reference" ] || { echo "error: this host's vlc demo printed no recall table" >&2; exit 1; }

for arch in $arches; do
  target=$arch-unknown-linux-gnu
  add_rust_target "$target"
  # The `.2.17` suffix asks cargo-zigbuild for glibc 2.17's symbols; the binary lands under
  # target/$target/release as usual, stripped (the release profile keeps line tables for
  # profiling: a third of the size).
  PATH=$venv/bin:$PATH CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=symbols \
    "$venv/bin/cargo-zigbuild" zigbuild -q --release -p vlc-cli --target "$target.2.17"
  binary=target/$target/release/vlc
  newest=$(readelf --dyn-syms -W "$binary" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  if [ "$(printf '%s\n' "$newest" GLIBC_2.17 | sort -V | tail -1)" != GLIBC_2.17 ]; then
    echo "error: $binary needs $newest, newer than glibc 2.17" >&2
    exit 1
  fi
  if [ "$arch" = "$(uname -m)" ]; then
    run=("$binary")
  elif [ "$arch" = aarch64 ] && command -v qemu-aarch64 >/dev/null; then
    # Its loader and libc: Debian's cross libc (libc6-dev-arm64-cross), as tools/test_aarch64.sh.
    run=(qemu-aarch64 -L /usr/aarch64-linux-gnu "$binary")
  else
    run=()
  fi
  if [ ${#run[@]} -eq 0 ]; then
    echo "$arch: vlc demo SKIPPED (cannot run $arch binaries here)"
  elif [ "$(recall "${run[@]}")" = "$reference" ]; then
    echo "$arch: vlc demo gives this host's recall table; newest glibc symbol $newest"
  else
    echo "error: $arch's vlc demo recall differs from this host's release build:" >&2
    recall "${run[@]}" >&2
    exit 1
  fi
  archive=$out/vlc-$version-$arch-linux.tar.gz
  stage=$(mktemp -d)
  mkdir "$stage/vlc-$version-$arch-linux"
  cp "$binary" README.md "$stage/vlc-$version-$arch-linux/"
  tar -C "$stage" -czf "$archive" "vlc-$version-$arch-linux"
  rm -rf "$stage"
  echo "$archive"
done
