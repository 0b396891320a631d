#!/usr/bin/env bash
# The aarch64 (Jetson) build and its NEON kernels. On an x86-64 machine: checks that the whole
# workspace (CLI, CUDA and WGPU backends included) builds for aarch64-unknown-linux-gnu, then
# runs vlc-core's tests (the SIMD parity tests of every NEON kernel among them, and the search
# tests end to end) under qemu's user-mode emulator. Speed under emulation means nothing; this
# is about correctness. It needs the Rust target (rustup), Debian's cross linker and qemu-user:
# the script installs them where it can, and says SKIPPED (exit 0) where it cannot, so a
# machine without them does not pass silently. The cross linker and the emulator are named
# through cargo's environment variables for this run only, so native builds are untouched.
# On an aarch64 machine (a Jetson itself) it runs the same tests natively.
#
# With --demo it also builds the release CLI for both architectures and runs `vlc demo` (build,
# train, search the committed sample) on each, and fails unless their recall tables agree
# (x86-64 hosts only).
set -euo pipefail
cd "$(dirname "$0")/.."
target=aarch64-unknown-linux-gnu
skip() { echo "aarch64 tests SKIPPED: $*"; exit 0; }

# Runs vlc-core's tests with the extra cargo arguments given; prints the summary lines, and
# the log's tail on failure.
run_tests() {
  local log status=0
  log=$(mktemp)
  cargo test -p vlc-core "$@" >"$log" 2>&1 || status=$?
  grep -E "^test result|FAILED|panicked" "$log" || true
  [ "$status" = 0 ] || tail -40 "$log"
  rm -f "$log"
  return "$status"
}

if [ "$(uname -m)" = aarch64 ]; then
  echo "aarch64 host: cargo check --workspace --all-targets; cargo test -p vlc-core (native)"
  cargo check -q --workspace --all-targets
  run_tests
  exit 0
fi

if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  rustup target add "$target" >/dev/null 2>&1 || skip "cannot install the Rust target $target"
fi
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq gcc-aarch64-linux-gnu libc6-dev-arm64-cross \
        qemu-user >/dev/null; } || skip "cannot install gcc-aarch64-linux-gnu and qemu-user"
  else
    skip "gcc-aarch64-linux-gnu and qemu-user are not installed (and apt-get is not usable)"
  fi
fi
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
echo "aarch64: cargo check --workspace --all-targets --target $target"
cargo check -q --workspace --all-targets --target "$target"
echo "aarch64: cargo test -p vlc-core --target $target (under qemu-aarch64)"
run_tests --target "$target"
if [ "${1:-}" = "--demo" ]; then
  echo "aarch64: vlc demo under qemu-aarch64 against the x86-64 build"
  cargo build -q --release -p vlc-cli
  cargo build -q --release -p vlc-cli --target "$target"
  # The recall columns (nprobe, recall@1, @10, @100) of the demo's table, without the speed.
  recall() { "$@" demo 2>&1 | awk '$1 ~ /^[0-9]+$/ && NF == 6 {print $1, $2, $3, $4}'; }
  x86=$(recall target/release/vlc)
  arm=$(recall qemu-aarch64 -L /usr/aarch64-linux-gnu "target/$target/release/vlc")
  echo "$arm"
  [ -n "$arm" ] && [ "$x86" = "$arm" ] || { echo "demo recall differs from x86-64's:"; echo "$x86"; exit 1; }
  echo "demo recall identical on aarch64 and x86-64"
fi
