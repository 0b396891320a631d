#!/usr/bin/env python3
"""What an interrupted `vlc build` leaves beside its output (session 64).

An index is written to a hidden temporary file beside the output (`.NAME.tmp-...`) and renamed
over it when complete. This script starts `vlc build` over an existing output, waits until the
temporary file appears (the write is under way), sends SIGINT, SIGTERM or SIGHUP, and reports
how the run ended, what `vlc` said, whether the old output is intact, and which hidden files are
left. It then runs one more build to the same output and lists what is left after it (a
partial file of an ended process should be removed by it; `--next-vlc` runs that build with
another binary, e.g. this one after an older one's interrupted build).

Data: standard normal f32 vectors (ROWS x DIM, generated, seed 0); `--codec pcaq2 --anchors
256 --backend cpu`. The temporary file exists for the last part of a build only (the codes are
encoded in memory, then the file is written and synced), so the script polls without sleeping;
an attempt that misses the write (the build ends first) is retried, up to --attempts times.

Usage: python3 bench/interrupt_check.py [--vlc target/release/vlc] [--next-vlc VLC]
       [--rows 400000] [--dim 384] [--attempts 5]
"""
import argparse, os, signal, subprocess, tempfile, time
import numpy as np

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--vlc", default="target/release/vlc")
ap.add_argument("--rows", type=int, default=400000)
ap.add_argument("--dim", type=int, default=384)
ap.add_argument("--attempts", type=int, default=5)
ap.add_argument("--next-vlc", default=None, help="the vlc of the build after each interrupted one (default --vlc)")
a = ap.parse_args()
vlc = os.path.abspath(a.vlc)
next_vlc = os.path.abspath(a.next_vlc or a.vlc)

with tempfile.TemporaryDirectory() as tmp:
    p = lambda name: os.path.join(tmp, name)
    np.save(p("x.npy"), np.random.default_rng(0).standard_normal((a.rows, a.dim), dtype=np.float32))
    build = [vlc, "build", p("x.npy"), "-o", p("out.vlc"), "--codec", "pcaq2", "--anchors", "256",
             "--backend", "cpu", "-q"]
    hidden = lambda: sorted(f for f in os.listdir(tmp) if f.startswith(".out.vlc.tmp-"))
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        for attempt in range(1, a.attempts + 1):
            with open(p("out.vlc"), "wb") as f:
                f.write(b"the old index")
            for f in hidden():
                os.remove(p(f))
            run = subprocess.Popen(build, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            seen = None
            while run.poll() is None:
                if hidden():
                    seen = hidden()
                    run.send_signal(getattr(signal, name))
                    break
            _, err = run.communicate()
            if seen is None:
                continue  # the build ended before its write was seen: try again
            status = run.returncode
            ended = f"killed by {signal.Signals(-status).name}" if status < 0 else f"exit {status}"
            with open(p("out.vlc"), "rb") as f:
                intact = f.read() == b"the old index"
            said = " | ".join(l for l in err.strip().splitlines() if l) or "(nothing)"
            said = said.replace(tmp + "/", "")
            print(f"{name}, attempt {attempt}: {ended}; old output intact: {intact}; "
                  f"stderr: {said}; hidden files left: {hidden() or 'none'}")
            left = hidden()
            r = subprocess.run([next_vlc, *build[1:]], capture_output=True, text=True)
            print(f"  the next build: exit {r.returncode}; hidden files left: {hidden() or 'none'}"
                  f" (before it: {len(left)})")
            break
        else:
            print(f"{name}: the write was never seen in {a.attempts} attempts")
