#!/usr/bin/env python3
"""Filtered search (`vlc search --allow-ids`, session 65): recall@10 and speed at several
selectivities, against the exact neighbours among the allowed vectors.

For each share of the base allowed (a random subset, seed 0: 50%, 10%, 1%, 0.1%; or with
--layout range a run of consecutive ids, as one user's documents added together), the script
writes the subset's vectors and computes their exact top 10 for every query (`vlc groundtruth`,
ids mapped back to the base's), then runs `vlc search --allow-ids` at each nprobe on one thread
and scores the hits. The unfiltered search of the same index at the same nprobe is the first
row (share 100%). Time: wall time of one `vlc search` of every query, one thread (opening the
index and, where filtered, reading the ids and making the filter included), best of --repeat
runs; queries/s = queries / that time.

Usage: python3 bench/filtered_search.py DATASET_DIR [--vlc target/release/vlc]
       [--build-args "--codec rabitq1 --refine sq8"] [--nprobe 16,64] [--repeat 3]
       [--shares 0.5,0.1,0.01,0.001] [--layout random|range] [--batch-size N]
       [--backend cpu|cuda|wgpu] [--threads N]
DATASET_DIR holds base.npy and query.npy (the dev set's layout). On a GPU backend the time
includes copying the index to the device (once per `vlc search`), as --threads includes the
CPU's share of a filtered GPU search (ranking the lists).
"""
import argparse, os, shlex, subprocess, tempfile, time
import numpy as np

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("dataset")
ap.add_argument("--vlc", default="target/release/vlc")
ap.add_argument("--build-args", default="--codec rabitq1 --refine sq8")
ap.add_argument("--nprobe", default="16,64")
ap.add_argument("--shares", default="0.5,0.1,0.01,0.001")
ap.add_argument("--repeat", type=int, default=3)
ap.add_argument("--layout", choices=["random", "range"], default="random",
                help="random: a random subset (seed 0); range: a run of consecutive ids, from a random "
                     "start (seed 0), as the documents of one user or source added together")
ap.add_argument("--batch-size", type=int, default=0,
                help="vlc search --batch-size: 0 (default) every query in one call, as a batch; 1 each "
                     "query searched alone, as an application asking for one user at a time (the "
                     "results then written a query at a time, which the time includes)")
ap.add_argument("--backend", choices=["cpu", "cuda", "wgpu"], default="cpu",
                help="vlc search --backend (default cpu)")
ap.add_argument("--threads", type=int, default=1, help="vlc search --threads (default 1)")
a = ap.parse_args()
vlc = os.path.abspath(a.vlc)


def run(*args):
    done = subprocess.run([vlc, *map(str, args)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"vlc {' '.join(map(str, args))} failed:\n{done.stderr}")


def timed_search(index, queries, nprobe, out, extra=()):
    best = None
    for _ in range(a.repeat):
        start = time.perf_counter()
        run("search", index, queries, "-k", 10, "--nprobe", nprobe, "--threads", a.threads, "-o", out,
            "--batch-size", a.batch_size, "--backend", a.backend, *extra)
        took = time.perf_counter() - start
        best = took if best is None else min(best, took)
    return best, np.load(out)


def recall(hits, truth):
    return np.mean([len(set(h[h >= 0]) & set(t)) / 10 for h, t in zip(hits, truth)])


base = np.load(os.path.join(a.dataset, "base.npy")).astype(np.float32)
queries_path = os.path.join(a.dataset, "query.npy")
num_queries = np.load(queries_path, mmap_mode="r").shape[0]
with tempfile.TemporaryDirectory() as tmp:
    p = lambda name: os.path.join(tmp, name)
    np.save(p("base.npy"), base)
    run("build", "-q", p("base.npy"), "-o", p("index.vlc"), *shlex.split(a.build_args))
    run("groundtruth", p("base.npy"), queries_path, "-k", 10, "-o", p("gt.npy"), "-q")
    print(f"vlc: {vlc}; data: {a.dataset} ({base.shape[0]} x {base.shape[1]}, {num_queries} queries); "
          f"vlc build {a.build_args}; search -k 10 --threads {a.threads} --backend {a.backend} --batch-size {a.batch_size}, best of {a.repeat}; "
          f"allowed: {a.layout} ids")
    print("| allowed | vectors | nprobe | recall@10 | queries/s |")
    print("|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    cases = [(1.0, None, np.load(p("gt.npy")))]
    for share in map(float, a.shares.split(",")):
        count = max(10, round(share * base.shape[0]))
        if a.layout == "random":
            allowed = np.sort(rng.choice(base.shape[0], count, replace=False))
        else:
            first = int(rng.integers(0, base.shape[0] - count + 1))
            allowed = np.arange(first, first + count)
        np.save(p("allowed.npy"), allowed.astype(np.int64))
        np.save(p("subset.npy"), base[allowed])
        run("groundtruth", p("subset.npy"), queries_path, "-k", 10, "-o", p("gt_subset.npy"), "-q")
        cases.append((share, allowed.copy(), allowed[np.load(p("gt_subset.npy"))]))
        os.replace(p("allowed.npy"), p(f"allowed_{share}.npy"))
    for share, allowed, truth in cases:
        for nprobe in map(int, a.nprobe.split(",")):
            extra = () if allowed is None else ("--allow-ids", p(f"allowed_{share}.npy"))
            seconds, hits = timed_search(p("index.vlc"), queries_path, nprobe, p("hits.npy"), extra)
            if allowed is not None:
                assert np.isin(hits[hits >= 0], allowed).all(), "a hit outside the filter"
            n = base.shape[0] if allowed is None else len(allowed)
            print(f"| {share:.1%} | {n} | {nprobe} | {recall(hits, truth):.4f} | {num_queries / seconds:,.0f} |")
