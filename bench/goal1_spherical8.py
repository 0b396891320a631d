"""Issue #3, goal 1: how much an 8-d spherical code would gain over sign bits at 1 bit per
dimension. For a Gaussian vector cut into blocks of 8 dimensions, each block coded by the
nearest of 256 unit codewords (all of equal norm, so the blocks are chosen independently),
prints the mean cosine between the vector and its code: the 256 sign vectors (what RaBitQ's
1-bit code is) against the 240 roots of the E8 lattice, and the roots plus the 16 axes. The
estimator's relative variance goes as (1 - cos^2) / cos^2.

    python3 bench/goal1_spherical8.py
"""

import itertools

import numpy as np

rng = np.random.default_rng(1)
roots = []
for i, j in itertools.combinations(range(8), 2):
    for si in (1, -1):
        for sj in (1, -1):
            v = np.zeros(8)
            v[i], v[j] = si, sj
            roots.append(v)
for signs in itertools.product((1, -1), repeat=8):
    if np.prod(signs) == 1:
        roots.append(np.array(signs) * 0.5)
roots = np.array(roots)
roots /= np.linalg.norm(roots, axis=1, keepdims=True)
axes = np.vstack([np.eye(8), -np.eye(8)])
signs = np.array(list(itertools.product((1, -1), repeat=8))) / np.sqrt(8)
books = {"sign vectors (256)": signs, "E8 roots (240)": roots, "E8 roots + axes (256)": np.vstack([roots, axes])}

x = rng.normal(size=(2000, 384))
blocks = x.reshape(len(x), -1, 8)
for name, book in books.items():
    cos = (blocks @ book.T).max(2).sum(1) / np.sqrt(blocks.shape[1]) / np.linalg.norm(x, axis=1)
    c = cos.mean()
    print(f"{name:24} 384-d cosine {c:.4f}, relative variance {(1 - c * c) / (c * c):.3f}")
