// Cutting anchors' member lists in two for the training's split maintenance; the CPU reference
// is vlc::backend::split_list. Lists are cut into chunks of CHUNK members (list l's chunks are
// chunk_offsets[l] .. chunk_offsets[l + 1]), one block of 256 threads per chunk, so that one
// long list (an early anchor can own a large share of the points) spreads over the device
// instead of one block walking it:
//   1. split_far: each chunk's member farthest from its list's centre (ties to the smaller
//      point index);
//   2. split_side: the list's farthest member (over its chunks), then each member's side,
//      (x - centre) . (farthest - centre) > 0 being the plus side, and each chunk's per-side
//      sums, in member order in double;
//   3. split_means: one block per list adds its chunks' sums in chunk order (a fixed order, so
//      the means do not depend on thread timing).
// points: (num_points, dim); centers: (num_lists, dim); offsets: (num_lists + 1,), list l owns
// members[offsets[l] .. offsets[l + 1]); chunk_offsets: (num_lists + 1,); best_dist, best_index:
// (num_chunks,); side: one per member, 1 = plus; partial: (num_chunks, 2, dim) double, minus
// then plus; partial_counts: (num_chunks, 2); means: (num_lists, 2, dim), the minus side's mean
// then the plus side's; counts: (num_lists, 2), minus then plus.

#define CHUNK 256

// The list that chunk b belongs to: the last l with chunk_offsets[l] <= b.
__device__ int list_of_chunk(const unsigned int* chunk_offsets, int num_lists, unsigned int b) {
    int lo = 0, hi = num_lists;  // chunk_offsets[lo] <= b < chunk_offsets[hi]
    while (hi - lo > 1) {
        int mid = (lo + hi) >> 1;
        if (chunk_offsets[mid] <= b) lo = mid; else hi = mid;
    }
    return lo;
}

// Whether (d, i) is farther than (bd, bi): larger distance, ties to the smaller index; index
// 0xffffffff marks "none".
__device__ __forceinline__ bool farther(float d, unsigned int i, float bd, unsigned int bi) {
    return i != 0xffffffffu && (bi == 0xffffffffu || d > bd || (d == bd && i < bi));
}

// The block's farthest (d, i); every thread gets it. blockDim.x: a multiple of 32.
__device__ void block_farthest(float& d, unsigned int& i) {
    __shared__ float warp_d[32];
    __shared__ unsigned int warp_i[32];
    for (int o = 16; o > 0; o >>= 1) {
        float e = __shfl_xor_sync(0xffffffff, d, o);
        unsigned int j = __shfl_xor_sync(0xffffffff, i, o);
        if (farther(e, j, d, i)) { d = e; i = j; }
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) { warp_d[warp] = d; warp_i[warp] = i; }
    __syncthreads();
    d = warp_d[0];
    i = warp_i[0];
    for (int w = 1; w < warps; ++w)
        if (farther(warp_d[w], warp_i[w], d, i)) { d = warp_d[w]; i = warp_i[w]; }
}

extern "C" __global__ void split_far(const float* __restrict__ points, int dim,
                                     const float* __restrict__ centers,
                                     const unsigned int* __restrict__ offsets,
                                     const unsigned int* __restrict__ chunk_offsets, int num_lists,
                                     const unsigned int* __restrict__ members,
                                     float* __restrict__ best_dist, unsigned int* __restrict__ best_index) {
    unsigned int b = blockIdx.x;
    int l = list_of_chunk(chunk_offsets, num_lists, b);
    unsigned int lo = offsets[l] + (b - chunk_offsets[l]) * CHUNK;
    unsigned int hi = min(lo + CHUNK, offsets[l + 1]);
    const float* c = centers + (size_t)l * dim;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    float bd = -1.f;
    unsigned int bi = 0xffffffffu;
    for (unsigned int m = lo + warp; m < hi; m += warps) {
        unsigned int i = members[m];
        const float* r = points + (size_t)i * dim;
        float s = 0.f;
        for (int d = lane; d < dim; d += 32) {
            float t = r[d] - c[d];
            s += t * t;
        }
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
        if (farther(s, i, bd, bi)) { bd = s; bi = i; }
    }
    block_farthest(bd, bi);
    if (threadIdx.x == 0) {
        best_dist[b] = bd;
        best_index[b] = bi;
    }
}

// Dynamic shared memory: dim floats (the axis) and CHUNK unsigned ints (the chunk's sides).
extern "C" __global__ void split_side(const float* __restrict__ points, int dim,
                                      const float* __restrict__ centers,
                                      const unsigned int* __restrict__ offsets,
                                      const unsigned int* __restrict__ chunk_offsets, int num_lists,
                                      const unsigned int* __restrict__ members,
                                      const float* __restrict__ best_dist,
                                      const unsigned int* __restrict__ best_index,
                                      unsigned int* __restrict__ side, double* __restrict__ partial,
                                      unsigned int* __restrict__ partial_counts) {
    extern __shared__ float axis[];
    unsigned int* chunk_side = (unsigned int*)(axis + dim);
    unsigned int b = blockIdx.x;
    int l = list_of_chunk(chunk_offsets, num_lists, b);
    unsigned int lo = offsets[l] + (b - chunk_offsets[l]) * CHUNK;
    unsigned int hi = min(lo + CHUNK, offsets[l + 1]);
    const float* c = centers + (size_t)l * dim;
    // The list's farthest member, over all its chunks.
    float bd = -1.f;
    unsigned int bi = 0xffffffffu;
    for (unsigned int k = chunk_offsets[l] + threadIdx.x; k < chunk_offsets[l + 1]; k += blockDim.x)
        if (farther(best_dist[k], best_index[k], bd, bi)) { bd = best_dist[k]; bi = best_index[k]; }
    block_farthest(bd, bi);
    const float* far = points + (size_t)bi * dim;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) axis[d] = far[d] - c[d];
    __syncthreads();

    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    for (unsigned int m = lo + warp; m < hi; m += warps) {
        const float* r = points + (size_t)members[m] * dim;
        float p = 0.f;
        for (int d = lane; d < dim; d += 32) p += (r[d] - c[d]) * axis[d];
        for (int o = 16; o > 0; o >>= 1) p += __shfl_xor_sync(0xffffffff, p, o);
        if (lane == 0) {
            unsigned int s = p > 0.f ? 1u : 0u;
            side[m] = s;
            chunk_side[m - lo] = s;
        }
    }
    __syncthreads();

    double* out = partial + (size_t)b * 2 * dim;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        double plus = 0.0, minus = 0.0;
        for (unsigned int m = lo; m < hi; ++m) {
            double v = (double)points[(size_t)members[m] * dim + d];
            if (chunk_side[m - lo]) plus += v; else minus += v;
        }
        out[d] = minus;
        out[dim + d] = plus;
    }
    if (threadIdx.x == 0) {
        unsigned int n_plus = 0u;
        for (unsigned int m = lo; m < hi; ++m) n_plus += chunk_side[m - lo];
        partial_counts[2 * b] = (hi - lo) - n_plus;
        partial_counts[2 * b + 1] = n_plus;
    }
}

extern "C" __global__ void split_means(int dim, const unsigned int* __restrict__ offsets,
                                       const unsigned int* __restrict__ chunk_offsets,
                                       const double* __restrict__ partial,
                                       const unsigned int* __restrict__ partial_counts,
                                       float* __restrict__ means, unsigned int* __restrict__ counts) {
    int l = blockIdx.x;
    unsigned int first = chunk_offsets[l], last = chunk_offsets[l + 1];
    unsigned int n_minus = 0u, n_plus = 0u;
    for (unsigned int k = first; k < last; ++k) {
        n_minus += partial_counts[2 * k];
        n_plus += partial_counts[2 * k + 1];
    }
    if (offsets[l + 1] - offsets[l] < 2u) {
        // Not cut: the list's size as the minus side, as the host expects.
        n_minus = offsets[l + 1] - offsets[l];
        n_plus = 0u;
    }
    float* out = means + (size_t)l * 2 * dim;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        double minus = 0.0, plus = 0.0;
        for (unsigned int k = first; k < last; ++k) {
            minus += partial[(size_t)k * 2 * dim + d];
            plus += partial[(size_t)k * 2 * dim + dim + d];
        }
        out[d] = n_minus ? (float)(minus / (double)n_minus) : 0.f;
        out[dim + d] = n_plus ? (float)(plus / (double)n_plus) : 0.f;
    }
    if (threadIdx.x == 0) {
        counts[2 * l] = n_minus;
        counts[2 * l + 1] = n_plus;
    }
}
