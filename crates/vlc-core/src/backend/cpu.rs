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
/// AVX-512 VNNI, AVX-VNNI) is available.
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

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    /// `f32::EPSILON`, or [`amx::RANKING_ROUNDING`] where 8-bit anchors may rank on the
    /// integer kernels (AMX, AVX-512 VNNI or AVX-VNNI).
    fn ranking_rounding(&self) -> f32 {
        if amx::available() {
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
        let (num_points, num_anchors) = check_nearest_args(points, anchors, dim, per_point)?;
        let anchor_norms = row_norms_sq(anchors, dim);
        // 8-bit anchors (an index's, by default) rank on AMX or VNNI where the CPU has it; the packing
        // is cached, but hashing the anchors to find it costs about as much as ranking a few
        // dozen points the f32 way, so small calls keep the GEMM.
        let packed = if amx::available() && num_points >= INTEGER_MIN_POINTS {
            amx::packed_anchors(anchors, num_anchors, dim)
        } else {
            None
        };
        let (ids, dists) = match packed {
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
                    amx::dots(block, m, &packed, &mut tile);
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
}
