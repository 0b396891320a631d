#!/bin/bash
# Kernel durations (run P3) of a warm training with Nsight Compute, summed per kernel name.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64
NCU=/usr/local/cuda/bin/ncu
python3 -c "
import numpy as np
rng=np.random.default_rng(1); c=rng.normal(size=(256,128)).astype(np.float32); x=(c[rng.integers(0,256,10000)]+0.3*rng.normal(size=(10000,128))).astype(np.float32); np.save('/tmp/s.npy',x)
rng=np.random.default_rng(0); c=rng.standard_normal((4096,384),dtype=np.float32); l=rng.integers(0,4096,1000000)
x=c[l]+0.5*rng.standard_normal((1000000,384),dtype=np.float32); np.save('/tmp/x.npy',x)"
summ='import csv,sys,collections
rows=[r for r in csv.reader(l for l in sys.stdin if l.startswith("\""))]
h=rows[0]; ik=h.index("Kernel Name"); iv=h.index("Metric Value"); n=collections.Counter(); t=collections.Counter()
for r in rows[1:]:
    try: v=float(r[iv].replace(",",""))
    except: continue
    k=r[ik].split("(")[0][:60]; n[k]+=1; t[k]+=v
tot=sum(t.values()); print("kernels %d, total %.2f ms" % (sum(n.values()), tot/1e6))
for k,v in t.most_common(25): print("%10.3f ms %6d  %9.1f us  %s" % (v/1e6, n[k], v/n[k]/1e3, k))'
for case in "s 256 30" "x 4096 20"; do set -- $case
  echo "== $1: $2 anchors, $3 iterations (second training of the process)"
  timeout 280 $NCU --csv --metrics gpu__time_duration.sum --launch-skip 0 .carry/vlc train-bench /tmp/$1.npy --backend cuda --warmup --anchors $2 --iterations $3 > /tmp/ncu_$1.csv 2>/tmp/ncu_$1.err
  echo "rc $?"; tail -3 /tmp/ncu_$1.err
  python3 -c "$summ" < /tmp/ncu_$1.csv
done
