//! Distance bounds for training's assignments (Hamerly's): a point whose anchor is provably
//! still its nearest after the anchors moved is not ranked against every anchor again.
//!
//! Each training point keeps an upper bound `u` on its distance to its anchor and a lower
//! bound `l` on its distance to every other anchor (distances, not squared). When anchor `j`
//! moves by `δ_j`, the triangle inequality gives `u + δ_a` and `l − max_{j≠a} δ_j` as new
//! bounds. If they still separate, the point's exact distance to its own anchor (one row, `dim`
//! multiply-adds) tightens `u`; if they separate then, the point keeps its anchor. The other
//! points are ranked against every anchor as before (two nearest, which reset both bounds).
//!
//! Anchors that moved far (a split's, a merge's or a re-seed's, or the large moves of the
//! first iterations) would lower every point's lower bound by their move. Instead, like the
//! CUDA backend, the few that moved the most are "movers": every point is ranked against the
//! movers alone (a GEMM with a few rows), and its lower bound is lowered by the largest move
//! of the others only.
//!
//! The backend's assignment computes squared distances in GEMM form, whose rounding can rank
//! two anchors either way when their distances are within about `ε·(‖x‖² + ‖c‖²)`; a point
//! keeps its anchor only when the bounds separate by a margin well above that, so the bounded
//! and the full assignment agree except on such near-ties.

use crate::backend::{Backend, Nearest};
use crate::error::Result;
use crate::linalg::{l2_sq, row_norms_sq};
use rayon::prelude::*;

/// Margin, relative to `‖x‖² + max ‖c‖²`, by which the bounds (squared) must separate.
const MARGIN: f32 = 64.0 * f32::EPSILON;

/// At most 1/this of the anchors are movers.
const MAX_MOVER_FRACTION: usize = 8;

/// Points per parallel chunk of the bound checks.
const CHUNK: usize = 1024;

/// The points to rank are copied out and ranked in blocks of about this many bytes (at least
/// 256 rows; the unit tests use the smallest blocks, so that they rank several). Each block is
/// one parallel ranking, which waits for its slowest thread: on 16 cores, blocks of 32 MiB
/// made the bounded training slower than the plain one.
#[cfg(not(test))]
const GATHER_BYTES: usize = 128 << 20;
#[cfg(test)]
const GATHER_BYTES: usize = 0;

/// Bounds kept between the assignments of one training sample.
pub(crate) struct DistanceBounds {
    /// Squared norm of each point. Layout: (num_points,).
    norms: Vec<f32>,
    /// The anchors the bounds refer to. Layout: (num_anchors, dim), row-major.
    anchors: Vec<f32>,
    /// Each point's anchor. Layout: (num_points,).
    ids: Vec<u32>,
    /// Upper bound on each point's distance to its anchor. Layout: (num_points,).
    upper: Vec<f32>,
    /// Lower bound on each point's distance to every other anchor. Layout: (num_points,).
    lower: Vec<f32>,
    /// Points the last assignment ranked against every anchor.
    pub ranked: usize,
    /// The rows to rank, copied out (at most `GATHER_BYTES`). Layout: (rows, dim), row-major.
    gather: Vec<f32>,
}

impl DistanceBounds {
    /// Bounds for `points` (num_points, dim), row-major; the first assignment ranks them all.
    pub fn new(points: &[f32], dim: usize) -> Self {
        DistanceBounds {
            norms: row_norms_sq(points, dim),
            anchors: Vec::new(),
            ids: Vec::new(),
            upper: Vec::new(),
            lower: Vec::new(),
            ranked: 0,
            gather: Vec::new(),
        }
    }

    /// The nearest anchor of each point, as `backend.nearest_anchors(points, anchors, dim, 1)`
    /// gives it (up to near-ties), ranking only the points whose bounds do not prove it.
    /// `points` must be the rows given to [`DistanceBounds::new`].
    pub fn nearest(
        &mut self,
        backend: &dyn Backend,
        points: &[f32],
        anchors: &[f32],
        dim: usize,
    ) -> Result<Nearest> {
        let num_points = self.norms.len();
        let num_anchors = anchors.len() / dim;
        debug_assert_eq!(points.len(), num_points * dim);
        if num_anchors < 2 || self.anchors.len() != anchors.len() {
            // The first assignment, or one after the anchor count changed: rank every point.
            (self.ids, self.upper, self.lower) = (
                vec![0; num_points],
                vec![0.0; num_points],
                vec![0.0; num_points],
            );
            let mut dists = vec![f32::NAN; num_points];
            let every: Vec<usize> = (0..num_points).collect();
            self.rank(backend, points, anchors, dim, &every, &mut dists)?;
            self.anchors = anchors.to_vec();
            return Ok(self.result(dists));
        }
        let anchor_norms = row_norms_sq(anchors, dim);
        let max_anchor_norm = anchor_norms.iter().fold(0f32, |m, &v| m.max(v));
        // Each anchor's move, rounded up a little (the bounds must stay bounds).
        let drifts: Vec<f32> = (0..num_anchors)
            .into_par_iter()
            .map(|j| {
                let (new, old) = (
                    &anchors[j * dim..(j + 1) * dim],
                    &self.anchors[j * dim..(j + 1) * dim],
                );
                l2_sq(new, old).sqrt() * (1.0 + 1e-5)
            })
            .collect();
        let mut slack: Vec<f32> = (0..num_points)
            .into_par_iter()
            .map(|i| self.lower[i] - self.upper[i] - drifts[self.ids[i] as usize])
            .collect();
        slack.par_sort_unstable_by(|a, b| a.total_cmp(b));
        let (movers, stable) = pick_movers(&drifts, &slack);

        // Ranking against the movers alone: the two nearest movers of each point.
        let mover_picks = movers.len().min(2);
        let mover_nearest = if movers.is_empty() {
            None
        } else {
            let rows: Vec<f32> = movers
                .iter()
                .flat_map(|&j| {
                    anchors[j as usize * dim..(j as usize + 1) * dim]
                        .iter()
                        .copied()
                })
                .collect();
            Some(backend.nearest_anchors(points, &rows, dim, mover_picks)?)
        };
        let mut is_mover = vec![false; num_anchors];
        for &j in &movers {
            is_mover[j as usize] = true;
        }
        let (drifts, movers) = (&drifts, &movers);
        // (nearest mover, its squared distance, the second nearest mover's) of point i.
        let mover_of = |i: usize| match &mover_nearest {
            None => (u32::MAX, f32::INFINITY, f32::INFINITY),
            Some(m) => (
                movers[m.ids[i * mover_picks] as usize],
                m.dists[i * mover_picks],
                if mover_picks == 2 {
                    m.dists[i * 2 + 1]
                } else {
                    f32::INFINITY
                },
            ),
        };

        // Check each point's bounds. `dists` gets the squared distance to the nearest anchor
        // of the points the bounds settle, and stays NaN for those ranked below.
        let mut dists = vec![f32::NAN; num_points];
        let norms = &self.norms;
        self.ids
            .par_chunks_mut(CHUNK)
            .zip(self.upper.par_chunks_mut(CHUNK))
            .zip(self.lower.par_chunks_mut(CHUNK))
            .zip(dists.par_chunks_mut(CHUNK))
            .enumerate()
            .for_each(|(c, (((ids, upper), lower), dists))| {
                for (o, ((id, u), (l, d))) in ids
                    .iter_mut()
                    .zip(upper.iter_mut())
                    .zip(lower.iter_mut().zip(dists.iter_mut()))
                    .enumerate()
                {
                    let i = c * CHUNK + o;
                    let margin = MARGIN * (norms[i] + max_anchor_norm);
                    let a = *id as usize;
                    let (mover, mover_dist, second_mover_dist) = mover_of(i);
                    // Every anchor that is neither `a` nor a mover is at least `low` away.
                    let low = (*l - stable).max(0.0) * (1.0 - 1e-6);
                    let low_sq = low * low;
                    if is_mover[a] {
                        // Every non-mover is at least `low` away: the nearest mover wins if
                        // it is nearer.
                        if mover_dist + margin < low_sq {
                            *id = mover;
                            *d = mover_dist;
                            *u = mover_dist.sqrt();
                            *l = low.min(second_mover_dist.sqrt());
                        }
                        continue;
                    }
                    let bound = *u + drifts[a];
                    if bound * bound + margin >= low_sq {
                        continue;
                    }
                    let exact = l2_sq(
                        &points[i * dim..(i + 1) * dim],
                        &anchors[a * dim..(a + 1) * dim],
                    );
                    *u = exact.sqrt();
                    if exact + margin >= low_sq {
                        continue;
                    }
                    if exact + margin < mover_dist {
                        // `a` is nearer than every other anchor, movers included.
                        *d = exact;
                        *l = low.min(mover_dist.sqrt());
                    } else if mover_dist + margin < exact {
                        // A mover is nearer than `a`, which is nearer than every non-mover.
                        *id = mover;
                        *d = mover_dist;
                        *u = mover_dist.sqrt();
                        *l = exact.sqrt().min(second_mover_dist.sqrt());
                    }
                    // Otherwise a near-tie: ranked below.
                }
            });

        let stale: Vec<usize> = (0..num_points).filter(|&i| dists[i].is_nan()).collect();
        self.rank(backend, points, anchors, dim, &stale, &mut dists)?;
        self.anchors.copy_from_slice(anchors);
        Ok(self.result(dists))
    }

    /// Rank the points `stale` against every anchor, storing each one's nearest anchor, its
    /// squared distance (into `dists`) and both bounds (from its two nearest): in place when
    /// every point is stale, else copied out a block at a time into a buffer kept between
    /// calls (a fresh one cost page faults and zeroing on every call, which did not shrink
    /// with the thread count).
    fn rank(
        &mut self,
        backend: &dyn Backend,
        points: &[f32],
        anchors: &[f32],
        dim: usize,
        stale: &[usize],
        dists: &mut [f32],
    ) -> Result<()> {
        self.ranked = stale.len();
        let per_point = (anchors.len() / dim).min(2);
        let num_points = self.norms.len();
        let block_rows = if stale.len() == num_points {
            num_points
        } else {
            (GATHER_BYTES / (dim * 4)).max(256)
        };
        for block in stale.chunks(block_rows.max(1)) {
            let ranked = if block.len() == num_points {
                backend.nearest_anchors(points, anchors, dim, per_point)?
            } else {
                let need = block.len() * dim;
                if self.gather.len() < need {
                    self.gather.resize(need, 0.0);
                }
                let rows = &mut self.gather[..need];
                rows.par_chunks_mut(dim * 64)
                    .zip(block.par_chunks(64))
                    .for_each(|(out, points_of)| {
                        for (row, &i) in out.chunks_mut(dim).zip(points_of) {
                            row.copy_from_slice(&points[i * dim..(i + 1) * dim]);
                        }
                    });
                backend.nearest_anchors(rows, anchors, dim, per_point)?
            };
            for (r, &i) in block.iter().enumerate() {
                let pick = r * per_point;
                self.ids[i] = ranked.ids[pick];
                dists[i] = ranked.dists[pick];
                self.upper[i] = ranked.dists[pick].sqrt();
                self.lower[i] = if per_point == 2 {
                    ranked.dists[pick + 1].sqrt()
                } else {
                    f32::INFINITY
                };
            }
        }
        Ok(())
    }

    /// The assignment handed to the training loop: every point's anchor and `dists`.
    fn result(&self, dists: Vec<f32>) -> Nearest {
        Nearest {
            per_point: 1,
            ids: self.ids.clone(),
            dists,
            resident: None,
        }
    }
}

/// The anchors that moved far, given each anchor's move (`drifts`, (num_anchors,)), and the
/// largest move of the others. `slack` holds each point's margin `l − u − δ_a` (the point's
/// bounds after its own anchor's move), sorted: a point is ranked again about when its margin
/// is below the largest move of the non-movers. The count of movers (the largest moves, at
/// most 1/8 of the anchors) minimises the estimated work: each mover costs one distance per
/// point, each point ranked again one per anchor.
fn pick_movers(drifts: &[f32], slack: &[f32]) -> (Vec<u32>, f32) {
    let k = drifts.len();
    let cap = k / MAX_MOVER_FRACTION;
    let mut order: Vec<u32> = (0..k as u32).collect();
    let by_move = |a: &u32, b: &u32| {
        drifts[*b as usize]
            .total_cmp(&drifts[*a as usize])
            .then(a.cmp(b))
    };
    if cap + 1 < k {
        order.select_nth_unstable_by(cap, by_move);
    }
    let mut top: Vec<u32> = order[..(cap + 1).min(k)].to_vec();
    top.sort_unstable_by(by_move);
    let ranked_again = |stable: f32| slack.partition_point(|&g| g < stable);
    let (n, mut best, mut best_cost) = (slack.len(), 0, usize::MAX);
    for m in 0..top.len() {
        let cost = m * n + ranked_again(drifts[top[m] as usize]) * k;
        if cost < best_cost {
            (best, best_cost) = (m, cost);
        }
    }
    let stable = drifts[top[best] as usize];
    top.truncate(best);
    (top, stable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::CpuBackend;
    use crate::rng::Rng;
    use crate::synthetic::clustered;

    #[test]
    fn movers_are_the_few_far_moves() {
        // Two anchors of 64 jumped; the rest crept. Every point's margin is 0.5.
        let mut drifts = vec![0.01f32; 64];
        drifts[9] = 3.0;
        drifts[40] = 2.0;
        let slack = vec![0.5f32; 1000];
        let (movers, stable) = pick_movers(&drifts, &slack);
        assert_eq!(movers, vec![9, 40]);
        assert_eq!(stable, 0.01);
        // Moves all alike: no mover is worth its cost.
        let (movers, stable) = pick_movers(&[0.2; 64], &slack);
        assert!(movers.is_empty() && stable == 0.2);
        // Fewer than 8 anchors: none.
        let (movers, stable) = pick_movers(&[5.0, 0.0, 0.0], &slack);
        assert!(movers.is_empty() && stable == 5.0);
    }

    /// Rounds of anchor moves (small ones for all, large ones for a few, one anchor swapped
    /// with a far point), each checked against a full ranking.
    #[test]
    fn bounded_assignment_matches_full_ranking() {
        for (dim, k) in [(5usize, 9usize), (33, 40), (130, 24)] {
            let n = 2500;
            let points = clustered(n, dim, 12, 0.4, dim as u64);
            let mut rng = Rng::new(3);
            let mut anchors: Vec<f32> = (0..k)
                .flat_map(|_| {
                    let i = rng.below(n);
                    points[i * dim..(i + 1) * dim].to_vec()
                })
                .collect();
            let mut bounds = DistanceBounds::new(&points, dim);
            let mut skipped_some = false;
            for round in 0..8 {
                let got = bounds.nearest(&CpuBackend, &points, &anchors, dim).unwrap();
                let full = CpuBackend
                    .nearest_anchors(&points, &anchors, dim, 2)
                    .unwrap();
                assert_eq!(got.per_point, 1);
                let max_norm = row_norms_sq(&anchors, dim).into_iter().fold(0f32, f32::max);
                for i in 0..n {
                    let (best, second) = (full.dists[2 * i], full.dists[2 * i + 1]);
                    // The GEMM form's rounding, relative to the norms it cancels.
                    let rounding = 1e-5 * (bounds.norms[i] + max_norm);
                    let tie = second - best <= rounding;
                    if !tie {
                        assert_eq!(
                            got.ids[i],
                            full.ids[2 * i],
                            "dim {dim} round {round} point {i}"
                        );
                    }
                    assert!(
                        (got.dists[i] - best).abs() <= rounding,
                        "dim {dim} round {round} point {i}: {} vs {best}",
                        got.dists[i]
                    );
                }
                skipped_some |= round > 0 && bounds.ranked < n;
                // Move the anchors: every one a little, two of them far, and one onto a point.
                for v in anchors.iter_mut() {
                    *v += 0.01 * (rng.next_f64() as f32 - 0.5);
                }
                for j in [round % k, (round * 7 + 3) % k] {
                    for v in &mut anchors[j * dim..(j + 1) * dim] {
                        *v += 0.8 * (rng.next_f64() as f32 - 0.5);
                    }
                }
                let (j, i) = ((round * 5 + 1) % k, rng.below(n));
                anchors[j * dim..(j + 1) * dim].copy_from_slice(&points[i * dim..(i + 1) * dim]);
            }
            assert!(skipped_some, "dim {dim}: the bounds never settled a point");
        }
    }
}
