#!/usr/bin/env python3
"""Peak memory of `vlc build` on a collection larger than its f32 copy should need.

Usage: python3 bench/build_memory.py WORK_DIR [--n 1000000] [--dim 384] [--vlc target/release/vlc]
                                     [-- BUILD_OPTIONS...]

Writes WORK_DIR/large_N_DIM.npy (float16 unit vectors from 2,000 Gaussian clusters, made a
block at a time; kept for reruns), builds it with `vlc build ... --quiet` and the options
given after `--` (default `--codec pcaq1`), and prints the input's size as f16 and as f32, the
build's peak resident memory (its ru_maxrss, from wait4), its wall time and the index size.
`vlc build` reads its input a block at a time, so its peak is the training samples, one block
and the codes, not the input.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

argv = sys.argv[1:]
extra = []
if "--" in argv:
    extra = argv[argv.index("--") + 1 :]
    argv = argv[: argv.index("--")]
ap = argparse.ArgumentParser()
ap.add_argument("work")
ap.add_argument("--n", type=int, default=1_000_000)
ap.add_argument("--dim", type=int, default=384)
ap.add_argument("--vlc", default="target/release/vlc")
ap.add_argument("--generate", action="store_true", help=argparse.SUPPRESS)
a = ap.parse_args(argv)
extra = extra or ["--codec", "pcaq1"]

os.makedirs(a.work, exist_ok=True)
data = os.path.join(a.work, f"large_{a.n}_{a.dim}.npy")
if not os.path.exists(data) and not a.generate:
    # Made in a process of its own: a child spawned by this one (vfork) starts with this
    # process's peak memory as its own, which the generation would otherwise inflate.
    subprocess.run([sys.executable, __file__, *argv, "--generate"], check=True)
elif a.generate:
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((2000, a.dim)).astype(np.float32)
    out = np.lib.format.open_memmap(data + ".tmp.npy", mode="w+", dtype=np.float16, shape=(a.n, a.dim))
    step = 100_000
    for s in range(0, a.n, step):
        m = min(step, a.n - s)
        x = centres[rng.integers(0, 2000, m)] + 0.7 * rng.standard_normal((m, a.dim)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        out[s : s + m] = x.astype(np.float16)
    out.flush()
    del out
    os.replace(data + ".tmp.npy", data)
    sys.exit(0)

index = os.path.join(a.work, "large.vlc")
cmd = [a.vlc, "build", data, "-o", index, "--quiet", *extra]
print("$", " ".join(cmd), flush=True)
start = time.time()
child = subprocess.Popen(cmd)
_, status, usage = os.wait4(child.pid, 0)
wall = time.time() - start
if status != 0:
    sys.exit(f"vlc build failed (wait status {status})")
peak = usage.ru_maxrss * 1024  # Linux reports KiB
gib = 1024**3
print(f"input      {a.n:,} x {a.dim}: {os.path.getsize(data) / gib:.2f} GiB as f16, {a.n * a.dim * 4 / gib:.2f} GiB as f32")
print(f"peak RSS   {peak / gib:.2f} GiB")
print(f"wall       {wall:.1f} s")
print(f"index      {os.path.getsize(index) / gib:.3f} GiB ({os.path.getsize(index) / a.n:.1f} bytes/vector)")
