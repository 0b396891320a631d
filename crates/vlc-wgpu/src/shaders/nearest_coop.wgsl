// nearest_coop: `nearest_fused` on tensor cores, for adapters with cooperative matrices
// (16 x 16 x 16, f16 inputs, f32 accumulation, subgroups of 32). This file is appended to
// nearest.wgsl (whose bindings 0-2 and 4-6 it uses) after the `enable f16;` and
// `enable wgpu_cooperative_matrix;` directives, and only on adapters that have both.
//
// Three passes per call:
// max_abs:  the largest |value| of the points and, in a second dispatch, of the anchors;
// to_f16:   f16 copies of both, each scaled by a power of two (exact) so that its largest
//           |value| lands in [128, 256): no overflow, no subnormals; rows padded with zeros to
//           a multiple of 128 and dimensions to a multiple of 32 (`dim32`);
// nearest_coop: a workgroup of 8 subgroups owns 128 points and walks over all anchors 128 at
//           a time. Subgroup s multiplies points 32 (s % 4) .. + 32 with anchors 64 (s / 4) .. +
//           64: 2 x 4 accumulator tiles of 16 x 16. The workgroup stages 32-dimension slices
//           of its points and anchors in workgroup memory, and loads the next slice into
//           registers while it multiplies the current one. After each anchor tile the
//           subgroup stores its tiles (two at a time) to workgroup memory
//           and each lane keeps a running minimum of ||c||^2 - 2 x.c for one point and 8
//           anchors per tile. At the end the four minima of each point are reduced, and the
//           distances to the chosen anchor and the runner-up are recomputed in FP32: distances
//           are exact, and a near-tie (within f16 rounding of the dot products) goes to the
//           exact nearest, as the FP32 kernels decide it (a third anchor within rounding of
//           both is the only case that can still differ).
//
// Distance bounds (training: the same pinned points, anchors that move a little; as
// nearest.cu). Each point keeps a lower bound on its distance (not squared) to every anchor but
// its own. When the anchors move, the bound drops by the largest anchor move (anchor_drift); a
// point whose exact distance to its own anchor stays below the bound keeps it (bound_check), and
// only the others are ranked again by nearest_coop (mode 2: rows from the list bound_check
// appends to, dispatched indirectly for the listed count), which tracks the runner-up as well: its distance, less an allowance for the f16
// rounding, is the new bound. Mode 1 ranks all points and sets every bound; mode 0 ranks all
// points and keeps no bounds.

// max_abs output, and the two maxima nearest_coop reads: [0] points, [1] anchors, as f32
// bits (non-negative floats order as their bits); [2] the largest anchor move (anchor_drift).
// Layout: (3,).
@group(0) @binding(7) var<storage, read_write> maxima: array<atomic<u32>>;
// f16 copies, row-major. Layout: (rows padded to 128, dim32), as pairs (to_f16 writes) or
// groups of four (nearest_coop reads).
@group(0) @binding(10) var<storage, read_write> half_out: array<vec2<f16>>;
@group(0) @binding(11) var<storage, read> points_h: array<vec4<f16>>;
@group(0) @binding(12) var<storage, read> anchors_h: array<vec4<f16>>;

struct CoopParams {
    // Which maxima entry max_abs / to_f16 use (0 points, 1 anchors).
    slot: u32,
    // Rows to write in to_f16 (a multiple of 128).
    padded_rows: u32,
    // nearest_coop: 0 all points, no bounds; 1 all points, bounds set; 2 the listed points.
    mode: u32,
    pad1: u32,
}
@group(0) @binding(8) var<uniform> cq: CoopParams;

// Bounds state of the pinned points (modes 1 and 2, bound_check, anchor_drift).
// Points to rank again (mode 2), in any order. Layout: (rows,), the first listed_count[0] used.
@group(0) @binding(13) var<storage, read> listed: array<u32>;
@group(0) @binding(14) var<storage, read> listed_count: array<u32>;
// bound_check's view of the same two buffers.
@group(0) @binding(15) var<storage, read_write> list_out: array<u32>;
@group(0) @binding(16) var<storage, read_write> list_counter: array<atomic<u32>>;
// Anchor of each point at its last ranking. Layout: (rows,).
@group(0) @binding(17) var<storage, read_write> assign: array<u32>;
// Lower bound on the distance (not squared) to every other anchor. Layout: (rows,).
@group(0) @binding(18) var<storage, read_write> lower: array<f32>;
// The anchors the bounds were last moved to. Layout: (num_anchors, dim), row-major.
@group(0) @binding(19) var<storage, read> before: array<f32>;

// Per subgroup, two 16 x 16 result tiles, row-major (point, anchor); reused for the final
// reduction. Layout: (8 subgroups, 2, 16, 16).
var<workgroup> cstage: array<f32, 4096>;
var<workgroup> wg_max: atomic<u32>;

fn dim32() -> u32 {
    return (p.dim + 31u) & ~31u;
}

// The scale exponent of maxima[slot]: the largest |value| times 2^e lies in [128, 256).
fn scale_exponent(slot: u32) -> i32 {
    let e = i32((atomicLoad(&maxima[slot]) >> 23u) & 0xffu) - 127;
    return clamp(7 - e, -120, 120);
}

// 2^e for e in [-126, 127] (exact).
fn exp2_int(e: i32) -> f32 {
    return bitcast<f32>(u32(e + 127) << 23u);
}

// max_abs: the largest |value| of points[0 .. rows * dim) (binding 1) into maxima[cq.slot],
// which the host zeroes first. Grid-stride loop.
@compute @workgroup_size(256)
fn max_abs(
    @builtin(global_invocation_id) g: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let total = p.rows * p.dim;
    var most = 0u;
    for (var i = g.x; i < total; i = i + groups.x * 256u) {
        most = max(most, bitcast<u32>(abs(points[i])));
    }
    atomicMax(&wg_max, most);
    workgroupBarrier();
    if (li == 0u) {
        atomicMax(&maxima[cq.slot], atomicLoad(&wg_max));
    }
}

// to_f16: points (binding 1, rows x dim) times 2^scale_exponent(cq.slot) into half_out, two
// values per invocation; rows rows .. padded_rows and dimensions dim .. dim32 are zero.
// Grid-stride loop over padded_rows * dim32 / 2 pairs.
@compute @workgroup_size(256)
fn to_f16(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let scale = exp2_int(scale_exponent(cq.slot));
    let half_row = dim32() / 2u;
    let total = cq.padded_rows * half_row;
    for (var w = g.x; w < total; w = w + groups.x * 256u) {
        let r = w / half_row;
        let d = (w % half_row) * 2u;
        var v = vec2<f32>(0.0);
        if (r < p.rows) {
            if (d < p.dim) {
                v.x = points[r * p.dim + d];
            }
            if (d + 1u < p.dim) {
                v.y = points[r * p.dim + d + 1u];
            }
        }
        half_out[w] = vec2<f16>(v * scale);
    }
}

// A running best (bd, bi) and runner-up (sd, si): (d, i) goes before (e, j) when d < e, or
// d == e and i < j.
fn top2_push(bd: ptr<function, f32>, bi: ptr<function, u32>, sd: ptr<function, f32>,
             si: ptr<function, u32>, d: f32, i: u32) {
    if (d < *bd || (d == *bd && i < *bi)) {
        *sd = *bd;
        *si = *bi;
        *bd = d;
        *bi = i;
    } else if (d < *sd || (d == *sd && i < *si)) {
        *sd = d;
        *si = i;
    }
}

// top2_push over 8 anchors (a, a + 1, ..) of one tile row, read from the staged tile at `at`
// (anchors come in increasing order, so `<` alone keeps the smaller id on ties).
fn coop_keep(bd: ptr<function, f32>, bi: ptr<function, u32>, sd: ptr<function, f32>,
             si: ptr<function, u32>, at: u32, a: u32, unscale: f32) {
    for (var q = 0u; q < 8u; q = q + 1u) {
        let anchor = a + q;
        if (anchor < p.num_anchors) {
            let d = anchor_norms[anchor] - 2.0 * (cstage[at + q] * unscale);
            if (d < *sd) {
                if (d < *bd) {
                    *sd = *bd;
                    *si = *bi;
                    *bd = d;
                    *bi = anchor;
                } else {
                    *sd = d;
                    *si = anchor;
                }
            }
        }
    }
}

// The point of row `row` of the tile: listed[row] in mode 2 (rows past the list repeat its
// last entry; their results are dropped), else the row itself. Mode 2 is dispatched with
// ceil(count / 128) workgroups (list_dispatch), so count >= 1 wherever this runs.
fn point_of(row: u32, count: u32) -> u32 {
    if (cq.mode == 2u) {
        return listed[min(row, count - 1u)];
    }
    return row;
}

// Staged 32-dimension slices of 128 points / 128 anchors as vec4<f16> (one store per four
// halves), row-major with rows padded to 10 vec4 (80 bytes: 16-byte aligned, fewer bank
// conflicts); the cooperative loads read them with strides in vec4 units. Layout: (128, 10).
var<workgroup> sxv: array<vec4<f16>, 1280>;
var<workgroup> syv: array<vec4<f16>, 1280>;

@compute @workgroup_size(256)
fn nearest_coop(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let p0 = wg.x * 128u;
    // Mode 2 ranks only the listed points.
    let rows = select(p.rows, listed_count[0], cq.mode == 2u);
    let stride = dim32();
    let unscale = exp2_int(-scale_exponent(0u)) * exp2_int(-scale_exponent(1u));
    let rb = sg % 4u; // points 32 rb .. + 32 of the workgroup's 128
    let cb = sg / 4u; // anchors 64 cb .. + 64 of each tile of 128
    let m = lane % 16u;
    let h = lane / 16u;
    // This lane's running best and runner-up: row 32 rb + m (t0) and 32 rb + 16 + m (t1),
    // anchor columns 8 h .. + 8 of each 16-anchor tile.
    var bd0 = 3.0e38;
    var sd0 = 3.0e38;
    var bi0 = 0xffffffffu;
    var si0 = 0xffffffffu;
    var bd1 = 3.0e38;
    var sd1 = 3.0e38;
    var bi1 = 0xffffffffu;
    var si1 = 0xffffffffu;
    // Staging: invocation li moves 8 halves (two vec4) of rows li / 4 and li / 4 + 64, columns
    // 8 (li % 4) .., of the points and of the anchors; the next slice is loaded into registers
    // while the current one is multiplied.
    let sr = li / 4u;
    let sc = li % 4u;
    let row4 = stride / 4u;
    let xg = point_of(p0 + sr, rows) * row4 + sc * 2u;
    let xh = point_of(p0 + sr + 64u, rows) * row4 + sc * 2u;
    let chunks = stride / 32u;
    let tiles = (p.num_anchors + 127u) / 128u;
    for (var tile_a = 0u; tile_a < tiles; tile_a = tile_a + 1u) {
        let a0 = tile_a * 128u;
        let yg = (a0 + sr) * row4 + sc * 2u;
        var c00 = coop_mat16x16<f32, C>();
        var c01 = coop_mat16x16<f32, C>();
        var c02 = coop_mat16x16<f32, C>();
        var c03 = coop_mat16x16<f32, C>();
        var c10 = coop_mat16x16<f32, C>();
        var c11 = coop_mat16x16<f32, C>();
        var c12 = coop_mat16x16<f32, C>();
        var c13 = coop_mat16x16<f32, C>();
        var xa = points_h[xg];
        var xb = points_h[xg + 1u];
        var xc = points_h[xh];
        var xd = points_h[xh + 1u];
        var ya = anchors_h[yg];
        var yb = anchors_h[yg + 1u];
        var yc = anchors_h[yg + 64u * row4];
        var yd = anchors_h[yg + 64u * row4 + 1u];
        for (var ch = 0u; ch < chunks; ch = ch + 1u) {
            workgroupBarrier();
            sxv[sr * 10u + sc * 2u] = xa;
            sxv[sr * 10u + sc * 2u + 1u] = xb;
            sxv[(sr + 64u) * 10u + sc * 2u] = xc;
            sxv[(sr + 64u) * 10u + sc * 2u + 1u] = xd;
            syv[sr * 10u + sc * 2u] = ya;
            syv[sr * 10u + sc * 2u + 1u] = yb;
            syv[(sr + 64u) * 10u + sc * 2u] = yc;
            syv[(sr + 64u) * 10u + sc * 2u + 1u] = yd;
            workgroupBarrier();
            if (ch + 1u < chunks) {
                let o = (ch + 1u) * 8u;
                xa = points_h[xg + o];
                xb = points_h[xg + o + 1u];
                xc = points_h[xh + o];
                xd = points_h[xh + o + 1u];
                ya = anchors_h[yg + o];
                yb = anchors_h[yg + o + 1u];
                yc = anchors_h[yg + 64u * row4 + o];
                yd = anchors_h[yg + 64u * row4 + o + 1u];
            }
            for (var k = 0u; k < 8u; k = k + 4u) {
                let x0 = coopLoadT<coop_mat16x16<f16, A>>(&sxv[rb * 320u + k], 10u);
                let x1 = coopLoadT<coop_mat16x16<f16, A>>(&sxv[rb * 320u + 160u + k], 10u);
                let y0 = coopLoad<coop_mat16x16<f16, B>>(&syv[cb * 640u + k], 10u);
                let y1 = coopLoad<coop_mat16x16<f16, B>>(&syv[cb * 640u + 160u + k], 10u);
                let y2 = coopLoad<coop_mat16x16<f16, B>>(&syv[cb * 640u + 320u + k], 10u);
                let y3 = coopLoad<coop_mat16x16<f16, B>>(&syv[cb * 640u + 480u + k], 10u);
                c00 = coopMultiplyAdd(x0, y0, c00);
                c01 = coopMultiplyAdd(x0, y1, c01);
                c02 = coopMultiplyAdd(x0, y2, c02);
                c03 = coopMultiplyAdd(x0, y3, c03);
                c10 = coopMultiplyAdd(x1, y0, c10);
                c11 = coopMultiplyAdd(x1, y1, c11);
                c12 = coopMultiplyAdd(x1, y2, c12);
                c13 = coopMultiplyAdd(x1, y3, c13);
            }
        }
        // Column tile j of this subgroup: anchors a0 + 64 cb + 16 j ..; this lane reads row m,
        // columns 8 h .. + 8.
        let slot = sg * 512u;
        let at = slot + m * 16u + h * 8u;
        let ab = a0 + cb * 64u + h * 8u;
        coopStoreT(c00, &cstage[slot], 16u);
        coopStoreT(c10, &cstage[slot + 256u], 16u);
        workgroupBarrier();
        coop_keep(&bd0, &bi0, &sd0, &si0, at, ab, unscale);
        coop_keep(&bd1, &bi1, &sd1, &si1, at + 256u, ab, unscale);
        workgroupBarrier();
        coopStoreT(c01, &cstage[slot], 16u);
        coopStoreT(c11, &cstage[slot + 256u], 16u);
        workgroupBarrier();
        coop_keep(&bd0, &bi0, &sd0, &si0, at, ab + 16u, unscale);
        coop_keep(&bd1, &bi1, &sd1, &si1, at + 256u, ab + 16u, unscale);
        workgroupBarrier();
        coopStoreT(c02, &cstage[slot], 16u);
        coopStoreT(c12, &cstage[slot + 256u], 16u);
        workgroupBarrier();
        coop_keep(&bd0, &bi0, &sd0, &si0, at, ab + 32u, unscale);
        coop_keep(&bd1, &bi1, &sd1, &si1, at + 256u, ab + 32u, unscale);
        workgroupBarrier();
        coopStoreT(c03, &cstage[slot], 16u);
        coopStoreT(c13, &cstage[slot + 256u], 16u);
        workgroupBarrier();
        coop_keep(&bd0, &bi0, &sd0, &si0, at, ab + 48u, unscale);
        coop_keep(&bd1, &bi1, &sd1, &si1, at + 256u, ab + 48u, unscale);
        workgroupBarrier();
    }
    // Four partial results per point (h = 0, 1; cb = 0, 1): [point][h + 2 cb] in cstage, best
    // distances in words 0 .., best ids (as bits) 512 .., runner-up distances 1024 .., ids 1536 ...
    let r0 = rb * 32u + m;
    let w = h + 2u * cb;
    let at0 = r0 * 4u + w;
    cstage[at0] = bd0;
    cstage[512u + at0] = bitcast<f32>(bi0);
    cstage[1024u + at0] = sd0;
    cstage[1536u + at0] = bitcast<f32>(si0);
    let at1 = (r0 + 16u) * 4u + w;
    cstage[at1] = bd1;
    cstage[512u + at1] = bitcast<f32>(bi1);
    cstage[1024u + at1] = sd1;
    cstage[1536u + at1] = bitcast<f32>(si1);
    workgroupBarrier();
    // Two invocations per point (dimensions split in halves) merge the partial results and
    // recompute the exact distance to the winner (and the point's squared norm).
    let r = li / 2u;
    let half = li % 2u;
    var bd = 3.0e38;
    var sd = 3.0e38;
    var bi = 0xffffffffu;
    var si = 0xffffffffu;
    for (var s = 0u; s < 4u; s = s + 1u) {
        let e = r * 4u + s;
        top2_push(&bd, &bi, &sd, &si, cstage[e], bitcast<u32>(cstage[512u + e]));
        top2_push(&bd, &bi, &sd, &si, cstage[1024u + e], bitcast<u32>(cstage[1536u + e]));
    }
    let in_range = p0 + r < rows;
    let point = point_of(p0 + r, rows);
    // Exact FP32 distances to the winner and to the runner-up (for a near-tie, below).
    var acc = 0.0;
    var acc2 = 0.0;
    var norm = 0.0;
    if (in_range && bi < p.num_anchors) {
        let first = half * (p.dim / 2u);
        let last = select(p.dim / 2u, p.dim, half == 1u);
        let second = select(bi, si, si < p.num_anchors);
        for (var d = first; d < last; d = d + 1u) {
            let x = points[point * p.dim + d];
            let diff = x - anchors[bi * p.dim + d];
            acc = fma(diff, diff, acc);
            norm = fma(x, x, norm);
            let diff2 = x - anchors[second * p.dim + d];
            acc2 = fma(diff2, diff2, acc2);
        }
    }
    workgroupBarrier();
    cstage[li] = acc;
    cstage[256u + li] = norm;
    cstage[512u + li] = acc2;
    workgroupBarrier();
    if (half == 0u && in_range && bi < p.num_anchors) {
        let xn = norm + cstage[256u + li + 1u];
        var best = bi;
        var best_d = acc + cstage[li + 1u];
        // The runner-up's exact distance when it is within rounding of the winner.
        var loser = 3.0e38;
        // The f16 products are each within 2^-10 (||x||^2 + ||c||^2) of the exact ones (f16
        // keeps 11 significant bits, as TF32 does); allow four times that.
        var allowance = 0.0;
        if (si < p.num_anchors) {
            allowance = (xn + anchor_norms[si]) * (1.0 / 256.0);
            if (sd - bd <= allowance) {
                // A near-tie: the exact nearest wins (ties to the smaller id), as an FP32 pass
                // decides it.
                let exact2 = acc2 + cstage[512u + li + 1u];
                if (exact2 < best_d || (exact2 == best_d && si < bi)) {
                    loser = best_d;
                    best = si;
                    best_d = exact2;
                } else {
                    loser = exact2;
                }
            }
        }
        out_ids[point] = best;
        out_dists[point] = best_d;
        if (cq.mode != 0u) {
            assign[point] = best;
            var bound = 3.0e38;
            if (si < p.num_anchors) {
                // Anchors other than these two are at least the runner-up's f16 distance
                // away, less the allowance.
                bound = sqrt(max(min(xn + sd - allowance, loser), 0.0));
            }
            lower[point] = bound;
        }
    }
}

// Workgroups for nearest_coop's mode 2: ceil(listed / 128), as indirect dispatch arguments.
@group(0) @binding(20) var<storage, read_write> dispatch_args: array<u32>;

@compute @workgroup_size(1)
fn list_dispatch() {
    dispatch_args[0] = (atomicLoad(&list_counter[0]) + 127u) / 128u;
    dispatch_args[1] = 1u;
    dispatch_args[2] = 1u;
}

// The largest anchor move since the bounds were set, ||anchors[a] - before[a]|| over a, into
// maxima[2] (which the host zeroes). One subgroup per anchor.
@compute @workgroup_size(256)
fn anchor_drift(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    for (var a = wg.x * 8u + sg; a < p.num_anchors; a = a + groups.x * 8u) {
        var s = 0.0;
        for (var d = lane; d < p.dim; d = d + 32u) {
            let diff = anchors[a * p.dim + d] - before[a * p.dim + d];
            s = fma(diff, diff, s);
        }
        let total = subgroupAdd(s);
        if (lane == 0u) {
            // Rounded up a little: the bound must not shrink by less than the true move.
            atomicMax(&maxima[2], bitcast<u32>(sqrt(total) * 1.0001 + 1e-30));
        }
    }
}

// One subgroup per point: the exact (FP32) squared distance to its anchor. The point keeps
// that anchor when the distance (rounded up) is below its lowered bound (writes id and
// distance), else it is appended to the list for nearest_coop (mode 2).
@compute @workgroup_size(256)
fn bound_check(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let drift = bitcast<f32>(atomicLoad(&maxima[2]));
    for (var pt = wg.x * 8u + sg; pt < p.rows; pt = pt + groups.x * 8u) {
        let a = assign[pt];
        var s = 0.0;
        for (var d = lane; d < p.dim; d = d + 32u) {
            let diff = points[pt * p.dim + d] - anchors[a * p.dim + d];
            s = fma(diff, diff, s);
        }
        let dist = subgroupAdd(s);
        if (lane == 0u) {
            let bound = lower[pt] - drift;
            lower[pt] = bound;
            // The FP32 sum's rounding is far below 2^-10 of it.
            if (sqrt(dist * (1.0 + 1.0 / 1024.0)) < bound) {
                out_ids[pt] = a;
                out_dists[pt] = dist;
            } else {
                list_out[atomicAdd(&list_counter[0], 1u)] = pt;
            }
        }
    }
}
