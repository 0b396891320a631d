// Batched inverted-list search, one thread block per query: rank the anchors, scan the probed
// lists with the primary code, keep a candidate pool, rescore it with the second stage, top k;
// with the automatic pool, then rescore the scanned candidates beyond it that the first stage's
// error may have pushed out.
// The same steps and estimators as the CPU search (vlc-core src/search.rs), in float.
//
// Candidates are ordered by a 64-bit key: the distance's bits made order-preserving in the high
// half, the list position (or anchor id) in the low half, as `vlc::linalg::order_key`; so ties
// resolve by position, as on the CPU.
//
// The pool lives in shared memory: `cap` slots (a power of two, at least keep + blockDim).
// Each round every thread scores at most one item and appends it when it beats the threshold;
// when fewer than blockDim free slots are left the block sorts the pool (bitonic), keeps the
// best `keep` and tightens the threshold to the worst kept distance.

typedef unsigned long long u64;
typedef unsigned int u32;

#define KIND_NONE 0
#define KIND_ANCHOR_ONLY 1
#define KIND_RABITQ 2
#define KIND_SCALAR 3
#define KIND_PCA 4
#define KIND_FLOAT 5

struct SearchArgs {
    const float* dots;            // (num_queries, num_anchors): q . c
    const float* query_norms;     // (num_queries,)
    const float* anchor_norms;    // (num_anchors,)
    const u64* list_offsets;      // (num_anchors + 1,)
    const u32* ids;               // (num_vectors,)
    const float* queries;         // (num_queries, dim), prepared (normalised for cosine)
    const float* rotated;         // (num_queries, padded_dim): P q, or null without RaBitQ
    const unsigned char* codes1;  // primary codes (num_vectors, code_size1): sq8 rows padded to 16 bytes
    const unsigned char* codes2;  // second-stage codes (num_vectors, code_size2), or null
    const float* lo1;             // scalar ranges of stage 1: (rows, dim), or null
    const float* step1;
    const float* lo2;             // scalar ranges of stage 2, or null
    const float* step2;
    const float* pca_top;         // pcaq: (padded_dim,) each dimension's top-bit weight, or null
    const float* pca_coarse;      // pcaq: (padded_dim,) first stage's grid-centre offsets
    const float* pca_full;        // pcaq: (padded_dim,) full code's grid-centre offsets
    const int* pca_planes;        // pcaq: first-stage planes E, remaining planes L, then the
                                  // dimensions of each (E + L), as vlc's StageCodec::Pca
    long long* out_ids;           // (num_queries, k); -1 pads
    float* out_dists;             // (num_queries, k); +inf pads
    // A filtered search (vlc's DeviceFilter), else all null: the lists each query probes,
    // ranked on the host, and the vectors it may return, list by list.
    const u32* probe_anchors;     // (total probes,): query i's lists, nearest first, are
                                  // entries probe_offsets[i] .. probe_offsets[i + 1]
    const float* probe_dists;     // (total probes,): squared distances to those anchors
    const u32* probe_offsets;     // (num_queries + 1,), for this launch's queries
    const u32* allowed_starts;    // (num_anchors + 1,): list a's allowed vectors are entries
                                  // allowed_starts[a] .. allowed_starts[a + 1] of:
    const u32* allowed_positions; // (allowed,): their list positions, ascending
    const u32* allowed_shares;    // (num_anchors,): each list's share of allowed vectors in
                                  // units of 2^-16 (vlc's list_share)
    int num_queries, num_anchors, dim, padded_dim;
    int nprobe, pool_size, k, cap;
    int cap_rescore;              // pool slots of steps 2 to 4: a power of two, at least
                                  // pool_size + blockDim (the automatic pool's staging follows);
                                  // cap, for step 1, may be far larger (a narrow filter's
                                  // thousands of ranked lists), and a scan's compactions sort
                                  // only what they need
    int slots;                    // slots of keys and aux: at least cap, and for the automatic
                                  // pool at least cap_rescore + 2 blockDim
    int kind1, bits1, code_size1, per_anchor1;
    int kind2, bits2, code_size2, per_anchor2;
    float probe_margin;           // adaptive probing: margin x energy, +inf for fixed nprobe
    float pca_scale;              // pcaq: 2 / sqrt(active dimensions)
    int tables;                   // nibble tables in shared memory: 2 for pcaq, else 1
    float error_margin;           // automatic pool: vlc's ERROR_MARGIN; 0 for a fixed pool
    int group;                    // lanes that score one second-stage code together: a power
                                  // of two, at most 32
    // A filtered search that ranks its lists here (allowed_starts set, probe_anchors null;
    // vlc's DeviceFilterLists): nprobe is the lists ranked (those holding an allowed vector
    // only), nprobe_target the lists' worth to take, lists_with_allowed how many hold one.
    int nprobe_target, lists_with_allowed;
};

__device__ __forceinline__ u64 order_key(float d, u32 id) {
    u32 b = __float_as_uint(d);
    u32 ordered = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return ((u64)ordered << 32) | (u64)id;
}

__device__ __forceinline__ float key_dist(u64 key) {
    u32 k = (u32)(key >> 32);
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

__device__ __forceinline__ float infinity() { return __int_as_float(0x7f800000); }

// IEEE half (its bits) to float, subnormals, infinities and NaN included.
__device__ __forceinline__ float half_to_float(u32 h) {
    u32 sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) return __uint_as_float(sign | __float_as_uint((float)man * 5.9604645e-8f));
    if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (man << 13));
    return __uint_as_float(sign | ((exp + 112) << 23) | (man << 13));
}

// Byte b (0-3) of v, an sq8 level, as a float, exactly and without an integer-to-float
// conversion: one byte permute (PRMT) places the byte under the exponent of 2^23, giving the
// float 2^23 + level, and one add takes 2^23 off.
__device__ __forceinline__ float byte_level(u32 v, int b) {
    return __uint_as_float(__byte_perm(v, 0x4b000000u, 0x7440u | (u32)b)) - 8388608.f;
}

// ip plus the four sq8 levels of word v against the weights w, in order.
__device__ __forceinline__ float add_word_levels(float ip, u32 v, float4 w) {
    ip += w.x * byte_level(v, 0);
    ip += w.y * byte_level(v, 1);
    ip += w.z * byte_level(v, 2);
    return ip + w.w * byte_level(v, 3);
}

__device__ __forceinline__ float load_f32(const unsigned char* p) {
    return __uint_as_float((u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24));
}

// Sort keys[0..n) ascending (n a power of two), carrying aux along. Pair i of a stage is
// (lo, lo + stride) with lo = 2 stride (i / stride) + i % stride, taken by masks and shifts
// (stride is a power of two; a division of variables costs tens of instructions, and a
// narrow filter's ranking sorts thousands of keys in one block).
__device__ void bitonic_sort(u64* keys, u32* aux, int n) {
    for (int size = 2; size <= n; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < (n >> 1); i += blockDim.x) {
                int lo = ((i & ~(stride - 1)) << 1) | (i & (stride - 1));
                int hi = lo + stride;
                bool ascending = (lo & size) == 0;
                u64 a = keys[lo], b = keys[hi];
                if ((a > b) == ascending) {
                    keys[lo] = b;
                    keys[hi] = a;
                    u32 t = aux[lo];
                    aux[lo] = aux[hi];
                    aux[hi] = t;
                }
            }
            __syncthreads();
        }
    }
}

// Sort the pool and keep its best `keep`; called by the whole block. Only the occupied slots,
// padded to a power of two (at most `cap`), are sorted: the last compactions of a query hold
// far fewer entries than the pool's capacity. With `outside` (one word per aux tag), each
// entry dropped lowers its tag's word to its key's high word (atomicMin).
__device__ void compact(u64* keys, u32* aux, int* count, float* threshold, int keep, int cap,
                        u32* outside = nullptr) {
    int c = *count;
    int n = 1;
    while (n < c) n <<= 1;
    for (int i = c + threadIdx.x; i < n; i += blockDim.x) keys[i] = ~0ull;
    __syncthreads();
    bitonic_sort(keys, aux, n);
    if (outside)
        for (int i = keep + threadIdx.x; i < c; i += blockDim.x)
            atomicMin(&outside[aux[i]], (u32)(keys[i] >> 32));
    if (threadIdx.x == 0) {
        *count = c < keep ? c : keep;
        *threshold = c >= keep ? key_dist(keys[keep - 1]) : infinity();
    }
    __syncthreads();
}

// Offer one scored item to the pool, then compact when the pool is nearly full. Every thread
// of the block calls it once per round (valid = false for threads without an item). With
// `outside` (see `compact`), an item turned away or dropped lowers its tag's word: at the end
// each word holds the smallest key (high word) of its tag's items outside the pool.
__device__ __forceinline__ void offer(bool valid, float d, u32 id, u32 tag, u64* keys, u32* aux,
                                      int* count, float* threshold, int keep, int cap,
                                      u32* outside = nullptr) {
    if (valid) {
        if (d < *threshold) {
            int slot = atomicAdd(count, 1);
            keys[slot] = order_key(d, id);
            aux[slot] = tag;
        } else if (outside) {
            atomicMin(&outside[tag], (u32)(order_key(d, 0) >> 32));
        }
    }
    __syncthreads();
    int c = *count;
    __syncthreads();  // every thread has read the count before anyone appends again
    if (c > cap - (int)blockDim.x) compact(keys, aux, count, threshold, keep, cap, outside);
}

// The sum of each thread's `v` over the block (of whole warps), for thread 0, in a fixed order
// (within warps by shuffles, then the warps' sums in turn), so that it does not vary from run to
// run. `parts` holds one float per warp.
__device__ float block_sum(float v, float* parts) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    if ((threadIdx.x & 31) == 0) parts[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0.f;
    if (threadIdx.x == 0)
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) s += parts[w];
    __syncthreads();
    return s;
}

// Called by the 32 threads of warp 0: out[0] = 0 and out[i + 1] = value(0) + ... + value(i)
// for i < n. Each lane reads its value(i) before it writes out[i + 1], so value may read
// out[i + 1] itself (an in-place scan of sizes stored there).
template <typename F>
__device__ void warp_prefix_sums(u32* out, int n, F value) {
    const int lane = threadIdx.x;
    u32 carry = 0;
    if (lane == 0) out[0] = 0;
    for (int c = 0; c < n; c += 32) {
        int i = c + lane;
        u32 v = i < n ? value(i) : 0;
        for (int o = 1; o < 32; o <<= 1) {
            u32 below = __shfl_up_sync(0xffffffff, v, o);
            if (lane >= o) v += below;
        }
        if (i < n) out[i + 1] = carry + v;
        carry += __shfl_sync(0xffffffff, v, 31);
    }
}

// The probed list of item t of a flat range whose lists' prefix sums (of n lists) are
// `prefix`, from cursor p (a list at or before it): the list j with prefix[j] <= t <
// prefix[j + 1], for t < prefix[n]. A cursor one or two lists behind steps on; one further
// behind (a narrow filter's items, a few in each of thousands of lists) searches by halves.
__device__ __forceinline__ int advance(const u32* prefix, int p, u32 t, int n) {
    if (prefix[p + 1] > t) return p;
    if (p + 2 >= n || prefix[p + 2] > t) return p + 1;
    int lo = p + 2, hi = n - 1;  // prefix[lo] <= t < prefix[n]
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (prefix[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Items [0, n) by groups of `group` lanes, each group's item by `visit(item, whether it is
// real)`: every lane of a warp makes the same number of calls (a group past the end repeats
// item n - 1), so that shuffles within the groups see whole warps.
template <typename F>
__device__ __forceinline__ void by_groups(int n, int group, F visit) {
    const int per_warp = 32 / group;
    const int in_warp = (threadIdx.x & 31) / group;
    for (int base = (threadIdx.x >> 5) * per_warp; base < n;
         base += (blockDim.x >> 5) * per_warp) {
        int item = base + in_warp;
        visit(item < n ? item : n - 1, item < n);
    }
}

// One lane's share of the sum over the bytes of one bit plane of table[2i][low nibble] +
// table[2i+1][high nibble]: the words (or bytes) first, first + stride, ... (0 and 1: all).
__device__ __forceinline__ float plane_sum(const unsigned char* plane, int nb, bool words,
                                           const float* table, int first, int stride) {
    float s = 0.f;
    if (words) {
        const u32* w = (const u32*)plane;
        for (int i = first; i < (nb >> 2); i += stride) {
            u32 v = w[i];
            const float* t = table + i * 128;
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                u32 byte = (v >> (8 * b)) & 0xff;
                s += t[b * 32 + (byte & 15)] + t[b * 32 + 16 + (byte >> 4)];
            }
        }
    } else {
        for (int i = first; i < nb; i += stride) {
            u32 byte = plane[i];
            s += table[i * 32 + (byte & 15)] + table[i * 32 + 16 + (byte >> 4)];
        }
    }
    return s;
}

// Lanes that score one code together: each takes a share of the code (`first`, `stride`: all
// of it for a lone thread), `reduce` adds the shares over the lanes (the identity for a lone
// thread), and the code's factors finish the estimate.

// pcaq (vlc's StageCodec::Pca, whose planes and factors start on 4-byte boundaries): the first
// stage reads the sign plane and the planes below it against the top-bit table `table` (plane j
// below the sign at 2^-(j+1)), the full code adds the remaining planes against the plain table
// `table + 4 * padded_dim` (plane j at 2^j).
template <typename R>
__device__ __forceinline__ float score_pca(bool full, const unsigned char* code,
                                           const float* table, int padded_dim, const int* planes,
                                           float constant1, float constant2, float anchor_dist,
                                           int first, int stride, R reduce) {
    const int e = planes[0], l = planes[1];
    int at = padded_dim >> 3;
    float top = plane_sum(code, at, true, table, first, stride);
    for (int j = 0; j < e; ++j) {
        int n = ((planes[2 + j] + 31) >> 5) << 2;
        top += ldexpf(plane_sum(code + at, n, true, table, first, stride), -(j + 1));
        at += n;
    }
    if (!full) {
        top = reduce(top);
        return anchor_dist + load_f32(code + at) + load_f32(code + at + 4) * (constant1 + top);
    }
    at += 8;
    const float* plain = table + 4 * padded_dim;
    float low = 0.f;
    for (int j = 0; j < l; ++j) {
        int n = ((planes[2 + e + j] + 31) >> 5) << 2;
        low += (float)(1 << j) * plane_sum(code + at, n, true, plain, first, stride);
        at += n;
    }
    top = reduce(top);
    low = reduce(low);
    return anchor_dist + load_f32(code + at) + load_f32(code + at + 4) * (constant2 + top + low);
}

// Estimated squared distance of a scalar code with global ranges, scored as the CPU's
// `prepare_query` does: `w` = q ∘ step, `constant` = <q, lo>, so <q, r> = constant + sum_d w[d]
// level[d] and a level costs one weight and one multiply-add (not the query, its range and its
// step). One thread's share over dimensions `first`, `first + stride`, ...; `whole`: one
// thread reads the whole code a word at a time as `score` does (sq8 rows padded to 16 bytes:
// sixteen levels a load first), in the same order and sums as byte by byte.
template <typename R>
__device__ __forceinline__ float score_weighted(int bits, int code_size, const unsigned char* code,
                                                const float* w, float constant, int dim,
                                                float anchor_dist, int first, int stride,
                                                bool whole, R reduce) {
    float ip = 0.f;
    int d = first;
    if (bits == 8) {
        if (whole && (code_size & 15) == 0) {
            // Four weights a load as well (`w` starts on a 16-byte boundary in shared memory,
            // and d is a multiple of 16 here, of 4 in the word loop), the levels made floats by
            // `byte_level`, and four of the row's loads in flight (without the pragma the
            // compiler stopped unrolling at one). The same order and sums as byte by byte, so
            // the same results (session 79).
#pragma unroll 4
            for (const uint4* c = (const uint4*)code; d + 16 <= dim; d += 16) {
                const uint4 v4 = c[d >> 4];
                const u32 words[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    ip = add_word_levels(ip, words[j], *(const float4*)(w + d + 4 * j));
            }
        }
        if (whole) {
            for (const u32* c = (const u32*)code; d + 4 <= dim; d += 4)
                ip = add_word_levels(ip, c[d >> 2], *(const float4*)(w + d));
        }
        for (; d < dim; d += stride) ip += w[d] * byte_level(code[d], 0);
        return anchor_dist + load_f32(code + dim) - 2.f * (constant + reduce(ip));
    }
    if (whole) {
        for (const u32* c = (const u32*)code; d + 8 <= dim; d += 8) {
            u32 v = c[d >> 3];
#pragma unroll
            for (int b = 0; b < 8; ++b) ip += w[d + b] * (float)((v >> (4 * b)) & 15);
        }
    }
    for (; d < dim; d += stride) ip += w[d] * (float)((code[d >> 1] >> ((d & 1) * 4)) & 15);
    return anchor_dist + load_f32(code + ((dim + 1) >> 1)) - 2.f * (constant + reduce(ip));
}

// Estimated squared distance of one code (see the codec docs in vlc-core).
// `full`: for RaBitQ, all bits (else only the leading 1-bit code); for pcaq, the full code (else
// its first stage). `lone`: one thread scores the whole code (`first` 0, `stride` 1) in step 2's
// scan, and may read it a word at a time (below); a literal at each call site, so the other
// call sites carry no word loops. `weighted` (a literal): a scalar code with global ranges,
// `q` holding the weights and `constant` <q, lo> (`score_weighted`).
template <typename R>
__device__ __forceinline__ float score(int kind, int bits, bool full, int code_size,
                                       int per_anchor, const unsigned char* code,
                                       const float* table, float constant, float constant2,
                                       const float* q, const float* lo, const float* step, int dim,
                                       int padded_dim, const int* planes, u32 anchor,
                                       float anchor_dist, int first, int stride, bool lone,
                                       bool weighted, R reduce) {
    if (weighted)
        return score_weighted(bits, code_size, code, q, constant, dim, anchor_dist, first, stride,
                              lone && (code_size & 3) == 0, reduce);
    if (kind == KIND_ANCHOR_ONLY) return anchor_dist;
    if (kind == KIND_PCA)
        return score_pca(full && bits > 1, code, table, padded_dim, planes, constant, constant2,
                         anchor_dist, first, stride, reduce);
    if (kind == KIND_RABITQ) {
        int nb = (dim + 7) >> 3;
        bool words = (nb & 3) == 0 && (code_size & 3) == 0;
        float ip;
        int at;
        if (!full || bits == 1) {
            ip = constant + reduce(plane_sum(code, nb, words, table, first, stride));
            at = nb;
        } else {
            int low = bits - 1;
            int ex = nb + 8;
            float planes_ip = (float)(1 << low) * plane_sum(code, nb, words, table, first, stride);
            for (int j = 0; j < low; ++j)
                planes_ip += (float)(1 << j) *
                             plane_sum(code + ex + j * nb, nb, words, table, first, stride);
            ip = (float)((1 << bits) - 1) * constant + reduce(planes_ip);
            at = ex + low * nb;
        }
        return anchor_dist + load_f32(code + at) + load_f32(code + at + 4) * ip;
    }
    // A lone thread reads a code whose rows start on 4-byte boundaries a word at a time (four
    // sq8 levels, eight sq4 levels, two halves or a float; sq8 rows padded to 16 bytes, 16
    // levels a load first), in the same order and sums as byte by byte: a thread's byte loads
    // of its own row touch a cache sector each, and a lone query's scan of sq8 codes waited
    // on them (session 73). Lanes that share a code read it byte by byte, neighbouring lanes
    // neighbouring bytes. With word loops at every call site the kernel spilled registers on
    // sm_100 and sm_120 (session 74).
    const bool whole = lone && (code_size & 3) == 0;
    if (kind == KIND_FLOAT) {
        // Float residuals: distance = |q - c|^2 + factor - 2 <q, r>, r stored as is.
        float ip = 0.f;
        int d = first;
        if (bits == 16) {
            if (whole) {
                for (const u32* w = (const u32*)code; d + 2 <= dim; d += 2) {
                    u32 v = w[d >> 1];
                    ip += q[d] * half_to_float(v & 0xffff);
                    ip += q[d + 1] * half_to_float(v >> 16);
                }
            }
            for (; d < dim; d += stride)
                ip += q[d] * half_to_float((u32)code[2 * d] | ((u32)code[2 * d + 1] << 8));
        } else {
            if (whole)
                for (const float* w = (const float*)code; d < dim; ++d) ip += q[d] * w[d];
            for (; d < dim; d += stride) ip += q[d] * load_f32(code + 4 * d);
        }
        return anchor_dist + load_f32(code + (bits / 8) * dim) - 2.f * reduce(ip);
    }
    // Scalar: r = lo + step * level; distance = |q - c|^2 + factor - 2 <q, r>.
    size_t row = per_anchor ? (size_t)anchor * dim : 0;
    const float* l = lo + row;
    const float* s = step + row;
    float ip = 0.f;
    int packed;
    int d = first;
    if (bits == 8) {
        if (whole && (code_size & 15) == 0) {
            // Rows padded to 16 bytes on the device (the host's `CudaIndex::new`): sixteen
            // levels a load.
            for (const uint4* w = (const uint4*)code; d + 16 <= dim; d += 16) {
                const uint4 v4 = w[d >> 4];
                const u32 words[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
                for (int k = 0; k < 16; ++k)
                    ip += q[d + k] *
                          (l[d + k] + s[d + k] * (float)((words[k >> 2] >> (8 * (k & 3))) & 0xff));
            }
        }
        if (whole) {
            for (const u32* w = (const u32*)code; d + 4 <= dim; d += 4) {
                u32 v = w[d >> 2];
#pragma unroll
                for (int b = 0; b < 4; ++b)
                    ip += q[d + b] * (l[d + b] + s[d + b] * (float)((v >> (8 * b)) & 0xff));
            }
        }
        for (; d < dim; d += stride) ip += q[d] * (l[d] + s[d] * (float)code[d]);
        packed = dim;
    } else {
        if (whole) {
            for (const u32* w = (const u32*)code; d + 8 <= dim; d += 8) {
                u32 v = w[d >> 3];
#pragma unroll
                for (int b = 0; b < 8; ++b)
                    ip += q[d + b] * (l[d + b] + s[d + b] * (float)((v >> (4 * b)) & 15));
            }
        }
        for (; d < dim; d += stride) {
            u32 level = (code[d >> 1] >> ((d & 1) * 4)) & 15;
            ip += q[d] * (l[d] + s[d] * (float)level);
        }
        packed = (dim + 1) >> 1;
    }
    return anchor_dist + load_f32(code + packed) - 2.f * reduce(ip);
}

// The search of one query (the block's), by one of the two entry functions below. `Weighted`:
// the primary code is scalar with global ranges, scored against the weights q ∘ step1 and
// <q, lo1> (`score_weighted`), which take the query's place in shared memory; the query moves
// past them where a scalar or float second stage reads it. A kernel of its own, as scoring
// both ways in one kernel made it spill registers on one architecture or another (session 75).
template <bool Weighted>
__device__ __forceinline__ void search_query(const SearchArgs& a) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int query = blockIdx.x;
    const int tid = threadIdx.x;
    const int bd = blockDim.x;
    // Shared layout (16-byte aligned first): keys, aux, probe anchors, probe distances, probe
    // list starts, prefix sums of probe sizes, for the automatic pool each probed list's
    // smallest first-stage estimate outside the pool (the high word of its order key) and the
    // prefix sums of the sizes of the lists it rescores, nibble tables (RaBitQ: 1, pcaq: 2),
    // query (`Weighted`: the weights, then the query where a second stage reads it). The
    // tables, and so the query, start on a 16-byte boundary, so the scan of sq8 codes reads
    // four weights a load. The automatic pool stages the candidates it rescores (their
    // positions, probe indices and distances, 2 blockDim each) in the keys and aux slots past
    // those its top k uses.
    u64* keys = (u64*)smem;
    u32* aux = (u32*)(keys + a.slots);
    u32* probe_anchor = aux + a.slots;
    float* probe_dist = (float*)(probe_anchor + a.nprobe);
    u32* probe_start = (u32*)(probe_dist + a.nprobe);
    u32* prefix = probe_start + a.nprobe;               // (nprobe + 1,)
    u32* list_min = prefix + a.nprobe + 1;               // (nprobe,)
    u32* live = list_min + a.nprobe;                    // (nprobe + 1,)
    // (tables, padded_dim / 4, 16): keys and aux end on a 16-byte boundary (slots is a
    // multiple of 4), the probe arrays 8 bytes past one where nprobe is even (the host's
    // layout leaves those 8 bytes).
    float* table = (float*)(live + a.nprobe + 1 + ((a.nprobe & 1) ? 0 : 2));
    float* q = table + 4 * a.tables * a.padded_dim;      // (dim,)
    // The automatic pool's staging, in slots that steps 3 and 4 leave free:
    u32* staged_position = (u32*)(keys + a.cap_rescore);  // (2 blockDim,)
    u32* staged_probe = staged_position + 2 * bd;         // (2 blockDim,)
    float* staged_dist = (float*)(aux + a.cap_rescore);   // (2 blockDim,)
    __shared__ int count;
    __shared__ float threshold;
    __shared__ float constant;
    __shared__ float constant2;
    __shared__ int scanned;
    __shared__ float parts[32];
    __shared__ float margin;
    __shared__ int staged;
    __shared__ int lists_taken;

    // 1. The nprobe nearest anchors; or a filtered search's lists, ranked on the host
    // (`host_probes`) or here among the lists that hold an allowed vector (`np` of them).
    const bool filtered = a.allowed_starts != nullptr;
    const bool host_probes = a.probe_anchors != nullptr;
    const u32 first_probe = host_probes ? a.probe_offsets[query] : 0u;
    int np = host_probes ? (int)(a.probe_offsets[query + 1] - first_probe) : a.nprobe;
    if (tid == 0) {
        count = 0;
        threshold = infinity();
    }
    __syncthreads();
    if (!host_probes) {
        const float* dots = a.dots + (size_t)query * a.num_anchors;
        const float qn = a.query_norms[query];
        for (int base = 0; base < a.num_anchors; base += bd) {
            int j = base + tid;
            bool valid = j < a.num_anchors &&
                         (!filtered || a.allowed_starts[j + 1] > a.allowed_starts[j]);
            float d = valid ? fmaxf(qn - 2.f * dots[j] + a.anchor_norms[j], 0.f) : 0.f;
            offer(valid, d, (u32)j, 0, keys, aux, &count, &threshold, a.nprobe, a.cap);
        }
        compact(keys, aux, &count, &threshold, a.nprobe, a.cap);
    }
    if (filtered && !host_probes) {
        // The ranked lists in order until their shares of allowed vectors reach
        // nprobe_target lists' worth (vlc's Index::filtered_probe_count, in the same integer
        // sums); all of them where they are every list holding one; else the host ranks this
        // query (its row is marked -2). The cut is the first list before which the shares
        // reach the target. Warp 0 finds it: each lane sums the shares of a run of the ranked
        // lists (loads one after another, not waiting on each other), the lanes' sums are
        // scanned, and each lane walks its run from the worth before it (a narrow filter
        // ranks thousands of lists: one thread walking them all, a load at a time, took
        // most of a lone query's time).
        if (tid < 32) {
            const int ranked = count;
            const u64 target = (u64)a.nprobe_target << 16;
            const int run = (ranked + 31) / 32;
            const int lo = min(tid * run, ranked), hi = min(lo + run, ranked);
            u64 sum = 0;
            for (int j = lo; j < hi; ++j) sum += a.allowed_shares[(u32)keys[j]];
            u64 through = sum;  // the shares of the runs up to this lane's, inclusive
            for (int o = 1; o < 32; o <<= 1) {
                u64 below = __shfl_up_sync(0xffffffff, through, o);
                if (tid >= o) through += below;
            }
            u64 worth = through - sum;
            int cut = 0x7fffffff;
            for (int j = lo; j < hi; ++j) {
                if (worth >= target) {
                    cut = j;
                    break;
                }
                worth += a.allowed_shares[(u32)keys[j]];
            }
            for (int o = 16; o > 0; o >>= 1) cut = min(cut, __shfl_xor_sync(0xffffffff, cut, o));
            const u64 total = __shfl_sync(0xffffffff, through, 31);
            if (tid == 0) {
                if (cut == 0x7fffffff)
                    cut = total >= target || ranked >= a.lists_with_allowed ? ranked : -1;
                lists_taken = cut;
            }
        }
        __syncthreads();
        np = lists_taken;
        if (np < 0) {
            for (int i = tid; i < a.k; i += bd) {
                a.out_ids[(size_t)query * a.k + i] = -2;
                a.out_dists[(size_t)query * a.k + i] = infinity();
            }
            return;
        }
    }
    // A probed list's range: its positions, or (filtered) its entries of allowed_positions.
    for (int i = tid; i < np; i += bd) {
        u32 anchor = host_probes ? a.probe_anchors[first_probe + i] : (u32)keys[i];
        probe_anchor[i] = anchor;
        probe_dist[i] = host_probes ? a.probe_dists[first_probe + i] : key_dist(keys[i]);
        list_min[i] = 0xffffffffu;
        if (filtered) {
            probe_start[i] = a.allowed_starts[anchor];
            prefix[i + 1] = a.allowed_starts[anchor + 1] - a.allowed_starts[anchor];
        } else {
            probe_start[i] = (u32)a.list_offsets[anchor];
            prefix[i + 1] = (u32)(a.list_offsets[anchor + 1] - a.list_offsets[anchor]);
        }
    }
    // The query and its tables.
    const float* query_row = a.queries + (size_t)query * a.dim;
    for (int d = tid; d < a.dim; d += bd) {
        if (!Weighted) {
            q[d] = query_row[d];
        } else {
            q[d] = query_row[d] * a.step1[d];
            if (a.kind2 == KIND_SCALAR || a.kind2 == KIND_FLOAT) q[a.dim + d] = query_row[d];
        }
    }
    const bool rabitq = a.rotated != 0;
    const bool pca = a.pca_top != 0;
    if (rabitq) {
        // Nibble tables of the rotated query: pcaq's first is weighted by each dimension's
        // top bit, its second (and RaBitQ's only one) is plain.
        const float* rq = a.rotated + (size_t)query * a.padded_dim;
        const float scale = pca ? a.pca_scale : 2.f / sqrtf((float)a.dim);
        const int n = 4 * a.padded_dim;
        for (int e = tid; e < a.tables * n; e += bd) {
            int g = (e % n) >> 4, m = e & 15;
            bool weighted = pca && e < n;
            float v = 0.f;
            for (int t = 0; t < 4; ++t)
                if (m >> t & 1) v += rq[4 * g + t] * (weighted ? a.pca_top[4 * g + t] : 1.f);
            table[e] = scale * v;
        }
    }
    __syncthreads();
    if (tid < 32) {
        // Prefix sums of the probed list sizes (warp 0), then the RaBitQ constant -sum(Pq)/sqrt(D).
        warp_prefix_sums(prefix, np, [&](int i) { return prefix[i + 1]; });
        if (pca) {
            // Grid-centre terms of the first stage and of the full code.
            const float* rq = a.rotated + (size_t)query * a.padded_dim;
            float s1 = 0.f, s2 = 0.f;
            for (int j = tid; j < a.padded_dim; j += 32) {
                s1 += rq[j] * a.pca_coarse[j];
                s2 += rq[j] * a.pca_full[j];
            }
            for (int o = 16; o > 0; o >>= 1) {
                s1 += __shfl_xor_sync(0xffffffff, s1, o);
                s2 += __shfl_xor_sync(0xffffffff, s2, o);
            }
            if (tid == 0) {
                constant = a.pca_scale * s1;
                constant2 = a.pca_scale * s2;
            }
        } else if (rabitq) {
            const float* rq = a.rotated + (size_t)query * a.padded_dim;
            float s = 0.f;
            for (int j = tid; j < a.padded_dim; j += 32) s += rq[j];
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
            if (tid == 0) {
                constant = -s / sqrtf((float)a.dim);
                constant2 = 0.f;
            }
        } else if (Weighted) {
            float s = 0.f;
            for (int d = tid; d < a.dim; d += 32) s += query_row[d] * a.lo1[d];
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
            if (tid == 0) constant = s;
        }
        __syncwarp();  // every lane's prefix sums are visible to every lane
        if (tid == 0) {
            count = 0;
            threshold = infinity();
        }
        // Adaptive probing (SearchParams::lists_to_scan): the first list past the margin
        // whose predecessors hold k vectors ends the scan (lists ranked on the host come cut
        // to what they scan: their margin is +inf, as without adaptive probing; a filtered
        // search counts each list's allowed vectors). The lanes test 32 lists at a time (a
        // narrow filter probes thousands).
        int eff = np;
        if (isfinite(a.probe_margin) && np > 0) {
            const float limit = probe_dist[0] + a.probe_margin;
            for (int c = 1; c < np; c += 32) {
                const int j = c + tid;
                const bool past = j < np && probe_dist[j] > limit && prefix[j] >= (u32)a.k;
                const unsigned ballot = __ballot_sync(0xffffffff, past);
                if (ballot != 0) {
                    eff = c + __ffs(ballot) - 1;
                    break;
                }
            }
        }
        if (tid == 0) scanned = eff;
    }
    __syncthreads();

    // 2. Scan the probed lists as one flat range; each thread walks its probe cursor forward.
    // A filtered search's range holds its allowed vectors only: entry j is at
    // allowed_positions[j].
    auto position_of = [&](u32 entry) { return filtered ? a.allowed_positions[entry] : entry; };
    const u32 total = prefix[scanned];
    const float c_q = rabitq || Weighted ? constant : 0.f;
    const float c_q2 = pca ? constant2 : 0.f;
    // The first stage's estimate of the vector at `position` of probed list `pr`, by one
    // thread (word reads where `lone`, see `score`); its second stage's distance, by the
    // `group` lanes of a warp that share that vector (each lane's share summed by shuffles
    // within the group, so every lane of the group returns the same distance).
    auto first_stage = [&](u32 position, int pr, bool lone) {
        return score(a.kind1, a.bits1, false, a.code_size1, a.per_anchor1,
                     a.codes1 + (size_t)position * a.code_size1, table, c_q, c_q2, q, a.lo1,
                     a.step1, a.dim, a.padded_dim, a.pca_planes, probe_anchor[pr], probe_dist[pr],
                     0, 1, lone, Weighted, [](float v) { return v; });
    };
    const int group = a.group;
    const int lane = tid & (group - 1);
    auto second_stage = [&](u32 position, int pr) {
        return score(a.kind2, a.bits2, true, a.code_size2, a.per_anchor2,
                     a.codes2 + (size_t)position * a.code_size2, table, c_q, c_q2,
                     Weighted ? q + a.dim : q, a.lo2, a.step2, a.dim, a.padded_dim, a.pca_planes,
                     probe_anchor[pr], probe_dist[pr], lane, group, false, false, [&](float v) {
                         for (int o = group >> 1; o > 0; o >>= 1)
                             v += __shfl_xor_sync(0xffffffff, v, o, group);
                         return v;
                     });
    };
    // The automatic pool's step 4 skips the lists whose every estimate outside the pool is too
    // large: each probed list's smallest such estimate, kept as items are turned away or
    // dropped from the pool (the pool's own entries are rescored in step 3).
    u32* outside = a.error_margin > 0.f ? list_min : nullptr;
    int p = 0;
    for (u32 base = 0; base < total; base += bd) {
        u32 t = base + tid;
        bool valid = t < total;
        float d = 0.f;
        u32 position = 0;
        if (valid) {
            p = advance(prefix, p, t, scanned);
            position = position_of(probe_start[p] + (t - prefix[p]));
            d = first_stage(position, p, true);
        }
        offer(valid, d, position, (u32)p, keys, aux, &count, &threshold, a.pool_size,
              a.cap_rescore, outside);
    }
    compact(keys, aux, &count, &threshold, a.pool_size, a.cap_rescore, outside);

    // 3. Rescore the pool with the second stage, then the top k.
    const int found = count;
    if (a.kind2 != KIND_NONE) {
        // The automatic pool (vlc's SearchParams::pool_size): only a full pool leaves
        // candidates out, those whose first-stage keys are above its largest.
        const bool extend = a.error_margin > 0.f && found == a.pool_size;
        const u64 boundary = found > 0 ? keys[found - 1] : 0;
        __syncthreads();  // every thread has read it before the keys are rescored
        float sum = 0.f, sum_sq = 0.f;
        by_groups(found, group, [&](int i, bool real) {
            const u64 key = keys[i];
            float d = second_stage((u32)key, (int)aux[i]);
            __syncwarp();  // the warp's lanes have read keys[i] before lane 0 rewrites it
            if (real && lane == 0) {
                float error = d - key_dist(key);
                sum += error;
                sum_sq += error * error;
                keys[i] = order_key(d, (u32)key);
            }
        });
        __syncthreads();
        compact(keys, aux, &count, &threshold, a.k, a.cap_rescore);
        if (extend) {
            // The first stage's error over the pool (its standard deviation), and whether the
            // pool's worst estimate is under the k-th best plus its margin.
            sum = block_sum(sum, parts);
            sum_sq = block_sum(sum_sq, parts);
            if (tid == 0) {
                float mean = sum / (float)found;
                float spread = sqrtf(fmaxf(sum_sq / (float)found - mean * mean, 0.f));
                margin = key_dist(boundary) < threshold + a.error_margin * spread
                             ? a.error_margin * spread
                             : -1.f;
            }
            __syncthreads();
            // 4. Rescore every scanned candidate beyond the pool whose first-stage estimate
            // (scored again, the same as in step 2) is under the k-th best plus the margin,
            // in the lists whose smallest estimate outside the pool is (one flat range of
            // them, as in step 2).
            if (margin >= 0.f) {
                const int lists = scanned;
                const float bound = threshold + margin;
                if (tid < 32)
                    warp_prefix_sums(live, lists, [&](int i) {
                        return key_dist((u64)list_min[i] << 32) < bound ? prefix[i + 1] - prefix[i]
                                                                       : 0u;
                    });
                __syncthreads();
                const u32 live_total = live[lists];
                if (tid == 0) staged = 0;
                __syncthreads();
                // Groups of lanes rescore the n staged candidates, which are then offered to
                // the top k, blockDim at a time; called by the whole block.
                auto rescore_staged = [&](int n) {
                    by_groups(n, group, [&](int j, bool real) {
                        float d = second_stage(staged_position[j], (int)staged_probe[j]);
                        if (real && lane == 0) staged_dist[j] = d;
                    });
                    __syncthreads();
                    for (int base = 0; base < n; base += bd) {
                        int j = base + tid;
                        bool valid = j < n;
                        offer(valid, valid ? staged_dist[j] : 0.f,
                              valid ? staged_position[j] : 0u, valid ? staged_probe[j] : 0u,
                              keys, aux, &count, &threshold, a.k, a.cap_rescore);
                    }
                    if (tid == 0) staged = 0;
                    __syncthreads();
                };
                int p = 0;
                for (u32 base = 0; base < live_total; base += bd) {
                    // Each thread scores one item's first stage and stages it if it passes
                    // (against the k-th best as of the last rescoring); once more than a
                    // round's worth is staged, or at the end, they are rescored.
                    u32 t = base + tid;
                    if (t < live_total) {
                        p = advance(live, p, t, lists);
                        u32 position = position_of(probe_start[p] + (t - live[p]));
                        // Byte reads: step 4 runs only with a second stage, behind first
                        // stages that are mostly RaBitQ or pcaq (nibble tables), and word
                        // loops here too made the kernel spill on sm_100 and sm_120.
                        float estimate = first_stage(position, p, false);
                        if (order_key(estimate, position) > boundary &&
                            estimate < threshold + margin) {
                            int slot = atomicAdd(&staged, 1);
                            staged_position[slot] = position;
                            staged_probe[slot] = (u32)p;
                        }
                    }
                    __syncthreads();
                    const int n = staged;
                    __syncthreads();  // every thread has read the count before more are staged
                    if (n > bd || (n > 0 && base + bd >= live_total)) rescore_staged(n);
                }
                compact(keys, aux, &count, &threshold, a.k, a.cap_rescore);
            }
        }
    }
    for (int i = tid; i < a.k; i += bd) {
        size_t o = (size_t)query * a.k + i;
        if (i < found) {
            a.out_ids[o] = (long long)a.ids[(u32)keys[i]];
            a.out_dists[o] = fmaxf(key_dist(keys[i]), 0.f);
        } else {
            a.out_ids[o] = -1;
            a.out_dists[o] = infinity();
        }
    }
}

// Blocks of 256 threads (the host's BLOCK), four per multiprocessor at least: the register
// budget that keeps the second stage's inlined group scoring from halving the occupancy.
extern "C" __global__ void __launch_bounds__(256, 4) search_queries(SearchArgs a) {
    search_query<false>(a);
}

// The same for a scalar primary code with global ranges (sq8 and sq4 without a Jacobian).
extern "C" __global__ void __launch_bounds__(256, 4) search_queries_weighted(SearchArgs a) {
    search_query<true>(a);
}
