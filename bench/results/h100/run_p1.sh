#!/bin/bash
# Profile (run P1): where the time of the 1M x 384 (4096 anchors, 20 iterations) and 10K x 128
# (256 anchors, 30 iterations) training loops goes, with Nsight Systems when the machine has it.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${NSYS:-none}"; ls /usr/local/cuda/bin | tr '\n' ' '; echo
python3 -c "
import numpy as np
rng=np.random.default_rng(0); c=rng.standard_normal((4096,384),dtype=np.float32); l=rng.integers(0,4096,1000000)
x=c[l]+0.5*rng.standard_normal((1000000,384),dtype=np.float32); np.save('/tmp/x.npy',x)
rng=np.random.default_rng(1); c=rng.normal(size=(256,128)).astype(np.float32); x=(c[rng.integers(0,256,10000)]+0.3*rng.normal(size=(10000,128))).astype(np.float32); np.save('/tmp/s.npy',x)
np.save('/tmp/x262.npy', np.load('/tmp/x.npy')[:262144])"
echo "== iteration_probe 262144 x 384, 4096 anchors (per call)"
VLC_PROBE_DATA=/tmp/x262.npy .carry/iteration_probe 262144 384 4096 20 2>&1 | grep -v "^training [123]"
echo "== iteration_probe 10K x 128, 256 anchors"
VLC_PROBE_DATA=/tmp/s.npy .carry/iteration_probe 10000 128 256 200 2>&1
if [ -n "$NSYS" ]; then
  for case in "x 4096 20" "s 256 30"; do set -- $case
    $NSYS profile -o /tmp/prof_$1 --force-overwrite true -t cuda,nvtx .carry/vlc train-bench /tmp/$1.npy --backend cuda --warmup --anchors $2 --iterations $3 > /dev/null 2>&1
    $NSYS stats -r cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum /tmp/prof_$1.nsys-rep 2>&1 | head -90
    $NSYS export -t sqlite -o /tmp/prof_$1.sqlite /tmp/prof_$1.nsys-rep >/dev/null 2>&1 && cp /tmp/prof_$1.sqlite $OUT/ 
  done
fi
