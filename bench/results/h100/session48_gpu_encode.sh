# Session 48 device script: the encode primitive on CUDA (Backend::code_levels, kernels/code_levels.cu).
# 1. The CUDA test executables of COMMIT: conformance (with check_code_levels and
#    check_encode_matches_cpu: the GPU's levels equal the CPU reference's, and pcaq and rabitq
#    codes encoded through them are the CPU's byte for byte), unit tests, search tests.
# 2. 1,000,000 x 384 synthetic (bench/make_synthetic.py --seed 11, as in sessions 44-45), 4,096
#    anchors trained on CUDA, built by COMMIT's vlc with the levels on the CPU (VLC_CUDA_ENCODE=0)
#    and on the GPU (the default), pcaq5, pcaq2.5, pcaq1 and rabitq4, each pair twice; the two indexes
#    compared section by section before META; the GPU-encoded pcaq5 evaluated on the CPU at
#    nprobe 32. Then 400,000 x 768 (--seed 12), pcaq3, the same way.
# Carry: .carry/s64.tar.xz (s64/: vlc, conformance, vlc_cuda, search of COMMIT, stripped).
# Usage: bash bench/results/h100/session48_gpu_encode.sh COMMIT
set -u
tar -C .carry -xJf .carry/s64.tar.xz; B=$PWD/.carry/s64
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export VLC_KERNEL_CACHE=/tmp/vlc-kernels
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "$(nproc) CPU cores; binaries from $1"
echo "== CUDA conformance"
$B/conformance 2>&1 | grep -E "^test |test result|panicked|SKIPPED" 
echo "== CUDA unit tests"
$B/vlc_cuda 2>&1 | grep -E "test result|panicked"
echo "== CUDA search tests"
$B/search 2>&1 | grep -E "test result|panicked"
compare() {
  python3 - "$B/vlc" "$1" "$2" <<'PY'
import json, subprocess, sys
import numpy as np
vlc, a, b = sys.argv[1:]
infos = [json.loads(subprocess.run([vlc, "info", f, "--json"], capture_output=True, check=True).stdout) for f in (a, b)]
for sa in infos[0]["sections"]:
    if sa["tag"] == "META":
        continue
    sb = next(s for s in infos[1]["sections"] if s["tag"] == sa["tag"])
    xa = np.fromfile(a, dtype=np.uint8, count=sa["bytes"], offset=sa["offset"])
    xb = np.fromfile(b, dtype=np.uint8, count=sb["bytes"], offset=sb["offset"])
    same = xa.shape == xb.shape and bool((xa == xb).all())
    line = f"  {sa['tag']}: {sa['bytes']} bytes, {'identical' if same else 'DIFFERENT'}"
    if not same and sa["tag"] == "CODE" and xa.shape == xb.shape:
        size = infos[0]["code_size"]
        changed = (xa.reshape(-1, size) != xb.reshape(-1, size)).any(1)
        line += f" ({changed.sum()} of {len(changed)} codes differ)"
    print(line)
PY
}
build_pair() { # DIR CODEC ANCHORS
  for round in 1 2; do
    for enc in 0 1; do
      echo "\$ VLC_CUDA_ENCODE=$enc vlc build $1/base.npy -o $1/e$enc.$2.vlc --codec $2 --anchors $3 --backend cuda -q   (round $round)"
      VLC_CUDA_ENCODE=$enc $B/vlc build $1/base.npy -o $1/e$enc.$2.vlc --codec $2 \
        --anchors $3 --backend cuda -q 2>&1 | grep -E "file|build time|rror" || true
    done
  done
  compare $1/e0.$2.vlc $1/e1.$2.vlc
}
python3 bench/make_synthetic.py /tmp/big --n 1000000 --dim 384 --seed 11 | tail -1
for codec in pcaq5 pcaq2.5 pcaq1 rabitq4; do build_pair /tmp/big $codec 4096; done
echo "\$ vlc eval /tmp/big/e1.pcaq5.vlc --nprobe 32 --backend cpu"
$B/vlc eval /tmp/big/e1.pcaq5.vlc --queries /tmp/big/query.npy --groundtruth /tmp/big/groundtruth.npy \
  --nprobe 32 --backend cpu 2>&1 | tail -3
rm -f /tmp/big/*.vlc
python3 bench/make_synthetic.py /tmp/big768 --n 400000 --dim 768 --seed 12 | tail -1
build_pair /tmp/big768 pcaq3 2048
