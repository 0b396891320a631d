#!/usr/bin/env python3
"""How far each dataset's mean lies from the origin, in units of its spread (the root mean squared
distance of its vectors to the mean), over up to 20,000 evenly spaced rows of DIR/base.npy: the ratio
`vlc build` compares with 4 to decide whether to centre an index (vlc::vectors::CENTRE_RATIO; it
samples up to 16,384 rows). Usage: python3 bench/centre_ratio.py DIR [DIR ...]
"""
import os, sys
import numpy as np

if len(sys.argv) < 2:
    sys.exit(__doc__)
for d in sys.argv[1:]:
    x = np.load(os.path.join(d, "base.npy"), mmap_mode="r")
    s = np.asarray(x[:: max(1, len(x) // 20000)], dtype=np.float64)
    mean = s.mean(0)
    spread = np.sqrt(((s - mean) ** 2).sum(1).mean())
    print(f"{d}: {x.shape[0]} x {x.shape[1]}, mean's norm / spread = {np.linalg.norm(mean) / spread:.3f}")
