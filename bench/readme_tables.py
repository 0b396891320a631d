#!/usr/bin/env python3
"""Markdown tables for README.md from a `vlc bench` results.jsonl (VLC and peer points).

Usage: python3 bench/readme_tables.py bench/results/debian-minilm/results.jsonl
"""
import json
import sys
from collections import defaultdict

points = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
groups = defaultdict(list)
for p in points:
    # One row per configuration and pool depth (rerank 0 is the default pool, 10·k).
    label = p["config"] if not p.get("rerank") else f'{p["config"]} pool {p["rerank"]}'
    groups[(p["system"], label)].append(p)
nprobes = sorted({p["nprobe"] for p in points if p["system"] == "vlc"})
print("| VLC config | bytes/vector | " + " | ".join(f"nprobe {n}" for n in nprobes) + " |")
print("|---|---|" + "---|" * len(nprobes))
for (system, config), ps in sorted(groups.items(), key=lambda g: g[1][0]["bytes_per_vector"]):
    if system != "vlc":
        continue
    by = {p["nprobe"]: p for p in ps}
    cells = [f"{by[n]['recall@10']:.3f} @ {by[n]['qps']:,.0f}" if n in by else "-" for n in nprobes]
    print(f"| {config} | {ps[0]['bytes_per_vector']:.1f} | " + " | ".join(cells) + " |")
print()
print("| system | config | bytes/vector | best recall@10 (nprobe <= 128) | QPS there |")
print("|---|---|---|---|---|")
rows = []
for (system, config), ps in groups.items():
    if " pool " in config:
        continue  # smaller pools: in the first table; this one lists each configuration once
    best = max((p for p in ps if p["nprobe"] <= 128), key=lambda p: (p["recall@10"], p["qps"]))
    rows.append((ps[0]["bytes_per_vector"], system, config, best))
for b, system, config, best in sorted(rows):
    print(f"| {system} | {config} | {b:.1f} | {best['recall@10']:.4f} | {best['qps']:,.0f} |")
vlc = [p for p in points if p["system"] == "vlc"]
peers = [p for p in points if p["system"] != "vlc"]
beaten = sum(any(v["bytes_per_vector"] <= f["bytes_per_vector"] and v["recall@10"] >= f["recall@10"] and v["qps"] >= f["qps"] for v in vlc) for f in peers)
print(f"\nPareto: {beaten} of {len(peers)} peer points are matched or beaten by a VLC point (bytes, recall@10 and QPS all at least as good).")
