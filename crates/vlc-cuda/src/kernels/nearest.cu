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
