#!/usr/bin/env bash
# Session 78: where a lone CUDA query's time goes (scoping several blocks per lone query).
# On a GPU host, with a stripped vlc binary and a dataset directory DIR (base.npy, query.npy,
# groundtruth.npy; session 78 ran it on `python3 bench/make_synthetic.py DIR --n 60601 --dim 384
# --queries 2000`, the dev set's shape, as the dev set's base is too large to carry with the
# binary): a default `sq8` index built on the CPU; `vlc eval --batch-size 1
# --threads 1 --nprobe 16,64 --repeat 3` on the CPU and on CUDA, two rounds, and all 2,000
# queries in one call on CUDA; then Nsight Compute's duration of every kernel of 20 lone CUDA
# queries at nprobe 16 and 64 (median per kernel name, launches per query).
# Usage: bash bench/results/h200/session78_lone_breakdown.sh VLC DIR
set -uo pipefail
V=${1:?usage: session78_lone_breakdown.sh VLC DIR}
D=${2:?give the directory of base.npy, query.npy, groundtruth.npy}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
"$V" build -q "$D/base.npy" -o "$T/index.vlc" --backend cpu >/dev/null
"$V" info "$T/index.vlc" | grep -E "vectors|anchors|codec"
python3 -c "import numpy as np; np.save('$T/q20.npy', np.load('$D/query.npy')[:20])"
for round in 1 2; do
  for backend in cpu cuda; do
    echo "round $round, $backend: vlc eval --batch-size 1 --threads 1 --nprobe 16,64 --repeat 3"
    "$V" eval "$T/index.vlc" --queries "$D/query.npy" --groundtruth "$D/groundtruth.npy" \
      --nprobe 16,64 --threads 1 --batch-size 1 --backend "$backend" --repeat 3 2>&1 | tail -2
  done
  echo "round $round, cuda: all queries in one call"
  "$V" eval "$T/index.vlc" --queries "$D/query.npy" --groundtruth "$D/groundtruth.npy" \
    --nprobe 16,64 --backend cuda --repeat 3 2>&1 | tail -2
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "no ncu"; exit 0; }
for nprobe in 16 64; do
  echo "ncu --clock-control none --metrics gpu__time_duration.sum vlc search q20 --backend cuda --batch-size 1 --nprobe $nprobe"
  timeout 240 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
    "$V" search "$T/index.vlc" "$T/q20.npy" -k 10 --nprobe "$nprobe" --backend cuda --batch-size 1 \
    -o "$T/out.npy" 2>/dev/null > "$T/ncu.csv"
  python3 - "$T/ncu.csv" <<'PY'
import csv, sys
from collections import defaultdict
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]
ki, ui, vi = head.index("Kernel Name"), head.index("Metric Unit"), head.index("Metric Value")
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
by = defaultdict(list)
for r in rows[1:]:
    by[r[ki][:60]].append(float(r[vi].replace(",", "")) * scale.get(r[ui], float("nan")))
for name, ts in sorted(by.items(), key=lambda kv: -sum(kv[1])):
    ts.sort()
    print(f"  {name}: {len(ts)} launches ({len(ts) / 20:.1f} a query), median {ts[len(ts) // 2]:.2f} us, min {ts[0]:.2f}, max {ts[-1]:.2f}")
PY
done
