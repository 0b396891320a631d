"""Shared by bench/rd_bound.py and bench/goal1_levers.py: the ideal (rate-distortion) code of
Gaussian residuals."""
import math

import numpy as np


def water_fill(lam, bits):
    """Per-axis distortion of the reverse water-filling of variances `lam` at `bits` in all."""
    lo, hi = 1e-12, lam.max()
    for _ in range(200):
        theta = math.sqrt(lo * hi)
        if 0.5 * np.log2(lam / np.minimum(theta, lam)).sum() > bits:
            lo = theta
        else:
            hi = theta
    return np.minimum(hi, lam)


def anchors_and_axes(base, num_anchors, seed):
    """FAISS k-means anchors of `base` (seed `seed + 1`, 20 iterations) and the principal axes
    of the residuals: `(assign, centroids, residual, basis)`, `basis` (dim, dim) with one axis
    per column by falling variance."""
    import faiss

    km = faiss.Kmeans(base.shape[1], num_anchors, niter=20, seed=seed + 1, verbose=False)
    km.train(base)
    _, assign = km.index.search(base, 1)
    assign = assign[:, 0]
    centroids = km.centroids
    residual = base - centroids[assign]
    lam, basis = np.linalg.eigh(np.cov(residual.T.astype(np.float64)))
    basis = basis[:, np.argsort(lam)[::-1]].astype(np.float32)
    return assign, centroids, residual, basis
