"""Scratch-grade simulation (session 50): a two-level anchor ranking, on an index's own anchors.

The anchors (int8 section of a VLC index file) are grouped by k-means into GROUPS groups, each
anchor in its MULTI nearest groups. A query ranks the groups by their centre, then measures the
anchors of the nearest groups until budget x nprobe anchors (at least 64) are measured, and
probes the nprobe nearest of those. Printed per setting: the share of the true top 10 whose
list is probed (the recall ceiling; exact ranking in the first lines), the share of the exact
nprobe nearest anchors found, and the distances computed per query.

Usage: python3 bench/anchor_groups_sim.py INDEX DATASET_DIR MULTI GROUPS[,GROUPS...]
e.g.   vlc build DIR/base.npy -o /tmp/i.vlc --codec pcaq1 --anchors 4096
       python3 bench/anchor_groups_sim.py /tmp/i.vlc DIR 2 64,128
Needs numpy and faiss-cpu. Only int8 anchors (the default) are read.
"""
import sys, struct

import faiss
import numpy as np

path, data = sys.argv[1], sys.argv[2]
raw = open(path, 'rb').read()
dim, na = struct.unpack_from('<II', raw, 16)
nsec = struct.unpack_from('<I', raw, 36)[0]
secs = {}
for s in range(nsec):
    tag, _, off, ln = struct.unpack_from('<4sIQQ', raw, 64 + 32 * s)
    secs[tag] = (off, ln)
flags = raw[35]
off, ln = secs[b'ANCH']
assert flags == 2, 'anchors are not int8 (build with the default --anchor-precision int8)'
scales = np.frombuffer(raw, np.float32, na, off)
lev = np.frombuffer(raw, np.int8, na * dim, off + 4 * na).reshape(na, dim)
A = (lev.astype(np.float32) * scales[:, None]).astype(np.float32)
Q = np.load(data + '/query.npy' if __import__('os').path.exists(data + '/query.npy') else data + '/queries.npy').astype(np.float32)
X = np.load(data + '/base.npy', mmap_mode='r')
gt = np.load(data + '/groundtruth.npy')[:, :10]
nq = min(len(Q), 2000); Q = Q[:nq]; gt = gt[:nq]
# list of each gt vector
ix = faiss.IndexFlatL2(dim); ix.add(A)
gv = np.asarray(X[np.sort(np.unique(gt))], dtype=np.float32)
_, gl = ix.search(gv, 1)
lst = dict(zip(np.sort(np.unique(gt)).tolist(), gl[:, 0].tolist()))
glist = np.vectorize(lst.get)(gt)
NP = [16, 64, 256]
MULTI = int(sys.argv[3])
SS = [int(x) for x in sys.argv[4].split(',')]
_, exact = ix.search(Q, max(NP))
def ceiling(probes, n):
    return np.mean([np.isin(glist[i], probes[i][:n]).mean() for i in range(nq)])
for n in NP:
    print(f'exact nprobe {n}: ceiling {ceiling(exact, n):.4f}')
for S in SS:
    km = faiss.Kmeans(dim, S, niter=20, seed=1); km.train(A)
    _, sa = km.index.search(A, MULTI)
    members = [np.where((sa == s).any(1))[0] for s in range(S)]
    _, sorder = km.index.search(Q, S)
    for budget_mult in [2, 4, 8]:
        res = {}
        for n in NP:
            budget = max(budget_mult * n, 64)
            probes = []; cost = 0; hit = 0
            for i in range(nq):
                cand = []; c = 0
                for s in sorder[i]:
                    cand.append(members[s]); c += len(members[s]) / MULTI
                    if c >= budget: break
                cand = np.unique(np.concatenate(cand))
                d = ((A[cand] - Q[i]) ** 2).sum(1)
                top = cand[np.argsort(d)[:n]]
                probes.append(top); cost += len(cand)
                hit += len(np.intersect1d(top, exact[i, :n])) / n
            res[n] = (ceiling(probes, n), hit / nq, cost / nq + S)
        print(f'S {S} budget {budget_mult}x: ' + '  '.join(f'np{n}: ceil {c:.4f} probe-recall {h:.3f} dots {d:.0f}' for n, (c, h, d) in res.items()), flush=True)
