// Nearest anchors. For one neighbour per point (training), `nearest_fused` at the end of this
// file. For several (search), two passes over a chunk of points:
// distances: the (rows, num_anchors) tile of squared L2 distances in GEMM form, 128 x 128
//            per workgroup (8 x 8 per invocation), 8 dimensions at a time.
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

// distances: GEMM form ||x||^2 - 2 x.c + ||c||^2 (clamped at 0), register-blocked as
// `nearest_fused_wide` below: a workgroup of 16 x 16 invocations owns a tile of 128 points x
// 128 anchors; each invocation computes an 8 x 8 block (points 8*ty.., anchors 8*tx..) from
// 8-dimension slices staged in workgroup memory (`wp`, `wa`, declared with that kernel), and
// the squared norms of its 8 points and 8 anchors from the same slices. Sixteen multiply-adds
// per four workgroup-memory reads, where a 16 x 16 tile of one output per invocation did one
// per two.
@compute @workgroup_size(16, 16)
fn distances(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>) {
    let tx = l.x;
    let ty = l.y;
    let p0 = wg.y * 128u;
    let a0 = wg.x * 128u;
    var b: Block8;
    // Squared norms: points 8*ty + 0..3 / 4..7, anchors 8*tx + 0..3 / 4..7.
    var xn0 = vec4<f32>(0.0);
    var xn1 = vec4<f32>(0.0);
    var cn0 = vec4<f32>(0.0);
    var cn1 = vec4<f32>(0.0);
    for (var t = 0u; t < p.dim; t = t + 8u) {
        stage_wide(ty * 16u + tx, p0, a0, t);
        workgroupBarrier();
        for (var k = 0u; k < 8u; k = k + 1u) {
            let x0 = wp[k][2u * ty];
            let x1 = wp[k][2u * ty + 1u];
            let c0 = wa[k][2u * tx];
            let c1 = wa[k][2u * tx + 1u];
            multiply_wide(&b, x0, x1, c0, c1);
            xn0 = fma(x0, x0, xn0);
            xn1 = fma(x1, x1, xn1);
            cn0 = fma(c0, c0, cn0);
            cn1 = fma(c1, c1, cn1);
        }
        workgroupBarrier();
    }
    let r = p0 + 8u * ty;
    let a = a0 + 8u * tx;
    put_distances(r, a, xn0, xn1, cn0.x, b.q0l, b.q0h);
    put_distances(r, a + 1u, xn0, xn1, cn0.y, b.q1l, b.q1h);
    put_distances(r, a + 2u, xn0, xn1, cn0.z, b.q2l, b.q2h);
    put_distances(r, a + 3u, xn0, xn1, cn0.w, b.q3l, b.q3h);
    put_distances(r, a + 4u, xn0, xn1, cn1.x, b.q4l, b.q4h);
    put_distances(r, a + 5u, xn0, xn1, cn1.y, b.q5l, b.q5h);
    put_distances(r, a + 6u, xn0, xn1, cn1.z, b.q6l, b.q6h);
    put_distances(r, a + 7u, xn0, xn1, cn1.w, b.q7l, b.q7h);
}

// Writes anchor `a`'s distances to points r..r+3 (norms xl, dots ql) and r+4..r+7 (xh, qh).
fn put_distances(r: u32, a: u32, xl: vec4<f32>, xh: vec4<f32>, cn: f32, ql: vec4<f32>, qh: vec4<f32>) {
    if (a >= p.num_anchors) {
        return;
    }
    let dl = max(xl + vec4<f32>(cn) - 2.0 * ql, vec4<f32>(0.0));
    let dh = max(xh + vec4<f32>(cn) - 2.0 * qh, vec4<f32>(0.0));
    for (var i = 0u; i < 4u; i = i + 1u) {
        if (r + i < p.rows) {
            tile[(r + i) * p.num_anchors + a] = dl[i];
        }
        if (r + 4u + i < p.rows) {
            tile[(r + 4u + i) * p.num_anchors + a] = dh[i];
        }
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

// select_radix: the per_point smallest as select_nearest gives them (same order, ties to the
// smaller id), for 8 <= per_point <= 256, in a fixed number of passes over the row instead of
// one scan per pick (as CUDA's nearest_radix_from_dots). One workgroup per row: four passes
// build 256-bin histograms of the distance's bits (a non-negative float's bits order as the
// float does) and narrow down the per_point-th smallest, T; each invocation then counts the
// ties at T in its contiguous share of the row, so that the first ones by id can be taken; the
// picks are gathered below RADIX_MAX_PICKS and ranked by (distance, id). Each invocation loops
// about 6 x num_anchors / 64 + per_point^2 / 64 times (a software driver like lavapipe, which
// stops a loop after 65,535 iterations, cut select_nearest's per_point x num_anchors short).

const RADIX_MAX_PICKS: u32 = 256u;
var<workgroup> r_hist: array<atomic<u32>, 256>;
var<workgroup> r_ties: array<u32, 64>;
var<workgroup> r_pick_key: array<u32, 256>;
var<workgroup> r_pick_id: array<u32, 256>;
var<workgroup> r_digit: u32;
var<workgroup> r_before: u32;
var<workgroup> r_written: atomic<u32>;

fn radix_key(row: u32, j: u32) -> u32 {
    // Distances are sums of squares (>= 0); clearing the sign bit makes -0 and +0 one key.
    return bitcast<u32>(tile[row * p.num_anchors + j]) & 0x7fffffffu;
}

@compute @workgroup_size(64)
fn select_radix(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    let row = wg.x;
    if (row >= p.rows) {
        return;
    }
    let n = p.num_anchors;
    let m = p.per_point;
    var prefix = 0u;
    var need = m;
    for (var round = 0u; round < 4u; round = round + 1u) {
        let shift = 24u - 8u * round;
        for (var b = l; b < 256u; b = b + 64u) {
            atomicStore(&r_hist[b], 0u);
        }
        workgroupBarrier();
        var high_mask = 0u;
        if (round > 0u) {
            high_mask = 0xffffffffu << (shift + 8u);
        }
        for (var j = l; j < n; j = j + 64u) {
            let key = radix_key(row, j);
            if ((key & high_mask) == prefix) {
                atomicAdd(&r_hist[(key >> shift) & 255u], 1u);
            }
        }
        workgroupBarrier();
        if (l == 0u) {
            var sum = 0u;
            var digit = 0u;
            var before = 0u;
            for (var b = 0u; b < 256u; b = b + 1u) {
                let c = atomicLoad(&r_hist[b]);
                if (sum + c >= need) {
                    digit = b;
                    before = sum;
                    break;
                }
                sum = sum + c;
            }
            r_digit = digit;
            r_before = before;
        }
        workgroupBarrier();
        prefix = prefix | (r_digit << shift);
        need = need - r_before;
        workgroupBarrier();
    }
    // prefix = T: m - need keys lie below it; the first `need` ties at T by id join them.
    let chunk = (n + 63u) / 64u;
    let lo = min(l * chunk, n);
    let hi = min(lo + chunk, n);
    var ties = 0u;
    for (var j = lo; j < hi; j = j + 1u) {
        if (radix_key(row, j) == prefix) {
            ties = ties + 1u;
        }
    }
    r_ties[l] = ties;
    if (l == 0u) {
        atomicStore(&r_written, 0u);
    }
    workgroupBarrier();
    if (l == 0u) {
        var sum = 0u;
        for (var i = 0u; i < 64u; i = i + 1u) {
            let c = r_ties[i];
            r_ties[i] = sum;
            sum = sum + c;
        }
    }
    workgroupBarrier();
    var tie_rank = r_ties[l];
    for (var j = lo; j < hi; j = j + 1u) {
        let key = radix_key(row, j);
        var take = key < prefix;
        if (key == prefix) {
            take = tie_rank < need;
            tie_rank = tie_rank + 1u;
        }
        if (take) {
            let at = atomicAdd(&r_written, 1u);
            r_pick_key[at] = key;
            r_pick_id[at] = j;
        }
    }
    workgroupBarrier();
    // Rank each pick by (distance, id): the pairs are distinct, so the ranks are a permutation.
    for (var i = l; i < m; i = i + 64u) {
        let key = r_pick_key[i];
        let id = r_pick_id[i];
        var rank = 0u;
        for (var t = 0u; t < m; t = t + 1u) {
            let k2 = r_pick_key[t];
            let i2 = r_pick_id[t];
            if (k2 < key || (k2 == key && i2 < id)) {
                rank = rank + 1u;
            }
        }
        out_ids[row * m + rank] = id;
        out_dists[row * m + rank] = bitcast<f32>(key);
    }
}

// nearest_fused: the single nearest anchor of each point, without materialising distances
// (per_point = 1, the training case). GEMM form ||x||^2 - 2 x.c + ||c||^2, register-blocked:
// a workgroup of 16 x 16 invocations owns 64 points and walks over all anchors 64 at a time;
// each invocation computes a 4 x 4 block (points 4*ty.., anchors 4*tx..) from 16-dimension
// slices staged in workgroup memory, keeps a running minimum per point (ties to the smaller
// id), and the 16 invocations sharing a point reduce their minima at the end.

@group(0) @binding(6) var<storage, read> anchor_norms: array<f32>; // (num_anchors,)

// [k][i]: dimension k of points 4i..4i+3 (x..w) / anchors 4i..4i+3.
var<workgroup> sp: array<array<vec4<f32>, 16>, 16>;
var<workgroup> sa: array<array<vec4<f32>, 16>, 16>;
// [point][tx]: each invocation's best distance and anchor for the points it covers.
var<workgroup> red_d: array<array<f32, 16>, 64>;
var<workgroup> red_i: array<array<u32, 16>, 64>;

@compute @workgroup_size(16, 16)
fn nearest_fused(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>) {
    let tx = l.x;
    let ty = l.y;
    let flat = ty * 16u + tx;
    let p0 = wg.x * 64u;
    var best_d = vec4<f32>(3.0e38);
    var best_i = vec4<u32>(0xffffffffu);
    var xn = vec4<f32>(0.0);
    let tiles = (p.num_anchors + 63u) / 64u;
    for (var tile_a = 0u; tile_a < tiles; tile_a = tile_a + 1u) {
        let a0 = tile_a * 64u;
        var acc0 = vec4<f32>(0.0);
        var acc1 = vec4<f32>(0.0);
        var acc2 = vec4<f32>(0.0);
        var acc3 = vec4<f32>(0.0);
        for (var t = 0u; t < p.dim; t = t + 16u) {
            // Stage 64 rows x 16 dimensions of points and of anchors: 4 values per invocation,
            // read 16 consecutive floats per row.
            for (var e = 0u; e < 4u; e = e + 1u) {
                let f = flat + 256u * e;
                let r = f / 16u;
                let c = f % 16u;
                let d = t + c;
                let pr = p0 + r;
                let ar = a0 + r;
                sp[c][r / 4u][r % 4u] = select(0.0, points[pr * p.dim + d], pr < p.rows && d < p.dim);
                sa[c][r / 4u][r % 4u] = select(0.0, anchors[ar * p.dim + d], ar < p.num_anchors && d < p.dim);
            }
            workgroupBarrier();
            for (var k = 0u; k < 16u; k = k + 1u) {
                let x = sp[k][ty];
                let c = sa[k][tx];
                acc0 = fma(vec4<f32>(x.x), c, acc0);
                acc1 = fma(vec4<f32>(x.y), c, acc1);
                acc2 = fma(vec4<f32>(x.z), c, acc2);
                acc3 = fma(vec4<f32>(x.w), c, acc3);
                if (tile_a == 0u) {
                    xn = fma(x, x, xn);
                }
            }
            workgroupBarrier();
        }
        for (var j = 0u; j < 4u; j = j + 1u) {
            let a = a0 + tx * 4u + j;
            if (a < p.num_anchors) {
                let cn = anchor_norms[a];
                let d = vec4<f32>(cn - 2.0 * acc0[j], cn - 2.0 * acc1[j], cn - 2.0 * acc2[j], cn - 2.0 * acc3[j]);
                let better = d < best_d;
                best_d = select(best_d, d, better);
                best_i = select(best_i, vec4<u32>(a), better);
            }
        }
    }
    for (var i = 0u; i < 4u; i = i + 1u) {
        red_d[ty * 4u + i][tx] = best_d[i];
        red_i[ty * 4u + i][tx] = best_i[i];
    }
    workgroupBarrier();
    // Invocations with tx < 4 finish one point each: point ty*4 + tx.
    if (tx < 4u) {
        let r = ty * 4u + tx;
        var bd = red_d[r][0];
        var bi = red_i[r][0];
        for (var s = 1u; s < 16u; s = s + 1u) {
            let d = red_d[r][s];
            let i = red_i[r][s];
            if (d < bd || (d == bd && i < bi)) {
                bd = d;
                bi = i;
            }
        }
        let row = p0 + r;
        if (row < p.rows) {
            out_ids[row] = bi;
            out_dists[row] = max(bd + xn[tx], 0.0);
        }
    }
}

// nearest_fused_wide: `nearest_fused` with twice the register block, for adapters with at
// least 24 KiB of workgroup memory: a workgroup of 16 x 16 invocations owns 128 points and
// walks over all anchors 128 at a time; each invocation computes an 8 x 8 block (points
// 8*ty.., anchors 8*tx..) from 8-dimension slices staged in workgroup memory: twice the
// multiply-adds per workgroup-memory read of the 4 x 4 block. The accumulators are the named
// fields of a struct (`Block8`), not an array (an array indexed in a loop can be placed in slow
// local memory; on the H100's Vulkan driver that made this kernel 5x slower than the narrow one). Same
// multiply-add order over dimensions, so the same outputs and ties as `nearest_fused`.

// [k][i]: dimension k of points 4i..4i+3 / anchors 4i..4i+3, 128 rows.
var<workgroup> wp: array<array<vec4<f32>, 32>, 8>;
var<workgroup> wa: array<array<vec4<f32>, 32>, 8>;
// [point][tx]: each invocation's best distance and anchor for the points it covers.
var<workgroup> wred_d: array<array<f32, 16>, 128>;
var<workgroup> wred_i: array<array<u32, 16>, 128>;

// An 8 x 8 block of dot products: qJl / qJh, anchor 8*tx + J with points 8*ty + 0..3 / 4..7
// (`distances` and `nearest_fused_wide`). Named fields, not an array (see nearest_fused_wide).
struct Block8 {
    q0l: vec4<f32>,
    q1l: vec4<f32>,
    q2l: vec4<f32>,
    q3l: vec4<f32>,
    q4l: vec4<f32>,
    q5l: vec4<f32>,
    q6l: vec4<f32>,
    q7l: vec4<f32>,
    q0h: vec4<f32>,
    q1h: vec4<f32>,
    q2h: vec4<f32>,
    q3h: vec4<f32>,
    q4h: vec4<f32>,
    q5h: vec4<f32>,
    q6h: vec4<f32>,
    q7h: vec4<f32>,
}

// Stage rows p0.. of the points and a0.. of the anchors, 128 each, dimensions t..t+7, in `wp`
// and `wa` (zeros past the ends): 4 values per invocation (`flat`: its index, 0..255).
fn stage_wide(flat: u32, p0: u32, a0: u32, t: u32) {
    for (var e = 0u; e < 4u; e = e + 1u) {
        let f = flat + 256u * e;
        let r = f / 8u;
        let c = f % 8u;
        let d = t + c;
        let pr = p0 + r;
        let ar = a0 + r;
        wp[c][r / 4u][r % 4u] = select(0.0, points[pr * p.dim + d], pr < p.rows && d < p.dim);
        wa[c][r / 4u][r % 4u] = select(0.0, anchors[ar * p.dim + d], ar < p.num_anchors && d < p.dim);
    }
}

// One dimension's multiply-adds into `b`: points x0 (8*ty + 0..3), x1 (+ 4..7), anchors c0
// (8*tx + 0..3), c1 (+ 4..7).
fn multiply_wide(b: ptr<function, Block8>, x0: vec4<f32>, x1: vec4<f32>, c0: vec4<f32>, c1: vec4<f32>) {
    (*b).q0l = fma(x0, vec4<f32>(c0.x), (*b).q0l);
    (*b).q0h = fma(x1, vec4<f32>(c0.x), (*b).q0h);
    (*b).q1l = fma(x0, vec4<f32>(c0.y), (*b).q1l);
    (*b).q1h = fma(x1, vec4<f32>(c0.y), (*b).q1h);
    (*b).q2l = fma(x0, vec4<f32>(c0.z), (*b).q2l);
    (*b).q2h = fma(x1, vec4<f32>(c0.z), (*b).q2h);
    (*b).q3l = fma(x0, vec4<f32>(c0.w), (*b).q3l);
    (*b).q3h = fma(x1, vec4<f32>(c0.w), (*b).q3h);
    (*b).q4l = fma(x0, vec4<f32>(c1.x), (*b).q4l);
    (*b).q4h = fma(x1, vec4<f32>(c1.x), (*b).q4h);
    (*b).q5l = fma(x0, vec4<f32>(c1.y), (*b).q5l);
    (*b).q5h = fma(x1, vec4<f32>(c1.y), (*b).q5h);
    (*b).q6l = fma(x0, vec4<f32>(c1.z), (*b).q6l);
    (*b).q6h = fma(x1, vec4<f32>(c1.z), (*b).q6h);
    (*b).q7l = fma(x0, vec4<f32>(c1.w), (*b).q7l);
    (*b).q7h = fma(x1, vec4<f32>(c1.w), (*b).q7h);
}

// Running minimum of four points (lanes) against anchor `a`, given their dot products with it
// (ties keep the smaller id: anchors come in increasing order).
fn keep_better(bd: ptr<function, vec4<f32>>, bi: ptr<function, vec4<u32>>, dot: vec4<f32>, a: u32) {
    if (a < p.num_anchors) {
        let d = vec4<f32>(anchor_norms[a]) - 2.0 * dot;
        let b = d < *bd;
        *bd = select(*bd, d, b);
        *bi = select(*bi, vec4<u32>(a), b);
    }
}

@compute @workgroup_size(16, 16)
fn nearest_fused_wide(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>) {
    let tx = l.x;
    let ty = l.y;
    let flat = ty * 16u + tx;
    let p0 = wg.x * 128u;
    // Points 8*ty + 0..3 (lanes of *0) and 8*ty + 4..7 (lanes of *1).
    var bd0 = vec4<f32>(3.0e38);
    var bd1 = vec4<f32>(3.0e38);
    var bi0 = vec4<u32>(0xffffffffu);
    var bi1 = vec4<u32>(0xffffffffu);
    var xn0 = vec4<f32>(0.0);
    var xn1 = vec4<f32>(0.0);
    let tiles = (p.num_anchors + 127u) / 128u;
    var b: Block8;
    for (var tile_a = 0u; tile_a < tiles; tile_a = tile_a + 1u) {
        let a0 = tile_a * 128u;
        b = Block8();
        for (var t = 0u; t < p.dim; t = t + 8u) {
            stage_wide(flat, p0, a0, t);
            workgroupBarrier();
            for (var k = 0u; k < 8u; k = k + 1u) {
                let x0 = wp[k][2u * ty];
                let x1 = wp[k][2u * ty + 1u];
                let c0 = wa[k][2u * tx];
                let c1 = wa[k][2u * tx + 1u];
                multiply_wide(&b, x0, x1, c0, c1);
                if (tile_a == 0u) {
                    xn0 = fma(x0, x0, xn0);
                    xn1 = fma(x1, x1, xn1);
                }
            }
            workgroupBarrier();
        }
        let a = a0 + tx * 8u;
        keep_better(&bd0, &bi0, b.q0l, a);
        keep_better(&bd1, &bi1, b.q0h, a);
        keep_better(&bd0, &bi0, b.q1l, a + 1u);
        keep_better(&bd1, &bi1, b.q1h, a + 1u);
        keep_better(&bd0, &bi0, b.q2l, a + 2u);
        keep_better(&bd1, &bi1, b.q2h, a + 2u);
        keep_better(&bd0, &bi0, b.q3l, a + 3u);
        keep_better(&bd1, &bi1, b.q3h, a + 3u);
        keep_better(&bd0, &bi0, b.q4l, a + 4u);
        keep_better(&bd1, &bi1, b.q4h, a + 4u);
        keep_better(&bd0, &bi0, b.q5l, a + 5u);
        keep_better(&bd1, &bi1, b.q5h, a + 5u);
        keep_better(&bd0, &bi0, b.q6l, a + 6u);
        keep_better(&bd1, &bi1, b.q6h, a + 6u);
        keep_better(&bd0, &bi0, b.q7l, a + 7u);
        keep_better(&bd1, &bi1, b.q7h, a + 7u);
    }
    let r0 = ty * 8u;
    wred_d[r0][tx] = bd0.x;
    wred_d[r0 + 1u][tx] = bd0.y;
    wred_d[r0 + 2u][tx] = bd0.z;
    wred_d[r0 + 3u][tx] = bd0.w;
    wred_d[r0 + 4u][tx] = bd1.x;
    wred_d[r0 + 5u][tx] = bd1.y;
    wred_d[r0 + 6u][tx] = bd1.z;
    wred_d[r0 + 7u][tx] = bd1.w;
    wred_i[r0][tx] = bi0.x;
    wred_i[r0 + 1u][tx] = bi0.y;
    wred_i[r0 + 2u][tx] = bi0.z;
    wred_i[r0 + 3u][tx] = bi0.w;
    wred_i[r0 + 4u][tx] = bi1.x;
    wred_i[r0 + 5u][tx] = bi1.y;
    wred_i[r0 + 6u][tx] = bi1.z;
    wred_i[r0 + 7u][tx] = bi1.w;
    workgroupBarrier();
    // Invocations with tx < 8 finish one point each: point ty*8 + tx.
    if (tx < 8u) {
        let r = r0 + tx;
        var bd = wred_d[r][0];
        var bi = wred_i[r][0];
        for (var s = 1u; s < 16u; s = s + 1u) {
            let d = wred_d[r][s];
            let i = wred_i[r][s];
            if (d < bd || (d == bd && i < bi)) {
                bd = d;
                bi = i;
            }
        }
        let xn = select(xn0[tx % 4u], xn1[tx % 4u], tx >= 4u);
        let row = p0 + r;
        if (row < p.rows) {
            out_ids[row] = bi;
            out_dists[row] = max(bd + xn, 0.0);
        }
    }
}
