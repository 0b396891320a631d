#!/usr/bin/env python3
"""Two levers on goal 1 (recall@10 at 64 bytes/vector), measured on the ideal residual code of
`bench/rd_bound.py` (Gaussian test channel at Shannon's bound, VLC's estimator, every list
scored), so their gains are upper estimates on top of that ideal.

1. Anchor-direction correction: VLC's estimate of <q - c, r> is f<q - c, r_hat> with RaBitQ's
   factor f, which makes the error e = r - f r_hat orthogonal to r but not to the anchor c.
   For unit-norm data, q - x is nearly orthogonal to x (|q|=|x| gives <q - x, q + x> = 0), so
   for a true neighbour the error's part along x = c + r, i.e. along c, is weighted far more
   than a random direction's. Storing t = <c/|c|, e> per vector (8 bits here) and adding
   <q - c, c/|c|> t to the estimate removes it.
2. Weighted allocation: water-filling on lam_i * w_i instead of lam_i, with w_i the data's
   global variance along residual axis i over its mean, raised to `--power` (the queries come
   from the data's distribution, not the residuals'). Needs only the base vectors.

The `neighbours` line shows, for the true top-10 pairs, E<q - x, c^>^2 and E<q - x, r^>^2
against the mean per direction.

Usage: python3 bench/goal1_levers.py DATASET_DIR [--bits 438] [--power 0.5]
(438 bits: 64 B less rd_bound.py's 9.3 B of overhead at 1,024 anchors.)
"""
import argparse

import numpy as np
from ideal_code import anchors_and_axes, backward_channel, load_top10, water_fill

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("dataset")
ap.add_argument("--bits", type=float, default=438.0, help="code bits per vector")
ap.add_argument("--power", type=float, default=0.5, help="exponent of the allocation weight")
ap.add_argument("--anchors", type=int, default=1024)
ap.add_argument("--seed", type=int, default=0)
a = ap.parse_args()

base, queries, gt = load_top10(a.dataset)
n, dim = base.shape
assign, centroids, residual, basis = anchors_and_axes(base, a.anchors, a.seed)
rotated = residual @ basis
lam = rotated.astype(np.float64).var(0)
anchor_rot = centroids[assign] @ basis
unit = centroids / np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), 1e-30)
unit_rot = (unit @ basis)[assign]
q_rot = queries @ basis
q_anchor = queries @ centroids.T
# <q - c, c^> per query and anchor.
q_unit = queries @ unit.T - (centroids * unit).sum(1)[None, :]

pairs_q = np.repeat(np.arange(len(queries)), 10)
diff = queries[pairs_q] - base[gt.reshape(-1)]
along_c = (diff * unit[assign[gt.reshape(-1)]]).sum(1)
r_dir = residual[gt.reshape(-1)]
r_dir /= np.maximum(np.linalg.norm(r_dir, axis=1, keepdims=True), 1e-30)
along_r = (diff * r_dir).sum(1)
print(f"{a.dataset}: {n} x {dim}, {len(queries)} queries, {a.anchors} anchors, {a.bits:g} bits")
print(f"neighbours: E|q-x|^2 {(diff * diff).sum(1).mean():.4f}, per direction "
      f"{(diff * diff).sum(1).mean() / dim:.5f}; along the anchor {np.mean(along_c ** 2):.5f}, "
      f"along the residual {np.mean(along_r ** 2):.5f}")


def channel(weights, bits, rng):
    """The ideal code's reconstruction when distortion is weighted by `weights` per axis."""
    weighted = lam * weights
    dw = water_fill(weighted, bits)
    coded = weighted > dw
    return backward_channel(rotated, lam, dw / weights, coded, rng)


def recall(recon, correct):
    # RaBitQ's factor |r|^2 / <r_hat, r>. A real code keeps the cosine between r_hat and r
    # well above zero; the simulated channel at few bits can draw r_hat nearly orthogonal to
    # r (or opposite), where the factor blows up: such rows are scored without their
    # residual (factor 0), as the code says nothing of it.
    inner = (recon * rotated).sum(1)
    cosine = inner / np.maximum(np.linalg.norm(recon, axis=1) * np.linalg.norm(rotated, axis=1), 1e-30)
    factor = np.where(cosine > 0.1, (rotated * rotated).sum(1) / np.maximum(inner, 1e-30), 0.0)
    recon = recon * factor[:, None].astype(np.float32)
    t = (unit_rot * (rotated - recon)).sum(1)
    if correct:  # 8-bit t, on a symmetric grid over its range
        top = np.abs(t).max()
        t = np.round(t / top * 127) / 127 * top
    const = (anchor_rot * anchor_rot).sum(1) + (rotated * rotated).sum(1) + 2 * (anchor_rot * recon).sum(1)
    hits = 0
    for s in range(0, len(queries), 1000):
        est = const[None, :] - 2 * (q_rot[s:s + 1000] @ recon.T + q_anchor[s:s + 1000][:, assign])
        if correct:
            est -= 2 * q_unit[s:s + 1000][:, assign] * t[None, :]
        top10 = np.argpartition(est, 10, axis=1)[:, :10]
        for i, row in enumerate(top10):
            hits += len(set(row.tolist()) & set(gt[s + i].tolist()))
    return hits / (10 * len(queries)), int((cosine <= 0.1).sum())


xc = base - base.mean(0)
weight = ((xc @ basis) ** 2).mean(0).astype(np.float64)
weight = (weight / weight.mean()) ** a.power
print(f"{'allocation':>22} {'bits':>6} {'plain':>7} {'anchor-corrected (+8 bits)':>27} "
      f"{'rows at cosine <= 0.1':>22}")
for label, w in (("residual variance", np.ones(dim)), (f"x global^{a.power:g}", weight)):
    for bits, correct in ((a.bits, False), (a.bits - 8, True)):
        r, dropped = recall(channel(w, bits, np.random.default_rng(a.seed)), correct)
        col = f"{r:>7.4f} {'':>27}" if not correct else f"{'':>7} {r:>27.4f}"
        print(f"{label:>22} {bits:>6g} {col} {dropped:>22}", flush=True)
