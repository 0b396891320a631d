# Session 54 device script: COMMIT's lone-query products side by side (simd::matrix_vector:
# pcaq's query rotation, and the f32 anchor ranking where no integer kernel runs) on the GPU
# machine's Xeon (Sapphire Rapids class: AMX, AVX-512 VNNI, AVX-VNNI), an Intel CPU beside
# this repo's AMD VM. 1. vlc-core's unit tests (the kernel's parity test) and search tests, as
# it is and with AMX, AVX-512 and VNNI off (AVX2 only). 2. One query per call (`vlc eval
# --batch-size 1 --threads 1`), the `vlc` of 41f662f (before) against COMMIT's, three
# alternating rounds, on synthetic 384- and 1,536-d sets made here, with the integer ranking
# as it is (VNNI for one query) and off (f32 ranking, as on NEON).
# Carry: .carry/s76.tar.xz (COMMIT's vlc-core lib and search test executables, and the
# release `vlc` of 41f662f and of COMMIT, all stripped).
# Usage: bash bench/results/h100/session54_xeon.sh COMMIT
set -u
echo "$(nproc) CPU cores; built from $1"
grep -m1 'model name' /proc/cpuinfo
grep -o -w 'amx_int8\|avx512_vnni\|avx_vnni' /proc/cpuinfo | sort | uniq -c
rm -rf /tmp/b && mkdir /tmp/b && tar -C /tmp/b -xJf .carry/s76.tar.xz
for mode in "" "VLC_NO_AMX=1 VLC_NO_AVX512=1 VLC_NO_VNNI=1"; do
  echo "== tests, ${mode:-as it is}"
  for t in vlc-lib search; do
    env $mode /tmp/b/$t --test-threads 8 2>&1 | grep -E "test result|FAILED|panicked" | sed "s/^/$t: /"
  done
done
python3 bench/make_synthetic.py /tmp/s384 --n 100000 --dim 384 --queries 2000 --seed 54 --latent 64 --clusters 500 >/dev/null
python3 bench/make_synthetic.py /tmp/s1536 --n 30000 --dim 1536 --queries 1000 --seed 31 --latent 128 --clusters 300 >/dev/null
for set in s384 s1536; do
  /tmp/b/vlc_new build /tmp/$set/base.npy -o /tmp/$set.vlc --codec pcaq1 --backend cpu -q | grep -E "anchors|codec|file"
  for mode in "" "VLC_NO_AMX=1 VLC_NO_VNNI=1 VLC_NO_AVX2_INT8=1"; do
    for round in 1 2 3; do
      for v in old new; do
        echo "== $set, ranking ${mode:-as it is}, round $round: vlc_$v, one query per call"
        env $mode /tmp/b/vlc_$v eval /tmp/$set.vlc --queries /tmp/$set/query.npy \
          --groundtruth /tmp/$set/groundtruth.npy --nprobe 16,64 --threads 1 --repeat 3 \
          --batch-size 1 | sed -n '1s/.*CPU kernels/CPU kernels/p;3,$p'
      done
    done
  done
done
