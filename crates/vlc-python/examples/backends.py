"""Build one index on each backend from Python and compare: the backend that trained the
anchors, build time, energy, recall@10 of a CPU search against exact search. Then search the
first index on each backend: recall@10, queries per second (the best of 5 calls of every
query, after one call that makes the GPU copy), and how many of the CPU's ids each returns.

    python3 crates/vlc-python/examples/backends.py [--n 200000] [--dim 384] [--backends cpu,cuda,wgpu]

A backend that cannot open (no GPU, no driver) is reported and skipped.
"""

import argparse
import time

import numpy as np

import vlc_index as vlc

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--n", type=int, default=200_000)
parser.add_argument("--dim", type=int, default=384)
parser.add_argument("--backends", default="cpu,cuda,wgpu")
parser.add_argument("--codec", default="pcaq1")
parser.add_argument("--queries", type=int, default=1000)
parser.add_argument("--nprobe", type=int, default=32)
args = parser.parse_args()

rng = np.random.default_rng(7)
centres = rng.normal(size=(1000, args.dim)).astype(np.float32)
base = centres[rng.integers(0, 1000, args.n)] + 0.6 * rng.normal(size=(args.n, args.dim)).astype(np.float32)
nq = args.queries
queries = centres[rng.integers(0, 1000, nq)] + 0.6 * rng.normal(size=(nq, args.dim)).astype(np.float32)
start = time.perf_counter()
truth = vlc.exact_knn(base, queries, 10)
print(f"{args.n} x {args.dim}, {nq:,} queries; exact top-10 in {time.perf_counter() - start:.2f} s")
first = None

for backend in args.backends.split(","):
    start = time.perf_counter()
    try:
        index = vlc.build(base, codec=args.codec, backend=backend)
    except vlc.VlcError as e:
        print(f"{backend}: skipped ({e})")
        continue
    seconds = time.perf_counter() - start
    info = index.info()
    ids, _ = index.search(queries, k=10, nprobe=args.nprobe)
    print(
        f"{backend:5} (trained on {index.backend}): build {seconds:.2f} s, {info['anchors']} anchors, "
        f"energy {info['energy']:.5f}, recall@10 {vlc.recall(ids, truth, 10):.4f} at nprobe {args.nprobe}"
    )
    first = first or index

if first is not None:
    print(f"searching the index trained on {first.backend}, nprobe {args.nprobe}:")
    cpu_ids = None
    for backend in ["cpu"] + [b for b in args.backends.split(",") if b != "cpu"]:
        try:
            ids, _ = first.search(queries, k=10, nprobe=args.nprobe, backend=backend)
        except vlc.VlcError as e:
            print(f"  {backend}: skipped ({e})")
            continue
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            first.search(queries, k=10, nprobe=args.nprobe, backend=backend)
            best = min(best, time.perf_counter() - start)
        cpu_ids = ids if cpu_ids is None else cpu_ids
        print(
            f"  {backend:5} recall@10 {vlc.recall(ids, truth, 10):.4f} at {nq / best:>9,.0f} "
            f"queries/s, {(ids == cpu_ids).mean() * 100:6.2f}% of the CPU's ids "
            f"({first.info()['device_copy'] or 'cpu'})"
        )
        first.release_device()
