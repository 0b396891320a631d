#!/usr/bin/env python3
"""Goal 1 lever: bits per vector that vary with the vector (the same mean), on the ideal code of
`bench/rd_bound.py` (Gaussian residuals, reverse water-filling, VLC's estimator, every list).

Usage: python3 bench/goal1_variable_rate.py DATASET_DIR [--bits 438] [--anchors 1024]

438 bits is the code that 64 bytes leave after rd_bound.py's overhead (ids, int4 anchors,
factors). Vector i gets `bits + beta * z_i` bits (clipped to [64, 3 x bits], rescaled to the
same mean, rounded to whole bytes), z_i a standardised score of how much the vector is likely
to matter:
- `base_kocc`: log(1 + how often it is among the 10 nearest of the other base vectors), a
  hubness score that needs no queries;
- `density`: minus its distance to its 10th nearest base vector (crowded vectors need finer
  codes to be told apart), and `log_density` the same on a log scale;
- `query_oracle`: log(1 + how often it is in the queries' true top 10). It reads the ground
  truth, so no index can use it: it bounds what any such score could give.
"""
import argparse
import os
import sys

import faiss
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ideal_code import anchors_and_axes, load_top10, water_fill  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("dataset")
ap.add_argument("--bits", type=float, default=438.0)
ap.add_argument("--anchors", type=int, default=1024)
ap.add_argument("--betas", default="60,120,200")
ap.add_argument("--seed", type=int, default=0)
a = ap.parse_args()

base, queries, gt = load_top10(a.dataset)
n, dim = base.shape
print(f"{a.dataset}: {n} x {dim}, {len(queries)} queries; {a.bits:.0f} bits per vector on average")

flat = faiss.IndexFlatL2(dim)
flat.add(base)
knn_d, knn_i = flat.search(base, 11)  # the first is the vector itself
base_kocc = np.bincount(knn_i[:, 1:].ravel(), minlength=n).astype(np.float64)
query_kocc = np.bincount(gt.ravel(), minlength=n).astype(np.float64)
tenth = knn_d[:, 10].astype(np.float64)
print(f"never in a query's top 10: {(query_kocc == 0).mean():.3f} of the base; "
      f"never among another base vector's 10 nearest: {(base_kocc == 0).mean():.3f}")
print(f"correlation with log(1 + query top-10 count): base_kocc "
      f"{np.corrcoef(np.log1p(base_kocc), np.log1p(query_kocc))[0, 1]:.3f}, density "
      f"{np.corrcoef(-tenth, np.log1p(query_kocc))[0, 1]:.3f}")

assign, centroids, residual, basis = anchors_and_axes(base, a.anchors, a.seed)
rotated = residual @ basis
anchor_rot = centroids[assign] @ basis
lam = rotated.astype(np.float64).var(0)
q_anchor = queries @ centroids.T
q_rot = queries @ basis
const_base = (anchor_rot * anchor_rot).sum(1) + (rotated * rotated).sum(1)
noise = np.random.default_rng(a.seed).standard_normal(rotated.shape, dtype=np.float32)


def recall(recon):
    """recall@10 with VLC's estimator (rd_bound.py's `score`) over every list."""
    factor = (rotated * rotated).sum(1) / np.maximum((recon * rotated).sum(1), 1e-30)
    recon = recon * factor[:, None]
    const = const_base + 2 * (anchor_rot * recon).sum(1)
    hits = 0
    for s in range(0, len(queries), 1000):
        est = const[None, :] - 2 * (q_rot[s:s + 1000] @ recon.T + q_anchor[s:s + 1000][:, assign])
        top = np.argpartition(est, 10, axis=1)[:, :10]
        hits += sum(len(set(t.tolist()) & set(g.tolist())) for t, g in zip(top, gt[s:s + 1000]))
    return hits / (10 * len(queries))


def reconstruct(bits):
    """The ideal code's reconstruction (backward test channel) at each vector's own bits."""
    levels = np.round(bits / 8) * 8
    recon = np.zeros_like(rotated)
    for level in np.unique(levels):
        rows = levels == level
        d = water_fill(lam, level)
        coded = lam > d
        scale = np.where(coded, (lam - d) / lam, 0).astype(np.float32)
        var = np.where(coded, lam * d / np.maximum(lam - d, 1e-300), 0).astype(np.float32)
        recon[rows] = scale * (rotated[rows] + noise[rows] * np.sqrt(var))
    return recon, levels.mean()


uniform, mean_bits = reconstruct(np.full(n, a.bits))
print(f"{'score':>13} {'beta':>5} {'mean bits':>9} {'recall@10':>9}")
print(f"{'uniform':>13} {0:>5} {mean_bits:>9.1f} {recall(uniform):>9.4f}", flush=True)
scores = [("base_kocc", np.log1p(base_kocc)), ("density", -tenth),
          ("log_density", -np.log(tenth + 1e-6)), ("query_oracle", np.log1p(query_kocc))]
for name, score in scores:
    z = (score - score.mean()) / score.std()
    for beta in [float(b) for b in a.betas.split(",")]:
        bits = np.clip(a.bits + beta * z, 64, 3 * a.bits)
        bits *= a.bits / bits.mean()
        recon, mean_bits = reconstruct(bits)
        print(f"{name:>13} {beta:>5.0f} {mean_bits:>9.1f} {recall(recon):>9.4f}", flush=True)
