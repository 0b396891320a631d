#!/usr/bin/env python3
"""Recall@10 of an ideal residual quantiser at a byte budget: the ceiling that per-vector codes
(anchor id + coded residual, the VLC/IVF design) can be compared with.

Usage:
  python3 bench/rd_bound.py DATASET_DIR [--anchors 1024] [--bytes 48,64,96,128,192] [--vq-bits 8]

The anchors are FAISS k-means centroids (`--anchors` of them). The residuals `r = x - c` are
rotated into their principal axes, with variances `lam_i`. At a budget of `bits` per vector the
ideal quantiser of a Gaussian source with that covariance (Shannon's rate-distortion function)
has distortion `D_i = min(theta, lam_i)` on axis `i`, reverse water-filling, with
`sum_i max(0, log2(lam_i / D_i) / 2) = bits`. No real code reaches it (it needs infinitely long
blocks); a scalar quantiser is about 1.5 dB above it at high rates. Its reconstruction is
simulated through the backward test channel, `r = r_hat + z` with `z_i ~ N(0, D_i)` independent
of `r_hat`, i.e. `r_hat_i = s_i (r_i + n_i)`, `s_i = (lam_i - D_i) / lam_i`,
`Var n_i = lam_i D_i / (lam_i - D_i)`, and every list is scored (no probing loss), so the recall
printed is an upper estimate of what such a code gets at that many bits.

Two estimators of `|q - x|^2` from the reconstruction, both with RaBitQ's per-vector factor
`f = |r|^2 / <r_hat, r>` (exact when the query direction is `r`):
- `recall@10` is VLC's (`pcaq`, `rabitq*`): `|q - c|^2 + |r|^2 - 2 f <q - c, r_hat>`, the
  inner product taken with the query's offset from the list's anchor, so the estimate is exact
  for a query at `x` itself;
- `plain` is `|x|^2 - 2 <q, c> - 2 f <q, r_hat>` (what this script printed before session 24;
  it is not VLC's estimator and puts the ceiling about 0.015 too low at 64 B on the dev set).

Two budgets per byte line:
- `all bytes`: every byte of the line is code (no ids, no anchors, no factors): a ceiling for
  any per-vector code whose data is Gaussian-like;
- `after overhead`: what VLC's file also holds, counted generously: ids at ceil(log2(n)/8)
  bytes, int4 anchors (dim/2 + 4 bytes each, over n), two f16 factors (4 bytes); the
  rotation is not counted.

The source is not Gaussian; a quantiser that exploits its structure (more anchors, learned
codebooks) can exceed this estimate, which `--anchors` lets one probe (the anchors' bytes are
in `after overhead`). `--vq-bits B` adds, per line, a learned code at the same bits: the
principal axes are cut into consecutive groups that each carry `B` bits of the water-filling
rates, each group gets a k-means codebook of `2^B` entries (FAISS), and the same estimator
scores it; its codebooks are not counted.
"""
import argparse

import numpy as np
from ideal_code import (anchors_and_axes, backward_channel, load_top10, overhead_bytes, product_code,
                        water_fill)

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("dataset")
ap.add_argument("--anchors", default="1024", help="anchor counts, comma separated")
ap.add_argument("--bytes", default="48,64,96,128,192", help="bytes/vector, comma separated")
ap.add_argument("--queries", type=int, default=10_000, help="queries used (the first N)")
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--vq-bits", default="", help="bits per learned codebook group, comma separated")
a = ap.parse_args()

base, queries, gt = load_top10(a.dataset, a.queries)
n, dim = base.shape
norms = (base.astype(np.float64) ** 2).sum(1).astype(np.float32)
print(f"{a.dataset}: {n} x {dim}, {len(queries)} queries, recall@10 over every list")


def recall(estimate_rows):
    """Mean recall@10 of the ids with the 10 smallest estimates per query row block."""
    hits = 0
    for start, est in estimate_rows:
        top = np.argpartition(est, 10, axis=1)[:, :10]
        for i, row in enumerate(top):
            hits += len(set(row.tolist()) & set(gt[start + i].tolist()))
    return hits / (10 * len(queries))


def score(recon, rotated, energy, anchor_rot, q_rot, q_anchor, assign):
    """Recall@10 with VLC's estimator and with the plain one, of a reconstruction `recon` of
    the rotated residuals (rescaled here by the per-vector factor), and its distortion
    relative to the residuals' mean energy `energy`."""
    factor = (rotated * rotated).sum(1) / np.maximum((recon * rotated).sum(1), 1e-30)
    recon = recon * factor[:, None]
    # VLC: |q - c|^2 + |r|^2 - 2 f <q - c, r_hat>; |q|^2 is the same for every row, so the
    # ranking is that of |c|^2 + |r|^2 + 2 <c, f r_hat> - 2 <q, c> - 2 <q, f r_hat>.
    vlc_const = ((anchor_rot * anchor_rot).sum(1) + (rotated * rotated).sum(1)
                 + 2 * (anchor_rot * recon).sum(1))

    def rows(const):
        for s in range(0, len(queries), 1000):
            e = q_rot[s:s + 1000] @ recon.T
            e += q_anchor[s:s + 1000][:, assign]
            yield s, const[None, :] - 2 * e

    distortion = float(((recon - rotated) ** 2).sum(1).mean()) / energy
    return recall(rows(vlc_const)), recall(rows(norms)), distortion


def learned(rotated, lam, bits, group_bits, seed):
    """Reconstruction by k-means codebooks of 2^group_bits entries over consecutive groups of
    principal axes that each carry group_bits bits of the water-filling rates."""
    recon, axes, _ = product_code(rotated, lam, bits, group_bits, seed)
    return recon, axes


vq_bits = [int(b) for b in a.vq_bits.split(",") if b]
for num_anchors in [int(k) for k in a.anchors.split(",")]:
    assign, centroids, residual, basis = anchors_and_axes(base, num_anchors, a.seed)
    rotated = residual @ basis
    anchor_rot = centroids[assign] @ basis
    lam = rotated.astype(np.float64).var(0)
    q_anchor = queries @ centroids.T
    q_rot = queries @ basis
    energy = float((rotated.astype(np.float64) ** 2).sum(1).mean())
    overhead = overhead_bytes(n, dim, num_anchors)
    print(f"\nanchors {num_anchors}: residual energy {energy:.4f}; overhead counted "
          f"{overhead:.1f} B/vector (ids, int4 anchors, two f16 factors)")
    print(f"{'bytes/vector':>12} {'budget':>15} {'code':>12} {'code bits':>9} {'coded axes':>10} "
          f"{'distortion':>10} {'recall@10':>9} {'plain':>7}")
    rng = np.random.default_rng(a.seed)
    for line in [float(b) for b in a.bytes.split(",")]:
        for label, code_bytes in (("all bytes", line), ("after overhead", line - overhead)):
            bits = 8 * code_bytes
            if bits <= 0:
                print(f"{line:>12.0f} {label:>15} {'-':>12}   the overhead alone exceeds the line")
                continue
            d = water_fill(lam, bits)
            coded = lam > d
            recon = backward_channel(rotated, lam, d, coded, rng)
            vlc, plain, distortion = score(recon, rotated, energy, anchor_rot, q_rot, q_anchor, assign)
            print(f"{line:>12.0f} {label:>15} {'ideal':>12} {bits:>9.0f} {int(coded.sum()):>10} "
                  f"{distortion:>10.4f} {vlc:>9.4f} {plain:>7.4f}", flush=True)
            for group_bits in vq_bits:
                recon, axes = learned(rotated, lam, bits, group_bits, a.seed + 7)
                vlc, plain, distortion = score(recon, rotated, energy, anchor_rot, q_rot, q_anchor, assign)
                print(f"{line:>12.0f} {label:>15} {f'k-means {group_bits}b':>12} {bits:>9.0f} "
                      f"{axes:>10} {distortion:>10.4f} {vlc:>9.4f} {plain:>7.4f}", flush=True)
