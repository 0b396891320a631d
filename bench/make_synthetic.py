#!/usr/bin/env python3
"""Synthetic embedding-like dataset of any shape, with exact ground truth.

Usage: python3 bench/make_synthetic.py OUT_DIR [--n 50000] [--dim 768] [--queries 2000] [--seed 1]
                                                [--latent 64] [--clusters 500]
                                                [--offset 0] [--norm-spread 0]
                                                [--tails 0] [--zipf 0]

Documents: unit vectors from a mixture of `clusters` anisotropic Gaussian clusters in a
`latent`-dim latent space lifted to `dim` dimensions plus isotropic noise. Queries: other draws from the
same clusters, moved toward the clusters' means and given their own noise, so that, as with
real short queries, they are not distributed like the documents. `--offset O` adds a common
direction of length O to every vector before it is normalised, as many embedding models'
outputs share one (O = 1.5 puts the mean cosine between unrelated vectors near 0.7);
`--norm-spread S` leaves the vectors unnormalised, their norms log-normal with sigma S around
1 (S = 0 keeps unit norm). `--tails DF` draws the clusters' latent spread from Student's t with
DF degrees of freedom (heavy tails, scaled to the Gaussian's variance; 0 = Gaussian), and
`--zipf A` weighs cluster r (in a random order) by (r + 1)^-A, so a few clusters hold most
vectors (0 = weights uniform in 0.2..1). Writes base.npy (float32),
query.npy and groundtruth.npy (int32, exact top-100 by L2).
"""
import argparse
import os

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--n", type=int, default=50000)
ap.add_argument("--dim", type=int, default=768)
ap.add_argument("--queries", type=int, default=2000)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--latent", type=int, default=64)
ap.add_argument("--clusters", type=int, default=500)
ap.add_argument("--offset", type=float, default=0.0)
ap.add_argument("--norm-spread", type=float, default=0.0)
ap.add_argument("--tails", type=float, default=0.0)
ap.add_argument("--zipf", type=float, default=0.0)
a = ap.parse_args()
if a.tails and a.tails <= 2:
    ap.error("--tails needs more than 2 degrees of freedom (a finite variance)")
rng = np.random.default_rng(a.seed)
latent, clusters = a.latent, a.clusters
lift = rng.standard_normal((latent, a.dim)).astype(np.float32) / np.sqrt(latent)
centres = rng.standard_normal((clusters, latent)).astype(np.float32)
scales = rng.uniform(0.3, 1.0, (clusters, latent)).astype(np.float32)
weights = rng.uniform(0.2, 1.0, clusters)
if a.zipf:  # drawn only when asked for, so the default datasets stay as they were
    weights = (1.0 + rng.permutation(clusters)) ** -a.zipf
weights /= weights.sum()
if a.offset:  # drawn only when asked for, so the default datasets stay as they were
    common = rng.standard_normal(a.dim).astype(np.float32)
    common *= a.offset / np.linalg.norm(common)


def draw(count, pull, noise):
    c = rng.choice(clusters, count, p=weights)
    if a.tails:
        spread = rng.standard_t(a.tails, (count, latent)) * np.sqrt((a.tails - 2) / a.tails)
    else:
        spread = rng.standard_normal((count, latent))
    z = centres[c] * (1 + pull) + spread.astype(np.float32) * scales[c]
    x = z @ lift + noise * rng.standard_normal((count, a.dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    if a.offset:
        x = x + common
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    if a.norm_spread:
        x *= np.exp(a.norm_spread * rng.standard_normal((count, 1))).astype(np.float32)
    return x.astype(np.float32)


base = draw(a.n, 0.0, 0.15)
query = draw(a.queries, 0.5, 0.25)
os.makedirs(a.out, exist_ok=True)
gt = np.empty((a.queries, 100), dtype=np.int32)
bn = (base * base).sum(1)
for s in range(0, a.queries, 500):
    q = query[s:s + 500]
    d = bn[None, :] - 2 * q @ base.T
    idx = np.argpartition(d, 100, axis=1)[:, :100]
    order = np.take_along_axis(d, idx, 1).argsort(1)
    gt[s:s + 500] = np.take_along_axis(idx, order, 1)
np.save(os.path.join(a.out, "base.npy"), base)
np.save(os.path.join(a.out, "query.npy"), query)
np.save(os.path.join(a.out, "groundtruth.npy"), gt)
# What kind of data this is: the mean cosine of 2,000 random pairs of documents, and their
# norms' 5th, 50th and 95th percentiles (a generator of its own, so the data above is unchanged).
pairs = np.random.default_rng(0).integers(0, a.n, (2000, 2))
unit = base[pairs] / np.linalg.norm(base[pairs], axis=2, keepdims=True)
norms = np.percentile(np.linalg.norm(base, axis=1), [5, 50, 95])
print(f"{a.out}: {a.n} x {a.dim}, {a.queries} queries; mean cosine of random pairs "
      f"{(unit[:, 0] * unit[:, 1]).sum(1).mean():.2f}, norms {norms[0]:.2f} / {norms[1]:.2f} / {norms[2]:.2f} (5th / 50th / 95th percentile)")
