#!/usr/bin/env python3
"""How far a search's returned distances are from the exact ones: the error of a codec's
distance estimate where it matters, on the true nearest neighbours.

Usage:
  vlc search INDEX DATASET_DIR/query.npy -k 100 --nprobe N -o hits.npy
  python3 bench/estimate_error.py DATASET_DIR hits.npy [--top 20]

For every query, each of its exact `--top` nearest neighbours (groundtruth.npy) that the
search returned is compared with its exact squared L2 distance (recomputed in f64 from
base.npy); prints how many were compared, the RMS of the differences, the RMS relative to the
exact distance, the mean difference (the bias), and the 99th percentile and the largest of
the absolute differences (one vector whose estimate is far off, e.g. one whose factors lie
beyond the range fitted at build time, can set the RMS alone). `vlc search -o` writes the
estimates to `hits.distances.npy` beside the ids.
"""
import argparse
import os

import numpy as np

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("dataset")
ap.add_argument("hits")
ap.add_argument("--top", type=int, default=20)
a = ap.parse_args()

ids = np.load(a.hits)
est = np.load(a.hits[: -len(".npy")] + ".distances.npy")
base = np.load(os.path.join(a.dataset, "base.npy"))
qname = "query.npy" if os.path.exists(os.path.join(a.dataset, "query.npy")) else "queries.npy"
queries = np.load(os.path.join(a.dataset, qname)).astype(np.float64)[: len(ids)]
truth = np.load(os.path.join(a.dataset, "groundtruth.npy"))[: len(ids), : a.top]
errors, relative = [], []
for i, row in enumerate(ids):
    at = {int(v): j for j, v in enumerate(row)}
    for g in truth[i]:
        if int(g) in at:
            exact = float(((base[g].astype(np.float64) - queries[i]) ** 2).sum())
            e = float(est[i][at[int(g)]]) - exact
            errors.append(e)
            relative.append(e / exact if exact > 0 else 0.0)
errors, relative = np.array(errors), np.array(relative)
print(f"{a.hits}: {len(errors)} true top-{a.top} neighbours returned; RMS error "
      f"{np.sqrt((errors ** 2).mean()):.3e}, relative {np.sqrt((relative ** 2).mean()):.3e}, "
      f"mean {errors.mean():+.2e}; |error| 99th percentile {np.percentile(np.abs(errors), 99):.3e}, "
      f"largest {np.abs(errors).max():.3e}")
