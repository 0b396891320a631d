#!/bin/bash
# Usage on the device machine, from the repo root, with .carry/ holding vlc, base20k.npy (first 20,000
# dev vectors) and q1k.npy (first 1,000 dev queries): bash bench/gpu_auto_fallback_check.sh
# Device check of the auto search backend (run from the repo root on the GPU machine): which
# backend it picks for each index, and the GPU's ids against the CPU's. Until session 35 the
# pcaq, f16 and f32 indexes fell back to the CPU; since then every codec searches on the GPU.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64
set -x
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
V=.carry/vlc; T=$(mktemp -d)
$V build .carry/base20k.npy -o $T/r1sq8.vlc --codec rabitq1 --refine sq8 --backend cuda -q
$V build .carry/base20k.npy -o $T/r1f16.vlc --codec rabitq1 --refine f16 --backend cuda -q
$V build .carry/base20k.npy -o $T/pcaq.vlc --codec pcaq1.5 --backend cuda -q
$V build .carry/base20k.npy -o $T/r1f32.vlc --codec rabitq1 --refine f32 --backend cuda -q
for i in r1sq8 r1f16 r1f32 pcaq; do
  echo "== $i auto"; $V search $T/$i.vlc .carry/q1k.npy -k 10 --nprobe 16 --backend auto -o $T/$i.auto.npy; echo "exit $?"
  echo "== $i cuda"; $V search $T/$i.vlc .carry/q1k.npy -k 10 --nprobe 16 --backend cuda -o $T/$i.cuda.npy; echo "exit $?"
  echo "== $i cpu"; $V search $T/$i.vlc .carry/q1k.npy -k 10 --nprobe 16 --backend cpu -o $T/$i.cpu.npy; echo "exit $?"
done
python3 -c "
import numpy as np, os
T='$T'
for i in ['r1sq8','r1f16','r1f32','pcaq']:
    c=np.load(f'{T}/{i}.cpu.npy'); a=np.load(f'{T}/{i}.auto.npy')
    g=np.load(f'{T}/{i}.cuda.npy') if os.path.exists(f'{T}/{i}.cuda.npy') else None
    print(i,'auto==cpu ids', float((a==c).mean()), 'cuda==cpu ids', None if g is None else float((g==c).mean()))
"
