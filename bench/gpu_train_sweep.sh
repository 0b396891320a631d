#!/bin/bash
# On the device machine: `vlc train-bench DATA --backend cuda --warmup` once per argument
# ("default", or a VLC_CUDA_TILE_MB value), printing total and loop seconds, final energy and
# the phases. Usage: VLC=path/to/vlc bash bench/gpu_train_sweep.sh DATA.npy default [64 1024 ...]
# (VLC_CUDA_BOUNDS=0 in the environment turns the distance bounds off.)
vlc=${VLC:-.carry/vlc}
data=$1; shift
for t in "$@"; do
  if [ "$t" = default ]; then unset VLC_CUDA_TILE_MB; else export VLC_CUDA_TILE_MB=$t; fi
  "$vlc" train-bench "$data" --backend cuda --warmup --json | python3 -c "
import json,sys
r=json.loads(sys.stdin.read().strip().splitlines()[-1])
p=r['phase_seconds']
print('tile $t', 'total %.3f loop %.3f energy %.6f' % (r['seconds'], r['loop_seconds'], r['final_energy']), ' '.join('%s %.3f'%(k,v) for k,v in p.items()))
"
done
