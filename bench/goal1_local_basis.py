#!/usr/bin/env python3
"""Goal 1 (issue #3): is there structure in the residuals that a free basis would find?

Usage: python3 bench/goal1_local_basis.py DATASET_DIR [--anchors 1024] [--seed 1]

Trains anchors (FAISS k-means) on base.npy and measures two things about the residuals
(vector minus its nearest anchor):
  1. Energy captured by the span of each anchor's m nearest other anchors (differences to
     them, orthonormalised), against the residuals' top m global principal axes: a basis that
     costs no bytes (the anchors are stored anyway) and differs per list. Also after removing
     the top 64 global axes, against the next m.
  2. Near duplicates: the squared distance to a vector's nearest other vector against its
     anchor's, i.e. how much coding relative to a neighbour could save.
Needs: pip install faiss-cpu numpy
"""
import argparse
import os

import faiss
import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("dataset")
ap.add_argument("--anchors", type=int, default=1024)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--threads", type=int, default=1)
a = ap.parse_args()
faiss.omp_set_num_threads(a.threads)
x = np.ascontiguousarray(np.load(os.path.join(a.dataset, "base.npy")).astype(np.float32))
n, d = x.shape
km = faiss.Kmeans(d, a.anchors, niter=12, seed=a.seed)
km.train(x)
centroids = km.centroids
_, assign = km.index.search(x, 1)
assign = assign[:, 0]
r = x - centroids[assign]
total = float((r**2).sum())
w, axes = np.linalg.eigh(r.T @ r / n)
w, axes = w[::-1], axes[:, ::-1]
anchor_index = faiss.IndexFlatL2(d)
anchor_index.add(centroids)
_, near = anchor_index.search(centroids, 65)
members = [np.where(assign == c)[0] for c in range(a.anchors)]
print(f"{n} x {d}, {a.anchors} anchors; residual energy per vector {total / n:.4f}")


def local_share(m, res, remove=None):
    captured = 0.0
    for c in range(a.anchors):
        if len(members[c]) == 0:
            continue
        span = centroids[near[c, 1 : m + 1]] - centroids[c]
        if remove is not None:
            span = span - (span @ remove) @ remove.T
        q, _ = np.linalg.qr(span.T)
        captured += float(((res[members[c]] @ q) ** 2).sum())
    return captured


print("m | top m global axes | span of the m nearest anchors | random m-dim subspace")
for m in [8, 16, 32, 64]:
    print(f"{m} | {w[:m].sum() / w.sum():.3f} | {local_share(m, r) / total:.3f} | {m / d:.3f}")
top = axes[:, :64]
rest = r - (r @ top) @ top.T
rest_total = float((rest**2).sum())
print("after removing the top 64 global axes: m | next m global axes | span of the m nearest anchors")
for m in [16, 32]:
    print(f"{m} | {w[64:64 + m].sum() / w[64:].sum():.3f} | {local_share(m, rest, top) / rest_total:.3f}")
flat = faiss.IndexFlatL2(d)
flat.add(x)
dist, _ = flat.search(x, 2)
nearest = dist[:, 1]
anchor_dist = (r**2).sum(1)
ratio = nearest / np.maximum(anchor_dist, 1e-12)
print(f"mean squared distance: to the anchor {anchor_dist.mean():.4f}, to the nearest other vector {nearest.mean():.4f}")
print("nearest-vector / anchor squared distance, quantiles 0.1 0.25 0.5 0.75 0.9:",
      " ".join(f"{np.quantile(ratio, q):.3f}" for q in [0.1, 0.25, 0.5, 0.75, 0.9]))
print(f"share with the nearest vector under a quarter of the anchor's distance: {(ratio < 0.25).mean():.3f}; "
      f"nearest vector within squared distance 0.05: {(nearest < 0.05).mean():.3f}")
