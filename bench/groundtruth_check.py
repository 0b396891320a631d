#!/usr/bin/env python3
"""`vlc groundtruth` against a dataset's own ground truth: time, and where the two differ.

Usage: python3 bench/groundtruth_check.py DATASET_DIR [--vlc target/release/vlc]
DATASET_DIR holds base.npy, query.npy and groundtruth.npy. Runs `vlc groundtruth` (k = the
file's column count), then compares the ids place by place, the sets of each row, and the
order of each file's rows by distances recomputed in float64.
"""
import argparse
import os
import subprocess
import tempfile
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--vlc", default="target/release/vlc")
    a = ap.parse_args()
    theirs = np.load(os.path.join(a.dataset, "groundtruth.npy"))
    k = theirs.shape[1]
    with tempfile.TemporaryDirectory() as t:
        out = os.path.join(t, "gt.npy")
        cmd = [a.vlc, "groundtruth", os.path.join(a.dataset, "base.npy"),
               os.path.join(a.dataset, "query.npy"), "-o", out, "-k", str(k), "-q"]
        start = time.time()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        seconds = time.time() - start
        ours = np.load(out)
    print(f"$ {' '.join(cmd[:-5])} ... -k {k}: {seconds:.2f} s wall")
    base = np.load(os.path.join(a.dataset, "base.npy")).astype(np.float64)
    queries = np.load(os.path.join(a.dataset, "query.npy")).astype(np.float64)
    same = (ours == theirs).mean()
    rows_differ = sum(set(o) != set(t) for o, t in zip(ours, theirs))
    print(f"{ours.shape[0]} queries x {k}: ids equal in {same:.5%} of places; "
          f"rows whose {k} neighbours differ as a set: {rows_differ}")
    for name, ids in [("vlc groundtruth", ours), ("the dataset's file", theirs)]:
        out_of_order, worst = 0, 0.0
        for q, row in zip(queries, ids):
            d = ((base[row] - q) ** 2).sum(1)
            steps = np.diff(d)
            out_of_order += int((steps < 0).sum())
            worst = max(worst, float(-steps.min()) if steps.min() < 0 else 0.0)
        print(f"{name}: {out_of_order} neighbours after a farther one (float64 distances), "
              f"largest such gap {worst:.3g}")


if __name__ == "__main__":
    main()
