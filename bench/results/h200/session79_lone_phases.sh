#!/usr/bin/env bash
# Session 79: where a lone CUDA query's time goes inside the search kernel. Run from
# .carry/s136 on the H200 with vlc_a.gz (82eb6fe's stripped release vlc) and vlc_phases.gz (the
# same with bench/results/h200/lone_phases_session79.patch applied: clock64() stamps printed by
# thread 0 of every one-query launch). A synthetic set of the dev set's shape (60,601 x 384,
# 2,000 queries), the default sq8 index and a rabitq1 + sq8 one built on the CPU, then the first
# 50 queries one per call (`vlc eval --batch-size 1 --threads 1 --repeat 1`, which prints a
# stamp line per call, 100 in all) at nprobe 16 and 64; the medians of the stamp lines after
# the first five, in clock cycles of the SM.
cd "$(dirname "$0")"
for f in vlc_a vlc_phases; do gunzip -kf $f.gz; chmod +x $f; done
T=/tmp/ph; mkdir -p $T
python3 ../../bench/make_synthetic.py $T/d --n 60601 --dim 384 --queries 2000 >/dev/null
./vlc_a build -q $T/d/base.npy -o $T/sq8.vlc --backend cpu >/dev/null
./vlc_a build -q $T/d/base.npy -o $T/r1s8.vlc --codec rabitq1 --refine sq8 --backend cpu >/dev/null
python3 -c "import numpy as np; np.save('$T/q50.npy', np.load('$T/d/query.npy')[:50]); np.save('$T/g50.npy', np.load('$T/d/groundtruth.npy')[:50])"
for idx in sq8 r1s8; do for np_ in 16 64; do
  echo "== $idx nprobe $np_"
  ./vlc_phases eval $T/$idx.vlc --queries $T/q50.npy --groundtruth $T/g50.npy --nprobe $np_ --threads 1 --batch-size 1 --backend cuda --repeat 1 > $T/out.txt 2>&1
  grep -c PHASES $T/out.txt
  python3 - $T/out.txt <<'PY'
import sys, re, statistics as st
rows=[list(map(int, re.findall(r'-?\d+', l))) for l in open(sys.argv[1]) if l.startswith('PHASES')]
rows=rows[5:]
names=['rank','setup','scan','rounds','score','offer','rest','total']
print('  '.join(f"{n} {st.median(r[i] for r in rows):.0f}" for i,n in enumerate(names)))
PY
  tail -1 $T/out.txt
done; done
