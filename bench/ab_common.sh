# Sourced by bench/eval_ab.sh and bench/open_ab.sh, from the repository root, with `base` (a
# revision) and `data` (a dataset directory) set: checks BASE out once in a git worktree under
# ${TMPDIR:-/tmp} (kept, with its build, for reruns), builds both `vlc`s and sets A (the base
# revision's) and B (this checkout's), q (the dataset's queries) and T (a temporary directory,
# removed on exit), and prints the machine and the two revisions.
tree="${TMPDIR:-/tmp}/vlc-eval-$(git rev-parse --short "$base")"
[ -d "$tree" ] || git worktree add -q --detach "$tree" "$base"
(cd "$tree" && cargo build --release -q -p vlc-cli)
cargo build --release -q -p vlc-cli
A="$tree/target/release/vlc"; B=target/release/vlc
q=$data/query.npy; [ -f "$q" ] || q=$data/queries.npy
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
echo "$(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "A = $base, B = $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes')"
