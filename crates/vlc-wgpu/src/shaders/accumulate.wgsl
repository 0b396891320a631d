// Per-anchor trimmed sums, all on the device, in four passes (as accumulate.cu):
//   1. count_members: members and kept members (dist <= the anchor's threshold) per anchor
//      (`counts` and `kept` start at zero);
//   2. exclusive_scan: kept counts into offsets, so anchor a owns offsets[a] .. offsets[a+1],
//      and the same values into `cursor`;
//   3. scatter_kept: each kept point's index into its anchor's range;
//   4. sum_kept_fixed: one workgroup per anchor, invocations over dimensions, sums the range
//      and (when asked) moves the anchor: anchor += step * (sum / kept - anchor).
// The scatter's order within a range depends on timing, so step 4 adds in 64-bit fixed point
// (WGSL has neither f64 nor 64-bit integers: two u32 words with a carry): every value is
// rounded to a multiple of 2^-exponent, where the host picks the exponent so that no sum can
// overflow (num_points * max|x| * 2^exponent < 2^61). Integer addition is exact and
// order-free, so the sums are deterministic, and far closer to the exact sum than f32.

struct Params {
    num_points: u32,
    num_anchors: u32,
    dim: u32,
    // Anchors per row of the dispatch grid (sum_kept_fixed: workgroup (x, y) is anchor
    // y * anchors_per_row + x).
    anchors_per_row: u32,
    // Values are scaled by 2^exponent before rounding (in -126 ..= 126).
    exponent: i32,
    // 1: sum_kept_fixed moves the anchors.
    update: u32,
    // 1: sum_kept_fixed writes the fixed-point sums.
    write_sums: u32,
    step: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
// Layout: (num_points, dim), row-major.
@group(0) @binding(1) var<storage, read> points: array<f32>;
// Nearest anchor of each point and its squared distance. Layout: (num_points,).
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read> dists: array<f32>;
// Layout: (num_anchors,).
@group(0) @binding(4) var<storage, read> thresholds: array<f32>;
// Members per anchor, kept or not. Layout: (num_anchors,).
@group(0) @binding(5) var<storage, read_write> counts: array<atomic<u32>>;
// Kept members per anchor. Layout: (num_anchors,).
@group(0) @binding(6) var<storage, read_write> kept: array<atomic<u32>>;
// Layout: (num_anchors + 1,).
@group(0) @binding(7) var<storage, read_write> offsets: array<u32>;
// Next free slot of each anchor's range. Layout: (num_anchors,).
@group(0) @binding(8) var<storage, read_write> cursor: array<atomic<u32>>;
// Kept point indices grouped by anchor. Layout: (num_points,) (the first sum(kept) used).
@group(0) @binding(9) var<storage, read_write> members: array<u32>;
// Layout: (num_anchors, dim), row-major; moved in place when p.update is 1.
@group(0) @binding(10) var<storage, read_write> anchors: array<f32>;
// 64-bit fixed-point sums, two's complement, as (low word, high word).
// Layout: (num_anchors, dim, 2), row-major.
@group(0) @binding(11) var<storage, read_write> sums: array<u32>;

// count_members and scatter_kept: grid-stride loops over points.
@compute @workgroup_size(256)
fn count_members(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    for (var i = g.x; i < p.num_points; i = i + groups.x * 256u) {
        let a = ids[i];
        atomicAdd(&counts[a], 1u);
        if (dists[i] <= thresholds[a]) {
            atomicAdd(&kept[a], 1u);
        }
    }
}

var<workgroup> part: array<u32, 256>;

// One workgroup of 256: each invocation scans a contiguous run of counts; the runs' totals are
// scanned in workgroup memory (Hillis-Steele).
@compute @workgroup_size(256)
fn exclusive_scan(@builtin(local_invocation_index) t: u32) {
    let n = p.num_anchors;
    let per = (n + 255u) / 256u;
    let lo = min(t * per, n);
    let hi = min(lo + per, n);
    var s = 0u;
    for (var i = lo; i < hi; i = i + 1u) {
        s = s + atomicLoad(&kept[i]);
    }
    part[t] = s;
    workgroupBarrier();
    for (var o = 1u; o < 256u; o = o << 1u) {
        var v = 0u;
        if (t >= o) {
            v = part[t - o];
        }
        workgroupBarrier();
        part[t] = part[t] + v;
        workgroupBarrier();
    }
    var run = 0u;
    if (t > 0u) {
        run = part[t - 1u];
    }
    for (var i = lo; i < hi; i = i + 1u) {
        offsets[i] = run;
        atomicStore(&cursor[i], run);
        run = run + atomicLoad(&kept[i]);
    }
    if (t == 255u) {
        offsets[n] = part[255];
    }
}

@compute @workgroup_size(256)
fn scatter_kept(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    for (var i = g.x; i < p.num_points; i = i + groups.x * 256u) {
        let a = ids[i];
        if (dists[i] <= thresholds[a]) {
            members[atomicAdd(&cursor[a], 1u)] = i;
        }
    }
}

const TWO_32: f32 = 4294967296.0;

// acc + round(v * 2^exponent), 64-bit two's complement as (low, high). The magnitude splits
// exactly into words (it has at most 24 significant bits); a negative value is then negated.
fn add_fixed(acc: vec2<u32>, v: f32) -> vec2<u32> {
    let x = round(ldexp(v, p.exponent));
    let m = abs(x);
    let high = floor(m * (1.0 / TWO_32));
    var w = vec2<u32>(u32(m - high * TWO_32), u32(high));
    if (x < 0.0) {
        w = vec2<u32>(~w.x + 1u, ~w.y + select(0u, 1u, w.x == 0u));
    }
    let low = acc.x + w.x;
    return vec2<u32>(low, acc.y + w.y + select(0u, 1u, low < w.x));
}

// The fixed-point sum s divided by `count`, as an f32 (divided before un-scaling, so that a
// mean of values near the f32 limit cannot overflow).
fn fixed_mean(s: vec2<u32>, count: u32) -> f32 {
    let negative = (s.y & 0x80000000u) != 0u;
    var m = s;
    if (negative) {
        m = vec2<u32>(~s.x + 1u, ~s.y + select(0u, 1u, s.x == 0u));
    }
    let f = ldexp((f32(m.y) * TWO_32 + f32(m.x)) / f32(count), -p.exponent);
    return select(f, -f, negative);
}

@compute @workgroup_size(128)
fn sum_kept_fixed(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>) {
    let a = wg.y * p.anchors_per_row + wg.x;
    if (a >= p.num_anchors) {
        return;
    }
    let lo = offsets[a];
    let hi = offsets[a + 1u];
    let dim = p.dim;
    for (var d = l.x; d < dim; d = d + 128u) {
        var s = vec2<u32>(0u, 0u);
        var m = lo;
        // Four members at a time: their loads are independent.
        for (; m + 4u <= hi; m = m + 4u) {
            let v0 = points[members[m] * dim + d];
            let v1 = points[members[m + 1u] * dim + d];
            let v2 = points[members[m + 2u] * dim + d];
            let v3 = points[members[m + 3u] * dim + d];
            s = add_fixed(add_fixed(add_fixed(add_fixed(s, v0), v1), v2), v3);
        }
        for (; m < hi; m = m + 1u) {
            s = add_fixed(s, points[members[m] * dim + d]);
        }
        let idx = a * dim + d;
        if (p.write_sums == 1u) {
            sums[2u * idx] = s.x;
            sums[2u * idx + 1u] = s.y;
        }
        if (p.update == 1u && hi > lo) {
            let mean = fixed_mean(s, hi - lo);
            anchors[idx] = anchors[idx] + p.step * (mean - anchors[idx]);
        }
    }
}

// The trimming thresholds of the robust estimator (the CPU reference is
// vlc::backend::trimmed_thresholds), after passes 1-3 grouped every member by anchor (all
// thresholds +inf): workgroup (x, y) is anchor a = y * anchors_per_row + x and finds the value
// of rank rank[a] (0-based) among its members' distances; the host derives the rank from the
// member counts exactly as the CPU does (keep - 1, keep = vlc::backend::kept_count), and
// 0xffffffff (keep is all or none: +inf, set by the host) skips the anchor. A radix select over
// the distances' bits (non-negative floats order as their bits): four passes of 8 bits, each
// narrowing the prefix with a histogram in workgroup memory. The value found is one of the
// distances, so the result equals the CPU's exactly.
// Layout: (num_anchors,).
@group(0) @binding(12) var<storage, read> rank: array<u32>;
// Layout: (num_anchors,).
@group(0) @binding(13) var<storage, read_write> thresholds_out: array<f32>;

var<workgroup> hist: array<atomic<u32>, 256>;
// The prefix found so far and the rank within it.
var<workgroup> chosen: vec2<u32>;

@compute @workgroup_size(256)
fn select_thresholds(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let a = wg.y * p.anchors_per_row + wg.x;
    var lo = 0u;
    var hi = 0u;
    var r = 0xffffffffu;
    if (a < p.num_anchors) {
        lo = offsets[a];
        hi = offsets[a + 1u];
        r = rank[a];
    }
    let selecting = r != 0xffffffffu;
    var prefix = 0u;
    var mask = 0u;
    for (var pass_index = 0u; pass_index < 4u; pass_index = pass_index + 1u) {
        let shift = 24u - 8u * pass_index;
        atomicStore(&hist[t], 0u);
        workgroupBarrier();
        if (selecting) {
            for (var m = lo + t; m < hi; m = m + 256u) {
                // -0 (from a clamp) counts as +0.
                let bits = bitcast<u32>(dists[members[m]]) & 0x7fffffffu;
                if ((bits & mask) == prefix) {
                    atomicAdd(&hist[(bits >> shift) & 255u], 1u);
                }
            }
        }
        workgroupBarrier();
        if (t == 0u) {
            var below = 0u;
            var bin = 0u;
            loop {
                let h = atomicLoad(&hist[bin]);
                if (below + h > r || bin == 255u) {
                    break;
                }
                below = below + h;
                bin = bin + 1u;
            }
            chosen = vec2<u32>(prefix | (bin << shift), r - below);
        }
        workgroupBarrier();
        prefix = chosen.x;
        r = chosen.y;
        mask = mask | (255u << shift);
    }
    if (t == 0u && selecting) {
        thresholds_out[a] = bitcast<f32>(prefix);
    }
}
