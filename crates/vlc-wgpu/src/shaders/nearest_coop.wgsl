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
//           distance to the chosen anchor is recomputed in FP32: distances are exact; only
//           which anchor wins a near-tie (within f16 rounding of the dot products) can differ
//           from the FP32 kernels.

// max_abs output, and the two maxima nearest_coop reads: [0] points, [1] anchors, as f32
// bits (non-negative floats order as their bits). Layout: (2,).
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
    pad0: u32,
    pad1: u32,
}
@group(0) @binding(8) var<uniform> cq: CoopParams;

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

// Running minimum over 8 anchors (a, a + 1, ..) of one tile row, read from the staged tile at
// `at` (ties keep the smaller id: anchors come in increasing order).
fn coop_keep(bd: ptr<function, f32>, bi: ptr<function, u32>, at: u32, a: u32, unscale: f32) {
    for (var q = 0u; q < 8u; q = q + 1u) {
        let anchor = a + q;
        if (anchor < p.num_anchors) {
            let d = anchor_norms[anchor] - 2.0 * (cstage[at + q] * unscale);
            if (d < *bd) {
                *bd = d;
                *bi = anchor;
            }
        }
    }
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
    let stride = dim32();
    let unscale = exp2_int(-scale_exponent(0u)) * exp2_int(-scale_exponent(1u));
    let rb = sg % 4u; // points 32 rb .. + 32 of the workgroup's 128
    let cb = sg / 4u; // anchors 64 cb .. + 64 of each tile of 128
    let m = lane % 16u;
    let h = lane / 16u;
    // This lane's running minima: point 32 rb + m (bd0) and 32 rb + 16 + m (bd1), anchor
    // columns 8 h .. + 8 of each 16-anchor tile.
    var bd0 = 3.0e38;
    var bd1 = 3.0e38;
    var bi0 = 0xffffffffu;
    var bi1 = 0xffffffffu;
    // Staging: invocation li moves 8 halves (two vec4) of rows li / 4 and li / 4 + 64, columns
    // 8 (li % 4) .., of the points and of the anchors; the next slice is loaded into registers
    // while the current one is multiplied.
    let sr = li / 4u;
    let sc = li % 4u;
    let row4 = stride / 4u;
    let xg = (p0 + sr) * row4 + sc * 2u;
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
        var xc = points_h[xg + 64u * row4];
        var xd = points_h[xg + 64u * row4 + 1u];
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
                xc = points_h[xg + 64u * row4 + o];
                xd = points_h[xg + 64u * row4 + o + 1u];
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
        coop_keep(&bd0, &bi0, at, ab, unscale);
        coop_keep(&bd1, &bi1, at + 256u, ab, unscale);
        workgroupBarrier();
        coopStoreT(c01, &cstage[slot], 16u);
        coopStoreT(c11, &cstage[slot + 256u], 16u);
        workgroupBarrier();
        coop_keep(&bd0, &bi0, at, ab + 16u, unscale);
        coop_keep(&bd1, &bi1, at + 256u, ab + 16u, unscale);
        workgroupBarrier();
        coopStoreT(c02, &cstage[slot], 16u);
        coopStoreT(c12, &cstage[slot + 256u], 16u);
        workgroupBarrier();
        coop_keep(&bd0, &bi0, at, ab + 32u, unscale);
        coop_keep(&bd1, &bi1, at + 256u, ab + 32u, unscale);
        workgroupBarrier();
        coopStoreT(c03, &cstage[slot], 16u);
        coopStoreT(c13, &cstage[slot + 256u], 16u);
        workgroupBarrier();
        coop_keep(&bd0, &bi0, at, ab + 48u, unscale);
        coop_keep(&bd1, &bi1, at + 256u, ab + 48u, unscale);
        workgroupBarrier();
    }
    // Four minima per point (h = 0, 1; cb = 0, 1): [point][h + 2 cb] in cstage, distances in
    // the first 512 words, ids (as bits) in the next 512.
    let r0 = rb * 32u + m;
    let w = h + 2u * cb;
    cstage[r0 * 4u + w] = bd0;
    cstage[512u + r0 * 4u + w] = bitcast<f32>(bi0);
    cstage[(r0 + 16u) * 4u + w] = bd1;
    cstage[512u + (r0 + 16u) * 4u + w] = bitcast<f32>(bi1);
    workgroupBarrier();
    // Two invocations per point (dimensions split in halves) recompute the exact distance.
    let r = li / 2u;
    let half = li % 2u;
    var bd = cstage[r * 4u];
    var bi = bitcast<u32>(cstage[512u + r * 4u]);
    for (var s = 1u; s < 4u; s = s + 1u) {
        let d = cstage[r * 4u + s];
        let i = bitcast<u32>(cstage[512u + r * 4u + s]);
        if (d < bd || (d == bd && i < bi)) {
            bd = d;
            bi = i;
        }
    }
    let row = p0 + r;
    var acc = 0.0;
    if (row < p.rows && bi < p.num_anchors) {
        let first = half * (p.dim / 2u);
        let last = select(p.dim / 2u, p.dim, half == 1u);
        for (var d = first; d < last; d = d + 1u) {
            let diff = points[row * p.dim + d] - anchors[bi * p.dim + d];
            acc = fma(diff, diff, acc);
        }
    }
    workgroupBarrier();
    cstage[li] = acc;
    workgroupBarrier();
    if (half == 0u && row < p.rows && bi < p.num_anchors) {
        out_ids[row] = bi;
        out_dists[row] = acc + cstage[li + 1u];
    }
}
