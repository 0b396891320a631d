// Nearest anchors, in two passes over a chunk of points.
// distances: the (rows, num_anchors) tile of squared L2 distances, computed with 16 x 16 tiles
//            of points and anchors staged in workgroup memory, 16 dimensions at a time.
// select:    per row, the per_point smallest (ties to the smaller id) by repeated scans.

struct Params {
    rows: u32,
    num_anchors: u32,
    dim: u32,
    per_point: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> points: array<f32>;     // (rows, dim)
@group(0) @binding(2) var<storage, read> anchors: array<f32>;    // (num_anchors, dim)
@group(0) @binding(3) var<storage, read_write> tile: array<f32>; // (rows, num_anchors)

var<workgroup> tp: array<array<f32, 16>, 16>;
var<workgroup> ta: array<array<f32, 16>, 16>;

@compute @workgroup_size(16, 16)
fn distances(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>) {
    let row = wg.y * 16u + l.y;
    let anchor = wg.x * 16u + l.x;
    var acc = 0.0;
    for (var t = 0u; t < p.dim; t = t + 16u) {
        // Stage 16 points and 16 anchors, 16 dimensions each.
        let pr = wg.y * 16u + l.y;
        let ar = wg.x * 16u + l.y;
        let d = t + l.x;
        tp[l.y][l.x] = select(0.0, points[pr * p.dim + d], pr < p.rows && d < p.dim);
        ta[l.y][l.x] = select(0.0, anchors[ar * p.dim + d], ar < p.num_anchors && d < p.dim);
        workgroupBarrier();
        let n = min(16u, p.dim - t);
        for (var k = 0u; k < n; k = k + 1u) {
            let diff = tp[l.y][k] - ta[l.x][k];
            acc = acc + diff * diff;
        }
        workgroupBarrier();
    }
    if (row < p.rows && anchor < p.num_anchors) {
        tile[row * p.num_anchors + anchor] = acc;
    }
}

@group(0) @binding(4) var<storage, read_write> out_ids: array<u32>;   // (rows, per_point)
@group(0) @binding(5) var<storage, read_write> out_dists: array<f32>; // (rows, per_point)

@compute @workgroup_size(64)
fn select_nearest(@builtin(global_invocation_id) g: vec3<u32>) {
    let row = g.x;
    if (row >= p.rows) {
        return;
    }
    var prev_d = -1.0;
    var prev_i = 0xffffffffu;
    var have_prev = false;
    for (var s = 0u; s < p.per_point; s = s + 1u) {
        var bd = 3.0e38;
        var bi = 0xffffffffu;
        var found = false;
        for (var j = 0u; j < p.num_anchors; j = j + 1u) {
            let d = tile[row * p.num_anchors + j];
            let after = !have_prev || d > prev_d || (d == prev_d && j > prev_i);
            if (after && (!found || d < bd || (d == bd && j < bi))) {
                bd = d;
                bi = j;
                found = true;
            }
        }
        out_ids[row * p.per_point + s] = bi;
        out_dists[row * p.per_point + s] = bd;
        prev_d = bd;
        prev_i = bi;
        have_prev = true;
    }
}
