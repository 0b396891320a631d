// Temperature-scaled anchor update: anchor += step * (sum / kept - anchor) where kept > 0.
// anchors: (num_anchors, dim) float, updated in place; sums: (num_anchors, dim) double.

extern "C" __global__ void update_anchors(float* __restrict__ anchors, const double* __restrict__ sums,
                                          const unsigned int* __restrict__ kept, int num_anchors, int dim,
                                          float step) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)num_anchors * dim) return;
    unsigned int k = kept[idx / dim];
    if (k == 0) return;
    float mean = (float)(sums[idx] * (1.0 / (double)k));
    anchors[idx] += step * (mean - anchors[idx]);
}
