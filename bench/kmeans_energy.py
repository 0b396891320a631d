#!/usr/bin/env python3
"""FAISS k-means energy (mean squared distance to the nearest centroid) on a dataset, to set
beside the energy `vlc build` reports for its anchors on the same vectors.

Usage: python3 bench/kmeans_energy.py DATASET_DIR [--k 1024] [--niter 10,25]
"""
import argparse
import os

import faiss
import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("data")
ap.add_argument("--k", type=int, default=1024)
ap.add_argument("--niter", default="10,25")
a = ap.parse_args()
x = np.ascontiguousarray(np.load(os.path.join(a.data, "base.npy")).astype("float32"))
for niter in [int(v) for v in a.niter.split(",")]:
    km = faiss.Kmeans(x.shape[1], a.k, niter=niter, seed=1234, max_points_per_centroid=256)
    km.train(x)
    dist, _ = km.index.search(x, 1)
    print(f"faiss k-means k={a.k} niter={niter}: energy {dist.mean():.6f}")
