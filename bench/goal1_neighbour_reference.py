"""Goal 1 lever check: code each vector against its nearest neighbour in its list instead of
its anchor (closed-loop prediction, as in DPCM). Worth bits only if the neighbour is much nearer
than the anchor once the neighbour's own coding error is added.

    python3 bench/goal1_neighbour_reference.py DATASET_DIR [--anchors 1024] [--kept 0.164]

Prints the mean squared distance of each vector to its anchor (FAISS k-means, 20 iterations),
to its nearest other vector in the same list, and to its nearest vector overall; the share of
vectors with a neighbour in their list nearer than their anchor; and the prediction error a
decoded neighbour would leave: the neighbour distance plus the coding error of that neighbour,
`kept` times the anchor distance (0.164: the share of the residual energy a product code left
at 416 bits in bench/goal1_rq.py's log; the ideal Gaussian code leaves 0.112).
"""

import argparse

import faiss
import numpy as np

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("data")
parser.add_argument("--anchors", type=int, default=1024)
parser.add_argument("--kept", type=float, default=0.164)
args = parser.parse_args()

x = np.load(f"{args.data}/base.npy").astype(np.float32)
n, dim = x.shape
km = faiss.Kmeans(dim, args.anchors, niter=20, seed=1)
km.train(x)
_, assign = km.index.search(x, 1)
assign = assign[:, 0]
to_anchor = ((x - km.centroids[assign]) ** 2).sum(1)
in_list = np.empty(n, np.float32)
for a in range(args.anchors):
    members = np.where(assign == a)[0]
    if len(members) < 2:
        in_list[members] = to_anchor[members]  # no neighbour: the anchor stays the reference
        continue
    v = x[members]
    d = (v * v).sum(1)[:, None] - 2 * v @ v.T + (v * v).sum(1)[None, :]
    np.fill_diagonal(d, np.inf)
    in_list[members] = np.maximum(d.min(1), 0)
flat = faiss.IndexFlatL2(dim)
flat.add(x)
overall, _ = flat.search(x, 2)
print(f"{n} x {dim}, {args.anchors} anchors")
print(f"mean squared distance to the anchor:                 {to_anchor.mean():.4f}")
print(f"... to the nearest other vector in the same list:     {in_list.mean():.4f}")
print(f"... to the nearest other vector overall:             {overall[:, 1].mean():.4f}")
print(f"vectors whose in-list neighbour is nearer than the anchor: {(in_list < to_anchor).mean():.3f}")
best = np.minimum(in_list + args.kept * to_anchor, to_anchor)
print(
    f"prediction error from a decoded neighbour (kept {args.kept}): {(in_list + args.kept * to_anchor).mean():.4f};"
    f" the better of it and the anchor per vector: {best.mean():.4f}"
    f" ({10 * np.log10(to_anchor.mean() / best.mean()):.2f} dB, before the bits that name the neighbour)"
)
