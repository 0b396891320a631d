//! The compute backend: a handful of batched primitives on row-major buffers.
//!
//! The algorithm layer ([`crate::train`], [`crate::index`]) owns every decision (which points,
//! which thresholds, when to split or merge); a backend only runs these primitives. The CPU
//! backend is the reference every other backend is checked against (see the conformance suite
//! in `tests/conformance.rs`).

pub mod cpu;
pub mod split;

use crate::error::Result;

pub use cpu::CpuBackend;
pub use split::{split_list, ListSplit};

/// Nearest anchors of a batch of points.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Nearest {
    /// Number of neighbours kept per point.
    pub per_point: usize,
    /// Anchor ids, nearest first. Layout: (num_points, per_point), row-major.
    pub ids: Vec<u32>,
    /// Squared L2 distances matching `ids`. Layout: (num_points, per_point), row-major.
    pub dists: Vec<f32>,
    /// Set by a GPU backend whose device still holds exactly these `ids` and `dists` (a number
    /// it gives each result), so that [`Backend::accumulate_and_update`] can use its copy
    /// instead of uploading them again. Code that changes `ids` or `dists` must set it to None.
    pub resident: Option<u64>,
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

/// Keeps a buffer resident on a device for as long as it lives (see [`Backend::pin`]). It
/// borrows the host buffer, so the buffer can be neither changed nor freed meanwhile.
pub struct PinGuard<'a> {
    release: Option<Box<dyn FnOnce() + 'a>>,
}

impl<'a> PinGuard<'a> {
    /// A guard that runs `release` when dropped.
    pub fn new(release: impl FnOnce() + 'a) -> Self {
        PinGuard {
            release: Some(Box::new(release)),
        }
    }
    /// A guard that does nothing (backends whose memory is the host's).
    pub fn none() -> Self {
        PinGuard { release: None }
    }
}

impl Drop for PinGuard<'_> {
    fn drop(&mut self) {
        if let Some(f) = self.release.take() {
            f();
        }
    }
}

/// The batched primitives every backend provides.
pub trait Backend: Send + Sync {
    /// Short name for messages (`cpu`, `cuda`, `wgpu`).
    fn name(&self) -> &'static str;

    /// Make later calls that pass exactly this buffer (same address and length) use a copy
    /// kept on the device until the guard drops, instead of uploading it each time. The
    /// training loop pins its sample. Host-memory backends return [`PinGuard::none`].
    fn pin<'a>(&'a self, points: &'a [f32]) -> Result<PinGuard<'a>> {
        let _ = points;
        Ok(PinGuard::none())
    }

    /// Relative rounding of the products behind [`nearest_anchors`](Backend::nearest_anchors)'s
    /// one-per-point ranking: two anchors whose squared distances to `x` differ by less than
    /// `ranking_rounding() · (‖x‖² + ‖c‖²)` may be ranked either way (the distances returned
    /// are still FP32). FP32 kernels: `f32::EPSILON` (the default). A backend that ranks with
    /// f16 or TF32 products says so here.
    fn ranking_rounding(&self) -> f32 {
        f32::EPSILON
    }

    /// Whether this backend decides itself whether to keep distance bounds for the training
    /// loop's one-per-point assignments of pinned points (the GPU backends keep theirs on the
    /// device). When it does not, the training loop keeps them on the host (see `bounds.rs`)
    /// and asks the backend to rank only the points they do not settle. False by default.
    fn bounds_assignments(&self) -> bool {
        false
    }

    /// The largest `per_point` that [`nearest_anchors`](Backend::nearest_anchors) selects in a
    /// fixed number of passes over each point's row of distances. Above it a backend may scan
    /// the row once per pick: fine for an index's few thousand anchors, slow against rows of
    /// tens of thousands (a ground truth's blocks of base rows). No limit by default (the CPU
    /// keeps a running selection).
    fn fast_picks(&self) -> usize {
        usize::MAX
    }

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

    /// [`nearest_anchors`](Backend::nearest_anchors) of an index's anchors, with the index's
    /// own packing of exactly these `anchors` for the CPU's integer kernels
    /// ([`crate::amx::packed_anchors`]; `packed`, where they pack): a backend
    /// that ranks with those kernels uses it, so that a call of any number of points ranks on
    /// the kernel a large call does (the CPU finds its own packing by hashing the anchors,
    /// which it skips for calls of few points). Other backends ignore it (the default).
    fn nearest_index_anchors(
        &self,
        points: &[f32],
        anchors: &[f32],
        dim: usize,
        per_point: usize,
        packed: Option<&crate::amx::PackedAnchors>,
    ) -> Result<Nearest> {
        let _ = packed;
        self.nearest_anchors(points, anchors, dim, per_point)
    }

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

    /// [`accumulate`](Backend::accumulate) then [`update`](Backend::update) in one call, for
    /// backends that can keep the sums on their device, with the assignment and distances of
    /// `nearest` (one anchor per point; a GPU backend uses its own copy when
    /// [`Nearest::resident`] says it still has one). Returns the member and kept counts (`sums`
    /// left empty). The default runs the two primitives.
    fn accumulate_and_update(
        &self,
        points: &[f32],
        anchors: &mut [f32],
        dim: usize,
        nearest: &Nearest,
        thresholds: &[f32],
        step: f32,
    ) -> Result<AnchorSums> {
        check_single_nearest(nearest)?;
        let mut sums = self.accumulate(points, dim, &nearest.ids, &nearest.dists, thresholds)?;
        self.update(anchors, dim, &sums, step)?;
        sums.sums = Vec::new();
        Ok(sums)
    }

    /// Cut each of `lists` in two for the split maintenance ([`split_list`], which the default
    /// runs): list `i` holds indices of rows of `points` ((num_points, dim), row-major) and
    /// belongs to the anchor `centers[i]` ((num_lists, dim), row-major). A GPU backend cuts
    /// them on the device when `points` is pinned; its distances and projections are summed in
    /// another order, so a member within rounding of the cutting plane, or a tie for the
    /// farthest member, may fall differently. Results in list order.
    fn split_lists(
        &self,
        points: &[f32],
        dim: usize,
        centers: &[f32],
        lists: &[&[u32]],
    ) -> Result<Vec<Option<ListSplit>>> {
        split::split_lists(points, dim, centers, lists)
    }

    /// The robust estimator's per-anchor trimming thresholds for the one-per-point assignment
    /// `nearest` (ids < `num_anchors`): see [`trimmed_thresholds`], which the default runs. A
    /// GPU backend computes them on its own copy of the assignment when
    /// [`Nearest::resident`] says it still has one; the result is the same, value for value,
    /// since each threshold is one of the distances. Layout: (num_anchors,).
    fn trimmed_thresholds(
        &self,
        nearest: &Nearest,
        num_anchors: usize,
        trim: f32,
    ) -> Result<Vec<f32>> {
        check_threshold_args(nearest, num_anchors, trim)?;
        Ok(trimmed_thresholds(
            &nearest.ids,
            &nearest.dists,
            num_anchors,
            trim,
        ))
    }

    /// The encode primitive of the extended codes (`pcaq`, `rabitq2`-`8`): for each row `v` of
    /// `vectors` (rows, `caps.len()`), row-major, the magnitude levels
    /// `x_i = min(⌊t |v_i|⌋, caps[i])` at the scale `t` that maximises the cosine between
    /// `x + ½` and `|v|` (see [`crate::codec::levels`]), into `out` (rows, dim), row-major.
    /// A backend that offers it writes exactly the CPU reference's levels
    /// ([`crate::codec::levels::code_levels`]), so codes encoded through it are the CPU's byte
    /// for byte, and returns `true`; the default returns `false` and leaves the work to the
    /// codec on the CPU. Every `caps[i]` is below 2^11.
    fn code_levels(&self, _vectors: &[f32], _caps: &[u32], _out: &mut [u16]) -> Result<bool> {
        Ok(false)
    }

    /// Whether [`code_levels`](Backend::code_levels) runs here rather than returning `false`
    /// (false by default): a codec prepares its input for the call only when it does.
    fn offers_code_levels(&self) -> bool {
        false
    }
}

/// Validate [`Backend::code_levels`] arguments: whole rows of `caps.len()` values, as many
/// levels as values, caps below 2^11. Returns the number of rows.
pub fn check_code_levels_args(vectors: &[f32], caps: &[u32], out: &[u16]) -> Result<usize> {
    if let Some(&cap) = caps.iter().find(|&&c| c >= 1 << 11) {
        return Err(crate::VlcError::param(
            "caps",
            format!("a cap of {cap} levels; code levels take at most 2047"),
        ));
    }
    if out.len() != vectors.len() {
        return Err(crate::VlcError::DimensionMismatch {
            what: "code levels' output length".into(),
            expected: vectors.len(),
            actual: out.len(),
        });
    }
    rows_of("vectors", vectors.len(), caps.len())
}

/// Validate [`Backend::trimmed_thresholds`] arguments: one anchor per point, every id below
/// `num_anchors`, `trim` in [0, 1].
pub fn check_threshold_args(nearest: &Nearest, num_anchors: usize, trim: f32) -> Result<()> {
    check_single_nearest(nearest)?;
    if !(0.0..=1.0).contains(&trim) {
        return Err(crate::VlcError::param(
            "trim_fraction",
            format!("must be in [0, 1], got {trim}"),
        ));
    }
    // The largest id alone (a loop the compiler vectorises), over threads when long.
    let largest = if nearest.ids.len() <= SERIAL_MAX {
        nearest.ids.iter().max().copied()
    } else {
        use rayon::prelude::*;
        nearest
            .ids
            .par_chunks(SERIAL_MAX)
            .filter_map(|c| c.iter().max().copied())
            .max()
    };
    if let Some(bad) = largest.filter(|&a| a as usize >= num_anchors) {
        return Err(crate::VlcError::param(
            "assignment",
            format!("anchor id {bad} is out of range for {num_anchors} anchors"),
        ));
    }
    Ok(())
}

/// Inputs of at most this many points are summarised on the calling thread (the thread pool's
/// dispatch costs more than the work).
pub const SERIAL_MAX: usize = 1 << 16;

/// The CPU reference of the robust estimator's trimming: for each anchor with `m` members
/// (points with `assignment[i] == a`), the distance of its `keep`-th nearest member, `keep` =
/// ⌈(1 − trim)·m⌉, so that members at or below it are kept; +∞ when `keep` is all of them or
/// none. `assignment`, `dists`: (num_points,), ids < num_anchors. Layout: (num_anchors,).
pub fn trimmed_thresholds(
    assignment: &[u32],
    dists: &[f32],
    num_anchors: usize,
    trim: f32,
) -> Vec<f32> {
    use rayon::prelude::*;
    let (offsets, members) = group_by_anchor(assignment, num_anchors);
    let threshold = |a: usize, d: &mut Vec<f32>| {
        let mem = &members[offsets[a]..offsets[a + 1]];
        let keep = kept_count(mem.len(), trim);
        if keep == mem.len() || keep == 0 {
            return f32::INFINITY;
        }
        d.clear();
        d.extend(mem.iter().map(|&i| dists[i as usize]));
        let (_, &mut v, _) = d.select_nth_unstable_by(keep - 1, f32::total_cmp);
        v
    };
    if assignment.len() <= SERIAL_MAX {
        let mut d = Vec::new();
        return (0..num_anchors).map(|a| threshold(a, &mut d)).collect();
    }
    // Enough anchors per task that each task has about SERIAL_MAX / 4 points.
    let min_len = (num_anchors * (SERIAL_MAX / 4))
        .div_ceil(assignment.len())
        .max(1);
    (0..num_anchors)
        .into_par_iter()
        .with_min_len(min_len)
        .map_init(Vec::new, |d, a| threshold(a, d))
        .collect()
}

/// How many of an anchor's `members` the trimmed mean keeps: ⌈(1 − trim)·members⌉ (computed
/// in f64; a GPU backend computes it the same way).
pub fn kept_count(members: usize, trim: f32) -> usize {
    ((members as f64 * (1.0 - trim as f64)).ceil() as usize).min(members)
}

/// An assignment for accumulation: `nearest` must hold one anchor per point.
pub fn check_single_nearest(nearest: &Nearest) -> Result<()> {
    if nearest.per_point != 1 || nearest.ids.len() != nearest.dists.len() {
        return Err(crate::VlcError::DimensionMismatch {
            what: "nearest anchors per point for accumulation".into(),
            expected: 1,
            actual: nearest.per_point,
        });
    }
    Ok(())
}

/// Number of rows of a (rows, dim) buffer of `len` values, or a typed error.
pub fn rows_of(what: &str, len: usize, dim: usize) -> Result<usize> {
    if dim == 0 {
        return Err(crate::VlcError::param("dim", "must be at least 1"));
    }
    if !len.is_multiple_of(dim) {
        return Err(crate::VlcError::DimensionMismatch {
            what: format!("{what} buffer length {len}"),
            expected: dim,
            actual: len % dim,
        });
    }
    Ok(len / dim)
}

/// Validate [`Backend::nearest_anchors`] arguments; returns (num_points, num_anchors).
pub fn check_nearest_args(
    points: &[f32],
    anchors: &[f32],
    dim: usize,
    per_point: usize,
) -> Result<(usize, usize)> {
    let num_points = rows_of("points", points.len(), dim)?;
    let num_anchors = rows_of("anchors", anchors.len(), dim)?;
    if num_anchors == 0 {
        return Err(crate::VlcError::EmptyInput {
            what: "anchors".into(),
        });
    }
    if per_point == 0 || per_point > num_anchors {
        return Err(crate::VlcError::param(
            "per_point",
            format!("must be in 1..={num_anchors}, got {per_point}"),
        ));
    }
    Ok((num_points, num_anchors))
}

/// Validate [`Backend::accumulate`] arguments; returns num_points.
pub fn check_accumulate_args(
    points: &[f32],
    dim: usize,
    assignment: &[u32],
    dists: &[f32],
    num_anchors: usize,
) -> Result<usize> {
    let num_points = rows_of("points", points.len(), dim)?;
    if assignment.len() != num_points || dists.len() != num_points {
        return Err(crate::VlcError::DimensionMismatch {
            what: "assignment/dists length".into(),
            expected: num_points,
            actual: assignment.len().min(dists.len()),
        });
    }
    if let Some(&bad) = assignment.iter().find(|&&a| a as usize >= num_anchors) {
        return Err(crate::VlcError::param(
            "assignment",
            format!("anchor id {bad} >= {num_anchors}"),
        ));
    }
    Ok(num_points)
}

/// Validate the anchors of [`Backend::accumulate_and_update`]: (num_anchors, dim), one row per
/// threshold.
pub fn check_anchor_rows(anchors: &[f32], dim: usize, num_anchors: usize) -> Result<()> {
    let rows = rows_of("anchors", anchors.len(), dim)?;
    if rows != num_anchors {
        return Err(crate::VlcError::DimensionMismatch {
            what: "anchors (rows) vs thresholds".into(),
            expected: num_anchors,
            actual: rows,
        });
    }
    Ok(())
}

/// Validate [`Backend::update`] arguments; returns num_anchors.
pub fn check_update_args(anchors: &[f32], dim: usize, sums: &AnchorSums) -> Result<usize> {
    let num_anchors = rows_of("anchors", anchors.len(), dim)?;
    if sums.kept.len() != num_anchors || sums.sums.len() != num_anchors * dim {
        return Err(crate::VlcError::DimensionMismatch {
            what: "anchor sums".into(),
            expected: num_anchors,
            actual: sums.kept.len(),
        });
    }
    Ok(num_anchors)
}

/// The exponent `e` that turns values of magnitude at most `max_abs` into 64-bit fixed point
/// (multiples of 2^-e) with room for sums of `num_points` of them: num_points · max_abs · 2^e
/// < 2^61. GPU backends add in fixed point so that sums do not depend on the order of addition.
pub fn fixed_point_exponent(num_points: usize, max_abs: f32) -> i32 {
    let count_bits = usize::BITS - num_points.leading_zeros();
    // max_abs < 2^value_bits (f32 exponents lie in -149..=128).
    let value_bits = if max_abs > 0.0 {
        (max_abs as f64).log2().floor() as i32 + 1
    } else {
        0
    };
    61 - count_bits as i32 - value_bits
}

/// Indices of points grouped by anchor (a CSR layout), in increasing point order within each
/// anchor. Returns `(offsets, members)`: anchor `a` owns `members[offsets[a]..offsets[a+1]]`.
/// `offsets` has num_anchors + 1 entries.
pub fn group_by_anchor(assignment: &[u32], num_anchors: usize) -> (Vec<usize>, Vec<u32>) {
    use rayon::prelude::*;
    // A counting sort over chunks of points: per-chunk histograms in parallel, then each chunk
    // scatters its points (in increasing order) into its own disjoint ranges, so the result is
    // the same as the serial sort's whatever the thread count.
    const CHUNK: usize = 1 << 16;
    let n = assignment.len();
    if n <= CHUNK {
        // One chunk: the serial counting sort, without the thread pool.
        let mut offsets = vec![0usize; num_anchors + 1];
        for &a in assignment {
            offsets[a as usize + 1] += 1;
        }
        for a in 0..num_anchors {
            offsets[a + 1] += offsets[a];
        }
        let mut cursor = offsets.clone();
        let mut members = vec![0u32; n];
        for (i, &a) in assignment.iter().enumerate() {
            members[cursor[a as usize]] = i as u32;
            cursor[a as usize] += 1;
        }
        return (offsets, members);
    }
    let chunks: Vec<&[u32]> = assignment.chunks(CHUNK.max(1)).collect();
    let counts: Vec<Vec<usize>> = chunks
        .par_iter()
        .map(|c| {
            let mut h = vec![0usize; num_anchors];
            for &a in c.iter() {
                h[a as usize] += 1;
            }
            h
        })
        .collect();
    let mut offsets = vec![0usize; num_anchors + 1];
    // cursors[c][a]: where chunk c writes its first member of anchor a.
    let mut cursors = vec![vec![0usize; num_anchors]; chunks.len()];
    let mut at = 0usize;
    for a in 0..num_anchors {
        offsets[a] = at;
        for (c, h) in counts.iter().enumerate() {
            cursors[c][a] = at;
            at += h[a];
        }
    }
    offsets[num_anchors] = at;
    let mut members = vec![0u32; n];
    let out = SharedOut(members.as_mut_ptr());
    chunks
        .par_iter()
        .zip(cursors.par_iter_mut())
        .enumerate()
        .for_each(|(c, (chunk, cursor))| {
            let out = &out;
            for (i, &a) in chunk.iter().enumerate() {
                let slot = cursor[a as usize];
                cursor[a as usize] += 1;
                // SAFETY: every (chunk, anchor) pair owns the disjoint range
                // cursors[c][a] .. cursors[c][a] + counts[c][a] of `members` (n entries), so
                // no two threads write the same slot and every slot is below n.
                unsafe { *out.0.add(slot) = (c * CHUNK + i) as u32 };
            }
        });
    (offsets, members)
}

/// A pointer written by several threads at provably disjoint offsets.
struct SharedOut(*mut u32);
// SAFETY: used only by `group_by_anchor`, whose writers touch disjoint slots.
unsafe impl Sync for SharedOut {}

#[cfg(test)]
mod tests {
    use super::{fixed_point_exponent, group_by_anchor};
    use crate::rng::Rng;

    #[test]
    fn fixed_point_sums_cannot_overflow_and_keep_precision() {
        for &n in &[1usize, 2, 301, 1 << 20, 1_000_000, (1 << 32) - 1] {
            for &m in &[0.0f32, 1e-30, 0.07, 0.5, 1.0, 1.5, 2.0, 1000.0, 3.0e38] {
                let scale = 2f64.powi(fixed_point_exponent(n, m));
                let worst = n as f64 * (m as f64 * scale + 0.5);
                assert!(worst < 2f64.powi(62), "n {n}, max {m}: {worst:e}");
                // Not needlessly coarse: at most a factor 4 below the largest safe scale.
                if m > 0.0 {
                    assert!(
                        n as f64 * m as f64 * scale >= 2f64.powi(58),
                        "n {n}, max {m}"
                    );
                }
            }
        }
    }

    #[test]
    fn grouping_matches_a_serial_counting_sort_across_chunks() {
        let mut r = Rng::new(5);
        for (n, k) in [(0usize, 3usize), (1, 1), (1000, 7), (200_003, 37)] {
            let assignment: Vec<u32> = (0..n).map(|_| r.below(k) as u32).collect();
            let (offsets, members) = group_by_anchor(&assignment, k);
            let mut expected_members = Vec::new();
            let mut expected_offsets = vec![0usize];
            for a in 0..k as u32 {
                expected_members.extend((0..n as u32).filter(|&i| assignment[i as usize] == a));
                expected_offsets.push(expected_members.len());
            }
            assert_eq!(offsets, expected_offsets, "n {n} k {k}");
            assert_eq!(members, expected_members, "n {n} k {k}");
        }
    }
}
