//! The reference backend: multi-threaded (rayon) CPU code.

use super::{
    check_accumulate_args, check_nearest_args, check_update_args, group_by_anchor, AnchorSums,
    Backend, Nearest,
};
use crate::amx;
use crate::error::Result;
use crate::linalg::{
    block_rows, dot, gemm_nt, key_dist, key_id, row_norms_sq, smallest_keys, SmallestKeys,
};
use rayon::prelude::*;

/// Calls with fewer points rank anchors with the f32 GEMM even where an integer kernel (AMX,
/// AVX-512 VNNI, AVX-VNNI, or AVX2's two passes) is available.
const INTEGER_MIN_POINTS: usize = 64;

/// CPU implementation of [`Backend`]; deterministic regardless of thread count.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBackend;

/// Keeps the `m` smallest (distance, id) pairs of one row, ties to the smaller id.
/// `order` is scratch, reused across rows.
fn select_smallest(
    row: &[f32],
    m: usize,
    ids: &mut [u32],
    dists: &mut [f32],
    order: &mut Vec<u64>,
) {
    if m == 1 {
        let (mut best, mut best_d) = (0usize, f32::INFINITY);
        for (j, &d) in row.iter().enumerate() {
            if d < best_d {
                best_d = d;
                best = j;
            }
        }
        ids[0] = best as u32;
        dists[0] = best_d;
        return;
    }
    smallest_keys(row, m, order);
    for (slot, &key) in order.iter().enumerate() {
        let j = key_id(key);
        ids[slot] = j;
        dists[slot] = row[j as usize];
    }
}

/// Anchors per GEMM call on the f32 path. The GEMM packs both operands on every call, so a
/// call's packing costs (rows + anchors) · dim against rows · anchors · dim multiply-adds.
/// With the tile held near 4 MiB over all anchors at once, a call on 16,384 anchors had 64
/// points and spent more time packing than multiplying; wider sets of anchors are now ranked
/// a block of columns at a time, each point's picks gathered across the blocks (the bench
/// group "anchor ranking, 16384 anchors" in `benches/kernels.rs`).
const ANCHOR_COLUMNS: usize = 1024;

/// Points per block (one task each) whose distance tile has `columns` columns: rows for a tile
/// near 4 MiB, but fewer where that would leave threads idle (with several threads, at least
/// two blocks per thread, of at least 64 points).
fn point_rows(num_points: usize, columns: usize) -> usize {
    let threads = rayon::current_num_threads();
    let per_block = if threads > 1 {
        num_points.div_ceil(2 * threads).max(64)
    } else {
        num_points
    };
    block_rows(columns).min(per_block)
}

/// Points and anchors per block of [`gemm_nearest`].
fn gemm_blocks(num_points: usize, num_anchors: usize) -> (usize, usize) {
    let columns = num_anchors.min(ANCHOR_COLUMNS);
    (point_rows(num_points, columns), columns)
}

/// The f32 GEMM path of [`CpuBackend::nearest_anchors`]: the `per_point` nearest anchors of
/// every point, ranked in blocks of `rows` points (one per task) by `columns` anchors (one
/// GEMM call each), ties to the smaller id. `points`: (num_points, dim), `anchors`:
/// (num_anchors, dim), both row-major; `anchor_norms`: num_anchors values. Returns the ids
/// and distances, each (num_points, per_point), row-major. The GEMM gives every product the
/// same value whatever the shape of the call it is in, so the result does not depend on
/// `rows` or `columns` (test `column_blocks_rank_as_one_call`), nor on the thread count.
fn gemm_nearest(
    points: &[f32],
    anchors: &[f32],
    anchor_norms: &[f32],
    dim: usize,
    per_point: usize,
    (rows, columns): (usize, usize),
) -> (Vec<u32>, Vec<f32>) {
    let num_anchors = anchor_norms.len();
    let columns = num_anchors.min(columns.max(1));
    rank_in_blocks(points, dim, per_point, rows, |block, ids, dists| {
        let m = block.len() / dim;
        let norms: Vec<f32> = block.chunks_exact(dim).map(|x| dot(x, x)).collect();
        let mut tile = vec![0f32; m * columns];
        // Each point's selection so far, when the anchors take more than one call.
        let mut running = if columns < num_anchors && per_point > 1 {
            vec![SmallestKeys::new(per_point); m]
        } else {
            Vec::new()
        };
        let mut order = Vec::new();
        for first in (0..num_anchors).step_by(columns) {
            let width = columns.min(num_anchors - first);
            let tile = &mut tile[..m * width];
            let block_anchors = &anchors[first * dim..(first + width) * dim];
            gemm_nt(block, m, block_anchors, width, dim, tile);
            for (i, row) in tile.chunks_exact_mut(width).enumerate() {
                for (d, cn) in row.iter_mut().zip(&anchor_norms[first..first + width]) {
                    *d = (norms[i] - 2.0 * *d + cn).max(0.0);
                }
                let (ids, dists) = (
                    &mut ids[i * per_point..(i + 1) * per_point],
                    &mut dists[i * per_point..(i + 1) * per_point],
                );
                if width == num_anchors {
                    select_smallest(row, per_point, ids, dists, &mut order);
                } else if per_point == 1 {
                    // Strictly smaller only: blocks come in id order, so ties stay with
                    // the smaller id.
                    if first == 0 {
                        (ids[0], dists[0]) = (0, f32::INFINITY);
                    }
                    for (j, &d) in row.iter().enumerate() {
                        if d < dists[0] {
                            (ids[0], dists[0]) = ((first + j) as u32, d);
                        }
                    }
                } else {
                    running[i].push(row, first as u32);
                }
            }
        }
        for (i, selection) in running.iter_mut().enumerate() {
            selection.finish();
            for (slot, &key) in selection.keys.iter().enumerate() {
                ids[i * per_point + slot] = key_id(key);
                dists[i * per_point + slot] = key_dist(key);
            }
        }
    })
}

/// Where [`amx::two_pass_available`] (AVX2 without VNNI), a batch ranks on integers when each
/// point picks at most 1/16 of the anchors: beyond that the anchors near the cut-off are so
/// many that measuring them one at a time costs more than the f32 GEMM saves. (A `pcaq0.5`
/// index of 1,024 anchors on an AMD EPYC Zen 3, one thread: 5-10% more queries per second at
/// nprobe 64 on the dev set and a synthetic 768-d set, 3-7% fewer at 128.)
const TWO_PASS_MAX_SHARE: usize = 16;

/// Rows whose coarse distances [`two_pass_nearest`] computes at a time: 32 rows of 1,024
/// anchors are 128 KiB, which stay in a core's L2 cache until each row's candidates are
/// picked.
const TWO_PASS_ROWS: usize = 32;

/// Rounding of the distances of [`two_pass_nearest`], over `‖x‖² + ‖c‖²`: a bound on what
/// f32 arithmetic adds to the coarse and exact products' difference (2⁻¹⁸ by the count of
/// roundings in each) with a margin of 4.
const TWO_PASS_ROUNDING: f32 = 1.0 / 65536.0;

/// The integer path of [`CpuBackend::nearest_anchors`] on AVX2 CPUs without VNNI: the
/// `per_point` nearest anchors of every point by the distances the integer kernels give
/// ([`amx::dots`]), ties to the smaller id, as the AMX and VNNI path ranks them. `points`:
/// (num_points, dim), row-major; `anchor_norms`: (num_anchors,). Returns the ids and
/// distances, each (num_points, per_point), row-major.
///
/// Two passes: [`amx::coarse_dots`] gives every distance to within a bound `e_j` of the
/// exact one; `t`, the `per_point`-th smallest of `d_j + e_j`, is at least the exact
/// `per_point`-th distance, so an anchor with `d_j − e_j > t` cannot be among the picks. The
/// others (about twice `per_point` on the dev set at nprobe 8) are measured exactly
/// ([`amx::dots_of`]) and the picks selected from them.
fn two_pass_nearest(
    points: &[f32],
    packed: &amx::PackedAnchors,
    anchor_norms: &[f32],
    dim: usize,
    per_point: usize,
) -> (Vec<u32>, Vec<f32>) {
    let num_anchors = packed.rows();
    let rows = point_rows(points.len() / dim, num_anchors);
    let norms1 = packed.level_norms1();
    rank_in_blocks(points, dim, per_point, rows, |block, ids, dists| {
        let stride = packed.stride();
        let (mut tile, mut slack) = (Vec::new(), Vec::new());
        let (mut scratch, mut keys) = (amx::CandidateScratch::default(), Vec::new());
        let (mut candidates, mut exact) = (Vec::new(), Vec::new());
        let mut pieces = amx::QueryPieces::default();
        // A few rows at a time, so that their coarse distances are still in cache when each
        // row's candidates are picked from them.
        for (c, chunk) in block.chunks(TWO_PASS_ROWS * dim).enumerate() {
            let m = chunk.len() / dim;
            amx::coarse_dots(chunk, m, packed, &mut tile, &mut slack);
            for i in 0..m {
                let x = &chunk[i * dim..(i + 1) * dim];
                let xn = dot(x, x);
                amx::two_pass_candidates(
                    &tile[i * stride..i * stride + num_anchors],
                    xn,
                    anchor_norms,
                    norms1,
                    (2.0 * slack[i], TWO_PASS_ROUNDING),
                    per_point,
                    &mut scratch,
                    &mut candidates,
                );
                amx::dots_of(x, packed, &candidates, &mut pieces, &mut exact);
                keys.clear();
                keys.extend(candidates.iter().zip(&exact).map(|(&j, &d)| {
                    let dist = (xn - 2.0 * d + anchor_norms[j as usize]).max(0.0);
                    crate::linalg::order_key(dist, j)
                }));
                crate::linalg::keep_smallest_keys(&mut keys, per_point);
                let row = (c * TWO_PASS_ROWS + i) * per_point;
                for (slot, &key) in keys.iter().enumerate() {
                    ids[row + slot] = key_id(key);
                    dists[row + slot] = key_dist(key);
                }
            }
        }
    })
}

/// Runs `rank` on blocks of `rows` points (`points`: (num_points, dim), row-major) in
/// parallel, each with its rows of the ids and distances, each (num_points, per_point),
/// row-major, which it returns.
fn rank_in_blocks(
    points: &[f32],
    dim: usize,
    per_point: usize,
    rows: usize,
    rank: impl Fn(&[f32], &mut [u32], &mut [f32]) + Sync,
) -> (Vec<u32>, Vec<f32>) {
    let rows = rows.max(1);
    let num_points = points.len() / dim;
    let mut ids = vec![0u32; num_points * per_point];
    let mut dists = vec![0f32; num_points * per_point];
    points
        .par_chunks(rows * dim)
        .zip(ids.par_chunks_mut(rows * per_point))
        .zip(dists.par_chunks_mut(rows * per_point))
        .for_each(|((block, ids), dists)| rank(block, ids, dists));
    (ids, dists)
}

/// [`CpuBackend`]'s ranking, with `given` an index's packing of the anchors
/// ([`Backend::nearest_index_anchors`]), or `None` to find it.
fn rank_anchors(
    points: &[f32],
    anchors: &[f32],
    dim: usize,
    per_point: usize,
    given: Option<Option<&amx::PackedAnchors>>,
) -> Result<Nearest> {
    let (num_points, num_anchors) = check_nearest_args(points, anchors, dim, per_point)?;
    let anchor_norms = row_norms_sq(anchors, dim);
    // 8-bit anchors (an index's, by default) rank on AMX or VNNI where the CPU has it, and in
    // two passes where AVX2 is the integer kernel and the picks are few. The packing is cached,
    // but hashing the anchors to find it costs about as much as ranking a few dozen points the
    // f32 way, so small calls without an index's packing keep the GEMM.
    let two_pass = !amx::available()
        && amx::two_pass_available()
        && per_point * TWO_PASS_MAX_SHARE <= num_anchors;
    let found;
    let packed = match given {
        _ if !(amx::available() || two_pass) => None,
        Some(given) => given,
        None if num_points >= INTEGER_MIN_POINTS => {
            found = amx::packed_anchors(anchors, num_anchors, dim);
            found.as_deref()
        }
        None => None,
    };
    let (ids, dists) = match packed {
        Some(packed) if two_pass => two_pass_nearest(points, packed, &anchor_norms, dim, per_point),
        None => gemm_nearest(
            points,
            anchors,
            &anchor_norms,
            dim,
            per_point,
            gemm_blocks(num_points, num_anchors),
        ),
        Some(packed) => {
            let rows = point_rows(num_points, num_anchors);
            rank_in_blocks(points, dim, per_point, rows, |block, ids, dists| {
                let m = block.len() / dim;
                let mut tile = Vec::new();
                amx::dots(block, m, packed, &mut tile);
                let stride = packed.stride();
                let mut order = Vec::new();
                for i in 0..m {
                    let row = &mut tile[i * stride..i * stride + num_anchors];
                    let x = &block[i * dim..(i + 1) * dim];
                    let xn = crate::linalg::dot(x, x);
                    for (d, cn) in row.iter_mut().zip(&anchor_norms) {
                        *d = (xn - 2.0 * *d + cn).max(0.0);
                    }
                    select_smallest(
                        row,
                        per_point,
                        &mut ids[i * per_point..(i + 1) * per_point],
                        &mut dists[i * per_point..(i + 1) * per_point],
                        &mut order,
                    );
                }
            })
        }
    };
    Ok(Nearest {
        per_point,
        ids,
        dists,
        resident: None,
    })
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    /// `f32::EPSILON`, or [`amx::RANKING_ROUNDING`] where 8-bit anchors may rank on the
    /// integer kernels (AMX, AVX-512 VNNI, AVX-VNNI, or AVX2's two passes).
    fn ranking_rounding(&self) -> f32 {
        if amx::available() || amx::two_pass_available() {
            amx::RANKING_ROUNDING
        } else {
            f32::EPSILON
        }
    }

    fn nearest_anchors(
        &self,
        points: &[f32],
        anchors: &[f32],
        dim: usize,
        per_point: usize,
    ) -> Result<Nearest> {
        rank_anchors(points, anchors, dim, per_point, None)
    }

    fn nearest_index_anchors(
        &self,
        points: &[f32],
        anchors: &[f32],
        dim: usize,
        per_point: usize,
        packed: Option<&amx::PackedAnchors>,
    ) -> Result<Nearest> {
        rank_anchors(points, anchors, dim, per_point, Some(packed))
    }

    fn accumulate(
        &self,
        points: &[f32],
        dim: usize,
        assignment: &[u32],
        dists: &[f32],
        thresholds: &[f32],
    ) -> Result<AnchorSums> {
        let num_anchors = thresholds.len();
        check_accumulate_args(points, dim, assignment, dists, num_anchors)?;
        let (offsets, members) = group_by_anchor(assignment, num_anchors);
        let mut sums = vec![0f64; num_anchors * dim];
        let mut kept = vec![0u32; num_anchors];
        sums.par_chunks_mut(dim)
            .zip(kept.par_iter_mut())
            .enumerate()
            .for_each(|(a, (sum, kept))| {
                for &i in &members[offsets[a]..offsets[a + 1]] {
                    let i = i as usize;
                    if dists[i] <= thresholds[a] {
                        *kept += 1;
                        for (s, &x) in sum.iter_mut().zip(&points[i * dim..(i + 1) * dim]) {
                            *s += x as f64;
                        }
                    }
                }
            });
        let members = offsets.windows(2).map(|w| (w[1] - w[0]) as u32).collect();
        Ok(AnchorSums {
            sums,
            kept,
            members,
        })
    }

    fn update(&self, anchors: &mut [f32], dim: usize, sums: &AnchorSums, step: f32) -> Result<()> {
        check_update_args(anchors, dim, sums)?;
        anchors
            .par_chunks_mut(dim)
            .zip(sums.sums.par_chunks(dim))
            .zip(sums.kept.par_iter())
            .for_each(|((anchor, sum), &kept)| {
                if kept > 0 {
                    let inv = 1.0 / kept as f64;
                    for (c, &s) in anchor.iter_mut().zip(sum) {
                        let mean = (s * inv) as f32;
                        *c += step * (mean - *c);
                    }
                }
            });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Ranking in blocks of points and of anchors gives the picks, distances and tie order of
    /// one GEMM over all of them, for every block shape, including blocks narrower than the
    /// picks and anchors repeated across block boundaries (exact ties).
    #[test]
    fn column_blocks_rank_as_one_call() {
        let (dim, num_points, distinct) = (19, 37, 150);
        let mut rng = Rng::new(7);
        let points: Vec<f32> = (0..num_points * dim).map(|_| rng.normal() as f32).collect();
        let mut anchors: Vec<f32> = (0..distinct * dim).map(|_| rng.normal() as f32).collect();
        // Anchors 150..300 repeat 0..150 in reverse order, so every distance occurs twice.
        for a in (0..distinct).rev() {
            anchors.extend_from_within(a * dim..(a + 1) * dim);
        }
        let num_anchors = anchors.len() / dim;
        let norms = row_norms_sq(&anchors, dim);
        for per_point in [1, 2, 5, 40, num_anchors] {
            let run = |shape| gemm_nearest(&points, &anchors, &norms, dim, per_point, shape);
            let whole = run((num_points, num_anchors));
            for (i, picks) in whole.0.chunks_exact(per_point).enumerate() {
                let d = &whole.1[i * per_point..(i + 1) * per_point];
                assert!(d.windows(2).all(|w| w[0] <= w[1]), "per_point {per_point}");
                let mut seen = picks.to_vec();
                seen.sort_unstable();
                seen.dedup();
                assert_eq!(seen.len(), per_point);
            }
            for rows in [1, 5, 36] {
                for columns in [1, 3, 7, 64, 149, 150, 151, num_anchors - 1, num_anchors] {
                    assert_eq!(
                        run((rows, columns)),
                        whole,
                        "per_point {per_point}, blocks of {rows} x {columns}"
                    );
                }
            }
        }
    }

    /// Where a batch ranks in two passes (AVX2 without VNNI), it picks the anchors and
    /// distances that the integer kernel's products of every anchor give, ties to the smaller
    /// id: over dimensions 1 to 1,030, 8-bit and 4-bit anchors, anchors repeated (exact ties),
    /// a zero point and points far from every anchor, and shares of picks up to the largest
    /// it takes.
    #[test]
    fn two_pass_ranking_picks_what_every_anchors_products_pick() {
        if !amx::two_pass_available() {
            eprintln!("SKIPPED: the two-pass ranking runs only where AVX2 is the integer kernel (no VNNI or AMX here, or VLC_NO_AVX2_INT8 is set)");
            return;
        }
        let mut rng = Rng::new(23);
        for (dim, distinct, precision) in [
            (1, 64, crate::AnchorPrecision::Int8),
            (7, 100, crate::AnchorPrecision::Int8),
            (65, 150, crate::AnchorPrecision::Int4),
            (384, 520, crate::AnchorPrecision::Int8),
            (1030, 70, crate::AnchorPrecision::Int8),
        ] {
            let raw: Vec<f32> = (0..distinct * dim).map(|_| rng.normal() as f32).collect();
            let mut anchors =
                crate::anchor_store::StoredAnchors::encode(&raw, dim, precision).decode(dim);
            // The first 30 anchors again at the end: exact ties, the smaller id first.
            anchors.extend_from_within(..30 * dim);
            let num_anchors = anchors.len() / dim;
            let packed =
                amx::packed_anchors(&anchors, num_anchors, dim).expect("8- and 4-bit rows pack");
            let norms = row_norms_sq(&anchors, dim);
            // Points near anchors, one zero point, and every tenth far from all of them.
            let num_points = 90;
            let mut points = Vec::with_capacity(num_points * dim);
            for p in 0..num_points {
                let a = rng.below(num_anchors);
                let spread = if p % 10 == 9 { 30.0 } else { 0.3 };
                for t in 0..dim {
                    let v = anchors[a * dim + t] + spread * rng.normal() as f32;
                    points.push(if p == 4 { 0.0 } else { v });
                }
            }
            for per_point in [1, 2, 3, num_anchors / TWO_PASS_MAX_SHARE] {
                if per_point == 0 {
                    continue;
                }
                let near = CpuBackend
                    .nearest_anchors(&points, &anchors, dim, per_point)
                    .unwrap();
                let (mut tile, mut order) = (Vec::new(), Vec::new());
                let mut want_ids = vec![0u32; per_point];
                let mut want_dists = vec![0f32; per_point];
                for i in 0..num_points {
                    let x = &points[i * dim..(i + 1) * dim];
                    amx::dots(x, 1, &packed, &mut tile);
                    let xn = dot(x, x);
                    let row: Vec<f32> = (0..num_anchors)
                        .map(|j| (xn - 2.0 * tile[j] + norms[j]).max(0.0))
                        .collect();
                    select_smallest(&row, per_point, &mut want_ids, &mut want_dists, &mut order);
                    let got = i * per_point..(i + 1) * per_point;
                    let at =
                        format!("dim {dim}, {num_anchors} anchors, {per_point} picks, point {i}");
                    assert_eq!(near.ids[got.clone()], want_ids[..], "{at}");
                    let bits = |d: &[f32]| d.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&near.dists[got]), bits(&want_dists), "{at}");
                }
            }
        }
    }
}
