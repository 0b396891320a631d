// Per-anchor trimmed sums, all on the device, in four steps (group_small does the first three
// in one launch for small assignments):
//   1. count_members: members and kept members (dist <= the anchor's threshold) per anchor;
//   2. exclusive_scan: kept counts into offsets, so anchor a owns offsets[a] .. offsets[a+1];
//   3. scatter_kept: each kept point's index into its anchor's range;
//   4. sum_kept_fixed: one block per anchor, threads over dimensions, sums the range and
//      (when asked) moves the anchor: anchor += step * (sum / kept - anchor).
// The scatter's order within a range depends on thread timing, so step 4 adds in 64-bit fixed
// point: every value is rounded to a multiple of 1/scale (the caller picks scale, a power of two,
// so that no sum can overflow: num_points * max|x| * scale < 2^61). Integer addition is exact and
// order-free, so the sums are deterministic, and far closer to the exact sum than f32.
//
// ids, dists: (num_points,); thresholds, members_per_anchor, kept: (num_anchors,);
// offsets: (num_anchors + 1,); cursor: (num_anchors,); members: (kept points,);
// points: (num_points, dim); sums: (num_anchors, dim) double; anchors: (num_anchors, dim).

extern "C" __global__ void count_members(const unsigned int* __restrict__ ids, const float* __restrict__ dists,
                                         const float* __restrict__ thresholds, unsigned int num_points,
                                         unsigned int* __restrict__ members_per_anchor,
                                         unsigned int* __restrict__ kept) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < num_points; i += gridDim.x * blockDim.x) {
        unsigned int a = ids[i];
        atomicAdd(&members_per_anchor[a], 1u);
        if (dists[i] <= thresholds[a]) atomicAdd(&kept[a], 1u);
    }
}

// Exclusive scan across one block of one total per thread (Hillis-Steele in shared `part`,
// blockDim.x entries; blockDim.x a power of two, at most 1024): returns the sum of the totals
// of the threads before this one. part[blockDim.x - 1] ends as the grand total.
__device__ unsigned int block_exclusive_scan(unsigned int total, unsigned int* part) {
    int t = threadIdx.x;
    part[t] = total;
    __syncthreads();
    for (int o = 1; o < blockDim.x; o <<= 1) {
        unsigned int v = t >= o ? part[t - o] : 0u;
        __syncthreads();
        part[t] += v;
        __syncthreads();
    }
    return t > 0 ? part[t - 1] : 0u;
}

// One block: each thread scans a contiguous run of counts; the runs' totals are scanned in
// shared memory. blockDim.x must be a power of two, at most 1024.
extern "C" __global__ void exclusive_scan(const unsigned int* __restrict__ counts, int num_anchors,
                                          unsigned int* __restrict__ offsets) {
    __shared__ unsigned int part[1024];
    int t = threadIdx.x;
    int per = (num_anchors + blockDim.x - 1) / blockDim.x;
    int lo = min(t * per, num_anchors), hi = min(lo + per, num_anchors);
    unsigned int s = 0;
    for (int i = lo; i < hi; ++i) s += counts[i];
    unsigned int run = block_exclusive_scan(s, part);
    for (int i = lo; i < hi; ++i) {
        offsets[i] = run;
        run += counts[i];
    }
    if (t == blockDim.x - 1) offsets[num_anchors] = part[t];
}

// Steps 1 to 3 (count_members, exclusive_scan, scatter_kept) in one block, the counters in
// shared memory, for small assignments, where each launch costs more than its work. Writes
// the same members_per_anchor, kept, offsets and (up to the order within a range) members;
// nothing needs zeroing first. Dynamic shared memory: 2 * num_anchors unsigned ints.
// blockDim.x: a power of two, at most 1024.
extern "C" __global__ void group_small(const unsigned int* __restrict__ ids, const float* __restrict__ dists,
                                       const float* __restrict__ thresholds, unsigned int num_points,
                                       int num_anchors, unsigned int* __restrict__ members_per_anchor,
                                       unsigned int* __restrict__ kept, unsigned int* __restrict__ offsets,
                                       unsigned int* __restrict__ members) {
    extern __shared__ unsigned int counters[];
    __shared__ unsigned int part[1024];
    unsigned int* count = counters;
    unsigned int* cursor = counters + num_anchors;  // kept counts, then each range's next slot
    int t = threadIdx.x;
    for (int a = t; a < num_anchors; a += blockDim.x) count[a] = cursor[a] = 0u;
    __syncthreads();
    for (unsigned int i = t; i < num_points; i += blockDim.x) {
        unsigned int a = ids[i];
        atomicAdd(&count[a], 1u);
        if (dists[i] <= thresholds[a]) atomicAdd(&cursor[a], 1u);
    }
    __syncthreads();
    int per = (num_anchors + blockDim.x - 1) / blockDim.x;
    int lo = min(t * per, num_anchors), hi = min(lo + per, num_anchors);
    unsigned int s = 0;
    for (int a = lo; a < hi; ++a) s += cursor[a];
    unsigned int run = block_exclusive_scan(s, part);
    // Each thread rewrites only its own run of the counters.
    for (int a = lo; a < hi; ++a) {
        unsigned int k = cursor[a];
        members_per_anchor[a] = count[a];
        kept[a] = k;
        offsets[a] = run;
        cursor[a] = run;
        run += k;
    }
    if (t == blockDim.x - 1) offsets[num_anchors] = part[t];
    __syncthreads();
    for (unsigned int i = t; i < num_points; i += blockDim.x) {
        unsigned int a = ids[i];
        if (dists[i] <= thresholds[a]) members[atomicAdd(&cursor[a], 1u)] = i;
    }
}

extern "C" __global__ void scatter_kept(const unsigned int* __restrict__ ids, const float* __restrict__ dists,
                                        const float* __restrict__ thresholds, unsigned int num_points,
                                        unsigned int* __restrict__ cursor, unsigned int* __restrict__ members) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < num_points; i += gridDim.x * blockDim.x) {
        unsigned int a = ids[i];
        if (dists[i] <= thresholds[a]) members[atomicAdd(&cursor[a], 1u)] = i;
    }
}

__device__ __forceinline__ long long fixed(float v, double scale) { return __double2ll_rn((double)v * scale); }

extern "C" __global__ void sum_kept_fixed(const float* __restrict__ points, int dim,
                                          const unsigned int* __restrict__ offsets,
                                          const unsigned int* __restrict__ kept,
                                          const unsigned int* __restrict__ members, double scale,
                                          double* __restrict__ sums, float* __restrict__ anchors, int update,
                                          float step) {
    int a = blockIdx.x;
    unsigned int lo = offsets[a], hi = lo + kept[a];
    double inv_scale = 1.0 / scale;  // exact: scale is a power of two
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        long long s = 0;
        unsigned int m = lo;
        // Eight members at a time: their loads are independent, so more of them are in flight.
        for (; m + 8 <= hi; m += 8) {
            float v[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = points[(size_t)members[m + j] * dim + d];
#pragma unroll
            for (int j = 0; j < 8; ++j) s += fixed(v[j], scale);
        }
        for (; m < hi; ++m) s += fixed(points[(size_t)members[m] * dim + d], scale);
        double sum = (double)s * inv_scale;
        size_t idx = (size_t)a * dim + d;
        sums[idx] = sum;
        if (update && hi > lo) {
            float mean = (float)(sum * (1.0 / (double)(hi - lo)));
            anchors[idx] += step * (mean - anchors[idx]);
        }
    }
}

// Largest |x| as float bits (non-negative floats order like their bits); out starts at 0.
extern "C" __global__ void max_abs(const float* __restrict__ x, unsigned long long n, unsigned int* __restrict__ out) {
    float m = 0.f;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        m = fmaxf(m, fabsf(x[i]));
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
    if ((threadIdx.x & 31) == 0) atomicMax(out, __float_as_uint(m));
}

// The trimming thresholds of the robust estimator (the CPU reference is
// vlc::backend::trimmed_thresholds): with every member of each anchor grouped by count_members,
// exclusive_scan and scatter_kept (all thresholds +inf), one block per anchor finds the distance
// of its keep-th nearest member, keep = ceil((1 - trim) * members) in double as on the CPU, by a
// radix select over the distances' bits (non-negative floats order as their bits): four passes
// of 8 bits, each narrowing the prefix with a histogram in shared memory. The value found is one
// of the distances, so the result equals the CPU's exactly. +inf when keep is all or none.
// Then the block copies its members at or below the threshold to the front of its range of
// kept_members and writes their number to kept, the grouping sum_kept_fixed reads (as
// count_members, exclusive_scan and scatter_kept with these thresholds would leave it, up to
// the order within a range).
// dists: (num_points,); offsets: (num_anchors + 1,); members, kept_members: (num_points,)
// grouped by anchor; thresholds, kept: (num_anchors,). blockDim.x: a power of two, at least 32.
extern "C" __global__ void select_thresholds(const float* __restrict__ dists,
                                             const unsigned int* __restrict__ offsets,
                                             const unsigned int* __restrict__ members, float trim,
                                             float* __restrict__ thresholds, unsigned int* __restrict__ kept,
                                             unsigned int* __restrict__ kept_members) {
    __shared__ unsigned int hist[256];
    __shared__ unsigned int chosen_prefix, chosen_rank, slots;
    int a = blockIdx.x;
    unsigned int lo = offsets[a], hi = offsets[a + 1];
    unsigned int count = hi - lo;
    unsigned int keep = (unsigned int)ceil((double)count * (1.0 - (double)trim));
    if (keep > count) keep = count;
    float threshold = __int_as_float(0x7f800000);
    // The same for the whole block, so every thread reaches the barriers inside.
    if (keep != count && keep != 0u) {
        unsigned int prefix = 0u, mask = 0u, rank = keep - 1u;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0u;
            __syncthreads();
            for (unsigned int m = lo + threadIdx.x; m < hi; m += blockDim.x) {
                // -0 (from a clamp) counts as +0.
                unsigned int bits = __float_as_uint(dists[members[m]]) & 0x7fffffffu;
                if ((bits & mask) == prefix) atomicAdd(&hist[(bits >> shift) & 255u], 1u);
            }
            __syncthreads();
            if (threadIdx.x < 32) {
                // The bin holding rank: each lane sums 8 bins, a warp scan of those sums finds
                // the lane whose bins hold it, and that lane walks its 8.
                unsigned int lane = threadIdx.x, own = 0u;
                for (int j = 0; j < 8; ++j) own += hist[lane * 8 + j];
                unsigned int incl = own;
                for (int o = 1; o < 32; o <<= 1) {
                    unsigned int v = __shfl_up_sync(0xffffffff, incl, o);
                    if (lane >= (unsigned int)o) incl += v;
                }
                unsigned int below = incl - own;
                if (below <= rank && rank < incl) {
                    unsigned int bin = lane * 8;
                    while (below + hist[bin] <= rank) below += hist[bin++];
                    chosen_prefix = prefix | (bin << shift);
                    chosen_rank = rank - below;
                }
            }
            __syncthreads();
            prefix = chosen_prefix;
            rank = chosen_rank;
            mask |= 255u << shift;
            __syncthreads();
        }
        threshold = __uint_as_float(prefix);
    }
    if (threadIdx.x == 0) {
        thresholds[a] = threshold;
        slots = 0u;
    }
    __syncthreads();
    for (unsigned int m = lo + threadIdx.x; m < hi; m += blockDim.x) {
        unsigned int i = members[m];
        if (dists[i] <= threshold) kept_members[lo + atomicAdd(&slots, 1u)] = i;
    }
    __syncthreads();
    if (threadIdx.x == 0) kept[a] = slots;
}
