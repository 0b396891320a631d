#!/usr/bin/env python3
"""Markdown tables for README.md from a `vlc bench` results.jsonl (VLC and peer points).

Usage: python3 bench/readme_tables.py bench/results/debian-minilm/results.jsonl
"""
import json
import sys
from collections import defaultdict

points = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
groups = defaultdict(list)
# Adaptive-probing points (`vlc bench --probe-margin`, named `CONFIG mM`): extra columns of
# their configuration's row at the same pool depth.
adaptive = {}
for p in points:
    # One row per configuration and pool depth (rerank 0 is the default, automatic pool).
    config = p["config"]
    if p.get("probe_margin") is not None:
        config = config.rsplit(" m", 1)[0]
    label = config if not p.get("rerank") else f'{config} pool {p["rerank"]}'
    if p.get("probe_margin") is not None:
        adaptive[(p["system"], label, p["probe_margin"])] = p
    else:
        groups[(p["system"], label)].append(p)
nprobes = sorted({p["nprobe"] for p in points if p["system"] == "vlc" and p.get("probe_margin") is None})
margins = sorted({m for (_, _, m) in adaptive})
caps = sorted({p["nprobe"] for p in adaptive.values()})
cap = f" (nprobe <= {caps[0]})" if len(caps) == 1 else ""
print("| VLC config | bytes/vector | " + " | ".join(f"nprobe {n}" for n in nprobes)
      + "".join(f" | margin {m:g}{cap}" for m in margins) + " |")
print("|---|---|" + "---|" * (len(nprobes) + len(margins)))
cell = lambda p: f"{p['recall@10']:.3f} @ {p['qps']:,.0f}" if p else "-"
for (system, config), ps in sorted(groups.items(), key=lambda g: g[1][0]["bytes_per_vector"]):
    if system != "vlc":
        continue
    by = {p["nprobe"]: p for p in ps}
    cells = [cell(by.get(n)) for n in nprobes] + [cell(adaptive.get((system, config, m))) for m in margins]
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
