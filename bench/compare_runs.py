#!/usr/bin/env python3
"""Two `vlc bench` runs of one dataset, point by point: for FAISS's points, for VLC's at a
fixed candidate pool (`rerank` > 0) and for VLC's at the default pool (`rerank` 0; adaptive
probing points left out), how many settings both runs measured, the median and range of the
QPS ratio (NEW / OLD) and how recall@10 moved.

Usage: python3 bench/compare_runs.py NEW/results.jsonl OLD/results.jsonl
"""
import json
import statistics
import sys


def load(path):
    points = [json.loads(l) for l in open(path) if l.strip()]
    return {
        (p["system"], p["config"], p["nprobe"], p.get("rerank") or 0): p
        for p in points
        if not p["config"].rsplit(" ", 1)[-1].startswith("m")
    }


new, old = load(sys.argv[1]), load(sys.argv[2])
groups = {
    "FAISS": lambda k: k[0] != "vlc",
    "VLC, fixed pool": lambda k: k[0] == "vlc" and k[3] > 0,
    "VLC, default pool": lambda k: k[0] == "vlc" and k[3] == 0,
}
for name, member in groups.items():
    keys = [k for k in new if k in old and member(k)]
    if not keys:
        print(f"{name}: no setting in both runs")
        continue
    ratio = [new[k]["qps"] / old[k]["qps"] for k in keys]
    moved = [new[k]["recall@10"] - old[k]["recall@10"] for k in keys]
    print(
        f"{name}: {len(keys)} settings; QPS new/old median {statistics.median(ratio):.2f}x "
        f"({min(ratio):.2f}-{max(ratio):.2f}x); recall@10 the same at "
        f"{sum(m == 0 for m in moved)}, change {min(moved):+.5f} to {max(moved):+.5f}"
    )
