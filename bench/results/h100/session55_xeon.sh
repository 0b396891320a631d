# Session 55 device script: COMMIT's orthonormalisation of pcaq's stored rotation by f64 GEMMs
# (linalg::orthonormalize_rows, run each time a pcaq index is opened) on the GPU machine's
# Xeon, a CPU with AVX-512 beside this repo's AMD VM. 1. vlc-core's unit tests (the new test
# against the row-by-row reference, and across thread counts), golden files (every released
# format's answers, to 1e-5), codecs and search tests. 2. Opening a pcaq index (`vlc info`) with
# the `vlc` of 4bcf63e (before) and of COMMIT, three alternating rounds, on 1, 4 and all
# threads, at 1,536 and 3,072 dims (synthetic sets made here); and the neighbours and distances
# both give for 200 queries.
# Carry: .carry/s78.tar.xz (COMMIT's vlc-core lib, golden, codecs and search test executables,
# and the release `vlc` of 4bcf63e and of COMMIT, all stripped).
# Usage: bash bench/results/h100/session55_xeon.sh COMMIT
set -u
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
echo "$(nproc) CPU cores; built from $1"
grep -m1 'model name' /proc/cpuinfo
rm -rf /tmp/b && mkdir /tmp/b && tar -C /tmp/b -xJf .carry/s78.tar.xz
# The golden test reads its files where it was built (/work/main/crates/vlc-core/tests/golden).
[ -e /work/main/crates/vlc-core/tests/golden ] || { mkdir -p /work && ln -sfn "$(pwd)" /work/main; }
for t in vlc-lib golden codecs search; do
  /tmp/b/$t --test-threads 8 2>&1 | grep -E "test result|FAILED|panicked" | sed "s/^/$t: /"
done
python3 bench/make_synthetic.py /tmp/s1536 --n 30000 --dim 1536 --queries 1000 --seed 31 --latent 128 --clusters 300 >/dev/null
python3 bench/make_synthetic.py /tmp/s3072 --n 10000 --dim 3072 --queries 200 --seed 32 --latent 128 --clusters 100 >/dev/null
for set in s1536 s3072; do
  start=$(now_ms)
  /tmp/b/vlc_new build /tmp/$set/base.npy -o /tmp/$set.vlc --codec pcaq3 --backend cpu -q | grep -E "codec|file"
  echo "build (COMMIT's vlc): $(( $(now_ms) - start )) ms"
  for round in 1 2 3; do
    for v in old new; do
      for threads in 1 4 "$(nproc)"; do
        start=$(now_ms)
        /tmp/b/vlc_$v --threads "$threads" info /tmp/$set.vlc > /dev/null
        echo "== $set, round $round, vlc_$v, $threads threads: open $(( $(now_ms) - start )) ms"
      done
    done
  done
  python3 -c "import numpy as np, sys; np.save(sys.argv[2], np.load(sys.argv[1])[:200])" /tmp/$set/query.npy /tmp/q.npy
  for v in old new; do
    /tmp/b/vlc_$v search /tmp/$set.vlc /tmp/q.npy -k 100 --nprobe 32 -o /tmp/hits_$v.npy > /dev/null 2>&1
  done
  python3 -c "
import numpy as np
ids = [np.load(f'/tmp/hits_{v}.npy') for v in ('old', 'new')]
dist = [np.load(f'/tmp/hits_{v}.distances.npy') for v in ('old', 'new')]
print('$set: the same ids', bool((ids[0] == ids[1]).all()), '; the same distances bit for bit', bool((dist[0] == dist[1]).all()))
"
done
