#!/usr/bin/env python3
"""CPU against CUDA for a block-at-a-time build and `vlc add` (run on the GPU machine in a folder with
`vlc`, base20k.npy (20,000 x 384) and q1k.npy (1,000 queries); see
bench/results/h100/session28_streaming_build_and_add_2026-11-24.log)."""
import subprocess, sys, numpy as np
V = "./vlc"
x = np.load("base20k.npy").astype(np.float32)
q = np.load("q1k.npy").astype(np.float32)
np.save("first.npy", x[:16000]); np.save("rest.npy", x[16000:])
d = (q**2).sum(1)[:, None] - 2 * q @ x.T + (x**2).sum(1)[None]
gt = np.argsort(d, axis=1)[:, :10]
def run(*a):
    r = subprocess.run([V, *a], capture_output=True, text=True)
    if r.returncode: print(r.stderr); sys.exit(1)
    return r.stdout
res = {}
for name, steps in [
    ("cpu build", [["build", "base20k.npy", "-o", "a.vlc", "--backend", "cpu"]]),
    ("cuda build", [["build", "base20k.npy", "-o", "b.vlc", "--backend", "cuda"]]),
    ("cuda build 16k + cuda add 4k", [["build", "first.npy", "-o", "c.vlc", "--backend", "cuda"], ["add", "c.vlc", "rest.npy", "--backend", "cuda"]]),
    ("cpu build 16k + cpu add 4k", [["build", "first.npy", "-o", "d.vlc", "--backend", "cpu"], ["add", "d.vlc", "rest.npy", "--backend", "cpu"]]),
]:
    for s in steps:
        out = run(*s, *(["--codec", "rabitq1", "--refine", "sq8"] if s[0] == "build" else []), "--quiet")
        print(name, "|", " ".join(l.strip() for l in out.splitlines() if "anchors" in l or "energy" in l or "ids" in l))
    f = steps[0][3]
    run("search", f, "q1k.npy", "-k", "10", "--nprobe", "64", "-o", f + ".npy")
    ids = np.load(f + ".npy")
    res[name] = ids
    rec = np.mean([len(set(ids[i]) & set(gt[i])) / 10 for i in range(len(q))])
    print(f"{name}: recall@10 {rec:.4f} (nprobe 64)")
for a, b in [("cpu build", "cuda build"), ("cpu build 16k + cpu add 4k", "cuda build 16k + cuda add 4k")]:
    ov = np.mean([len(set(res[a][i]) & set(res[b][i])) / 10 for i in range(len(q))])
    print(f"{a} vs {b}: top-10 overlap {ov:.4f}")
# `vlc remove`: every tenth id out of the CPU-built index, then CPU and CUDA search of the result.
np.save("doomed.npy", np.arange(0, 20000, 10, dtype=np.int64))
run("remove", "a.vlc", "--ids-file", "doomed.npy", "-o", "r.vlc")
found = {}
for backend in ["cpu", "cuda"]:
    run("search", "r.vlc", "q1k.npy", "-k", "10", "--nprobe", "64", "--backend", backend, "-o", f"r_{backend}.npy")
    found[backend] = np.load(f"r_{backend}.npy")
    print(f"removed every tenth id, {backend} search: removed ids returned {int((found[backend] % 10 == 0).sum())}")
ov = np.mean([len(set(found["cpu"][i]) & set(found["cuda"][i])) / 10 for i in range(len(q))])
print(f"removed index, cpu vs cuda search: top-10 overlap {ov:.4f}")
