# Session 42 device command, run 5, as it ran (the `run` tool's command line, in the repository root;
# carry .carry/s45.tar.xz and .gl, the binaries of session42_review.sh): `vlc groundtruth --backend
# wgpu -k 100` of 94a17e0 (vlc) against cdcc76b (vlc_prev), 1,000,000 x 384, after one warm-up run
# each, four times in turn. (Its first command, a `cp` of an earlier log, failed harmlessly.)
cp /work/.device/4/session42_review.log /dev/null 2>&1; set -u; tar -C .carry -xJf .carry/s45.tar.xz; export PATH=$PWD/.carry/s45:$PATH; for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json; T=$(mktemp -d); python3 -c "
import numpy as np
r = np.random.default_rng(40)
c = r.standard_normal((1000, 384)).astype(np.float32)
x = c[r.integers(0, 1000, 1_000_000)] + 0.6 * r.standard_normal((1_000_000, 384)).astype(np.float32)
x /= np.linalg.norm(x, axis=1, keepdims=True)
q = x[r.integers(0, 1_000_000, 10_000)] + 0.3 * r.standard_normal((10_000, 384)).astype(np.float32)
q /= np.linalg.norm(q, axis=1, keepdims=True)
np.save('$T/base.npy', x); np.save('$T/query.npy', q)"; for v in vlc_prev vlc; do $v groundtruth $T/base.npy $T/query.npy -o $T/w.npy --backend wgpu -k 100 -q >/dev/null 2>&1; done; for rep in 1 2 3 4; do for v in vlc_prev vlc; do echo "$v $(VLC_PROF=1 $v groundtruth $T/base.npy $T/query.npy -o $T/$v.npy --backend wgpu -k 100 --json 2>&1 | grep '"seconds"')"; done; done | tee $OUT/session42_review_gt_repeat.log
