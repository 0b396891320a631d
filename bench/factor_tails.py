#!/usr/bin/env python3
"""How many vectors of an index have a per-vector factor stored with a tail code: beyond the
range fitted on the build's training sample, where an 8- or 16-bit factor is kept to its side
and order of magnitude only (`codec::FactorFormat`), so that vector's distance estimates are
coarser.

Usage: python3 bench/factor_tails.py INDEX.vlc [INDEX.vlc ...] [--vlc target/release/vlc]

Reads the section table of the file (`crates/vlc-core/src/format.rs`) for the codes and asks
`vlc info` how the last stage's factors are stored (the last 2 or 4 bytes of every code of a
`rabitq*` or `pcaq` index).
"""
import argparse
import re
import struct
import subprocess

import numpy as np

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("indexes", nargs="+")
ap.add_argument("--vlc", default="target/release/vlc")
a = ap.parse_args()

for path in a.indexes:
    data = open(path, "rb").read()
    n = struct.unpack_from("<Q", data, 24)[0]
    sections = {}
    for s in range(struct.unpack_from("<I", data, 36)[0]):
        tag, _, offset, length, _, _ = struct.unpack_from("<4sIQQII", data, 64 + 32 * s)
        sections[tag.decode()] = (offset, length)
    offset, length = sections["CODE"]
    codes = np.frombuffer(data[offset:offset + length], dtype=np.uint8).reshape(n, length // n)
    info = subprocess.run([a.vlc, "info", path], capture_output=True, text=True, check=True).stdout
    found = re.search(r"factors\s+(.*) per vector", info)
    last = found.group(1).rstrip(", ").split(", ")[-1].split(" ")[0] if found else "none"
    if last == "16-bit":
        factors, tail = codes[:, -4:].copy().view("<u2"), 32
    elif last == "8-bit":
        factors, tail = codes[:, -2:], 16
    else:
        print(f"{path}: factors {last}: no tail codes")
        continue
    top = (1 << (8 * factors.dtype.itemsize)) - 1 - tail
    outside = ((factors < tail) | (factors > top)).any(axis=1)
    print(f"{path}: {last} factors; {outside.sum()} of {n} vectors ({100 * outside.mean():.3f}%) "
          f"with a tail-coded factor of the last stage")
