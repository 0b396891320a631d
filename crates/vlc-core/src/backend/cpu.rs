//! The reference backend: multi-threaded (rayon) CPU code.

use super::{
    check_accumulate_args, check_nearest_args, check_update_args, group_by_anchor, AnchorSums,
    Backend, Nearest,
};
use crate::amx;
use crate::error::Result;
use crate::linalg::{block_rows, gemm_nt, key_id, row_norms_sq, smallest_keys};
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
        let mut ids = vec![0u32; num_points * per_point];
        let mut dists = vec![0f32; num_points * per_point];
        let rows = block_rows(num_anchors);
        points
            .par_chunks(rows * dim)
            .zip(ids.par_chunks_mut(rows * per_point))
            .zip(dists.par_chunks_mut(rows * per_point))
            .for_each(|((block, ids), dists)| {
                let m = block.len() / dim;
                let mut tile = Vec::new();
                let stride = match &packed {
                    Some(packed) => {
                        amx::dots(block, m, packed, &mut tile);
                        packed.stride()
                    }
                    None => {
                        tile.resize(m * num_anchors, 0.0);
                        gemm_nt(block, m, anchors, num_anchors, dim, &mut tile);
                        num_anchors
                    }
                };
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
            });
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
