#!/usr/bin/env python3
"""VLC's GPU anchor training against PyTorch k-means, same data, same run (device machine).

Usage: python3 bench/gpu_bench.py --vlc PATH_TO_vlc [--n 1000000] [--dim 384] [--anchors 4096]
       [--iterations 20] [--cpu-reference] [--out results.jsonl]
       [--search-index INDEX.vlc --queries Q.npy --groundtruth GT.npy [--nprobe 8,32,128]]
       [--search-only] [--search-backends cuda,wgpu]

Makes clustered float32 data (seeded), saves it as .npy, then times:
  * `vlc train-bench --backend cuda --warmup` (the whole training loop, data resident on the GPU,
    timed after one untimed run in the same process, as PyTorch's loop is timed after its warm-up),
  * PyTorch k-means (Lloyd, random init, chunked assignment) in FP32 and in TF32,
  * optionally `vlc train-bench --backend cpu` as the FP32 reference for the final energy.
Final energies are all measured the same way (mean squared distance to the nearest anchor).

With --search-index, also times VLC's batched search of those queries on the GPU (`vlc eval
--backend cuda`: a copy of the index on the GPU; each pass includes moving the queries there and
the results back; fastest of 5 passes) against the CPU search on all cores of the same machine,
with recall@10 of both; --search-backends cuda,wgpu adds the WGPU search (Vulkan there) to the
same table. --search-only skips the training part.
"""
import argparse
import json
import subprocess
import tempfile
import time

import numpy as np
import torch

ap = argparse.ArgumentParser()
ap.add_argument("--vlc", required=True)
ap.add_argument("--n", type=int, default=1_000_000)
ap.add_argument("--dim", type=int, default=384)
ap.add_argument("--anchors", type=int, default=4096)
ap.add_argument("--iterations", type=int, default=20)
ap.add_argument("--cpu-reference", action="store_true")
ap.add_argument("--out", default=None)
ap.add_argument("--data", default=None, help="where to save the generated .npy (default: a temporary file)")
ap.add_argument("--search-index", default=None, help="a .vlc index to search on the GPU and the CPU")
ap.add_argument("--queries", default=None)
ap.add_argument("--groundtruth", default=None)
ap.add_argument("--nprobe", default="8,16,32,64,128")
ap.add_argument("--search-only", action="store_true")
ap.add_argument("--search-backends", default="cuda", help="GPU search backends to time, comma separated (cuda, wgpu)")
a = ap.parse_args()
if a.search_index and not (a.queries and a.groundtruth):
    ap.error("--search-index needs --queries and --groundtruth")

def search_bench():
    gpus = [b for b in a.search_backends.split(",") if b]
    rows = {}
    for backend in gpus + ["cpu"]:
        out = subprocess.run([a.vlc, "eval", a.search_index, "--queries", a.queries, "--groundtruth", a.groundtruth,
                              "--nprobe", a.nprobe, "--repeat", "3" if backend == "cpu" else "5", "--backend", backend,
                              "--json"], check=True, capture_output=True, text=True)
        rows[backend] = json.loads(out.stdout)
    gpu = torch.cuda.get_device_name()
    cpu = rows["cpu"]
    print(f"search {a.search_index}: {cpu['codec']}{' + ' + cpu['refine'] if cpu['refine'] else ''}, "
          f"{cpu['vectors']} vectors, {cpu['queries']} queries; cpu on {cpu['threads']} threads, {'/'.join(gpus)} on {gpu}")
    print(f"{'nprobe':>6} {'recall@10 cpu':>14} " + " ".join(f"{'recall@10 ' + b:>15}" for b in gpus)
          + f" {'QPS cpu':>10} " + " ".join(f"{'QPS ' + b:>11}" for b in gpus))
    for i, c in enumerate(cpu["results"]):
        g = {b: rows[b]["results"][i] for b in gpus}
        print(f"{c['nprobe']:>6} {c['recall@10']:>14.4f} " + " ".join(f"{g[b]['recall@10']:>15.4f}" for b in gpus)
              + f" {c['qps']:>10.0f} " + " ".join(f"{g[b]['qps']:>11.0f}" for b in gpus), flush=True)
        r = {"system": "vlc-search", "index": a.search_index, "nprobe": c["nprobe"], "gpu": gpu,
             "recall@10_cpu": c["recall@10"], "qps_cpu": c["qps"], "cpu_threads": cpu["threads"]}
        for b in gpus:
            r[f"recall@10_{b}"] = g[b]["recall@10"]
            r[f"qps_{b}"] = g[b]["qps"]
        results.append(r)


results = []
if a.search_index:
    search_bench()
if a.search_only:
    if a.out:
        with open(a.out, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in results)
    raise SystemExit(0)

rng = np.random.default_rng(0)
centres = rng.standard_normal((a.anchors, a.dim), dtype=np.float32)
labels = rng.integers(0, a.anchors, a.n)
x = centres[labels] + 0.5 * rng.standard_normal((a.n, a.dim), dtype=np.float32)
path = a.data or tempfile.mktemp(suffix=".npy")
np.save(path, x)


def vlc(backend):
    out = subprocess.run([a.vlc, "train-bench", path, "--backend", backend, "--anchors", str(a.anchors),
                          "--iterations", str(a.iterations), "--json"] + (["--warmup"] if backend != "cpu" else []), check=True, capture_output=True, text=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["system"] = f"vlc-{backend}"
    return r


def energy(xt, c):
    best = []
    cn = (c * c).sum(1)
    for s in range(0, xt.shape[0], 262144):
        xs = xt[s:s + 262144]
        d = (xs * xs).sum(1, keepdim=True) - 2 * xs @ c.T + cn
        best.append(d.min(1).values.clamp_min(0))
    return torch.cat(best).double().mean().item()


def torch_kmeans(tf32):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    xt = torch.from_numpy(x).cuda()
    g = torch.Generator(device="cuda").manual_seed(0)
    c = xt[torch.randperm(a.n, device="cuda", generator=g)[:a.anchors]].clone()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(a.iterations):
        cn = (c * c).sum(1)
        assign = torch.empty(a.n, dtype=torch.long, device="cuda")
        for s in range(0, a.n, 262144):
            xs = xt[s:s + 262144]
            assign[s:s + 262144] = (cn - 2 * xs @ c.T).argmin(1)
        sums = torch.zeros_like(c).index_add_(0, assign, xt)
        counts = torch.bincount(assign, minlength=a.anchors).clamp_min(1).unsqueeze(1)
        c = sums / counts
    torch.cuda.synchronize()
    secs = time.perf_counter() - t
    torch.backends.cuda.matmul.allow_tf32 = False
    return {"system": f"torch-{'tf32' if tf32 else 'fp32'}", "seconds": secs, "final_energy": energy(xt, c)}


torch_kmeans(True)  # warm-up: CUDA context, cuBLAS handles
vlc("cuda")  # warm-up: kernel compilation into the disk cache
for run in [lambda: vlc("cuda"), lambda: torch_kmeans(False), lambda: torch_kmeans(True)] + ([lambda: vlc("cpu")] if a.cpu_reference else []):
    r = run()
    r.update({"n": a.n, "dim": a.dim, "anchors": a.anchors, "iterations": a.iterations, "gpu": torch.cuda.get_device_name()})
    results.append(r)
    phases = r.get("phase_seconds")
    extra = " phases " + " ".join(f"{k} {v:.3f}" for k, v in phases.items()) if phases else ""
    if "splits" in r:
        extra += f" (merges {r['merges']}, splits {r['splits']}, reseeds {r['reseeds']})"
    # VLC's loop_seconds leaves out drawing the sample and uploading it; PyTorch's seconds
    # start with its data already on the GPU, so these two are the like-for-like pair.
    loop = f" (loop {r['loop_seconds']:.3f} s)" if "loop_seconds" in r else ""
    print(f"{r['system']:<10} {r['seconds']:8.3f} s{loop}  energy {r['final_energy']:.6f}{extra}", flush=True)
if a.out:
    with open(a.out, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in results)
