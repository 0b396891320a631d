#!/usr/bin/env python3
"""For each peer (FAISS) point of a `vlc bench` results.jsonl: the fastest VLC point with no
more bytes/vector and no less recall@10, and its QPS over the peer's (below 1: not matched).
Narrowest margins first.

Usage: python3 bench/pareto_margins.py bench/results/synthetic-256/results.jsonl [ROWS] [--only PREFIX]

`--only PREFIX` counts only the VLC configurations whose name starts with PREFIX (e.g. `pcaq`:
whether that family alone matches each peer).
"""
import json
import sys

args = sys.argv[1:]
only = ""
if "--only" in args:
    at = args.index("--only")
    only = args[at + 1]
    del args[at : at + 2]
points = [json.loads(l) for l in open(args[0]) if l.strip()]
rows_wanted = int(args[1]) if len(args) > 1 else 10
vlc = [p for p in points if p["system"] == "vlc" and p["config"].startswith(only)]
rows = []
for peer in (p for p in points if p["system"] != "vlc"):
    fits = [v for v in vlc if v["bytes_per_vector"] <= peer["bytes_per_vector"] and v["recall@10"] >= peer["recall@10"]]
    best = max(fits, key=lambda v: v["qps"], default=None)
    rows.append((best["qps"] / peer["qps"] if best else 0.0, peer, best))
rows.sort(key=lambda r: r[0])
print("| QPS ratio | peer | nprobe | B | recall@10 | QPS | VLC | nprobe | pool | B | recall@10 | QPS |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for ratio, p, v in rows[:rows_wanted]:
    peer = f"{p['config']} | {p['nprobe']} | {p['bytes_per_vector']:.1f} | {p['recall@10']:.4f} | {p['qps']:,.0f}"
    if v is None:
        print(f"| - | {peer} | none | | | | | |")
        continue
    pool = v.get("rerank") or "auto"
    print(f"| {ratio:.3f} | {peer} | {v['config']} | {v['nprobe']} | {pool} | {v['bytes_per_vector']:.1f} | {v['recall@10']:.4f} | {v['qps']:,.0f} |")
