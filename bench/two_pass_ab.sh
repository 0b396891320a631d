#!/usr/bin/env bash
# Session 52: the batch anchor ranking in two passes on CPUs with AVX2 and no VNNI, against
# the f32 GEMM it replaces (VLC_NO_AVX2_INT8=1), on the narrowest Pareto points of the
# AVX2-only sweep (bench/results/debian-minilm/zen3_5f53ed7): FAISS's IVF-PQ96x4fs, IVF-RaBitQ
# and IVF-PQ192x4fs, and VLC's pcaq0.5, rabitq1 and pcaq at those peers' footprints, all in one
# run on one thread. The two VLC passes alternate (A, B, A, B) so drift hits both.
# Usage: bash bench/two_pass_ab.sh DATASET_DIR OUT_DIR
set -euo pipefail
data=${1:?usage: bench/two_pass_ab.sh DATASET_DIR OUT_DIR}
out=${2:?usage: bench/two_pass_ab.sh DATASET_DIR OUT_DIR}
cd "$(dirname "$0")/.."
mkdir -p "$out"
cargo build --release -q -p vlc-cli
git rev-parse --short HEAD > "$out/commit.txt"
target/release/vlc --version >> "$out/commit.txt"
grep -m1 'model name' /proc/cpuinfo >> "$out/commit.txt"
python3 bench/faiss_bench.py "$data" --out "$out/faiss.jsonl" --threads 1 \
  --configs PQ96x4fs,RaBitQ,PQ192x4fs
for round in 1 2; do
  for mode in two_pass gemm; do
    env_set=()
    [ "$mode" = gemm ] && env_set=(VLC_NO_AVX2_INT8=1)
    env "${env_set[@]}" target/release/vlc bench "$data" --peers "$out/faiss.jsonl" \
      --out "$out/${mode}_$round" --search-threads 1 --configs pcaq0.5,rabitq1 \
      --nprobe 8,16,32,64,128 --probe-margin 1
    echo "== $mode, round $round"
    python3 bench/pareto_margins.py "$out/${mode}_$round/results.jsonl" 6
  done
done
