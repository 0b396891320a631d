// Per-anchor trimmed sums. Points are grouped by anchor (CSR: anchor a owns
// members[offsets[a] .. offsets[a+1]]); one block per anchor, threads over dimensions, members
// summed in increasing order in double precision: deterministic, no atomics.
// points: (num_points, dim); dists: (num_points,); thresholds: (num_anchors,);
// sums: (num_anchors, dim) double; kept: (num_anchors,).

extern "C" __global__ void accumulate_trimmed(const float* __restrict__ points, int dim,
                                              const unsigned long long* __restrict__ offsets,
                                              const unsigned int* __restrict__ members,
                                              const float* __restrict__ dists,
                                              const float* __restrict__ thresholds,
                                              double* __restrict__ sums, unsigned int* __restrict__ kept) {
    int a = blockIdx.x;
    unsigned long long lo = offsets[a], hi = offsets[a + 1];
    float thr = thresholds[a];
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        double s = 0.0;
        for (unsigned long long m = lo; m < hi; ++m) {
            unsigned int i = members[m];
            if (dists[i] <= thr) s += (double)points[(size_t)i * dim + d];
        }
        sums[(size_t)a * dim + d] = s;
    }
    if (threadIdx.x == 0) {
        unsigned int c = 0;
        for (unsigned long long m = lo; m < hi; ++m) c += dists[members[m]] <= thr;
        kept[a] = c;
    }
}
