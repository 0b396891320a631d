#!/usr/bin/env python3
"""FAISS on the same data as `vlc bench`, writing points in the same JSON-lines schema.

Usage:
  python3 bench/faiss_bench.py DATASET_DIR --out bench-out/faiss.jsonl [--threads 1]
  vlc bench DATASET_DIR --peers bench-out/faiss.jsonl --out bench-out

DATASET_DIR holds base.npy, query.npy (or queries.npy) and groundtruth.npy (.npy, any float
type; ground truth int32/int64). Bytes per vector = the index's code size + 8 bytes of id (as
FAISS's IVF files store them); for HNSW, the serialised index size / vectors.
Needs: pip install faiss-cpu numpy
"""
import argparse
import json
import os
import re
import time

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("dataset")
ap.add_argument("--out", required=True)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--repeat", type=int, default=3, help="timed passes per setting; QPS of the fastest (as vlc bench --repeat)")
ap.add_argument("--nlist", type=int, default=1024)
ap.add_argument("--nprobe", default="8,16,32,64,128,256")
ap.add_argument("--configs", default="PQ48,PQ96x4fs,RaBitQ,PQ192x4fs,PQ96,SQ8,RaBitQ+Refine(SQ8),HNSW32")
args = ap.parse_args()

import faiss  # noqa: E402

faiss.omp_set_num_threads(args.threads)


def load(*names):
    for n in names:
        p = os.path.join(args.dataset, n)
        if os.path.exists(p):
            return np.load(p)
    raise SystemExit(f"{args.dataset} has none of {names}")


xb = np.ascontiguousarray(load("base.npy").astype(np.float32))
xq = np.ascontiguousarray(load("query.npy", "queries.npy").astype(np.float32))
gt = load("groundtruth.npy").astype(np.int64)
n, d = xb.shape
nprobes = [int(p) for p in args.nprobe.split(",")]


def recall(ids, at):
    return float(np.mean([len(set(ids[i, :at]) & set(gt[i, :at])) / at for i in range(len(ids))]))


def measure(index, config, nprobe, bpv, build_s, out):
    secs = float("inf")
    for _ in range(max(args.repeat, 1)):
        t = time.perf_counter()
        _, ids = index.search(xq, 10)
        secs = min(secs, time.perf_counter() - t)
    _, ids100 = index.search(xq, 100) if gt.shape[1] >= 100 else (None, None)
    p = {
        "system": "faiss", "config": config, "nprobe": nprobe, "rerank": 0, "bytes_per_vector": bpv,
        "recall@1": recall(ids, 1), "recall@10": recall(ids, 10),
        "recall@100": recall(ids100, 100) if ids100 is not None else None,
        "qps": len(xq) / secs, "threads": args.threads, "build_seconds": build_s,
    }
    print(f"  {config:<24} nprobe {nprobe:>4}: recall@10 {p['recall@10']:.4f} {p['qps']:>9.0f} QPS {bpv:.1f} B/vector", flush=True)
    out.write(json.dumps(p) + "\n")
    out.flush()


def fit_pq(cfg):
    """PQ needs d divisible by its sub-quantizer count M: where it is not (e.g. PQ48 at d = 256),
    use the largest divisor of d below M, so the code is no larger than the named one."""
    m = re.match(r"PQ(\d+)(.*)", cfg)
    if not m or d % int(m.group(1)) == 0:
        return cfg
    sub = max(k for k in range(1, int(m.group(1)) + 1) if d % k == 0)
    print(f"  {cfg}: d = {d} is not a multiple of {m.group(1)}; using PQ{sub}{m.group(2)}", flush=True)
    return f"PQ{sub}{m.group(2)}"


with open(args.out, "w") as out:
    for cfg in args.configs.split(","):
        cfg = fit_pq(cfg)
        t = time.perf_counter()
        if cfg.startswith("HNSW"):
            index = faiss.index_factory(d, f"{cfg},Flat")
            index.add(xb)
            build_s = time.perf_counter() - t
            bpv = len(faiss.serialize_index(index)) / n
            for ef in [16, 32, 64, 128, 256]:
                index.hnsw.efSearch = ef
                measure(index, f"{cfg},Flat", ef, bpv, build_s, out)
            continue
        factory = f"IVF{args.nlist},{cfg.replace('+', ',')}"
        index = faiss.index_factory(d, factory)
        index.train(xb)
        index.add(xb)
        build_s = time.perf_counter() - t
        ivf = faiss.extract_index_ivf(index)
        code = ivf.code_size
        if isinstance(index, faiss.IndexRefine):
            code += index.refine_index.sa_code_size()
            index.k_factor = 10  # rerank 10·k candidates, as VLC does by default
        bpv = code + 8
        for p in nprobes:
            if p > args.nlist:
                continue
            ivf.nprobe = p
            measure(index, factory, p, bpv, build_s, out)
