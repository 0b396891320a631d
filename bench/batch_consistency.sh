#!/usr/bin/env bash
# Whether a query's results depend on the batch it is searched in (session 64). Builds a
# 5,000 x 40 `sq8` index of 256 anchors over standard normal vectors (seed 3), searches 777
# queries near them (k 40, nprobe 32) in one call and with `vlc search --batch-size N` for each
# N, and prints, per N, the result rows that differ from one call's, the ids that differ, and
# the largest relative difference of a distance. On the CPU kernel this machine ranks anchors
# with (`CPU kernels:` in `vlc eval`'s header). Run it with VLC_NO_VNNI=1 (and
# VLC_NO_AVX2_INT8=1) to see the AVX2 and f32 kernels on a machine with VNNI.
#
# Usage: bash bench/batch_consistency.sh VLC [BATCH SIZES, default "1 7 15 16 17 32 63 64 100"]
set -euo pipefail
vlc=$(realpath "${1:?vlc binary}"); sizes=${2:-1 7 15 16 17 32 63 64 100}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT; cd "$tmp"
python3 -c "
import numpy as np
r = np.random.default_rng(3); x = r.standard_normal((5000, 40)).astype('f4'); np.save('x.npy', x)
np.save('q.npy', (x[:777] + 0.1 * r.standard_normal((777, 40))).astype('f4'))"
"$vlc" build x.npy -o x.vlc --codec sq8 --anchors 256 --backend cpu -q > /dev/null
"$vlc" eval x.vlc --queries q.npy --base x.npy --nprobe 32 2>/dev/null | head -1
"$vlc" search x.vlc q.npy -k 40 --nprobe 32 -o one.npy 2> /dev/null
for n in $sizes; do
  "$vlc" search x.vlc q.npy -k 40 --nprobe 32 --batch-size "$n" -o parts.npy 2> /dev/null
  python3 -c "
import numpy as np
a, b = np.load('one.npy'), np.load('parts.npy')
da, db = np.load('one.distances.npy'), np.load('parts.distances.npy')
rows = int(((a != b) | (da != db)).any(axis=1).sum())
print(f'--batch-size $n: {rows} of {len(a)} rows differ, {int((a != b).sum())} of {a.size} ids, '
      f'largest relative distance difference {float(np.max(np.abs(da - db) / np.abs(da))):.2g}')"
done
