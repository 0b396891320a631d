# Sourced by tools/build_wheels.sh and tools/build_release.sh: the architectures they build for
# and the Rust targets those need.

# pick_arches WHICH USAGE: sets `arches` from x86_64, aarch64 or all; otherwise prints USAGE
# and exits 2.
pick_arches() {
  case "$1" in
    all) arches="x86_64 aarch64" ;;
    x86_64 | aarch64) arches=$1 ;;
    *) echo "usage: $2" >&2; exit 2 ;;
  esac
}

# add_rust_target TARGET: installs the Rust target where rustup manages the toolchain; without
# rustup, exits 1 unless the toolchain already has the target's standard library.
add_rust_target() {
  if command -v rustup >/dev/null; then
    rustup target list --installed | grep -qx "$1" || rustup target add "$1" >/dev/null
  elif [ ! -d "$(rustc --print sysroot)/lib/rustlib/$1/lib" ]; then
    echo "error: this Rust toolchain has no standard library for $1, and there is no rustup to add it" >&2
    exit 1
  fi
}
