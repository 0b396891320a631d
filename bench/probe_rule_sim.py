#!/usr/bin/env python3
"""Which lists to probe, simulated on FAISS k-means partitions (session 26's design check for
`--probe-margin`): for fixed nprobe, a relative rule (d_j <= (1 + e) d_1) and VLC's additive
rule in units of the energy E (d_j <= d_1 + M E), the recall@10 ceiling (true neighbours whose
list is probed) against the mean number of vectors in the probed lists, and for each rule
point the vectors fixed nprobe scans to reach the same ceiling.

Usage: python3 bench/probe_rule_sim.py DATASET_DIR  (base.npy, query.npy, groundtruth.npy;
lists as `vlc build` picks them: about 4 sqrt(n), a power of two)
"""
import os
import sys

import faiss
import numpy as np

d = sys.argv[1]
x = np.load(os.path.join(d, "base.npy")).astype("float32")
qf = os.path.join(d, "query.npy")
q = np.load(qf if os.path.exists(qf) else os.path.join(d, "queries.npy")).astype("float32")
gt = np.load(os.path.join(d, "groundtruth.npy"))[:, :10]
n = len(x)
nl = int(2 ** round(np.log2(4 * np.sqrt(n))))
km = faiss.Kmeans(x.shape[1], nl, niter=15, seed=1)
km.train(x)
da, a = km.index.search(x, 1)
a = a[:, 0]
energy = float(da.mean())
sizes = np.bincount(a, minlength=nl)
D, I = km.index.search(q, nl)
rank = np.empty_like(I)
rank[np.arange(len(q))[:, None], I] = np.arange(nl)[None, :]
nbr = rank[np.arange(len(q))[:, None], a[gt]]
cum = np.cumsum(sizes[I], axis=1)
fixed = [((nbr < p).mean(), cum[:, p - 1].mean()) for p in range(1, nl + 1)]


def fixed_cost(r):
    return next((c for rr, c in fixed if rr >= r), float("nan"))


def report(label, keep):
    probes = keep.sum(1)
    ceiling = (nbr < probes[:, None]).mean()
    scanned = cum[np.arange(len(q)), probes - 1].mean()
    print(f"  {label:<14} ceiling {ceiling:.4f}  scanned {scanned:8.0f}  fixed nprobe scans "
          f"{fixed_cost(ceiling):8.0f} for it ({fixed_cost(ceiling) / scanned:.2f}x)  median lists {np.median(probes):.0f}")


print(f"{d}: {n} vectors, {nl} lists, energy {energy:.4f}")
for p in [8, 32, 128, 512]:
    print(f"  nprobe {p:<7} ceiling {(nbr < p).mean():.4f}  scanned {cum[:, p - 1].mean():8.0f}")
for e in [0.2, 0.4, 0.7]:
    report(f"relative {e}", D <= D[:, :1] * (1 + e))
for m in [0.5, 0.75, 1.0, 1.5, 2.0]:
    report(f"margin {m}", D <= D[:, :1] + m * energy)
