#!/usr/bin/env bash
# The Performance section of README.md: VLC and FAISS on the same data in one run, search on
# one thread. Usage: bash bench/run_all.sh DATASET_DIR OUT_DIR
set -euo pipefail
data=${1:?usage: bench/run_all.sh DATASET_DIR OUT_DIR}
out=${2:?usage: bench/run_all.sh DATASET_DIR OUT_DIR}
cd "$(dirname "$0")/.."
mkdir -p "$out"
cargo build --release -q -p vlc-cli
python3 bench/faiss_bench.py "$data" --out "$out/faiss.jsonl" --threads 1
target/release/vlc bench "$data" --peers "$out/faiss.jsonl" --out "$out" --search-threads 1
