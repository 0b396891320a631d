// The encode primitive of the extended codes: the magnitude levels of each row, the same
// branch and bound over the scale as the CPU reference (vlc-core's codec/levels.rs), operation
// for operation, so that the levels are the CPU's exactly. Compiled with --fmad=false, and
// every rounding the reference makes is spelled out with an intrinsic (__fmul_rn, __dadd_rn,
// ...), so that nothing is fused or reassociated.
//
// Eight threads per row, one per lane of the reference's sums: lane l sums dimensions l, l + 8,
// ... in the reference's order, and the eight partial sums are added in lane order, so the
// sums are the reference's bit for bit. The search itself (the interval stack, the leaves) is
// the same in all eight threads of a row. A row whose search needs more than STACK_CAP pending
// intervals, or a leaf of more than LEAF_CAP events (many equal magnitudes), is flagged
// instead; the host computes those rows on the CPU.

#define LANES 8
#define LEAF_EVENTS 16.0
#define STACK_CAP 64
#define LEAF_CAP 64

typedef unsigned long long u64;

struct Sums {
    double numerator;
    double squares;
    double events;
};

struct Interval {
    float start;
    float end;
    Sums start_sums;
    Sums end_sums;
};

// An event's key, ordered as the reference's u128: (scale bits, level) then (tie, dim).
struct Key {
    u64 hi;
    u64 lo;
};

__device__ __forceinline__ bool key_less(Key a, Key b) {
    return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo);
}

__device__ __forceinline__ Key event_key(unsigned scale, unsigned level, unsigned tie, unsigned dim) {
    Key k;
    k.hi = ((u64)scale << 32) | level;
    k.lo = ((u64)tie << 32) | dim;
    return k;
}

// Every event at scale t ("whole").
__device__ __forceinline__ Key whole_key(float t) {
    return event_key(__float_as_uint(t), 0xffffffffu, 0xffffffffu, 0xffffffffu);
}

__device__ __forceinline__ double value_of(Sums s) {
    return __ddiv_rn(__dmul_rn(s.numerator, s.numerator), s.squares);
}

// min(floor(t |v|), cap) as the reference computes it: the f32 product, `min` (which returns
// the cap where the product is NaN), truncation.
__device__ __forceinline__ unsigned level_of(float t, float m, float cap) {
    float x = fminf(__fmul_rn(t, m), cap);
    return (unsigned)__float2int_rz(x);
}

__device__ __forceinline__ float cap_at(const float* capf, float m, unsigned i) {
    return m > 0.0f ? capf[i] : 0.0f;
}

// The reference's sums_at for the row x (dim,), by the eight threads of its group (`lane`
// 0..7, `mask` their bits in the warp): lane l sums dimensions l, l + 8, ... in order, the
// tail goes into lane 0, and the lanes' f64 sums are added in lane order. Every thread of the
// group returns the same sums.
__device__ Sums sums_at(float t, const float* x, const float* capf, unsigned dim, double base,
                        unsigned lane, unsigned mask) {
    double n = 0.0;
    u64 s = 0, e = 0;
    unsigned split = dim / LANES * LANES;
    for (unsigned i = lane; i < split; i += LANES) {
        float m = fabsf(x[i]);
        unsigned k = level_of(t, m, cap_at(capf, m, i));
        n = __dadd_rn(n, (double)__fmul_rn((float)k, m));
        s += (u64)(k * (k + 1));
        e += k;
    }
    if (lane == 0) {
        for (unsigned i = split; i < dim; ++i) {
            float m = fabsf(x[i]);
            unsigned k = level_of(t, m, cap_at(capf, m, i));
            n = __dadd_rn(n, (double)__fmul_rn((float)k, m));
            s += (u64)(k * (k + 1));
            e += k;
        }
    }
    double total = __shfl_sync(mask, n, 0, LANES);
#pragma unroll
    for (int l = 1; l < LANES; ++l) total = __dadd_rn(total, __shfl_sync(mask, n, l, LANES));
    // The integer sums are exact in any order.
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset /= 2) {
        s += __shfl_xor_sync(mask, s, offset, LANES);
        e += __shfl_xor_sync(mask, e, offset, LANES);
    }
    Sums r;
    r.numerator = __dadd_rn(base, total);
    r.squares = __dadd_rn(__dmul_rn(0.25, (double)dim), (double)s);
    r.events = (double)e;
    return r;
}

// The reference's bound on the value over the interval (start, end].
__device__ double bound(float start, float end, Sums a, Sums b) {
    double low = __dmul_rn(__dmul_rn(2.0, (double)start), 1.0 - 1e-5);
    double high = __dmul_rn(__dmul_rn(2.0, (double)end), 1.0 + 1e-5);
    double gained = __dsub_rn(b.numerator, a.numerator);
    double grown = __dsub_rn(b.squares, a.squares);
    double kink = __ddiv_rn(__dsub_rn(__dmul_rn(high, gained), grown), __dsub_rn(high, low));
    // Rust's clamp(0, gained), which keeps a NaN.
    kink = kink < 0.0 ? 0.0 : (kink > gained ? gained : kink);
    double top = __dadd_rn(a.numerator, kink);
    double at_kink = __ddiv_rn(__dmul_rn(top, top), __dadd_rn(a.squares, __dmul_rn(low, kink)));
    return fmax(fmax(at_kink, value_of(a)), value_of(b));
}

// The state behind the best value: none (every level 0), every level at a scale (Split), or a
// leaf's start levels raised by its events up to a key (Leaf).
#define STATE_ZERO 0
#define STATE_SPLIT 1
#define STATE_LEAF 2

struct Best {
    double value;
    bool has_key;
    Key key;
    int state;
    float start;
    float end;
};

__device__ __forceinline__ bool better(double value, Key key, const Best& best) {
    return value > best.value || (value == best.value && best.has_key && key_less(key, best.key));
}

// v: (rows, dim), row-major. caps: (dim,) the largest level of each dimension, as f32.
// levels: (rows, dim), row-major. flags: (rows,), 1 where the host must compute the row.
// Eight threads per row: blockDim.x a multiple of 8.
extern "C" __global__ void code_levels(const float* __restrict__ v, const float* __restrict__ capf,
                                       unsigned rows, unsigned dim,
                                       unsigned short* __restrict__ levels,
                                       unsigned char* __restrict__ flags) {
    unsigned row = (blockIdx.x * blockDim.x + threadIdx.x) / LANES;
    unsigned lane = threadIdx.x % LANES;
    // The whole group leaves together: its threads share the row.
    if (row >= rows) return;
    unsigned mask = 0xffu << ((threadIdx.x % 32) / LANES * LANES);
    const float* x = v + (u64)row * dim;
    double base_sum = 0.0;
    float last = 0.0f;
    bool beyond = false;
    for (unsigned i = 0; i < dim; ++i) {
        float m = fabsf(x[i]);
        base_sum = __dadd_rn(base_sum, (double)m);
        float c = cap_at(capf, m, i);
        if (c > 0.0f) {
            float t = __fdiv_rn(__fadd_rn(c, 1.0f), m);
            if (isfinite(t)) {
                last = fmaxf(last, t);
            } else {
                beyond = true;
            }
        }
    }
    double base = __dmul_rn(0.5, base_sum);
    Sums zero = sums_at(0.0f, x, capf, dim, base, lane, mask);
    Sums end_all = sums_at(last, x, capf, dim, base, lane, mask);
    Best best;
    best.value = value_of(zero);
    best.has_key = false;
    best.state = STATE_ZERO;
    best.start = 0.0f;
    best.end = 0.0f;
    // The state past the last finite event, then (where some first event is at +inf) at +inf.
    for (int pass = 0; pass < 2; ++pass) {
        float t;
        Sums sums;
        if (pass == 0) {
            t = last;
            sums = end_all;
        } else {
            if (!beyond) break;
            t = __int_as_float(0x7f800000);
            sums = sums_at(t, x, capf, dim, base, lane, mask);
        }
        if (t > 0.0f && better(value_of(sums), whole_key(t), best)) {
            best.value = value_of(sums);
            best.has_key = true;
            best.key = whole_key(t);
            best.state = STATE_SPLIT;
            best.start = t;
        }
    }
    Interval stack[STACK_CAP];
    int depth = 0;
    if (last > 0.0f) {
        stack[0].start = 0.0f;
        stack[0].end = last;
        stack[0].start_sums = zero;
        stack[0].end_sums = end_all;
        depth = 1;
    }
    Key events[LEAF_CAP];
    bool fallback = false;
    while (depth > 0) {
        Interval iv = stack[--depth];
        if (iv.end_sums.events == iv.start_sums.events ||
            bound(iv.start, iv.end, iv.start_sums, iv.end_sums) <= best.value) {
            continue;
        }
        float middle = __fadd_rn(iv.start, __fmul_rn(__fsub_rn(iv.end, iv.start), 0.5f));
        if (__dsub_rn(iv.end_sums.events, iv.start_sums.events) > LEAF_EVENTS &&
            iv.start < middle && middle < iv.end) {
            Sums ms = sums_at(middle, x, capf, dim, base, lane, mask);
            if (better(value_of(ms), whole_key(middle), best)) {
                best.value = value_of(ms);
                best.has_key = true;
                best.key = whole_key(middle);
                best.state = STATE_SPLIT;
                best.start = middle;
            }
            if (depth + 2 > STACK_CAP) {
                fallback = true;
                break;
            }
            Interval lower = {iv.start, middle, iv.start_sums, ms};
            Interval upper = {middle, iv.end, ms, iv.end_sums};
            // The half with the larger bound is searched first.
            if (bound(iv.start, middle, iv.start_sums, ms) > bound(middle, iv.end, ms, iv.end_sums)) {
                stack[depth++] = upper;
                stack[depth++] = lower;
            } else {
                stack[depth++] = lower;
                stack[depth++] = upper;
            }
            continue;
        }
        // A leaf: its events in order.
        int count = 0;
        for (unsigned i = 0; i < dim && !fallback; ++i) {
            float m = fabsf(x[i]);
            float c = cap_at(capf, m, i);
            unsigned a = level_of(iv.start, m, c), b = level_of(iv.end, m, c);
            if (b > a) {
                float inverse = __fdiv_rn(1.0f, m);
                unsigned tie = ~__float_as_uint(m);
                for (unsigned k = a + 1; k <= b; ++k) {
                    if (count == LEAF_CAP) {
                        fallback = true;
                        break;
                    }
                    events[count++] = event_key(__float_as_uint(__fmul_rn((float)k, inverse)), k, tie, i);
                }
            }
        }
        if (fallback) break;
        // Insertion sort (at most LEAF_CAP keys, usually about LEAF_EVENTS).
        for (int p = 1; p < count; ++p) {
            Key key = events[p];
            int y = p - 1;
            while (y >= 0 && key_less(key, events[y])) {
                events[y + 1] = events[y];
                --y;
            }
            events[y + 1] = key;
        }
        double numerator = iv.start_sums.numerator, squares = iv.start_sums.squares;
        for (int at = 0; at < count; ++at) {
            unsigned k = (unsigned)(events[at].hi & 0xffffffffu);
            unsigned i = (unsigned)(events[at].lo & 0xffffffffu);
            numerator = __dadd_rn(numerator, (double)fabsf(x[i]));
            squares = __dadd_rn(squares, __dmul_rn(2.0, (double)k));
            double value = __ddiv_rn(__dmul_rn(numerator, numerator), squares);
            if (better(value, events[at], best)) {
                best.value = value;
                best.has_key = true;
                best.key = events[at];
                best.state = STATE_LEAF;
                best.start = iv.start;
                best.end = iv.end;
            }
        }
    }
    if (lane == 0) flags[row] = fallback ? 1 : 0;
    unsigned short* out = levels + (u64)row * dim;
    for (unsigned i = lane; i < dim; i += LANES) {
        unsigned level = 0;
        if (!fallback && best.state != STATE_ZERO) {
            float m = fabsf(x[i]);
            float c = cap_at(capf, m, i);
            level = level_of(best.start, m, c);
            if (best.state == STATE_LEAF) {
                // The leaf's events of this dimension rise with their level: count those up to
                // the best key.
                unsigned b = level_of(best.end, m, c);
                if (b > level) {
                    float inverse = __fdiv_rn(1.0f, m);
                    unsigned tie = ~__float_as_uint(m);
                    unsigned a = level;
                    for (unsigned k = a + 1; k <= b; ++k) {
                        Key key = event_key(__float_as_uint(__fmul_rn((float)k, inverse)), k, tie, i);
                        if (key_less(best.key, key)) break;
                        ++level;
                    }
                }
            }
        }
        out[i] = (unsigned short)level;
    }
}
