set -u
tar -C .carry -xJf .carry/bin.tar.xz; B=.carry/bin; D=.carry/dev; export PATH=$PWD/$B:$PATH; cp $B/vlc .carry/vlc
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo '$ cuda_unit; cuda_conf; VLC_CUDA_SMALL_WORK=0 cuda_conf; cuda_search --nocapture; wgpu_conf; wgpu_search --nocapture (all --test-threads 1)'
cuda_unit --test-threads 1 2>&1 | grep -E "test result|panicked"
cuda_conf --test-threads 1 2>&1 | grep -E "test result|panicked"
VLC_CUDA_SMALL_WORK=0 cuda_conf --test-threads 1 2>&1 | grep -E "test result|panicked"
cuda_search --test-threads 1 --nocapture 2>&1 | grep -E "^pcaq|f16|f32|test result|panicked" | grep -v "margin Some"
wgpu_conf --test-threads 1 2>&1 | grep -E "test result|panicked"
wgpu_search --test-threads 1 --nocapture 2>&1 | grep -E "^pcaq|f16|f32|test result|panicked" | grep -v "margin Some"
echo '$ bash bench/gpu_auto_fallback_check.sh'
bash bench/gpu_auto_fallback_check.sh 2>&1 | grep -E "^==|exit|backend|ids|H200|H100"
echo '$ first 20,000 dev vectors: vlc build base20k.npy --codec rabitq1 --refine f16|f32 and --codec f16 (CPU), exact top-10 of q1k by numpy'
T=/tmp/fl; mkdir -p $T
vlc build .carry/base20k.npy -o $T/r1f16.vlc --codec rabitq1 --refine f16 --backend cpu -q >/dev/null
vlc build .carry/base20k.npy -o $T/r1f32.vlc --codec rabitq1 --refine f32 --backend cpu -q >/dev/null
vlc build .carry/base20k.npy -o $T/f16.vlc --codec f16 --backend cpu -q >/dev/null
python3 -c "
import numpy as np
x=np.load('.carry/base20k.npy').astype(np.float32); q=np.load('.carry/q1k.npy').astype(np.float32)
d=(q*q).sum(1)[:,None]-2*q@x.T+(x*x).sum(1)[None]
np.save('$T/gt.npy', np.argsort(d,1)[:,:10].astype(np.int32))"
echo '$ NPROBE=16,64,128 bash bench/gpu_search_check.sh vlc q1k.npy gt.npy r1f16.vlc r1f32.vlc f16.vlc'
NPROBE=16,64,128 bash bench/gpu_search_check.sh vlc .carry/q1k.npy $T/gt.npy $T/r1f16.vlc $T/r1f32.vlc $T/f16.vlc 2>&1 | grep -v "^search backend"
echo '$ bash bench/gpu_search_check.sh vlc q.npy gt10.npy p64.vlc'
bash bench/gpu_search_check.sh vlc $D/q.npy $D/gt10.npy $D/p64.vlc 2>&1 | grep -v "^search backend"
