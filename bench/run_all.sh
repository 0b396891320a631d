#!/usr/bin/env bash
# The Performance section of README.md: VLC and FAISS on the same data in one run, search on
# one thread. Usage: bash bench/run_all.sh DATASET_DIR OUT_DIR
#
# A part of the sweep, for a recheck of some points in one run on both sides: FAISS_CONFIGS
# (faiss_bench.py --configs, e.g. SQ8) and VLC_CONFIGS (vlc bench --configs, e.g.
# rabitq7,pcaq7.5); `pcaq:NB` at each chosen peer's footprint is built as in the full sweep.
# VLC_ARGS: more `vlc bench` options, split on spaces (e.g. "--rerank 0,300 --rerank-nprobe
# 256,512" for a deeper candidate pool at many probes).
set -euo pipefail
data=${1:?usage: bench/run_all.sh DATASET_DIR OUT_DIR}
out=${2:?usage: bench/run_all.sh DATASET_DIR OUT_DIR}
cd "$(dirname "$0")/.."
mkdir -p "$out"
cargo build --release -q -p vlc-cli
python3 bench/faiss_bench.py "$data" --out "$out/faiss.jsonl" --threads 1 \
  ${FAISS_CONFIGS:+--configs "$FAISS_CONFIGS"}
target/release/vlc bench "$data" --peers "$out/faiss.jsonl" --out "$out" --search-threads 1 \
  ${VLC_CONFIGS:+--configs "$VLC_CONFIGS"} ${VLC_ARGS:-}
