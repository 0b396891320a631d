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

# add_rust_target TARGET: installs the Rust target where rustup manages the toolchain.
add_rust_target() {
  if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx "$1"; then
    rustup target add "$1" >/dev/null
  fi
}
