// Cutting anchors' member lists in two for the training's split maintenance (as split.cu; the
// CPU reference is vlc::backend::split_list). Workgroup (x, y) is list l = y * lists_per_row + x:
//   1. the member farthest from the list's centre (ties to the smaller point index): each
//      invocation measures its members, then a reduction in workgroup memory;
//   2. each member's side: (x - centre) . (farthest - centre) > 0 is the plus side;
//   3. the mean of each side, one invocation per dimension summing the members in list order
//      (compensated f32 sums: WGSL has no f64; the order is fixed, so the result is
//      deterministic).
// points: (num_points, dim); centers: (num_lists, dim); offsets: (num_lists + 1,), list l owns
// members[offsets[l] .. offsets[l + 1]); side: one per member, 1 = plus; means: (num_lists, 2,
// dim), the minus side's mean then the plus side's; counts: (num_lists, 2), minus then plus.

struct Params {
    num_lists: u32,
    dim: u32,
    lists_per_row: u32,
    pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> points: array<f32>;
@group(0) @binding(2) var<storage, read> centers: array<f32>;
@group(0) @binding(3) var<storage, read> offsets: array<u32>;
@group(0) @binding(4) var<storage, read> members: array<u32>;
@group(0) @binding(5) var<storage, read_write> side: array<u32>;
@group(0) @binding(6) var<storage, read_write> means: array<f32>;
@group(0) @binding(7) var<storage, read_write> counts: array<u32>;

var<workgroup> best_dist: array<f32, 256>;
var<workgroup> best_index: array<u32, 256>;

@compute @workgroup_size(256)
fn split_lists(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let l = wg.y * p.lists_per_row + wg.x;
    let dim = p.dim;
    var lo = 0u;
    var hi = 0u;
    if (l < p.num_lists) {
        lo = offsets[l];
        hi = offsets[l + 1u];
    }
    // Lists of fewer than 2 members are not cut (the host knows them): no work.
    if (hi - lo < 2u) {
        hi = lo;
    }
    let c = l * dim;

    var bd = -1.0;
    var bi = 0xffffffffu;
    for (var m = lo + t; m < hi; m = m + 256u) {
        let i = members[m];
        var s = 0.0;
        for (var d = 0u; d < dim; d = d + 1u) {
            let v = points[i * dim + d] - centers[c + d];
            s = fma(v, v, s);
        }
        if (s > bd || (s == bd && i < bi)) {
            bd = s;
            bi = i;
        }
    }
    best_dist[t] = bd;
    best_index[t] = bi;
    workgroupBarrier();
    for (var half = 128u; half > 0u; half = half / 2u) {
        if (t < half) {
            let e = best_dist[t + half];
            let j = best_index[t + half];
            if (j != 0xffffffffu && (e > best_dist[t] || (e == best_dist[t] && j < best_index[t]))) {
                best_dist[t] = e;
                best_index[t] = j;
            }
        }
        workgroupBarrier();
    }
    let far = best_index[0];

    for (var m = lo + t; m < hi; m = m + 256u) {
        let i = members[m];
        var proj = 0.0;
        for (var d = 0u; d < dim; d = d + 1u) {
            let center = centers[c + d];
            proj = fma(points[i * dim + d] - center, points[far * dim + d] - center, proj);
        }
        side[m] = select(0u, 1u, proj > 0.0);
    }
    storageBarrier();
    workgroupBarrier();

    if (hi > lo) {
        for (var d = t; d < dim; d = d + 256u) {
            var plus = 0.0;
            var plus_carry = 0.0;
            var minus = 0.0;
            var minus_carry = 0.0;
            var n_plus = 0u;
            var n_minus = 0u;
            for (var m = lo; m < hi; m = m + 1u) {
                let v = points[members[m] * dim + d];
                // Kahan summation.
                if (side[m] != 0u) {
                    let y = v - plus_carry;
                    let s = plus + y;
                    plus_carry = (s - plus) - y;
                    plus = s;
                    n_plus = n_plus + 1u;
                } else {
                    let y = v - minus_carry;
                    let s = minus + y;
                    minus_carry = (s - minus) - y;
                    minus = s;
                    n_minus = n_minus + 1u;
                }
            }
            let out = l * 2u * dim;
            means[out + d] = select(0.0, minus / f32(n_minus), n_minus > 0u);
            means[out + dim + d] = select(0.0, plus / f32(n_plus), n_plus > 0u);
            if (d == 0u) {
                counts[2u * l] = n_minus;
                counts[2u * l + 1u] = n_plus;
            }
        }
    }
}
