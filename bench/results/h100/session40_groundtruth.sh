# Session 40 device script: `vlc groundtruth` on the GPU against the CPU (all cores) and PyTorch, on
# the dev set and on 1,000,000 x 384 synthetic vectors. Carry: .carry/gt (vlc.xz, base.npy and
# the first 3,000 queries of the dev set as query.npy; base.npy as base.npy.xz) and .gl. Usage: bash bench/results/h100/session40_groundtruth.sh COMMIT
set -u
G=.carry/gt; xz -dkf $G/vlc.xz; xz -dkf $G/base.npy.xz; chmod +x $G/vlc; export PATH=$PWD/$G:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; vlc built from $1"
T=$(mktemp -d)
python3 - "$T" <<'PY'
import sys, numpy as np
r = np.random.default_rng(40)
c = r.standard_normal((1000, 384)).astype(np.float32)
x = c[r.integers(0, 1000, 1_000_000)] + 0.6 * r.standard_normal((1_000_000, 384)).astype(np.float32)
x /= np.linalg.norm(x, axis=1, keepdims=True)
q = x[r.integers(0, 1_000_000, 10_000)] + 0.3 * r.standard_normal((10_000, 384)).astype(np.float32)
q /= np.linalg.norm(q, axis=1, keepdims=True)
np.save(sys.argv[1] + "/base.npy", x); np.save(sys.argv[1] + "/query.npy", q)
PY
run() { echo "\$ vlc groundtruth $1/base.npy $1/query.npy -o $2.npy --backend $3"; timeout 150 /usr/bin/time -f "  %e s wall, %M KB peak" vlc groundtruth $1/base.npy $1/query.npy -o $T/$2.npy --backend $3 --json 2>&1 | grep -E '"seconds"|"rescanned"|"backend"|wall|rror'; }
for set in dev big; do
  D=$G; [ $set = big ] && D=$T
  echo "== $set set"
  run $D ${set}_cpu cpu; run $D ${set}_cuda cuda; run $D ${set}_wgpu wgpu
  for b in cuda wgpu; do
    for f in npy distances.npy; do cmp -s $T/${set}_cpu.$f $T/${set}_$b.$f && echo "  $b $f: identical to cpu" || echo "  $b $f: DIFFERS from cpu"; done
  done
  python3 - $D $T/${set}_cpu.npy <<'PY'
import sys, time, numpy as np, torch
x = torch.from_numpy(np.load(sys.argv[1] + "/base.npy").astype(np.float32)).cuda()
q = torch.from_numpy(np.load(sys.argv[1] + "/query.npy").astype(np.float32)).cuda()
ours = np.load(sys.argv[2])
for rep in range(2):
    torch.cuda.synchronize(); t = time.time()
    xn = (x * x).sum(1)
    ids = torch.cat([(xn[None, :] - 2 * qb @ x.T).topk(100, dim=1, largest=False).indices for qb in q.split(1024)])
    ids = ids.cpu().numpy(); torch.cuda.synchronize()
    if rep: print(f"  PyTorch FP32 (matmul + topk, 1,024 queries a batch, data on the GPU): {time.time() - t:.2f} s; "
                  f"ids equal to vlc's in {(ids == ours).mean():.4%} of places, same sets in {np.mean([len(set(a) & set(b)) for a, b in zip(ids, ours)]):.2f} of 100")
PY
done
