#!/usr/bin/env python3
"""Recall of VLC indexes over data moved away from the origin (issue: data far from the origin).

Clustered synthetic data (200 clusters, spread 0.7 around unit-variance centres) is moved along a
random direction by RATIO times its spread (the root mean squared distance of the vectors to their
mean), for each RATIO; each codec is built with `vlc build` and searched with `vlc search --nprobe 64`,
both on --backend (cpu by default). Each cell is recall@10 against exact neighbours computed in
float64, and the index's bytes per vector. A translation changes no distance, so every row should
match ratio 0.

Usage: python3 bench/offset_check.py [--vlc target/release/vlc] [--backend cpu|cuda|wgpu] [--dim 128]
       [--ratios 0,1,4,...] [--codecs sq8,rabitq1+sq8,...]
"""
import argparse, json, subprocess, tempfile
import numpy as np

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--vlc", default="target/release/vlc")
ap.add_argument("--dim", type=int, default=128)
ap.add_argument("--n", type=int, default=20000)
ap.add_argument("--queries", type=int, default=200)
ap.add_argument("--ratios", default="0,1,4,10,30,100,1000")
ap.add_argument("--codecs", default="sq8,f16,rabitq1,rabitq4,pcaq1,pcaq3,rabitq1+sq8")
ap.add_argument("--seed", type=int, default=7)
ap.add_argument("--backend", default="cpu", help="where vlc build trains and vlc search searches")
a = ap.parse_args()

rng = np.random.default_rng(a.seed)
n, d, nq = a.n, a.dim, a.queries
centres = rng.standard_normal((200, d))
x0 = centres[rng.integers(0, 200, n + nq)] + 0.7 * rng.standard_normal((n + nq, d))
spread = np.sqrt(((x0 - x0.mean(0)) ** 2).sum(1).mean())
direction = rng.standard_normal(d)
direction /= np.linalg.norm(direction)
base0, q0 = x0[:n], x0[n:]
dist = (q0 ** 2).sum(1)[:, None] - 2 * q0 @ base0.T + (base0 ** 2).sum(1)[None]
gt = np.argsort(dist, 1)[:, :10]
print(f"# {n} x {d}, {nq} queries, spread {spread:.3f}; recall@10 at nprobe 64, `{a.vlc}`, backend {a.backend}")
codecs = a.codecs.split(",")
print("| mean / spread | " + " | ".join(codecs) + " |")
print("|---" * (len(codecs) + 1) + "|")
with tempfile.TemporaryDirectory() as t:
    for ratio in [float(r) for r in a.ratios.split(",")]:
        shift = ratio * spread * direction
        np.save(f"{t}/b.npy", (base0 + shift).astype(np.float32))
        np.save(f"{t}/q.npy", (q0 + shift).astype(np.float32))
        row = []
        for codec in codecs:
            args = [a.vlc, "build", f"{t}/b.npy", "-o", f"{t}/i.vlc", "-q", "--backend", a.backend]
            primary, _, refine = codec.partition("+")
            args += ["--codec", primary] + (["--refine", refine] if refine else [])
            subprocess.run(args, check=True, capture_output=True)
            subprocess.run([a.vlc, "search", f"{t}/i.vlc", f"{t}/q.npy", "-k", "10", "--nprobe", "64",
                            "-o", f"{t}/h.npy", "--backend", a.backend], check=True, capture_output=True)
            hits = np.load(f"{t}/h.npy")
            info = json.loads(subprocess.run([a.vlc, "info", "--json", f"{t}/i.vlc"], check=True,
                                             capture_output=True, text=True).stdout)
            recall = np.mean([len(set(hits[i]) & set(gt[i])) / 10 for i in range(nq)])
            row.append(f"{recall:.3f} ({info['bytes_per_vector']:.1f} B)")
        print(f"| {ratio:g} | " + " | ".join(row) + " |", flush=True)
