#!/usr/bin/env python3
"""Goal-1 lever, measured on rd_bound.py's ideal code: ranking by an estimate corrected for its
own noise (Tweedie's formula) instead of by the estimate alone.

Usage:
  python3 bench/goal1_uncertainty_rank.py DATASET_DIR [--bytes 64] [--queries 10000]

An estimate `e = d + n` of a squared distance `d`, with noise `n ~ N(0, s^2)`, has the posterior
mean `E[d | e] = e + s^2 (log p)'(e)`, `p` the density of the estimates: where there are more
vectors just above `e` than just below it (the lower tail of a query's distances, where its
top 10 lie), a noisier estimate is more likely to be a far vector that drew a low noise. The
noise's variance is known per query and list without a byte more: the ideal code's error on
principal axis `j` has variance `D_j` (reverse water-filling), so `2 <q - c, z>`, the error of
VLC's estimator (`|q - c|^2 + |r|^2 - 2 f <q - c, r_hat>`), has variance
`s^2 = 4 f^2 sum_j D_j (q - c)_j^2` (`f` the per-vector factor, near 1). Lists far from the
query get the noisier estimates.

The score ranked is `e + lam * g * s^2`, `g = 1 / (e_(100) - e_(1))` the inverse spread of the
query's 100 smallest estimates (so `lam` has no unit), for several `lam`; `lam = 0` is VLC's
ranking. `lam` is chosen on the first half of the queries and reported on the second (and the
whole sweep printed for both), every list scored, the budget counted as rd_bound.py's `after
overhead` line.
"""
import argparse

import numpy as np
from ideal_code import anchors_and_axes, backward_channel, load_top10, overhead_bytes, water_fill

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("dataset")
ap.add_argument("--bytes", type=float, default=64.0, help="bytes/vector, overhead included")
ap.add_argument("--queries", type=int, default=10_000, help="queries used (the first N)")
ap.add_argument("--anchors", type=int, default=1024)
ap.add_argument("--seed", type=int, default=0)
a = ap.parse_args()

base, queries, gt = load_top10(a.dataset, a.queries)
n, dim = base.shape
nq = len(queries)

assign, centroids, residual, basis = anchors_and_axes(base, a.anchors, a.seed)
rotated = residual @ basis
anchors_rot = centroids @ basis
anchor_rot = anchors_rot[assign]
lam_axes = rotated.astype(np.float64).var(0)
overhead = overhead_bytes(n, dim, a.anchors)
bits = 8 * (a.bytes - overhead)
distortion = water_fill(lam_axes, bits)
coded = lam_axes > distortion
recon = backward_channel(rotated, lam_axes, distortion, coded, np.random.default_rng(a.seed))
factor = (rotated * rotated).sum(1) / np.maximum((recon * rotated).sum(1), 1e-30)
recon *= factor[:, None]
const = (anchor_rot ** 2).sum(1) + (rotated ** 2).sum(1) + 2 * (anchor_rot * recon).sum(1)
d32 = distortion.astype(np.float32)
anchor_noise = (anchors_rot ** 2) @ d32
q_rot = queries @ basis
q_anchor = queries @ centroids.T

lams = [0.0, 0.4, 1.6, 3.2, 6.4, 12.8, 25.6, 51.2]
hits = np.zeros((nq, len(lams)))
for s in range(0, nq, 500):
    qr = q_rot[s:s + 500]
    est = const[None, :] - 2 * (qr @ recon.T + q_anchor[s:s + 500][:, assign])
    # s^2 per query and list: 4 sum_j D_j (q - c)_j^2, times the vector's f^2.
    per_list = ((qr ** 2) @ d32)[:, None] - 2 * (qr * d32) @ anchors_rot.T + anchor_noise[None, :]
    var = 4 * np.maximum(per_list, 0)[:, assign] * (factor ** 2)[None, :]
    low = np.sort(np.partition(est, 100, axis=1)[:, :101], axis=1)
    g = 1.0 / np.maximum(low[:, 100] - low[:, 0], 1e-12)
    for li, lam in enumerate(lams):
        top = np.argpartition(est + lam * g[:, None] * var, 10, axis=1)[:, :10]
        for i, row in enumerate(top):
            hits[s + i, li] = len(set(row.tolist()) & set(gt[s + i].tolist())) / 10

half = nq // 2
first, second = hits[:half].mean(0), hits[half:].mean(0)
best = int(np.argmax(first))
print(f"{a.dataset}: {n} x {dim}, {nq} queries, every list scored; {a.bytes:g} B/vector, "
      f"{overhead:.1f} B overhead, {bits:.0f} bits of ideal code on {int(coded.sum())} axes")
print(f"noise variance across (query, vector) pairs of the first block: relative spread "
      f"{float(np.std(var) / np.mean(var)):.2f}")
print(f"{'lam':>6} {'recall@10 first half':>21} {'second half':>12} {'all':>7}")
for li, lam in enumerate(lams):
    print(f"{lam:>6g} {first[li]:>21.4f} {second[li]:>12.4f} {hits[:, li].mean():>7.4f}")
print(f"lam chosen on the first half: {lams[best]:g}; on the second half "
      f"{second[best]:.4f} against {second[0]:.4f} at lam 0 ({second[best] - second[0]:+.4f})")
