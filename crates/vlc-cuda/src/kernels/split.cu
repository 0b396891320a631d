// Cutting anchors' member lists in two for the training's split maintenance; the CPU reference
// is vlc::backend::split_list. One block per list (blockDim.x a multiple of 32, at most 1024):
//   1. the member farthest from the list's centre (ties to the smaller point index);
//   2. each member's side: (x - centre) . (farthest - centre) > 0 is the plus side;
//   3. the mean of each side, one thread per dimension summing the members in list order in
//      double (so the result does not depend on thread timing).
// points: (num_points, dim); centers: (num_lists, dim); offsets: (num_lists + 1,), list l owns
// members[offsets[l] .. offsets[l + 1]); side: one per member, 1 = plus; means: (num_lists, 2,
// dim), the minus side's mean then the plus side's; counts: (num_lists, 2), minus then plus.
// Dynamic shared memory: dim floats (the axis).

extern "C" __global__ void split_lists(const float* __restrict__ points, int dim,
                                       const float* __restrict__ centers,
                                       const unsigned int* __restrict__ offsets,
                                       const unsigned int* __restrict__ members,
                                       unsigned int* __restrict__ side, float* __restrict__ means,
                                       unsigned int* __restrict__ counts) {
    extern __shared__ float axis[];
    __shared__ float warp_best[32];
    __shared__ unsigned int warp_index[32];
    __shared__ unsigned int farthest;
    int l = blockIdx.x;
    unsigned int lo = offsets[l], hi = offsets[l + 1];
    if (hi - lo < 2u) {
        if (threadIdx.x == 0) {
            counts[2 * l] = hi - lo;
            counts[2 * l + 1] = 0u;
        }
        return;
    }
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
        if (s > bd || (s == bd && i < bi)) { bd = s; bi = i; }
    }
    if (lane == 0) { warp_best[warp] = bd; warp_index[warp] = bi; }
    __syncthreads();
    if (threadIdx.x == 0) {
        float d = warp_best[0];
        unsigned int i = warp_index[0];
        for (int w = 1; w < warps; ++w) {
            float e = warp_best[w];
            unsigned int j = warp_index[w];
            if (j != 0xffffffffu && (e > d || (e == d && j < i))) { d = e; i = j; }
        }
        farthest = i;
    }
    __syncthreads();
    const float* far = points + (size_t)farthest * dim;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) axis[d] = far[d] - c[d];
    __syncthreads();

    for (unsigned int m = lo + warp; m < hi; m += warps) {
        const float* r = points + (size_t)members[m] * dim;
        float p = 0.f;
        for (int d = lane; d < dim; d += 32) p += (r[d] - c[d]) * axis[d];
        for (int o = 16; o > 0; o >>= 1) p += __shfl_xor_sync(0xffffffff, p, o);
        if (lane == 0) side[m] = p > 0.f ? 1u : 0u;
    }
    __syncthreads();

    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        double plus = 0.0, minus = 0.0;
        unsigned int n_plus = 0u, n_minus = 0u;
        for (unsigned int m = lo; m < hi; ++m) {
            float v = points[(size_t)members[m] * dim + d];
            if (side[m]) { plus += v; ++n_plus; } else { minus += v; ++n_minus; }
        }
        float* out = means + (size_t)l * 2 * dim;
        out[d] = n_minus ? (float)(minus / n_minus) : 0.f;
        out[dim + d] = n_plus ? (float)(plus / n_plus) : 0.f;
        if (d == 0) {
            counts[2 * l] = n_minus;
            counts[2 * l + 1] = n_plus;
        }
    }
}
