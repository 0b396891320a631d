// Nearest anchors from a GEMM tile of dot products.
// dots: (rows, num_anchors) row-major, x_norms: (rows,), c_norms: (num_anchors,).
// One warp per row; distance = max(||x||^2 - 2 x.c + ||c||^2, 0); ties go to the smaller id.
// Selects the per_point smallest by repeated warp arg-min (per_point is small: 1 for training,
// nprobe for search).

extern "C" __global__ void row_norms(const float* __restrict__ x, int rows, int dim, float* __restrict__ out) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= rows) return;
    const float* r = x + (size_t)warp * dim;
    float s = 0.f;
    for (int d = lane; d < dim; d += 32) s += r[d] * r[d];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
    if (lane == 0) out[warp] = s;
}

__device__ __forceinline__ bool better(float d, int i, float bd, int bi) {
    return d < bd || (d == bd && i < bi);
}

extern "C" __global__ void nearest_from_dots(const float* __restrict__ dots, const float* __restrict__ x_norms,
                                             const float* __restrict__ c_norms, int rows, int num_anchors,
                                             int per_point, unsigned int* __restrict__ out_ids,
                                             float* __restrict__ out_dists) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= rows) return;
    const float* row = dots + (size_t)warp * num_anchors;
    float xn = x_norms[warp];
    float prev_d = -1.f;
    int prev_i = -1;
    for (int sel = 0; sel < per_point; ++sel) {
        float bd = __int_as_float(0x7f800000);  // +inf (NVRTC has no math headers)
        int bi = 0x7fffffff;
        for (int j = lane; j < num_anchors; j += 32) {
            float d = fmaxf(xn - 2.f * row[j] + c_norms[j], 0.f);
            // Skip what earlier passes selected: everything ordered at or before (prev_d, prev_i).
            bool after = d > prev_d || (d == prev_d && j > prev_i);
            if (after && better(d, j, bd, bi)) { bd = d; bi = j; }
        }
        for (int o = 16; o > 0; o >>= 1) {
            float od = __shfl_xor_sync(0xffffffff, bd, o);
            int oi = __shfl_xor_sync(0xffffffff, bi, o);
            if (better(od, oi, bd, bi)) { bd = od; bi = oi; }
        }
        if (lane == 0) {
            out_ids[(size_t)warp * per_point + sel] = (unsigned int)bi;
            out_dists[(size_t)warp * per_point + sel] = bd;
        }
        prev_d = bd;
        prev_i = bi;
    }
}

// The per_point smallest as nearest_from_dots gives them (same distances, order and tie rule),
// for 8 <= per_point <= RADIX_MAX_PICKS, by radix selection instead of one scan per pick: four
// passes over the row build 256-bin histograms of the distance's bits (a non-negative float's
// bits order as the float does) and narrow down the per_point-th smallest, T; a fifth pass
// gathers in id order everything below T and the first ties at T, in shared memory; the warp
// then ranks them (by distance, then id) and writes each to its place. One warp per row, 8 warps
// per block (launch_warps).
#define RADIX_MAX_PICKS 256
#define RADIX_WARPS 8

__device__ __forceinline__ unsigned int dist_key(const float* row, const float* c_norms, float xn, int j) {
    // fmaxf(., 0) may give -0: clear the sign so that equal distances have equal keys.
    return __float_as_uint(fmaxf(xn - 2.f * row[j] + c_norms[j], 0.f)) & 0x7fffffffu;
}

extern "C" __global__ void nearest_radix_from_dots(const float* __restrict__ dots, const float* __restrict__ x_norms,
                                                   const float* __restrict__ c_norms, int rows, int num_anchors,
                                                   int per_point, unsigned int* __restrict__ out_ids,
                                                   float* __restrict__ out_dists) {
    __shared__ unsigned int hist[RADIX_WARPS][256];
    __shared__ unsigned int pick_key[RADIX_WARPS][RADIX_MAX_PICKS];
    __shared__ unsigned int pick_id[RADIX_WARPS][RADIX_MAX_PICKS];
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int w = threadIdx.x >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= rows) return;  // whole warps leave together (rows are per warp)
    const float* row = dots + (size_t)warp * num_anchors;
    float xn = x_norms[warp];
    unsigned int* h = hist[w];
    // Narrow the threshold down 8 bits at a time: prefix holds the bits found so far; `need` is
    // how many of the keys matching the prefix still belong to the picks.
    unsigned int prefix = 0;
    int need = per_point;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = lane; b < 256; b += 32) h[b] = 0;
        __syncwarp();
        unsigned int high_mask = shift == 24 ? 0u : (0xffffffffu << (shift + 8));
        for (int j = lane; j < num_anchors; j += 32) {
            unsigned int key = dist_key(row, c_norms, xn, j);
            if ((key & high_mask) == prefix) atomicAdd(&h[(key >> shift) & 255u], 1u);
        }
        __syncwarp();
        // Lane 0 finds the digit where the running count reaches `need`.
        unsigned int digit = 0;
        int before = 0;
        if (lane == 0) {
            int sum = 0;
            for (int b = 0; b < 256; ++b) {
                int c = (int)h[b];
                if (sum + c >= need) { digit = (unsigned int)b; before = sum; break; }
                sum += c;
            }
        }
        digit = __shfl_sync(0xffffffff, digit, 0);
        before = __shfl_sync(0xffffffff, before, 0);
        prefix |= digit << shift;
        need -= before;
        __syncwarp();
    }
    // prefix = T; per_point - need keys lie below it, and the first `need` ties at T (by id) join.
    unsigned int lower = 1u << lane;
    lower -= 1u;
    int written = 0, ties = 0;
    for (int base = 0; base < num_anchors; base += 32) {
        int j = base + lane;
        unsigned int key = j < num_anchors ? dist_key(row, c_norms, xn, j) : 0xffffffffu;
        bool below = j < num_anchors && key < prefix;
        bool tie = j < num_anchors && key == prefix;
        unsigned int tie_mask = __ballot_sync(0xffffffff, tie);
        bool take = below || (tie && ties + __popc(tie_mask & lower) < need);
        unsigned int take_mask = __ballot_sync(0xffffffff, take);
        if (take) {
            int at = written + __popc(take_mask & lower);
            pick_key[w][at] = key;
            pick_id[w][at] = (unsigned int)j;
        }
        written += __popc(take_mask);
        ties += __popc(tie_mask);
    }
    __syncwarp();
    // Rank each pick by (distance, id): keys and ids are distinct pairs, so ranks are a permutation.
    for (int i = lane; i < per_point; i += 32) {
        unsigned int key = pick_key[w][i], id = pick_id[w][i];
        int rank = 0;
        for (int t = 0; t < per_point; ++t) {
            unsigned int k2 = pick_key[w][t], i2 = pick_id[w][t];
            rank += (k2 < key || (k2 == key && i2 < id)) ? 1 : 0;
        }
        out_ids[(size_t)warp * per_point + rank] = id;
        out_dists[(size_t)warp * per_point + rank] = __uint_as_float(key);
    }
}

// The nearest anchor only (training's assignment): the same distances and tie rule as
// nearest_from_dots, read four at a time when num_anchors is a multiple of 4 (rows are then
// 16-byte aligned). One warp per row; within a lane ids increase, so a strict < keeps the
// smaller id of a tie.
extern "C" __global__ void nearest1_from_dots(const float* __restrict__ dots, const float* __restrict__ x_norms,
                                              const float* __restrict__ c_norms, int rows, int num_anchors,
                                              unsigned int* __restrict__ out_ids,
                                              float* __restrict__ out_dists) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= rows) return;
    const float* row = dots + (size_t)warp * num_anchors;
    float xn = x_norms[warp];
    float bd = __int_as_float(0x7f800000);
    int bi = 0x7fffffff;
    if ((num_anchors & 3) == 0) {
        const float4* row4 = reinterpret_cast<const float4*>(row);
        const float4* c4 = reinterpret_cast<const float4*>(c_norms);
        int quads = num_anchors >> 2;
#pragma unroll 4
        for (int q = lane; q < quads; q += 32) {
            float4 v = row4[q];
            float4 c = c4[q];
            int j = q << 2;
            float d0 = fmaxf(xn - 2.f * v.x + c.x, 0.f);
            float d1 = fmaxf(xn - 2.f * v.y + c.y, 0.f);
            float d2 = fmaxf(xn - 2.f * v.z + c.z, 0.f);
            float d3 = fmaxf(xn - 2.f * v.w + c.w, 0.f);
            if (d0 < bd) { bd = d0; bi = j; }
            if (d1 < bd) { bd = d1; bi = j + 1; }
            if (d2 < bd) { bd = d2; bi = j + 2; }
            if (d3 < bd) { bd = d3; bi = j + 3; }
        }
    } else {
        for (int j = lane; j < num_anchors; j += 32) {
            float d = fmaxf(xn - 2.f * row[j] + c_norms[j], 0.f);
            if (d < bd) { bd = d; bi = j; }
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float od = __shfl_xor_sync(0xffffffff, bd, o);
        int oi = __shfl_xor_sync(0xffffffff, bi, o);
        if (better(od, oi, bd, bi)) { bd = od; bi = oi; }
    }
    if (lane == 0) {
        out_ids[warp] = (unsigned int)bi;
        out_dists[warp] = bd;
    }
}

// f32 -> f16 (round to nearest even) for the fp16 assignment GEMM; `overflow` is set to 1 when a
// value's magnitude exceeds the f16 range (the caller then uses a 32-bit GEMM instead).
// PTX conversion: NVRTC needs no cuda_fp16.h for it.
extern "C" __global__ void to_half(const float* __restrict__ x, unsigned long long n,
                                   unsigned short* __restrict__ out, int* __restrict__ overflow) {
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        float v = x[i];
        if (fabsf(v) > 65504.f) *overflow = 1;
        unsigned short h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
        out[i] = h;
    }
}

// ---- Assignment with distance bounds (training: the same points, anchors that move a little) ----
// Each point keeps a lower bound on its distance (not squared) to every anchor but its own. When
// the anchors move, that bound drops by the largest anchor move; a point whose exact distance to
// its own anchor stays below the bound keeps it, and only the others are ranked again by GEMM
// (top-2: the runner-up's distance, less the GEMM's rounding allowance, is the new bound).

// Each anchor's move into drifts (num_anchors,), the largest as float bits into *max_drift
// (starts at 0). One warp per anchor.
extern "C" __global__ void anchor_drift(const float* __restrict__ now, const float* __restrict__ before,
                                        int num_anchors, int dim, unsigned int* __restrict__ max_drift,
                                        float* __restrict__ drifts) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= num_anchors) return;
    float s = 0.f;
    for (int d = lane; d < dim; d += 32) {
        float diff = now[(size_t)warp * dim + d] - before[(size_t)warp * dim + d];
        s += diff * diff;
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
    // Rounded up a little: the bound must not shrink by less than the true move.
    float drift = sqrtf(s) * 1.0001f + 1e-30f;
    if (lane == 0) {
        drifts[warp] = drift;
        atomicMax(max_drift, __float_as_uint(drift));
    }
}

// When a few anchors moved far (maintenance teleports the anchors it splits and merges), the
// largest move would lower every point's bound by that much and send every point to the GEMM.
// Instead the bound drops by the largest move of the other ("stable") anchors, and the movers'
// distances are taken from a GEMM of every point against the movers alone: one warp per row of
// dots (rows, num_movers), the row's point being base + row. The lowest GEMM-form distance to a
// mover other than the point's own anchor, less the GEMM's rounding allowance (as in
// nearest2_scatter), caps the new bound: lower = min(lower - stable_drift, that distance).
// movers: (num_movers,) anchor ids; mover_norms: their squared norms.
extern "C" __global__ void mover_lower(const float* __restrict__ dots, const float* __restrict__ x_norms,
                                       const float* __restrict__ mover_norms,
                                       const unsigned int* __restrict__ movers, int rows, int num_movers,
                                       unsigned int base, const unsigned int* __restrict__ assign,
                                       float stable_drift, float* __restrict__ lower) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= rows) return;
    unsigned int p = base + (unsigned int)warp;
    unsigned int own = assign[p];
    float xn = x_norms[p];
    const float* row = dots + (size_t)warp * num_movers;
    float low = __int_as_float(0x7f800000);
    for (int j = lane; j < num_movers; j += 32) {
        if (movers[j] == own) continue;
        float mn = mover_norms[j];
        float d = xn - 2.f * row[j] + mn - 0x1p-8f * (xn + mn);
        low = fminf(low, d);
    }
    for (int o = 16; o > 0; o >>= 1) low = fminf(low, __shfl_xor_sync(0xffffffff, low, o));
    if (lane == 0) lower[p] = fminf(lower[p] - stable_drift, sqrtf(fmaxf(low, 0.f)));
}

// One warp per point: exact (FP32) squared distance to its anchor; keeps the anchor when that
// distance, rounded up, is below the lowered bound (writes id and distance), else flags the point.
extern "C" __global__ void bound_check(const float* __restrict__ x, const float* __restrict__ x_norms,
                                       const float* __restrict__ anchors, const float* __restrict__ c_norms,
                                       int rows, int dim, const unsigned int* __restrict__ max_drift,
                                       const unsigned int* __restrict__ assign, float* __restrict__ lower,
                                       unsigned int* __restrict__ out_ids, float* __restrict__ out_dists,
                                       unsigned int* __restrict__ flags) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= rows) return;
    unsigned int a = assign[warp];
    const float* r = x + (size_t)warp * dim;
    const float* c = anchors + (size_t)a * dim;
    float dot = 0.f;
    for (int d = lane; d < dim; d += 32) dot += r[d] * c[d];
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffff, dot, o);
    if (lane != 0) return;
    float xn = x_norms[warp], cn = c_norms[a];
    float dist = fmaxf(xn - 2.f * dot + cn, 0.f);
    float bound = lower[warp] - __uint_as_float(*max_drift);
    // FP32 rounding of the GEMM form is far below 2^-18 (||x||^2 + ||c||^2).
    float upper = sqrtf(dist + 0x1p-18f * (xn + cn));
    bool keep = upper < bound;
    lower[warp] = bound;
    flags[warp] = keep ? 0u : 1u;
    if (keep) {
        out_ids[warp] = a;
        out_dists[warp] = dist;
    }
}

// Flags per block of blockDim.x points (a multiple of 32, at most 1024).
extern "C" __global__ void count_flags(const unsigned int* __restrict__ flags, int rows,
                                       unsigned int* __restrict__ block_counts) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int c = __syncthreads_count(i < rows && flags[i] != 0u);
    if (threadIdx.x == 0) block_counts[blockIdx.x] = (unsigned int)c;
}

// Indices of the flagged points in increasing order; block_offsets: exclusive scan of count_flags.
extern "C" __global__ void compact_flags(const unsigned int* __restrict__ flags, int rows,
                                         const unsigned int* __restrict__ block_offsets,
                                         unsigned int* __restrict__ out_idx) {
    __shared__ unsigned int warp_start[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    bool f = i < rows && flags[i] != 0u;
    unsigned int ballot = __ballot_sync(0xffffffff, f);
    if (lane == 0) warp_start[w] = __popc(ballot);
    __syncthreads();
    if (w == 0) {
        int warps = blockDim.x >> 5;
        unsigned int v = lane < warps ? warp_start[lane] : 0u;
        unsigned int inclusive = v;
        for (int o = 1; o < 32; o <<= 1) {
            unsigned int up = __shfl_up_sync(0xffffffff, inclusive, o);
            if (lane >= o) inclusive += up;
        }
        if (lane < warps) warp_start[lane] = inclusive - v;
    }
    __syncthreads();
    if (f) out_idx[block_offsets[blockIdx.x] + warp_start[w] + __popc(ballot & ((1u << lane) - 1u))] = (unsigned int)i;
}

// Rows idx[0..count) of x (and their norms) into out, contiguous. One warp per row.
template <typename T>
__device__ void gather_rows_body(const T* __restrict__ x, const float* __restrict__ x_norms,
                                 const unsigned int* __restrict__ idx, int count, int dim, T* __restrict__ out,
                                 float* __restrict__ out_norms) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= count) return;
    size_t r = idx[warp];
    for (int d = lane; d < dim; d += 32) out[(size_t)warp * dim + d] = x[r * dim + d];
    if (lane == 0) out_norms[warp] = x_norms[r];
}

extern "C" __global__ void gather_rows(const float* __restrict__ x, const float* __restrict__ x_norms,
                                       const unsigned int* __restrict__ idx, int count, int dim,
                                       float* __restrict__ out, float* __restrict__ out_norms) {
    gather_rows_body(x, x_norms, idx, count, dim, out, out_norms);
}

// Nearest and runner-up from a GEMM tile (rows of the tile are points idx[row], or base + row
// when idx is null); writes the nearest id and distance, the assignment and the new bound.
// The winner's distance is recomputed exactly in FP32 from the point's row of x (num_points,
// dim) and the anchors c (num_anchors, dim); when the two are closer than the GEMM's rounding
// allowance, so is the runner-up's, and the exact nearest wins. Near-ties are decided, and
// distances reported, as an FP32 pass would, so training follows the FP32 reference instead of
// drifting with TF32 rounding.
// A dot product of the tile as float: FP32 tiles as they are, FP16 tiles (their bits) converted.
__device__ __forceinline__ float dot_value(float v) { return v; }
__device__ __forceinline__ float dot_value(unsigned short bits) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
}

// The body of nearest2_scatter (FP32 tile) and nearest2_scatter_half (FP16 tile from FP16
// inputs, which round as TF32's do; the tile's own rounding adds at most 2^-11 (||x||^2 +
// ||c||^2) to their 2^-10 (...), within the allowance of four times 2^-10 (...) below).
template <typename Dot>
__device__ void nearest2_scatter_body(const Dot* __restrict__ dots, const float* __restrict__ x_norms,
                                      const float* __restrict__ c_norms, int rows, int num_anchors,
                                      const unsigned int* __restrict__ idx, unsigned int base,
                                      const float* __restrict__ x, const float* __restrict__ c, int dim,
                                      unsigned int* __restrict__ out_ids, float* __restrict__ out_dists,
                                      unsigned int* __restrict__ assign, float* __restrict__ lower) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= rows) return;
    const Dot* row = dots + (size_t)warp * num_anchors;
    float xn = x_norms[warp];
    float inf = __int_as_float(0x7f800000);
    float bd = inf, sd = inf;
    int bi = 0x7fffffff, si = 0x7fffffff;
    for (int j = lane; j < num_anchors; j += 32) {
        float d = fmaxf(xn - 2.f * dot_value(row[j]) + c_norms[j], 0.f);
        if (better(d, j, bd, bi)) { sd = bd; si = bi; bd = d; bi = j; }
        else if (better(d, j, sd, si)) { sd = d; si = j; }
    }
    // Butterfly merge: every lane ends with the same nearest and runner-up.
    for (int o = 16; o > 0; o >>= 1) {
        float od = __shfl_xor_sync(0xffffffff, bd, o), osd = __shfl_xor_sync(0xffffffff, sd, o);
        int oi = __shfl_xor_sync(0xffffffff, bi, o), osi = __shfl_xor_sync(0xffffffff, si, o);
        if (better(od, oi, bd, bi)) {
            if (better(bd, bi, osd, osi)) { sd = bd; si = bi; } else { sd = osd; si = osi; }
            bd = od; bi = oi;
        } else if (better(od, oi, sd, si)) { sd = od; si = oi; }
    }
    unsigned int p = idx ? idx[warp] : base + (unsigned int)warp;
    // TF32 GEMM rounding of a squared distance is at most 2^-10 (||x||^2 + ||c||^2): allow
    // four times that.
    float allowance = si < num_anchors ? 0x1p-8f * (xn + c_norms[si]) : 0.f;
    // Other anchors than these two are at least this far (squared), rounding allowed for.
    float others = sd - allowance;
    float loser = inf;
    // Uniform across the warp (every lane holds the same bd, sd, si).
    bool tie = si < num_anchors && sd - bd <= allowance;
    const float* r = x + (size_t)p * dim;
    const float* cb = c + (size_t)bi * dim;
    const float* cs = c + (size_t)(tie ? si : bi) * dim;
    float eb = 0.f, es = 0.f;
    for (int d = lane; d < dim; d += 32) {
        float u = r[d] - cb[d];
        eb += u * u;
        if (tie) {
            float v = r[d] - cs[d];
            es += v * v;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        eb += __shfl_xor_sync(0xffffffff, eb, o);
        es += __shfl_xor_sync(0xffffffff, es, o);
    }
    if (tie && better(es, si, eb, bi)) {
        bd = es; loser = eb; bi = si;
    } else {
        bd = eb;
        if (tie) loser = es;
    }
    if (lane == 0) {
        out_ids[p] = (unsigned int)bi;
        out_dists[p] = bd;
        assign[p] = (unsigned int)bi;
        float bound = fminf(fmaxf(others, 0.f), loser);
        lower[p] = si < num_anchors ? sqrtf(bound) : inf;
    }
}

extern "C" __global__ void nearest2_scatter(const float* __restrict__ dots, const float* __restrict__ x_norms,
                                            const float* __restrict__ c_norms, int rows, int num_anchors,
                                            const unsigned int* __restrict__ idx, unsigned int base,
                                            const float* __restrict__ x, const float* __restrict__ c, int dim,
                                            unsigned int* __restrict__ out_ids, float* __restrict__ out_dists,
                                            unsigned int* __restrict__ assign, float* __restrict__ lower) {
    nearest2_scatter_body(dots, x_norms, c_norms, rows, num_anchors, idx, base, x, c, dim, out_ids, out_dists,
                          assign, lower);
}

extern "C" __global__ void nearest2_scatter_half(const unsigned short* __restrict__ dots,
                                                 const float* __restrict__ x_norms,
                                                 const float* __restrict__ c_norms, int rows, int num_anchors,
                                                 const unsigned int* __restrict__ idx, unsigned int base,
                                                 const float* __restrict__ x, const float* __restrict__ c, int dim,
                                                 unsigned int* __restrict__ out_ids, float* __restrict__ out_dists,
                                                 unsigned int* __restrict__ assign, float* __restrict__ lower) {
    nearest2_scatter_body(dots, x_norms, c_norms, rows, num_anchors, idx, base, x, c, dim, out_ids, out_dists,
                          assign, lower);
}

// gather_rows for the FP16 copy of the points: rows idx[i] of x_half (num_points, dim) into
// out (count, dim), their norms into out_norms.
extern "C" __global__ void gather_rows_half(const unsigned short* __restrict__ x, const float* __restrict__ x_norms,
                                            const unsigned int* __restrict__ idx, int count, int dim,
                                            unsigned short* __restrict__ out, float* __restrict__ out_norms) {
    gather_rows_body(x, x_norms, idx, count, dim, out, out_norms);
}

// Nearest anchor of each point from exact FP32 distances to every anchor, for a few anchors
// (seeding rounds): one launch instead of norms, GEMM and arg-min. Each distance is summed as
// nearest2_scatter's exact recompute sums it (per-lane partial sums, then the butterfly), so a
// winner's distance is the same value either way; ties go to the smaller id. The anchors c
// (num_anchors, dim) are staged in dynamic shared memory (num_anchors * dim floats); warps
// stride over the points x (rows, dim).
extern "C" __global__ void nearest_direct(const float* __restrict__ x, const float* __restrict__ c, int rows,
                                          int num_anchors, int dim, unsigned int* __restrict__ out_ids,
                                          float* __restrict__ out_dists) {
    extern __shared__ float staged[];
    for (int i = threadIdx.x; i < num_anchors * dim; i += blockDim.x) staged[i] = c[i];
    __syncthreads();
    int lane = threadIdx.x & 31;
    int warps = (gridDim.x * blockDim.x) >> 5;
    for (int p = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; p < rows; p += warps) {
        const float* r = x + (size_t)p * dim;
        float bd = __int_as_float(0x7f800000);
        int bi = 0x7fffffff;
        for (int a = 0; a < num_anchors; ++a) {
            const float* ca = staged + (size_t)a * dim;
            float e = 0.f;
            for (int d = lane; d < dim; d += 32) {
                float u = r[d] - ca[d];
                e += u * u;
            }
            for (int o = 16; o > 0; o >>= 1) e += __shfl_xor_sync(0xffffffff, e, o);
            if (better(e, a, bd, bi)) { bd = e; bi = a; }
        }
        if (lane == 0) {
            out_ids[p] = (unsigned int)bi;
            out_dists[p] = bd;
        }
    }
}
