#!/usr/bin/env python3
"""Make the demo sample committed under data/sample/ from the Debian MiniLM development set.

Usage: python3 tools/make_sample.py ../shared/data/debian-minilm data/sample

Takes 5,000 document embeddings (seeded random choice, kept as float16) with their package
name and synopsis, and 200 synopsis queries whose source package is in the sample.
"""
import gzip
import json
import sys

import numpy as np

src, dst = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(20261121)
base = np.load(f"{src}/base.npy")
meta = json.load(open(f"{src}/query_meta.json"))
rows = np.sort(rng.choice(base.shape[0], 5000, replace=False))
pos = {int(r): i for i, r in enumerate(rows)}
texts = [json.loads(l) for l in gzip.open(f"{src}/texts.jsonl.gz", "rt")]
np.save(f"{dst}/base.npy", base[rows].astype(np.float16))
with gzip.open(f"{dst}/texts.jsonl.gz", "wt") as f:
    for r in rows:
        t = texts[r]
        f.write(json.dumps({"package": t["package"], "synopsis": t["synopsis"]}) + "\n")
queries = np.load(f"{src}/query.npy")
picked = [i for i, r in enumerate(meta["query_rows"]) if int(r) in pos][:200]
np.save(f"{dst}/queries.npy", queries[picked].astype(np.float16))
with open(f"{dst}/queries.jsonl", "w") as f:
    for i in picked:
        f.write(json.dumps({"text": meta["query_text"][i], "source": pos[int(meta["query_rows"][i])]}) + "\n")
print(f"{len(rows)} documents, {len(picked)} queries")
