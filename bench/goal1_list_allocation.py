#!/usr/bin/env python3
"""Goal 1 lever check: bits allocated per list instead of once for the whole index.

Usage: python3 bench/goal1_list_allocation.py DATASET_DIR [--anchors 1024] [--bits 438] [--seed 1]

`pcaq` spreads its bits over the principal axes of all residuals by one model. If lists
differed in which axes hold their residuals' variance, giving each list its own allocation
would lower the coding error at the same bits. This measures it on the ideal code of
`bench/rd_bound.py` (Gaussian residuals, reverse water-filling, `--bits` per vector, 438 being
what 64 bytes leave after ids, int4 anchors and factors): anchors by FAISS k-means, residuals
in the global principal axes, each list's per-axis variance estimated on a seeded half of its
vectors and the distortion measured on the other half (so an allocation cannot fit the noise
it is scored on), for
- the global allocation (the residuals' global variances),
- each list's own allocation (its half's variances), and
- each list's allocation shrunk halfway to the global shape (its variances averaged with the
  global ones scaled to its energy).
Needs: pip install faiss-cpu numpy
"""
import argparse
import os

import faiss
import numpy as np


def water_fill(variances, bits):
    """Rates (bits per axis) of reverse water-filling that spend `bits` in all."""
    variances = np.maximum(variances, 1e-12)
    low, high = 1e-12, float(variances.max())
    for _ in range(100):
        level = np.sqrt(low * high)
        if np.maximum(0.0, 0.5 * np.log2(variances / level)).sum() > bits:
            low = level
        else:
            high = level
    return np.maximum(0.0, 0.5 * np.log2(variances / high))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--anchors", type=int, default=1024)
    ap.add_argument("--bits", type=float, default=438)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    x = np.load(os.path.join(args.dataset, "base.npy")).astype(np.float32)
    n, dim = x.shape
    kmeans = faiss.Kmeans(dim, args.anchors, niter=20, seed=args.seed)
    kmeans.train(x)
    _, assignment = kmeans.index.search(x, 1)
    assignment = assignment[:, 0]
    residuals = x - kmeans.centroids[assignment]
    covariance = residuals.T @ residuals / n
    values, vectors = np.linalg.eigh(covariance)
    values, vectors = values[::-1], vectors[:, ::-1]
    z = residuals @ vectors
    fit = np.random.default_rng(args.seed).random(n) < 0.5
    global_rates = water_fill(values, args.bits)
    totals = {"global": 0.0, "per list": 0.0, "per list, shrunk halfway": 0.0}
    for a in range(args.anchors):
        members = assignment == a
        fitted, scored = z[members & fit], z[members & ~fit]
        if len(fitted) < 4 or len(scored) == 0:
            continue
        fitted_var, scored_var = (fitted**2).mean(0), (scored**2).mean(0)
        own = water_fill(fitted_var, args.bits)
        shrunk = water_fill(
            0.5 * fitted_var + 0.5 * values * (fitted_var.sum() / values.sum()), args.bits
        )
        for name, rates in (("global", global_rates), ("per list", own),
                            ("per list, shrunk halfway", shrunk)):
            totals[name] += (scored_var * 2.0 ** (-2 * rates)).sum() * len(scored)
    scored_count = sum(
        ((assignment == a) & ~fit).sum()
        for a in range(args.anchors)
        if ((assignment == a) & fit).sum() >= 4
    )
    print(f"{n} x {dim}, {args.anchors} anchors, {args.bits:g} bits per vector; residual energy "
          f"{float((z**2).sum(1).mean()):.4f}")
    for name, total in totals.items():
        print(f"ideal coding error per vector, {name} allocation: {total / scored_count:.5f}")


if __name__ == "__main__":
    main()
