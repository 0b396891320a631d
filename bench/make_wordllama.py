#!/usr/bin/env python3
"""A second neural embedding set from the development set's texts: WordLlama, 256-d.

Usage: python3 bench/make_wordllama.py TEXTS_JSONL_GZ QUERY_META_JSON OUT_DIR [--dim 256] [--raw]
(needs WordLlama's wheel, which carries its weights and tokenizer: pip install wordllama)

WordLlama (`l2_supercat_256`) is a token-embedding model distilled from large language models'
input embeddings: a text's vector is the mean of its tokens' vectors (no attention), so its
geometry differs from MiniLM's (a transformer) and from LSA's (a truncated SVD). Documents: the
`text` of every row of TEXTS_JSONL_GZ; queries: the `synopsis` of the rows QUERY_META_JSON's
`query_rows` names (short texts, as in real search). `--dim` keeps the first axes (the model is
trained so that 64 or 128 of them still work); vectors are scaled to unit norm, as WordLlama's
own similarity does, unless `--raw`. Writes base.npy (float32), query.npy and groundtruth.npy
(int32, exact top-100 by L2). No network access: the model is read from the installed package.

For the development set:
  python3 bench/make_wordllama.py ../shared/data/debian-minilm/texts.jsonl.gz \
      ../shared/data/debian-minilm/query_meta.json /tmp/vlc/wordllama256
"""
import argparse
import gzip
import json
import os
from pathlib import Path

import numpy as np
import wordllama
from safetensors import safe_open
from tokenizers import Tokenizer

ap = argparse.ArgumentParser()
ap.add_argument("texts")
ap.add_argument("query_meta")
ap.add_argument("out")
ap.add_argument("--dim", type=int, default=256)
ap.add_argument("--raw", action="store_true", help="keep the mean-pooled vectors as they are")
a = ap.parse_args()

# The package's loader looks for the tokenizer where the wheel does not put it and then tries
# the network; read both files from the wheel directly instead.
root = Path(wordllama.__file__).parent
tokenizer = Tokenizer.from_file(str(root / "tokenizers" / "l2_supercat_tokenizer_config.json"))
tokenizer.no_truncation()
with safe_open(str(root / "weights" / "l2_supercat_256.safetensors"), framework="np") as f:
    table = f.get_tensor("embedding.weight").astype(np.float32)
if not 0 < a.dim <= table.shape[1]:
    raise SystemExit(f"--dim {a.dim}: the model has {table.shape[1]} dimensions")
table = table[:, : a.dim]


def embed(texts):
    """Mean of each text's token vectors (WordLlama's pooling), in chunks."""
    out = np.empty((len(texts), a.dim), dtype=np.float32)
    for s in range(0, len(texts), 2000):
        for i, enc in enumerate(tokenizer.encode_batch(texts[s:s + 2000], add_special_tokens=False)):
            if not enc.ids:
                raise SystemExit(f"text {s + i} has no tokens")
            out[s + i] = table[enc.ids].mean(axis=0)
    return out


with gzip.open(a.texts, "rt") as f:
    rows = [json.loads(line) for line in f]
with open(a.query_meta) as f:
    query_rows = json.load(f)["query_rows"]
base = embed([r["text"] for r in rows])
query = embed([rows[i]["synopsis"] for i in query_rows])
# The mean-pooled vectors' norms (1st, 50th and 99th percentile), before any scaling.
spread = {name: np.percentile(np.linalg.norm(v, axis=1), [1, 50, 99]) for name, v in
          (("documents", base), ("queries", query))}
if not a.raw:
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    query /= np.linalg.norm(query, axis=1, keepdims=True)

gt = np.empty((len(query), 100), dtype=np.int32)
bn = (base.astype(np.float64) ** 2).sum(1)
for s in range(0, len(query), 500):
    q = query[s:s + 500].astype(np.float64)
    d = bn[None, :] - 2 * q @ base.T.astype(np.float64)
    idx = np.argpartition(d, 100, axis=1)[:, :100]
    order = np.take_along_axis(d, idx, 1).argsort(1, kind="stable")
    gt[s:s + 500] = np.take_along_axis(idx, order, 1)
os.makedirs(a.out, exist_ok=True)
np.save(os.path.join(a.out, "base.npy"), base)
np.save(os.path.join(a.out, "query.npy"), query)
np.save(os.path.join(a.out, "groundtruth.npy"), gt)
own = np.asarray(query_rows)
centre = np.linalg.norm(base.mean(0))
print(f"{a.out}: {len(base)} x {a.dim}, {len(query)} queries{' (unnormalised)' if a.raw else ''}; "
      f"norm of the documents' mean {centre:.3f}")
for name, (p1, p50, p99) in spread.items():
    print(f"  mean-pooled {name}' norms (1st / 50th / 99th percentile): {p1:.2f} / {p50:.2f} / {p99:.2f}")
print(f"  queries whose own package's description is the nearest: {(gt[:, 0] == own).mean():.3f}, "
      f"among the 10 nearest: {(gt[:, :10] == own[:, None]).any(1).mean():.3f}")
