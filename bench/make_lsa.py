#!/usr/bin/env python3
"""A second real dataset from the development set's texts, by another embedding model: LSA.

Usage: python3 bench/make_lsa.py TEXTS_JSONL_GZ QUERY_META_JSON OUT_DIR [--dim 128] [--seed 0]
(needs scikit-learn: pip install scikit-learn)

Documents: the `text` of every row of TEXTS_JSONL_GZ as TF-IDF (sublinear term frequency, words
and word pairs seen in at least two documents), reduced to `dim` dimensions by a truncated SVD
fitted on the documents, unit norm. Queries: the `synopsis` of the rows that QUERY_META_JSON's
`query_rows` names (short texts, as in real search), through the same TF-IDF and SVD. The result
is a real embedding set whose spectrum and cluster structure differ from a neural model's (a
few dominant axes, long tails), at a dimension of the user's choice. Writes base.npy (float32),
query.npy and groundtruth.npy (int32, exact top-100 by L2).

For the development set:
  python3 bench/make_lsa.py ../shared/data/debian-minilm/texts.jsonl.gz \
      ../shared/data/debian-minilm/query_meta.json /tmp/vlc/lsa128 --dim 128
"""
import argparse
import gzip
import json
import os

import numpy as np
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer

ap = argparse.ArgumentParser()
ap.add_argument("texts")
ap.add_argument("query_meta")
ap.add_argument("out")
ap.add_argument("--dim", type=int, default=128)
ap.add_argument("--seed", type=int, default=0)
a = ap.parse_args()

with gzip.open(a.texts, "rt") as f:
    rows = [json.loads(line) for line in f]
with open(a.query_meta) as f:
    query_rows = json.load(f)["query_rows"]
docs = [r["text"] for r in rows]
queries = [rows[i]["synopsis"] for i in query_rows]

tfidf = TfidfVectorizer(sublinear_tf=True, min_df=2, ngram_range=(1, 2), dtype=np.float32)
x_docs = tfidf.fit_transform(docs)
svd = TruncatedSVD(n_components=a.dim, algorithm="randomized", n_iter=7, random_state=a.seed)
base = svd.fit_transform(x_docs).astype(np.float32)
query = svd.transform(tfidf.transform(queries)).astype(np.float32)


def unit(v):
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    if (norms == 0).any():
        raise SystemExit(f"{int((norms == 0).sum())} rows have no known term; cannot normalise")
    return (v / norms).astype(np.float32)


base, query = unit(base), unit(query)
gt = np.empty((len(query), 100), dtype=np.int32)
bn = (base * base).sum(1)
for s in range(0, len(query), 500):
    q = query[s:s + 500]
    d = bn[None, :] - 2 * q @ base.T
    idx = np.argpartition(d, 100, axis=1)[:, :100]
    order = np.take_along_axis(d, idx, 1).argsort(1)
    gt[s:s + 500] = np.take_along_axis(idx, order, 1)
os.makedirs(a.out, exist_ok=True)
np.save(os.path.join(a.out, "base.npy"), base)
np.save(os.path.join(a.out, "query.npy"), query)
np.save(os.path.join(a.out, "groundtruth.npy"), gt)
ratio = svd.explained_variance_ratio_
print(f"{a.out}: {len(base)} x {a.dim}, {len(query)} queries; "
      f"SVD explains {ratio.sum():.3f} of the TF-IDF variance (first axis {ratio[0]:.3f})")
