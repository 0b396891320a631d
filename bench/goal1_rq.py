"""Goal 1 of issue #3, one more lever: a residual (additive) quantiser instead of a per-axis
grid. FAISS's ResidualQuantizer (M stages of 256 full-dimensional codewords, greedy encoding)
is trained on the residuals of half the base (a seeded split) and encodes the other half; its
distortion there, relative to the residuals' mean energy, is set beside the ideal Gaussian
code's (rd_bound.py's reverse water-filling) and a product code's (rd_bound.py's k-means 8b
groups of principal axes) at the same bits, all against the same anchors (ideal_code.py's FAISS
k-means). Distortion here is the mean squared error of the reconstruction over the
residuals' mean energy; the ideal's is the water-filling distortion itself (rd_bound.log's
column is measured after VLC's per-vector factor rescales the simulated code, a little
higher). The training half's own distortion shows what the codebooks memorise: their size,
M x 256 x dim floats (product code: 256 x dim), is also printed in bytes per vector of this
base.

Usage: python3 bench/goal1_rq.py DATASET_DIR [--bits 416] [--anchors 1024] [--seed 0]
"""
import argparse
import os
import time

import faiss
import numpy as np
from ideal_code import anchors_and_axes, product_code, water_fill

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("dataset")
ap.add_argument("--bits", default="416", help="code bits per vector, comma separated (multiples of 8)")
ap.add_argument("--anchors", type=int, default=1024)
ap.add_argument("--seed", type=int, default=0)
a = ap.parse_args()

base = np.load(os.path.join(a.dataset, "base.npy")).astype(np.float32)
n, dim = base.shape
assign, centroids, residual, basis = anchors_and_axes(base, a.anchors, a.seed)
rotated = np.ascontiguousarray(residual @ basis)
energy = float((rotated.astype(np.float64) ** 2).sum(1).mean())
lam = rotated.astype(np.float64).var(0)
perm = np.random.default_rng(a.seed).permutation(n)
train, held = perm[: n // 2], perm[n // 2:]
print(f"{a.dataset}: {n} x {dim}, {a.anchors} anchors, residual energy {energy:.4f}; "
      f"codebooks trained on {len(train)} residuals, distortion measured on the other {len(held)}")
print(f"{'code bits':>9} {'code':>28} {'distortion':>10} {'on training half':>16} "
      f"{'codebook B/vector':>17} {'seconds':>7}")


def rel(recon, rows):
    return float(((recon[rows] - rotated[rows]) ** 2).sum(1).mean()) / energy


for bits in [int(b) for b in a.bits.split(",")]:
    d = water_fill(lam, bits)
    print(f"{bits:>9} {'ideal Gaussian':>28} {float(d.sum()) / energy:>10.4f}", flush=True)
    # Product code: k-means 8-bit codebooks over groups of principal axes carrying 8 bits each
    # of the water-filling rates (rd_bound.py's), trained on the training half.
    t = time.time()
    recon, _, book_floats = product_code(rotated, lam, bits, 8, a.seed + 7, train)
    print(f"{bits:>9} {'product code, 8-bit groups':>28} {rel(recon, held):>10.4f} "
          f"{rel(recon, train):>16.4f} {book_floats * 4 / n:>17.1f} {time.time() - t:>7.0f}",
          flush=True)
    t = time.time()
    rq = faiss.ResidualQuantizer(dim, bits // 8, 8)
    rq.max_beam_size = 1
    rq.train(rotated[train])
    recon = rq.decode(rq.compute_codes(rotated))
    print(f"{bits:>9} {f'residual quantiser, {bits // 8} x 8b':>28} {rel(recon, held):>10.4f} "
          f"{rel(recon, train):>16.4f} {(bits // 8) * 256 * dim * 4 / n:>17.1f} "
          f"{time.time() - t:>7.0f}", flush=True)
