// Per-anchor trimmed sums over a CSR grouping (anchor a owns members[offsets[a]..offsets[a+1]]),
// one workgroup per anchor, invocations over dimensions, members in increasing order.
// WGSL has no f64: Kahan summation, and the compensation is returned so the host can combine
// sum - compensation in f64.

struct Params {
    num_anchors: u32,
    dim: u32,
    anchors_per_dispatch_row: u32,
    pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> points: array<f32>;      // (num_points, dim)
@group(0) @binding(2) var<storage, read> offsets: array<u32>;     // (num_anchors + 1)
@group(0) @binding(3) var<storage, read> members: array<u32>;     // (num_points)
@group(0) @binding(4) var<storage, read> dists: array<f32>;       // (num_points)
@group(0) @binding(5) var<storage, read> thresholds: array<f32>;  // (num_anchors)
@group(0) @binding(6) var<storage, read_write> sums: array<f32>;  // (num_anchors, dim)
@group(0) @binding(7) var<storage, read_write> comps: array<f32>; // (num_anchors, dim)
@group(0) @binding(8) var<storage, read_write> kept: array<u32>;  // (num_anchors)

@compute @workgroup_size(64)
fn accumulate_trimmed(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>) {
    let a = wg.y * p.anchors_per_dispatch_row + wg.x;
    if (a >= p.num_anchors) {
        return;
    }
    let lo = offsets[a];
    let hi = offsets[a + 1u];
    let thr = thresholds[a];
    for (var d = l.x; d < p.dim; d = d + 64u) {
        var s = 0.0;
        var c = 0.0;
        for (var m = lo; m < hi; m = m + 1u) {
            let i = members[m];
            if (dists[i] <= thr) {
                let y = points[i * p.dim + d] - c;
                let t = s + y;
                c = (t - s) - y;
                s = t;
            }
        }
        sums[a * p.dim + d] = s;
        comps[a * p.dim + d] = c;
    }
    if (l.x == 0u) {
        var k = 0u;
        for (var m = lo; m < hi; m = m + 1u) {
            if (dists[members[m]] <= thr) {
                k = k + 1u;
            }
        }
        kept[a] = k;
    }
}
