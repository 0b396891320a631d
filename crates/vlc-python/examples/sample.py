"""vlc_index on the committed sample (5,000 MiniLM embeddings, 200 queries): build, measure
recall@10 against exact search, time the queries, save, reopen and search a few by text.

    python3 crates/vlc-python/examples/sample.py [--threads 1]
"""

import argparse
import gzip
import json
import pathlib
import tempfile
import time

import numpy as np

import vlc_index as vlc

sample = pathlib.Path(__file__).resolve().parents[3] / "data" / "sample"
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--threads", type=int, default=None, help="search threads (default: all)")
parser.add_argument("--codec", default="pcaq1", help="codec to build (default pcaq1)")
args = parser.parse_args()

base = np.load(sample / "base.npy")  # float16: converted to float32 on the way in
queries = np.load(sample / "queries.npy")
truth = vlc.exact_knn(base, queries, 10)

start = time.perf_counter()
index = vlc.build(base, codec=args.codec, backend="cpu")
print(f"built in {time.perf_counter() - start:.2f} s: {index!r}")

for nprobe in (4, 16, 64):
    seconds = float("inf")
    for _ in range(5):  # the best of five calls
        start = time.perf_counter()
        ids, _ = index.search(queries, k=10, nprobe=nprobe, threads=args.threads)
        seconds = min(seconds, time.perf_counter() - start)
    print(
        f"nprobe {nprobe:3}: recall@10 {vlc.recall(ids, truth, 10):.3f}, "
        f"{len(queries) / seconds:,.0f} queries/s in one call"
    )

# An application asking as its users do: one query per call.
for nprobe in (16,):
    seconds = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for q in queries:
            index.search(q, k=10, nprobe=nprobe, threads=args.threads)
        seconds = min(seconds, time.perf_counter() - start)
    print(f"nprobe {nprobe:3}: {len(queries) / seconds:,.0f} queries/s one query per call")

with tempfile.TemporaryDirectory() as tmp:
    path = pathlib.Path(tmp) / "sample.vlc"
    index.save(path)
    reopened = vlc.load(path, mmap=True)
    again, _ = reopened.search(queries, k=10, nprobe=64)
    assert (again == ids).all(), "the saved file searches as the index did"
    print(f"saved and reopened: {path.stat().st_size:,} bytes, the same results")

texts = [json.loads(line) for line in gzip.open(sample / "texts.jsonl.gz", "rt")]
asked = [json.loads(line) for line in open(sample / "queries.jsonl")]
for q in range(3):
    hits, _ = index.search(queries[q], k=3, nprobe=16)
    found = ", ".join(texts[i]["package"] for i in hits[0])
    print(f"{asked[q]['text']!r}: {found}")
