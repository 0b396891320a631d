# Session 47 device script, second run: CPU training with and without distance bounds (vlc
# train-bench, as bench/cpu_bounds_ab.sh runs it) on 200,000 x 384 synthetic vectors, 2,048
# anchors, 14 iterations, on all 16 cores and on 4 threads (RAYON_NUM_THREADS).
# Carry: .carry/s55.tar.xz (vlc of COMMIT).
# Usage: bash bench/results/h100/session47_bounds2.sh COMMIT
set -u
tar -C .carry -xJf .carry/s55.tar.xz; B=$PWD/.carry/s55; export PATH=$B:$PATH
echo "$(nproc) CPU cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')); built from $1"
python3 bench/make_synthetic.py /tmp/syn --n 200000 --dim 384 --seed 5
ab() {
  for flag in --no-distance-bounds ""; do
    vlc train-bench /tmp/syn/base.npy --anchors 2048 --iterations 14 --backend cpu --json $flag 2>/dev/null | tail -1 | python3 -c "
import json, sys
d = json.loads(sys.stdin.read()); r = d['ranked_history']
share = sum(r) / (d['vectors'] * len(r)) if r else 1.0
print(f\"$1 {'bounds   ' if r else 'no bounds'}: {d['seconds']:.3f} s (assign {d['phase_seconds']['assign']:.3f} s), energy {d['final_energy']:.9f}, ranked {share:.3f}\")"
  done
}
ab "16 threads, run 1"; ab "16 threads, run 2"
RAYON_NUM_THREADS=4 ab "4 threads"
