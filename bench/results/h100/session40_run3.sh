# Session 40 device script, run 3: CUDA tests of the radix-selection commit, then `vlc groundtruth` on CUDA
# against the CPU (all cores) and PyTorch on 1,000,000 x 384 synthetic vectors (k 100 and 10) and on a set
# with many exact duplicates. Carry: .carry/gpu40.tar.xz (vlc and the CUDA test executables of COMMIT).
# Usage: bash bench/results/h100/session40_run3.sh COMMIT
set -u
tar -C .carry -xJf .carry/gpu40.tar.xz; B=.carry/gpu40; export PATH=$PWD/$B:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "$(nproc) CPU cores; built from $1"
echo "== CUDA tests (--test-threads 1)"
echo "\$ cuda_conf with VLC_CUDA_SMALL_WORK=0"; VLC_CUDA_SMALL_WORK=0 cuda_conf --test-threads 1 2>&1 | grep -E "test result|panicked"
for t in cuda_conf cuda_unit cuda_search; do echo "\$ $t"; $t --test-threads 1 2>&1 | grep -E "test result|panicked|SKIP"; done
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
# Duplicates: 50,000 rows drawn from 2,000 distinct ones (about 25 copies each), 128-d.
d = r.standard_normal((2000, 128)).astype(np.float32)
np.save(sys.argv[1] + "/dup_base.npy", d[r.integers(0, 2000, 50_000)])
np.save(sys.argv[1] + "/dup_query.npy", d[:500] + 0.1 * r.standard_normal((500, 128)).astype(np.float32))
PY
run() { echo "\$ vlc groundtruth $1base.npy $1query.npy -o $2.npy --backend $3 -k $4"; timeout 200 /usr/bin/time -f "  %e s wall, %M KB peak" vlc groundtruth $T/${1}base.npy $T/${1}query.npy -o $T/$2.npy --backend $3 -k $4 --json 2>&1 | grep -E '"seconds"|"rescanned"|wall|rror'; }
for k in 100 10; do
  echo "== 1,000,000 x 384, 10,000 queries, k $k"
  run "" cpu$k cpu $k; run "" cuda$k cuda $k
  for f in npy distances.npy; do cmp -s $T/cpu$k.$f $T/cuda$k.$f && echo "  cuda $f: identical to cpu" || echo "  cuda $f: DIFFERS from cpu"; done
done
echo "== 50,000 x 128 with ~25 copies of each row, 500 queries, k 100"
run dup_ dcpu cpu 100; run dup_ dcuda cuda 100
for f in npy distances.npy; do cmp -s $T/dcpu.$f $T/dcuda.$f && echo "  cuda $f: identical to cpu" || echo "  cuda $f: DIFFERS from cpu"; done
python3 - $T <<'PY'
import sys, time, numpy as np, torch
T = sys.argv[1]
x = torch.from_numpy(np.load(T + "/base.npy")).cuda(); q = torch.from_numpy(np.load(T + "/query.npy")).cuda()
for k in (100, 10):
    ours = np.load(f"{T}/cpu{k}.npy")
    for rep in range(2):
        torch.cuda.synchronize(); t = time.time()
        xn = (x * x).sum(1)
        ids = torch.cat([(xn[None, :] - 2 * qb @ x.T).topk(k, dim=1, largest=False).indices for qb in q.split(1024)]).cpu().numpy()
        torch.cuda.synchronize()
    print(f"PyTorch FP32, k {k} (matmul + topk, 1,024 queries a batch, data already on the GPU): {time.time() - t:.2f} s; "
          f"ids equal to vlc's in {(ids == ours).mean():.4%} of places, {np.mean([len(set(a) & set(b)) for a, b in zip(ids, ours)]):.3f} of {k} in common")
PY
