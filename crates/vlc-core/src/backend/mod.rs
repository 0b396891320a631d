//! The compute backend: a handful of batched primitives on row-major buffers.
//!
//! The algorithm layer ([`crate::train`], [`crate::index`]) owns every decision (which points,
//! which thresholds, when to split or merge); a backend only runs these primitives. The CPU
//! backend is the reference every other backend is checked against (see the conformance suite
//! in `tests/conformance.rs`).

pub mod cpu;

use crate::error::Result;

pub use cpu::CpuBackend;

/// Nearest anchors of a batch of points.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Nearest {
    /// Number of neighbours kept per point.
    pub per_point: usize,
    /// Anchor ids, nearest first. Layout: (num_points, per_point), row-major.
    pub ids: Vec<u32>,
    /// Squared L2 distances matching `ids`. Layout: (num_points, per_point), row-major.
    pub dists: Vec<f32>,
}

/// Per-anchor sums of the points kept by the robust (trimmed) estimator.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AnchorSums {
    /// Sum of the kept member rows. Layout: (num_anchors, dim), row-major, f64.
    pub sums: Vec<f64>,
    /// Number of kept members per anchor. Layout: (num_anchors,).
    pub kept: Vec<u32>,
    /// Number of all members per anchor (kept or trimmed). Layout: (num_anchors,).
    pub members: Vec<u32>,
}

/// The batched primitives every backend provides.
pub trait Backend: Send + Sync {
    /// Short name for messages (`cpu`, `cuda`, `wgpu`).
    fn name(&self) -> &'static str;

    /// For each point, the `per_point` nearest anchors by squared L2, nearest first, computed in
    /// GEMM form `‖x‖² − 2x·c + ‖c‖²` (clamped at 0). Ties resolve to the smaller anchor id.
    ///
    /// `points`: (num_points, dim), `anchors`: (num_anchors, dim), both row-major.
    fn nearest_anchors(
        &self,
        points: &[f32],
        anchors: &[f32],
        dim: usize,
        per_point: usize,
    ) -> Result<Nearest>;

    /// Per-anchor accumulation for the trimmed mean: point `i` (assigned to `assignment[i]` at
    /// squared distance `dists[i]`) is summed into its anchor when
    /// `dists[i] <= thresholds[assignment[i]]`.
    ///
    /// `points`: (num_points, dim); `assignment`, `dists`: (num_points,); `thresholds`:
    /// (num_anchors,).
    fn accumulate(
        &self,
        points: &[f32],
        dim: usize,
        assignment: &[u32],
        dists: &[f32],
        thresholds: &[f32],
    ) -> Result<AnchorSums>;

    /// Temperature-scaled update: `anchor += step · (sum/kept − anchor)` for anchors with
    /// `kept > 0`; others are left for the algorithm layer to re-seed.
    ///
    /// `anchors`: (num_anchors, dim), row-major, updated in place.
    fn update(&self, anchors: &mut [f32], dim: usize, sums: &AnchorSums, step: f32) -> Result<()>;
}

/// Indices of points grouped by anchor (a CSR layout), in increasing point order within each
/// anchor. Returns `(offsets, members)`: anchor `a` owns `members[offsets[a]..offsets[a+1]]`.
/// `offsets` has num_anchors + 1 entries.
pub fn group_by_anchor(assignment: &[u32], num_anchors: usize) -> (Vec<usize>, Vec<u32>) {
    let mut offsets = vec![0usize; num_anchors + 1];
    for &a in assignment {
        offsets[a as usize + 1] += 1;
    }
    for a in 0..num_anchors {
        offsets[a + 1] += offsets[a];
    }
    let mut cursor = offsets.clone();
    let mut members = vec![0u32; assignment.len()];
    for (i, &a) in assignment.iter().enumerate() {
        members[cursor[a as usize]] = i as u32;
        cursor[a as usize] += 1;
    }
    (offsets, members)
}
