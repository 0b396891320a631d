#!/usr/bin/env python3
"""Which queries a search result gets wrong against the exact top k, and how close they were.

Usage:
  vlc search INDEX DATASET_DIR/query.npy -k 10 --nprobe 64 -o hits.npy
  python3 bench/tie_check.py DATASET_DIR hits.npy [-k 10]

For every query whose k returned ids differ from the ground truth's first k, prints the exact
distances (recomputed in float64) of the k-th and (k+1)-th true neighbours and their relative
gap: a miss between neighbours a few 1e-5 apart is a near-tie that a rounded code cannot order.
"""
import argparse
import os

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("dataset")
ap.add_argument("hits")
ap.add_argument("-k", type=int, default=10)
a = ap.parse_args()
base = np.load(os.path.join(a.dataset, "base.npy")).astype(np.float64)
qname = "query.npy" if os.path.exists(os.path.join(a.dataset, "query.npy")) else "queries.npy"
queries = np.load(os.path.join(a.dataset, qname)).astype(np.float64)
gt = np.load(os.path.join(a.dataset, "groundtruth.npy"))
hits = np.load(a.hits)
k = a.k
misses, gaps = 0, []
for i in range(len(queries)):
    if set(gt[i, :k]) == set(hits[i, :k]):
        continue
    misses += 1
    d = ((base - queries[i]) ** 2).sum(axis=1)
    kth, next_ = np.sort(d)[k - 1 : k + 1]
    gap = (next_ - kth) / kth
    gaps.append(gap)
    print(f"query {i}: {k}th {kth:.9f}, {k + 1}th {next_:.9f}, relative gap {gap:.2e}")
hit_rate = np.mean([len(set(gt[i, :k]) & set(hits[i, :k])) / k for i in range(len(queries))])
print(f"{misses} of {len(queries)} queries differ from the exact top {k}; recall@{k} {hit_rate:.5f}")
if gaps:
    print(f"relative gap between the {k}th and {k + 1}th exact distances: {min(gaps):.2e} to {max(gaps):.2e}")
