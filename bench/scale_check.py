#!/usr/bin/env python3
"""Recall of VLC indexes over the same data scaled by powers of ten (session 63: values whose
squared distances overflow or underflow f32).

Clustered synthetic data (20 centres, standard normal, 48-d, spread 0.3 around them; 50 queries
near the first vectors) is multiplied by each SCALE, built with `vlc build` (default codec, or
--codec) and searched with `vlc eval --nprobe 16` against exact neighbours that `vlc
groundtruth` computes on the same scaled data. Each line: the scale, recall@10, or the first
line of the error `vlc` gave. Every scale within f32's range should give the recall of scale 1,
or a clear error.

Usage: python3 bench/scale_check.py [--vlc target/release/vlc] [--scales 1e-30,...,1e19]
       [--codec CODEC]
"""
import argparse, subprocess, tempfile, os
import numpy as np

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--vlc", default="target/release/vlc")
ap.add_argument("--scales", default="1e-30,1e-23,1e-21,1e-20,1e-10,1,1e10,1e18,1e19")
ap.add_argument("--codec", default=None)
a = ap.parse_args()

rng = np.random.default_rng(2)
centres = rng.standard_normal((20, 48))
x = centres[rng.integers(0, 20, 3000)] + 0.3 * rng.standard_normal((3000, 48))
q = x[:50] + 0.1 * rng.standard_normal((50, 48))

with tempfile.TemporaryDirectory() as tmp:
    p = lambda name: os.path.join(tmp, name)
    run = lambda *args: subprocess.run([a.vlc, *args], capture_output=True, text=True)
    print(f"{'scale':>8}  recall@10 at nprobe 16 (or vlc's error)")
    for scale in a.scales.split(","):
        s = float(scale)
        np.save(p("x.npy"), (x * s).astype(np.float32))
        np.save(p("q.npy"), (q * s).astype(np.float32))
        out = []
        for args in (["groundtruth", p("x.npy"), p("q.npy"), "-o", p("gt.npy"), "--backend", "cpu"],
                     ["build", p("x.npy"), "-o", p("x.vlc"), "--backend", "cpu"]
                     + (["--codec", a.codec] if a.codec else []),
                     ["eval", p("x.vlc"), "--queries", p("q.npy"), "--groundtruth", p("gt.npy"),
                      "--nprobe", "16", "--backend", "cpu"]):
            r = run(*args)
            if r.returncode != 0:
                err = [l for l in r.stderr.splitlines() if l.startswith("error")]
                out = [f"{args[0]}: " + (err[0] if err else r.stderr.strip()[-200:])]
                break
            out = [l for l in r.stdout.splitlines() if l.strip().startswith("16 ")]
        cell = out[0].split()[2] if out and not out[0].startswith(("groundtruth", "build", "eval")) else (out[0] if out else "?")
        print(f"{scale:>8}  {cell}")
