"""Shared by bench/rd_bound.py and the goal1_*.py scripts: the ideal (rate-distortion) code of
Gaussian residuals."""
import math
import os

import numpy as np


def load_top10(dataset, max_queries=None):
    """A benchmark set's `base.npy`, its queries (`query.npy`, else `queries.npy`; the first
    `max_queries` if given) as float32, and the first 10 true neighbours of each query from
    `groundtruth.npy`: `(base, queries, gt)`."""
    base = np.load(os.path.join(dataset, "base.npy")).astype(np.float32)
    name = "query.npy" if os.path.exists(os.path.join(dataset, "query.npy")) else "queries.npy"
    queries = np.load(os.path.join(dataset, name)).astype(np.float32)[:max_queries]
    gt = np.load(os.path.join(dataset, "groundtruth.npy"))[: len(queries), :10]
    return base, queries, gt


def overhead_bytes(n, dim, num_anchors):
    """VLC's bytes per vector besides the code, counted generously: ids at ceil(log2(n)/8)
    bytes, int4 anchors (dim/2 + 4 bytes each, over n vectors), two f16 factors (4 bytes)."""
    return math.ceil(math.log2(n) / 8) + num_anchors * (dim / 2 + 4) / n + 4


def backward_channel(rotated, lam, d, coded, rng):
    """The ideal code's reconstruction of `rotated` (principal axes of variances `lam`) at
    per-axis distortion `d` through the backward test channel: `s_i (r_i + n_i)`, with
    `s_i = (lam_i - d_i) / lam_i` and `Var n_i = lam_i d_i / (lam_i - d_i)` on the axes
    `coded`, zero elsewhere."""
    scale = np.where(coded, (lam - d) / lam, 0.0).astype(np.float32)
    noise = np.where(coded, lam * d / np.maximum(lam - d, 1e-300), 0.0).astype(np.float32)
    return scale * (rotated + rng.standard_normal(rotated.shape, dtype=np.float32) * np.sqrt(noise))


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


def product_code(rotated, lam, bits, group_bits, seed, train=None):
    """Reconstruction of `rotated` by k-means codebooks of 2^group_bits entries over consecutive
    groups of principal axes that each carry group_bits bits of the water-filling rates of
    variances `lam` at `bits` in all, trained on the rows `train` (all rows by default).
    Returns `(recon, coded_axes, codebook_floats)`."""
    import faiss

    rate = 0.5 * np.log2(lam / water_fill(lam, bits))
    groups = int(bits // group_bits)
    cumulative = np.cumsum(rate)
    coded = int((rate > 1e-9).sum())
    bounds = [0]
    for g in range(1, groups):
        bounds.append(max(bounds[-1] + 1, int(np.searchsorted(cumulative, g * bits / groups))))
    bounds.append(max(coded, bounds[-1] + 1))
    recon = np.zeros_like(rotated)
    floats = 0
    for g in range(groups):
        lo, hi = bounds[g], min(bounds[g + 1], rotated.shape[1])
        if hi <= lo:
            continue
        part = np.ascontiguousarray(rotated[:, lo:hi])
        km = faiss.Kmeans(hi - lo, 2 ** group_bits, niter=25, seed=seed + g, verbose=False)
        km.train(part if train is None else part[train])
        _, nearest = km.index.search(part, 1)
        recon[:, lo:hi] = km.centroids[nearest[:, 0]]
        floats += 2 ** group_bits * (hi - lo)
    return recon, min(bounds[-1], rotated.shape[1]), floats
