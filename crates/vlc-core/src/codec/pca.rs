//! `pcaq`: extended RaBitQ codes in a data-shaped basis, with bits spent where the residuals
//! vary.
//!
//! Embedding residuals are far from isotropic: a few principal directions hold much of their
//! variance. A random rotation (the `rabitq*` codecs) spreads that variance evenly and every
//! dimension gets the same bits; this codec instead rotates into the principal axes of the
//! training residuals and allocates `round(bits · dim / 8)` bytes of bit planes per code by
//! reverse water-filling from zero, one bit of a block of 8 axes at a time, where it lowers a
//! modelled ranking error most (`ErrorModel`): a block's variance times the estimate's
//! relative error at its width, or, for a block left uncoded, times `1 + coherence`, the
//! coherence being how much near neighbours share the block's coordinates
//! (`neighbour_coherence`, measured on the training sample). So axes that are independent
//! noise stay uncoded while structured axes get several bits, and on data with shared structure
//! on every axis (text embeddings) many axes get a bit or two. A code of one bit on leading
//! axes needs no second stage and spends the second stage's factor bytes on more axes; which
//! of the two shapes is used follows `ErrorModel::discrimination`. Axes with the same width
//! then get one random rotation among themselves, so their coordinates are Gaussian-like and of
//! equal variance, as extended RaBitQ's grid assumes.
//!
//! Codes are extended RaBitQ codes with a per-dimension width `b_i` (non-increasing in `i`, at
//! most [`MAX_DIM_BITS`] = 12, 8 before format version 8; the `active` dimensions have
//! `b_i ≥ 1`): an unsigned `u_i ∈ 0..2^b_i` whose grid point is
//! `w_i = u_i − (2^b_i − 1)/2`, all dimensions sharing one scale chosen per vector to maximise
//! the cosine between `w` and the rotated residual (the same estimator and factors as
//! [`super::rabitq`], with `√active` for `√D`). The residual energy outside the coded axes
//! enters only the `‖r‖²` term of f1 (its inner product with the query is not estimated).
//!
//! Search runs in two stages where some width exceeds one bit. The first stage reads the top
//! bit of every active dimension and the second-highest bit of the widest ones (a prefix of
//! axes, at most half of the active ones), i.e. the code truncated to its coarse grid, with
//! factors of its own: this is what the fast scan scores (a sign-only first stage prunes
//! poorly in this basis, where the variance is uneven). Axes wider than 8 bits (format version
//! 8 on) give it one more bit per bit past 8, down to the cell of an 8-bit axis's top two
//! bits, where the remaining planes stay prefixes (see `stage1_planes`): every axis shares
//! one grid step, so a wide axis spans many steps, and its top two bits alone would split it
//! far out in its tails. The full code then rescores the candidate pool. A code of one bit
//! per active dimension is a single stage, scanned and rescored like `rabitq1`.
//!
//! Code layout, `nb = ⌈active/8⌉`, dimension `d` at byte `d/8`, bit `d%8` of each plane:
//! - first stage: the sign plane (top bit of `u`, `nb` bytes), then plane `j` below it (bit
//!   `b_d − 2 − j`) of dimensions `0..stage1_planes[j]` (`⌈stage1_planes[j]/8⌉` bytes each;
//!   one plane, the second-highest bit, where no axis is wider than 8 bits; none where every
//!   width is 1 or no prefix of at most half the axes is 2 bits wide), f1 and f2 of the
//!   coarse grid in the codec's [`FactorFormat`] (8 or 16 bits each from format version 6,
//!   as fine as the stage's error needs, see [`ResidualSpread::factor_bits`]; two scaled `f16`
//!   before; two `f32` for anchors much longer than the residuals);
//! - the remaining bits of `u`, low bit first: plane `j` holds bit `j` of the first
//!   `plane_dims[j]` dimensions (a prefix, as the remaining widths are non-increasing), then
//!   f1 and f2 of the full code in its own [`FactorFormat`] (8 or 16 bits each from format
//!   version 6; like the first stage's in versions 4 and 5; two `f32` before).
//!
//! Files before format version 4 hold the earlier allocation (one bit on every axis above one
//! bit per dimension on average, one bit on a prefix below); their widths are stored, so they
//! decode as they always did.
//!
//! The rotation's rows of the coded axes are stored as int8 with an f32 scale per row (active ·
//! (dim + 4) bytes in the file, format version 5; an f16 matrix, twice the bytes, before) and
//! orthonormalised on the way in ([`crate::linalg::orthonormalize_rows`], the same at build and at
//! load), so the basis is exactly orthonormal, within int8 rounding of the principal axes, and
//! a loaded index encodes and searches exactly like the built one. At high dimension and few
//! vectors this is a fixed cost worth saving: 1024 x 1024 rows are 35 bytes per vector of a
//! 30,000-vector index as int8, 70 as f16.

use super::factors::{fit_formats, ResidualSpread};
use super::levels::{choose_levels, encode_through_backend, LevelScratch};
use super::rabitq::grid_factors;
use super::PreparedAnchors;
use super::{
    fill_remaining, planes_estimate, planes_full, term_bounds, CodecKind, FactorFormat,
    ParamReader, QueryState, ResidualCodec,
};
use crate::backend::Backend;
use crate::error::{Result, VlcError};
use crate::linalg::{dot, gemm_nt, symmetric_eigen};
use crate::simd::BitTerm;
use rayon::prelude::*;

/// Rows encoded per parallel task.
const ENCODE_BLOCK: usize = 1024;
/// Most training residuals used for the covariance.
const COVARIANCE_ROWS: usize = 16_384;
/// Widest dimension, in bits (format version 8 on; 8 before). Every axis of a code shares one
/// grid step, so where a few leading axes hold most of the residual variance they need several
/// bits more than the rest for that step to suit both: at 8 the cap held them back and set the
/// step for every axis, and from 5 to 7 bits per dimension the estimate stopped improving on
/// such data. 12 bits serve axes with 4^11 times the variance of a one-bit axis: built with a
/// cap of 16, `pcaq7.5` and `pcaq8` on the 768-, 1024- and 1536-d benchmark sets (the ones
/// whose leading axes reach 12 bits) get the same widths.
pub const MAX_DIM_BITS: u8 = 12;
/// Most average bits per dimension.
pub const MAX_AVERAGE_BITS: u8 = 8;
/// The first format version whose files may hold widths above 8 bits.
const WIDE_DIMS_VERSION: u32 = 8;
/// Average bits per dimension when none are given.
pub const DEFAULT_BITS: f32 = 3.0;

#[derive(Clone, Debug)]
pub struct PcaRaBitQ {
    dim: usize,
    /// The average bits per dimension asked for at training.
    bits: f32,
    /// Bits of each rotated dimension, non-increasing. Layout: (dim,).
    dim_bits: Vec<u8>,
    /// Dimensions with at least one bit: `dim_bits[..active]` (all of them above one bit per
    /// dimension on average).
    active: usize,
    /// The first stage's bit planes below the sign plane, highest first: plane `j` holds bit
    /// `b_i − 2 − j` of dimensions `0..stage1_planes[j]` (a prefix, non-increasing in `j`; see
    /// [`stage1_planes`]).
    stage1_planes: Vec<usize>,
    /// Plane `j` of the remaining bits covers dimensions `0..plane_dims[j]`.
    plane_dims: Vec<usize>,
    /// Rows are the basis vectors of the active dimensions, as decoded from `stored_rotation`.
    /// Layout: (active, dim), row-major.
    rotation: Vec<f32>,
    /// How the file holds `rotation`.
    stored_rotation: StoredRotation,
    /// How the first stage's factors are stored.
    factors: FactorFormat,
    /// How the full code's factors are stored: like the first stage's since format version 4,
    /// `f32` in older files.
    full_factors: FactorFormat,
    /// Bytes of one code (fixed by the widths; kept so the scan does not recount it).
    code_size: usize,
    /// Bytes of the first stage's bit planes (kept like `code_size`).
    stage1_bytes: usize,
}

/// How an index file holds the rotation's rows.
#[derive(Clone, Debug, PartialEq)]
enum StoredRotation {
    /// Every entry as an f16 (files before format version 5, and indexes read from them).
    F16,
    /// Each row as int8 levels with an f32 scale (`value = scale · level`), orthonormalised
    /// when decoded. Layout: `scales` (active,), `levels` (active, dim), row-major.
    Int8 { scales: Vec<f32>, levels: Vec<i8> },
}

/// Tags of [`StoredRotation`] in the parameters (format version 5 on).
const ROTATION_F16: u8 = 0;
const ROTATION_INT8: u8 = 1;

impl StoredRotation {
    /// Store `rows` (active, dim) as int8; returns the storage and the basis it decodes to.
    fn int8(rows: &[f32], dim: usize) -> Result<(Self, Vec<f32>)> {
        let mut scales = Vec::with_capacity(rows.len() / dim);
        let mut levels = Vec::with_capacity(rows.len());
        for row in rows.chunks_exact(dim) {
            let (scale, q) = crate::anchor_store::quantize_row(row);
            scales.push(scale);
            levels.extend(q);
        }
        let basis = Self::int8_basis(&scales, &levels, dim)?;
        Ok((StoredRotation::Int8 { scales, levels }, basis))
    }

    /// The orthonormal basis int8 rows stand for.
    fn int8_basis(scales: &[f32], levels: &[i8], dim: usize) -> Result<Vec<f32>> {
        let mut rows: Vec<f32> = levels
            .chunks_exact(dim)
            .zip(scales)
            .flat_map(|(row, &s)| row.iter().map(move |&l| l as f32 * s))
            .collect();
        crate::linalg::orthonormalize_rows(&mut rows, dim).map_err(|i| VlcError::Corrupt {
            what: format!(
                "pcaq codec parameters: rotation row {i} is not independent of the rows before it"
            ),
            offset: 0,
        })?;
        Ok(rows)
    }
}

#[derive(Default)]
struct EncodeScratch {
    levels: LevelScratch,
    /// Offset-binary code of each dimension. Layout: (dim,).
    units: Vec<u32>,
}

/// Relative error variance of the unbiased inner-product estimate from a `b`-bit uniform grid
/// of a Gaussian coordinate, `mse / (1 − mse)` with `mse` the optimal uniform quantiser's
/// relative mean squared error at `b` bits (Max, 1960) for `b` in `1..=8`, and a quarter of
/// the width before's above (the high-rate rule), for `b` in `1..=`[`MAX_DIM_BITS`].
pub(crate) const GRID_ERROR: [f64; MAX_DIM_BITS as usize] = {
    const MSE: [f64; 8] = [
        0.3634, 0.1188, 0.03744, 0.01154, 0.00349, 0.00104, 0.000303, 0.0000866,
    ];
    let mut out = [0.0; MAX_DIM_BITS as usize];
    let mut mse = 0.0;
    let mut b = 0;
    while b < MAX_DIM_BITS as usize {
        mse = if b < MSE.len() { MSE[b] } else { mse * 0.25 };
        out[b] = mse / (1.0 - mse);
        b += 1;
    }
    out
};

/// The ranking error that the bit allocation minimises, per block of 8 principal axes (the
/// last block may be shorter): the block's mean residual `variance` times the estimate's
/// relative error at the block's width ([`GRID_ERROR`]). An uncoded block's is `1 + coherence`:
/// its whole inner product with the query is missing, and the part of it that near neighbours
/// share (`coherence`, 0..=1, see [`neighbour_coherence`]) is signal that a top-k ranking loses
/// coherently, not noise. So on data whose every axis carries shared structure (text
/// embeddings) the first bit of a block is worth about one and a half times its second, and
/// many axes get a bit or two; where the small axes are independent noise (coherence ≈ 0), the
/// bits go to the structured axes first.
struct ErrorModel {
    /// Mean variance of each block. Layout: (blocks,).
    variance: Vec<f64>,
    /// Each block's coherence, 0..=1. Layout: (blocks,).
    coherence: Vec<f64>,
}

impl ErrorModel {
    /// `variances` per principal axis (non-increasing), `coherence` per block.
    fn new(variances: &[f64], coherence: &[f64]) -> Self {
        ErrorModel {
            variance: variances
                .chunks(8)
                .map(|c| c.iter().sum::<f64>() / c.len() as f64)
                .collect(),
            coherence: coherence.iter().map(|c| c.clamp(0.0, 1.0)).collect(),
        }
    }

    fn error(&self, block: usize, bits: u8) -> f64 {
        self.variance[block]
            * match bits {
                0 => 1.0 + self.coherence[block],
                b => GRID_ERROR[b as usize - 1],
            }
    }

    /// The estimate's relative error over all axes for per-dimension widths `dim_bits`
    /// (dim,): each block's variance times its grid error ([`GRID_ERROR`]), or times 1 where
    /// uncoded (its part of the inner product is not estimated), over the total variance.
    fn relative_error(&self, dim_bits: &[u8]) -> f64 {
        let (mut error, mut total) = (0.0, 0.0);
        for (d, &w) in dim_bits.iter().enumerate() {
            let v = self.variance[d / 8];
            total += v;
            error += v * if w == 0 {
                1.0
            } else {
                GRID_ERROR[w as usize - 1]
            };
        }
        if total > 0.0 {
            error / total
        } else {
            1.0
        }
    }

    fn total(&self, widths: &[u8]) -> f64 {
        widths
            .iter()
            .enumerate()
            .map(|(b, &w)| self.error(b, w))
            .sum()
    }

    /// How well the coded blocks single out neighbours that share structure: the signal they
    /// carry, `Σ coherence · variance`, squared, over its spread and the estimate's noise,
    /// `Σ variance² · (1 + relative error)`. Coherent signal adds linearly over blocks and
    /// noise in quadrature, so this favours coding many blocks coarsely more than
    /// [`total`](Self::total) does; it decides between codes of different shapes (one stage
    /// or two) where `total` fills each. `None` without any coherent signal.
    fn discrimination(&self, widths: &[u8]) -> Option<f64> {
        let (mut signal, mut noise) = (0.0, 0.0);
        for (b, &w) in widths.iter().enumerate().filter(|(_, &w)| w > 0) {
            let v = self.variance[b];
            signal += self.coherence[b] * v;
            noise += v * v * (1.0 + GRID_ERROR[w as usize - 1]);
        }
        (signal > 0.0 && noise > 0.0).then(|| signal * signal / noise)
    }

    /// Widths per block by greedy reverse water-filling from zero: `bytes` times, the block
    /// whose error falls most by one more bit (one more byte per code) gains it, ties to the
    /// lower block, at most `max_bits`. Widths stay non-increasing (bit planes are stored as
    /// prefixes): a block gains a bit only while it is narrower than the one before.
    fn fill(&self, bytes: usize, max_bits: u8) -> Vec<u8> {
        let blocks = self.variance.len();
        let mut widths = vec![0u8; blocks];
        for _ in 0..bytes {
            let mut best: Option<(f64, usize)> = None;
            for b in 0..blocks {
                if widths[b] >= max_bits || (b > 0 && widths[b] >= widths[b - 1]) {
                    continue;
                }
                let gain = self.error(b, widths[b]) - self.error(b, widths[b] + 1);
                if best.is_none_or(|(g, _)| gain > g) {
                    best = Some((gain, b));
                }
            }
            match best {
                Some((_, b)) => widths[b] += 1,
                None => break,
            }
        }
        widths
    }

    /// Widths per block for `bytes` bytes of bit planes per code: free widths in `bytes` (a
    /// two-stage code, which also stores the full code's factors, `full_factor_bytes`) or one
    /// bit on leading blocks in `bytes` plus those factor bytes (a single-stage code of the
    /// same size, or smaller where the blocks run out), whichever has the larger
    /// [`discrimination`](Self::discrimination) (the smaller [`total`](Self::total) error
    /// where there is no coherent signal to measure it by).
    fn widths(&self, bytes: usize, full_factor_bytes: usize) -> Vec<u8> {
        let single = self.fill(bytes + full_factor_bytes, 1);
        let multi = self.fill(bytes, MAX_DIM_BITS);
        if !multi.iter().any(|&w| w > 1) {
            return single;
        }
        let multi_better = match (self.discrimination(&multi), self.discrimination(&single)) {
            (Some(m), Some(s)) => m > s,
            _ => self.total(&multi) < self.total(&single),
        };
        if multi_better {
            multi
        } else {
            single
        }
    }
}

/// Training rows paired with their nearest neighbour for [`neighbour_coherence`].
const COHERENCE_PAIRS: usize = 2048;
/// Most members of its list a row is compared with for its nearest neighbour (bounds the cost
/// where lists are long, e.g. with few anchors).
const COHERENCE_CANDIDATES: usize = 512;

/// Per block of 8 principal axes, how much near neighbours share their residual coordinates:
/// evenly spaced training rows are paired with their nearest other row in the same list
/// (among at most [`COHERENCE_CANDIDATES`] of its members; exact duplicates are skipped, as
/// they share everything and say nothing of the axes), and the block's coherence is
/// `Σ a·b / √(Σ a² · Σ b²)` over the pairs' coordinates `a`, `b` on its axes, clamped to
/// 0..=1 (0 where no pair exists). `basis` holds the principal axes.
/// Layout: `basis` (dim, dim), row-major, one axis per row, in allocation order.
fn neighbour_coherence(
    points: &[f32],
    anchors: &[f32],
    assignment: &[u32],
    dim: usize,
    basis: &[f32],
) -> Vec<f64> {
    let m = assignment.len();
    let blocks = dim.div_ceil(8);
    // Rows of each list, in row order.
    let (starts, members) = crate::backend::group_by_anchor(assignment, anchors.len() / dim);
    let stride = m.div_ceil(COHERENCE_PAIRS).max(1);
    let row = |i: usize| &points[i * dim..(i + 1) * dim];
    let pairs: Vec<(usize, usize)> = (0..m)
        .step_by(stride)
        .collect::<Vec<_>>()
        .into_par_iter()
        .filter_map(|i| {
            let a = assignment[i] as usize;
            let list = &members[starts[a]..starts[a + 1]];
            list.iter()
                .step_by(list.len().div_ceil(COHERENCE_CANDIDATES).max(1))
                .map(|&j| j as usize)
                .filter(|&j| j != i)
                .map(|j| (crate::linalg::l2_sq(row(i), row(j)), j))
                .filter(|&(d, _)| d > 0.0)
                .min_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)))
                .map(|(_, j)| (i, j))
        })
        .collect();
    if pairs.is_empty() {
        return vec![0.0; blocks];
    }
    // Residuals of both sides, then their coordinates on the axes. Layout: (2·pairs, dim).
    let mut residuals = vec![0f32; 2 * pairs.len() * dim];
    for (k, &(i, j)) in pairs.iter().enumerate() {
        for (side, p) in [i, j].into_iter().enumerate() {
            let c = &anchors[assignment[p] as usize * dim..][..dim];
            let out = &mut residuals[(2 * k + side) * dim..][..dim];
            for ((o, x), c) in out.iter_mut().zip(row(p)).zip(c) {
                *o = x - c;
            }
        }
    }
    let mut coords = vec![0f32; residuals.len()];
    gemm_nt(&residuals, 2 * pairs.len(), basis, dim, dim, &mut coords);
    let mut sums = vec![[0f64; 3]; blocks];
    for pair in coords.chunks_exact(2 * dim) {
        let (a, b) = pair.split_at(dim);
        for d in 0..dim {
            let s = &mut sums[d / 8];
            s[0] += a[d] as f64 * b[d] as f64;
            s[1] += a[d] as f64 * a[d] as f64;
            s[2] += b[d] as f64 * b[d] as f64;
        }
    }
    sums.iter()
        .map(|&[ab, aa, bb]| {
            let norm = (aa * bb).sqrt();
            if norm > 0.0 {
                (ab / norm).clamp(0.0, 1.0)
            } else {
                0.0
            }
        })
        .collect()
}

/// The first-stage prefix: the dimensions of width at least `w`, for the smallest `w ≥ 2`
/// that keeps them to at most half of all dimensions (0 when no width qualifies).
fn stage1_prefix(dim_bits: &[u8]) -> usize {
    let half = dim_bits.len() / 2;
    (2..=MAX_DIM_BITS)
        .map(|w| dim_bits.iter().take_while(|&&b| b >= w).count())
        .find(|&n| n <= half)
        .unwrap_or(0)
}

/// Least share of the first stage's modelled grid error that the rounding of one quantisation
/// step for every fast-scan table must reach for the fast scan to cut its bytes into segments
/// (see [`PcaRaBitQ::stage1_hints`]). Each segment costs the scan a conversion of its sums per
/// block of 32 codes (48 code bytes: 34 ns in one segment, 43 ns in three,
/// `bench/results/kernels_segments_2026-11-26.log`); over the ten
/// benchmark sets at `pcaq1`, `pcaq5` and `pcaq7.5` (`bench/results/first_stage_segments.log`),
/// the codes below this share gained no recall from segments, and those above gained up to
/// 0.024 of recall@10 with a pool of 30.
const SEGMENT_NOISE_SHARE: f64 = 0.05;

/// Widest dimension whose first-stage view is at most two bits.
const STAGE1_TWO_BIT_WIDTH: u8 = 8;

/// The first stage's planes below the sign plane, as prefixes of dimensions, highest first:
/// the second-highest bit of [`stage1_prefix`]'s dimensions, then one more plane per bit
/// past [`STAGE1_TWO_BIT_WIDTH`] on those wider, so that the first stage reads every such axis
/// down to the cell of an 8-bit axis's top two bits (2^6 grid steps). Every axis of a code
/// shares one grid step, so a wide axis spans many steps, and its top two bits alone split it
/// at half its range, far out in its tails: nearly a sign. A plane is added only while the
/// bits left to the remaining planes stay non-increasing over the dimensions, as those planes
/// are stored as prefixes too.
fn stage1_planes(dim_bits: &[u8]) -> Vec<usize> {
    let second = stage1_prefix(dim_bits);
    let mut planes = Vec::new();
    if second > 0 {
        planes.push(second);
        // Plane j (below the second) covers the dimensions at least 8 + j bits wide.
        for extra in 1.. {
            let width = STAGE1_TWO_BIT_WIDTH + extra;
            let n = dim_bits[..second]
                .iter()
                .take_while(|&&b| b >= width)
                .count();
            if n == 0 {
                break;
            }
            planes.push(n);
            let rest = |i: usize| dim_bits[i] as usize - 1 - stage1_covered(&planes, i);
            if (1..dim_bits.len()).any(|i| rest(i) > rest(i - 1)) {
                planes.pop();
                break;
            }
        }
    }
    planes
}

/// How many of the first stage's planes below the sign cover dimension `i`.
fn stage1_covered(stage1_planes: &[usize], i: usize) -> usize {
    stage1_planes.iter().filter(|&&n| i < n).count()
}

/// Widths of the remaining planes' prefixes: plane `j` covers the dimensions with more than
/// `j` bits left after the first stage.
fn plane_prefixes(dim_bits: &[u8], stage1_planes: &[usize]) -> Vec<usize> {
    let rest = |i: usize| dim_bits[i] as usize - 1 - stage1_covered(stage1_planes, i);
    let planes = (0..dim_bits.len()).map(rest).max().unwrap_or(0);
    (0..planes)
        .map(|j| (0..dim_bits.len()).filter(|&i| rest(i) > j).count())
        .collect()
}

/// A uniformly random `n × n` orthogonal matrix (QR of a Gaussian one). Layout: row-major.
fn random_orthogonal(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = crate::rng::Rng::new(seed);
    let gauss = nalgebra::DMatrix::<f64>::from_fn(n, n, |_, _| rng.normal());
    let q = gauss.qr().q();
    (0..n * n).map(|k| q[(k / n, k % n)] as f32).collect()
}

/// Refuse a rate outside (0, [`MAX_DIM_BITS`]] bits per dimension.
fn check_bits(bits: f32) -> Result<()> {
    if bits > 0.0 && bits <= MAX_AVERAGE_BITS as f32 {
        Ok(())
    } else {
        Err(VlcError::param(
            "bits",
            format!(
                "pcaq needs more than 0 and at most {MAX_DIM_BITS} bits per dimension, got {bits}"
            ),
        ))
    }
}

/// What `pcaq` learns from the residuals before its rate is fixed: their principal axes and
/// variances, how much near neighbours share each block of axes, and the factor format. One
/// fit gives the codec at any rate ([`PcaFit::codec`]) and, cheaply, the size of its codes
/// and parameters at any rate ([`PcaFit::sizes`]), which is how a byte budget picks the rate.
pub(crate) struct PcaFit {
    dim: usize,
    seed: u64,
    /// Eigenvectors of the residual covariance. Layout: (dim, dim), row-major, row `a` is
    /// axis `a`.
    eigenvectors: Vec<f64>,
    /// Axis indices into `eigenvectors`, by falling variance. Layout: (dim,).
    axes: Vec<usize>,
    model: ErrorModel,
    /// The training residuals' spread, which with the code's error sets the factors' width.
    spread: ResidualSpread,
}

impl PcaFit {
    /// Fit to the residuals of `points` (m, dim) against their `anchors` (num_anchors, dim)
    /// under `assignment` (m,).
    pub(crate) fn new(
        dim: usize,
        seed: u64,
        points: &[f32],
        anchors: &[f32],
        assignment: &[u32],
    ) -> Result<Self> {
        let m = assignment.len();
        if m == 0 {
            return Err(VlcError::param("input", "pcaq needs training vectors"));
        }
        // Residual covariance from evenly spaced rows: transposed residuals (dim, rows).
        let stride = m.div_ceil(COVARIANCE_ROWS);
        let rows: Vec<usize> = (0..m).step_by(stride).collect();
        let mut transposed = vec![0f32; dim * rows.len()];
        for (j, &i) in rows.iter().enumerate() {
            let a = assignment[i] as usize;
            for d in 0..dim {
                transposed[d * rows.len() + j] = points[i * dim + d] - anchors[a * dim + d];
            }
        }
        let mut covariance = vec![0f32; dim * dim];
        gemm_nt(
            &transposed,
            dim,
            &transposed,
            dim,
            rows.len(),
            &mut covariance,
        );
        let cov: Vec<f64> = covariance
            .iter()
            .map(|&c| c as f64 / rows.len() as f64)
            .collect();
        let (eigenvalues, eigenvectors) = symmetric_eigen(&cov, dim).ok_or_else(|| {
            VlcError::param(
                "input",
                "the eigendecomposition of the residuals' covariance did not converge",
            )
        })?;
        let mut axes: Vec<usize> = (0..dim).collect();
        axes.sort_by(|&a, &b| eigenvalues[b].total_cmp(&eigenvalues[a]).then(a.cmp(&b)));
        let variances: Vec<f64> = axes.iter().map(|&a| eigenvalues[a].max(0.0)).collect();
        // The principal axes as rows, in allocation order. Layout: (dim, dim), row-major.
        let basis: Vec<f32> = axes
            .iter()
            .flat_map(|&a| &eigenvectors[a * dim..(a + 1) * dim])
            .map(|&v| v as f32)
            .collect();
        let coherence = neighbour_coherence(points, anchors, assignment, dim, &basis);
        let spread = ResidualSpread::measure(points, anchors, assignment, dim);
        Ok(PcaFit {
            dim,
            seed,
            eigenvectors,
            axes,
            model: ErrorModel::new(&variances, &coherence),
            spread,
        })
    }

    /// Bytes of bit planes per code at `bits` per dimension on average.
    fn plane_bytes(&self, bits: f32) -> usize {
        ((bits as f64 * self.dim as f64 / 8.0).round() as usize).max(1)
    }

    /// Bits of each rotated dimension (layout: (dim,)) at `bits` per dimension on average,
    /// and the factor formats of the first stage and the full code, their ranges not yet
    /// fitted. Compact factors take 8 or 16 bits each by the modelled error of the stage they
    /// belong to ([`ResidualSpread::factor_bits`]); the full code's width is settled first
    /// (with 8 bits, unless the code it allocates then needs 16), as its bytes enter the
    /// allocation.
    fn layout(&self, bits: f32) -> (Vec<u8>, FactorFormat, FactorFormat) {
        let allocate = |full_factor_bytes: usize| -> Vec<u8> {
            let widths = self.model.widths(self.plane_bytes(bits), full_factor_bytes);
            (0..self.dim).map(|d| widths[d / 8]).collect()
        };
        if !self.spread.compact {
            return (allocate(8), FactorFormat::F32, FactorFormat::F32);
        }
        let width = |dim_bits: &[u8]| {
            self.spread
                .factor_bits(self.model.relative_error(dim_bits), self.dim)
        };
        let mut dim_bits = allocate(2);
        let mut full = width(&dim_bits);
        if full == 16 {
            dim_bits = allocate(4);
            full = width(&dim_bits);
        }
        // The first stage: one bit on every active dimension, two on a prefix.
        let active = dim_bits.iter().filter(|&&b| b > 0).count();
        let planes = stage1_planes(&dim_bits[..active]);
        let stage1: Vec<u8> = (0..self.dim)
            .map(|d| dim_bits[d].min(1 + stage1_covered(&planes, d) as u8))
            .collect();
        let first = width(&stage1);
        (
            dim_bits,
            FactorFormat::unfitted(first),
            FactorFormat::unfitted(full),
        )
    }

    /// `(code_size, parameter bytes)` of the codec at `bits` per dimension on average, as
    /// [`codec`](Self::codec) would make it, without building its rotation.
    pub(crate) fn sizes(&self, bits: f32) -> (usize, usize) {
        let (dim_bits, factors, full_factors) = self.layout(bits);
        let active = dim_bits.iter().filter(|&&b| b > 0).count();
        let stored_rotation = StoredRotation::Int8 {
            scales: vec![0.0; active],
            levels: vec![0; active * self.dim],
        };
        let codec = PcaRaBitQ::from_parts(
            self.dim,
            bits,
            dim_bits,
            Vec::new(),
            stored_rotation,
            factors,
            full_factors,
        );
        let mut params = Vec::new();
        codec.write_params(&mut params);
        (codec.code_size, params.len())
    }

    /// The codec at `bits` per dimension on average (more than 0, at most [`MAX_AVERAGE_BITS`]),
    /// its 8- or 16-bit factor ranges (if any) fitted to the training sample `points` (m, dim) under
    /// `assignment` (m,) against `anchors` (num_anchors, dim), the one [`new`](Self::new) saw.
    pub(crate) fn codec(
        &self,
        bits: f32,
        points: &[f32],
        anchors: &[f32],
        assignment: &[u32],
    ) -> Result<PcaRaBitQ> {
        check_bits(bits)?;
        let (dim, axes) = (self.dim, &self.axes);
        let (dim_bits, factors, full_factors) = self.layout(bits);
        let active = dim_bits.iter().filter(|&&b| b > 0).count();
        // Basis: the principal axes, mixed by a random rotation within each run of equal width;
        // axes without bits are not stored.
        let mut rotation = vec![0f32; active * dim];
        let mut start = 0;
        while start < active {
            let end = start
                + dim_bits[start..]
                    .iter()
                    .take_while(|&&b| b == dim_bits[start])
                    .count();
            let n = end - start;
            let mix = random_orthogonal(n, self.seed ^ (start as u64).wrapping_mul(0x9e37_79b9));
            for a in 0..n {
                let row = &mut rotation[(start + a) * dim..(start + a + 1) * dim];
                for b in 0..n {
                    let weight = mix[a * n + b] as f64;
                    let axis = axes[start + b];
                    for (d, r) in row.iter_mut().enumerate() {
                        *r += (weight * self.eigenvectors[axis * dim + d]) as f32;
                    }
                }
            }
            start = end;
        }
        let (stored_rotation, rotation) = StoredRotation::int8(&rotation, dim)?;
        let (factors, full_factors) = if factors == FactorFormat::F32 {
            (factors, full_factors)
        } else {
            let wide = PcaRaBitQ::from_parts(
                dim,
                bits,
                dim_bits.clone(),
                rotation.clone(),
                stored_rotation.clone(),
                FactorFormat::F32,
                FactorFormat::F32,
            );
            let full = (!wide.single_stage()).then(|| wide.full_factors_offset());
            fit_formats(
                &wide,
                (wide.stage1_bytes(), full),
                (factors, full_factors),
                points,
                anchors,
                assignment,
            )
        };
        Ok(PcaRaBitQ::from_parts(
            dim,
            bits,
            dim_bits,
            rotation,
            stored_rotation,
            factors,
            full_factors,
        ))
    }
}

impl PcaRaBitQ {
    /// Fit the basis and bit allocation to the residuals of `points` (m, dim) against their
    /// `anchors` (num_anchors, dim) under `assignment` (m,).
    pub(crate) fn train(
        dim: usize,
        bits: f32,
        seed: u64,
        points: &[f32],
        anchors: &[f32],
        assignment: &[u32],
    ) -> Result<Self> {
        check_bits(bits)?;
        PcaFit::new(dim, seed, points, anchors, assignment)?
            .codec(bits, points, anchors, assignment)
    }

    /// Dimensions with at least one bit (a prefix of the rotated dimensions).
    pub fn active_dims(&self) -> usize {
        self.active
    }

    /// `√active`, the estimator's normalising constant (`√D` of [`super::rabitq`]).
    fn root(&self) -> f32 {
        (self.active as f32).sqrt()
    }

    /// Whether every dimension has at most one bit: the first stage is then the whole code,
    /// which has no second set of factors.
    fn single_stage(&self) -> bool {
        self.plane_dims.is_empty() && self.stage1_planes.is_empty()
    }

    /// `(f1, f2)` of the finest grid `code` holds: the full code's (its last 8 bytes), or the
    /// first stage's for a single-stage code.
    #[inline]
    fn finest_factors(&self, code: &[u8]) -> (f32, f32) {
        if self.single_stage() {
            self.factors.read(&code[self.stage1_bytes()..])
        } else {
            self.full_factors.read(&code[self.full_factors_offset()..])
        }
    }

    /// Offset of the full code's factors (the code's last bytes) in a two-stage code.
    fn full_factors_offset(&self) -> usize {
        self.code_size - self.full_factors.bytes()
    }

    fn from_parts(
        dim: usize,
        bits: f32,
        dim_bits: Vec<u8>,
        rotation: Vec<f32>,
        stored_rotation: StoredRotation,
        factors: FactorFormat,
        full_factors: FactorFormat,
    ) -> Self {
        let active = dim_bits.iter().filter(|&&b| b > 0).count();
        let stage1_planes = stage1_planes(&dim_bits[..active]);
        let plane_dims = plane_prefixes(&dim_bits[..active], &stage1_planes);
        let full_factor_bytes = if plane_dims.is_empty() && stage1_planes.is_empty() {
            0
        } else {
            full_factors.bytes()
        };
        let stage1_bytes =
            active.div_ceil(8) + stage1_planes.iter().map(|n| n.div_ceil(8)).sum::<usize>();
        let code_size = stage1_bytes
            + factors.bytes()
            + plane_dims.iter().map(|n| n.div_ceil(8)).sum::<usize>()
            + full_factor_bytes;
        PcaRaBitQ {
            dim,
            active,
            bits,
            dim_bits,
            stage1_planes,
            plane_dims,
            rotation,
            stored_rotation,
            factors,
            full_factors,
            code_size,
            stage1_bytes,
        }
    }

    /// Parameters as written by format `version` (the rotation's storage is tagged from
    /// version 5 on, f16 before).
    pub(crate) fn read_params(dim: usize, version: u32, bytes: &[u8]) -> Result<Self> {
        let mut r = ParamReader::new(bytes, "pcaq codec");
        let bits = f32::from_bits(r.u32()?);
        let dim_bits = r.bytes(dim)?.to_vec();
        let active = dim_bits.iter().filter(|&&b| b > 0).count();
        let tag = if version >= 5 {
            r.bytes(1)?[0]
        } else {
            ROTATION_F16
        };
        let (rotation, stored_rotation) = match tag {
            ROTATION_F16 => (
                r.bytes(active * dim * 2)?
                    .chunks_exact(2)
                    .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect::<Vec<f32>>(),
                StoredRotation::F16,
            ),
            ROTATION_INT8 => {
                let scales = r.f32s(active)?;
                let levels: Vec<i8> = r.bytes(active * dim)?.iter().map(|&b| b as i8).collect();
                if scales.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
                    return Err(r.corrupt("rotation row scales must be positive and finite"));
                }
                (
                    StoredRotation::int8_basis(&scales, &levels, dim)?,
                    StoredRotation::Int8 { scales, levels },
                )
            }
            t => return Err(r.corrupt(&format!("unknown rotation storage {t}"))),
        };
        let factors = FactorFormat::read_params(&mut r)?;
        // Absent before format version 4, whose full-code factors were f32.
        let full_factors = FactorFormat::read_params(&mut r)?;
        r.finish()?;
        let corrupt = |what: &str| VlcError::Corrupt {
            what: format!("pcaq codec parameters: {what}"),
            offset: 0,
        };
        if !(bits > 0.0 && bits <= MAX_AVERAGE_BITS as f32) {
            return Err(corrupt(&format!("average bits {bits} out of range")));
        }
        let widest = if version >= WIDE_DIMS_VERSION {
            MAX_DIM_BITS
        } else {
            8
        };
        if active == 0
            || dim_bits.iter().any(|&b| b > widest)
            || dim_bits.windows(2).any(|w| w[0] < w[1])
        {
            return Err(corrupt(&format!(
                "dimension widths are not non-increasing in 0..={widest} (a version {version} \
                 file{})",
                if widest < MAX_DIM_BITS {
                    format!("; widths above {widest} need version {WIDE_DIMS_VERSION}")
                } else {
                    String::new()
                }
            )));
        }
        if rotation.iter().any(|v| !v.is_finite()) {
            return Err(corrupt("non-finite rotation entry"));
        }
        Ok(Self::from_parts(
            dim,
            bits,
            dim_bits,
            rotation,
            stored_rotation,
            factors,
            full_factors,
        ))
    }

    /// How the first stage's factors are stored.
    pub fn factors(&self) -> FactorFormat {
        self.factors
    }

    /// How the full code's factors are stored (two-stage codes).
    pub fn full_factors(&self) -> FactorFormat {
        self.full_factors
    }

    /// Whether the code has two stages (some dimension has more than one bit), each with its
    /// own factors.
    pub fn two_stage(&self) -> bool {
        !self.single_stage()
    }

    /// Bytes of the first stage's bit planes (sign plane, then the planes below it).
    pub fn stage1_bytes(&self) -> usize {
        self.stage1_bytes
    }

    /// The average bits per dimension asked for.
    pub fn bits(&self) -> f32 {
        self.bits
    }

    /// Bits of each rotated dimension. Layout: (dim,).
    pub fn dim_bits(&self) -> &[u8] {
        &self.dim_bits
    }

    /// The basis the codes are taken in: one row per active dimension. Layout: (active, dim),
    /// row-major.
    pub fn rotation(&self) -> &[f32] {
        &self.rotation
    }

    fn nb(&self) -> usize {
        self.active.div_ceil(8)
    }

    /// Dimensions covered by each of the first stage's planes below the sign plane, highest
    /// first (prefixes, non-increasing). Layout: (planes,).
    pub fn stage1_plane_dims(&self) -> &[usize] {
        &self.stage1_planes
    }

    /// Dimensions covered by each of the remaining planes, plane `j` holding bit `j` of their
    /// `u` (prefixes, non-increasing). Layout: (planes,).
    pub fn low_plane_dims(&self) -> &[usize] {
        &self.plane_dims
    }

    /// The rotation as a matrix whose products with a query give `P q` zero-padded to
    /// `padded` (at least [`active_dims`](Self::active_dims)) entries: row `d` holds
    /// coordinate `d` of every basis vector. Layout: (dim, padded), row-major.
    pub fn rotation_matrix(&self, padded: usize) -> Vec<f32> {
        assert!(padded >= self.active, "padded below the active dimensions");
        let mut matrix = vec![0f32; self.dim * padded];
        for (i, row) in self.rotation.chunks_exact(self.dim).enumerate() {
            for (d, &v) in row.iter().enumerate() {
                matrix[d * padded + i] = v;
            }
        }
        matrix
    }

    /// Per dimension, zero-padded to `padded` (at least [`active_dims`](Self::active_dims))
    /// entries: the weight of its top bit (`2^(b_i−1)`; the first stage's plane `j` below it
    /// weighs `2^−(j+1)` of that), the first stage's grid-centre offset
    /// (`(2^shift − 1)/2 − centre`, its coarse grid point being the first-stage bits' weighted
    /// sum plus this) and the full code's (`−centre`). Each layout: (padded,).
    pub fn grid_weights(&self, padded: usize) -> [Vec<f32>; 3] {
        assert!(padded >= self.active, "padded below the active dimensions");
        let (mut top, mut coarse, mut full) =
            (vec![0f32; padded], vec![0f32; padded], vec![0f32; padded]);
        for i in 0..self.active {
            let step = (1u32 << self.shift(i)) as f32;
            top[i] = (1u32 << (self.dim_bits[i] - 1)) as f32;
            coarse[i] = (step - 1.0) * 0.5 - self.centre(i);
            full[i] = -self.centre(i);
        }
        [top, coarse, full]
    }

    /// `(2^b_i − 1)/2`, the centre of dimension `i`'s grid.
    fn centre(&self, i: usize) -> f32 {
        ((1u32 << self.dim_bits[i]) - 1) as f32 * 0.5
    }

    /// Bits of dimension `i` below the first stage's.
    fn shift(&self, i: usize) -> u32 {
        self.dim_bits[i] as u32 - 1 - stage1_covered(&self.stage1_planes, i) as u32
    }

    /// `P q`, zero-padded to ⌈D/8⌉·8 entries, for one query (rows side by side, see
    /// [`crate::simd::matrix_vector`]).
    pub fn rotate_query(&self, query: &[f32], out: &mut Vec<f32>) {
        out.clear();
        out.resize(self.nb() * 8, 0.0);
        crate::simd::matrix_vector(&self.rotation, self.dim, query, &mut out[..self.active]);
    }

    /// `P q` for a block of queries (m, dim) with one GEMM. Layout: (m, active), row-major.
    pub fn rotate_queries(&self, queries: &[f32]) -> Vec<f32> {
        const ROWS: usize = 256;
        let (dim, active) = (self.dim, self.active);
        let mut out = vec![0f32; queries.len() / dim * active];
        out.par_chunks_mut(ROWS * active)
            .zip(queries.par_chunks(ROWS * dim))
            .for_each(|(o, q)| gemm_nt(q, q.len() / dim, &self.rotation, active, dim, o));
        out
    }

    /// First-stage weights for the fast scan from a rotated query `rq`: the sign plane's bit
    /// `i` weighs `2^(b_i−1) rq_i`, the `j`-th plane below it `2^(b_i−2−j) rq_i`; `weights`
    /// gets `stage1_bytes · 8` entries. Returns the offset of
    /// [`crate::fastscan::FastScan::prepare`] for scale 2/√D.
    pub fn stage1_weights(&self, rq: &[f32], weights: &mut Vec<f32>) -> f32 {
        weights.clear();
        weights.resize(self.stage1_bytes() * 8, 0.0);
        let mut at = self.nb() * 8;
        for (j, &n) in self.stage1_planes.iter().enumerate() {
            for i in 0..n {
                let b = self.dim_bits[i] as u32;
                weights[at + i] = (1u32 << (b - 2 - j as u32)) as f32 * rq[i];
            }
            at += n.div_ceil(8) * 8;
        }
        let mut constant = 0f32;
        for i in 0..self.active {
            let b = self.dim_bits[i] as u32;
            weights[i] = (1u32 << (b - 1)) as f32 * rq[i];
            // The coarse grid point is (prefix · 2^shift) + (2^shift − 1)/2 − centre.
            let step = (1u32 << self.shift(i)) as f32;
            constant += ((step - 1.0) * 0.5 - self.centre(i)) * rq[i];
        }
        -2.0 / self.root() * constant
    }

    /// A typical magnitude of each first-stage bit's weight in [`stage1_weights`](Self::stage1_weights)'s
    /// layout, for the fast scan's segments ([`crate::fastscan`]), or `None` where one
    /// quantisation step serves every table. The model: a query's coordinate on axis `i`
    /// spreads over about `2^b_i` grid steps (a width grows by one bit per doubling of the
    /// axis's spread), so bit `j` below the top weighs about `2^(b_i − 1 − j) · 2^b_i`; the
    /// first stage's own grid error on the axis is that spread squared times its cell
    /// (`2^shift` steps) squared over 12; one step for every table rounds each 4-bit group's
    /// entries by up to half of the largest group's sum over 127. Segments are asked for where
    /// that rounding reaches `SEGMENT_NOISE_SHARE` (5%) of the grid error. Layout:
    /// (stage1_bytes · 8,).
    pub fn stage1_hints(&self) -> Option<Vec<f32>> {
        // The first-stage weights of a query whose coordinate on each axis is its spread.
        let spread: Vec<f32> = (0..self.active)
            .map(|i| (1u32 << self.dim_bits[i]) as f32)
            .collect();
        let mut hints = Vec::new();
        self.stage1_weights(&spread, &mut hints);
        let grid: f64 = (0..self.active)
            .map(|i| 4f64.powi(self.dim_bits[i] as i32 + self.shift(i) as i32) / 12.0)
            .sum();
        let groups = hints.len() / 4;
        let largest = hints
            .chunks_exact(4)
            .map(|g| g.iter().map(|&h| h as f64).sum::<f64>())
            .fold(0f64, f64::max);
        let rounding = groups as f64 * (largest / 127.0).powi(2) / 12.0;
        (rounding >= SEGMENT_NOISE_SHARE * grid).then_some(hints)
    }

    /// The full code's weights from a rotated query `rq`: `2 + E` vectors of 8·⌈active/8⌉,
    /// `E` the first stage's planes below the sign (sign plane `2^(b_i−1) s rq_i`, the `j`-th
    /// first-stage plane below it `2^(b_i−2−j) s rq_i` on its prefix, remaining planes
    /// `s rq_i`, with `s = 2/√active`), and the grid-centre term in `constant`.
    pub fn prepare_rotated(&self, rq: &[f32], state: &mut QueryState) {
        let scale = 2.0 / self.root();
        let len = self.nb() * 8;
        let extra = self.stage1_planes.len();
        state.table.clear();
        state.table.resize((2 + extra) * len, 0.0);
        let (sign, rest) = state.table.split_at_mut(len);
        let (stage1, low) = rest.split_at_mut(extra * len);
        for i in 0..self.active {
            let b = self.dim_bits[i] as u32;
            let v = scale * rq[i];
            sign[i] = (1u32 << (b - 1)) as f32 * v;
            low[i] = v;
        }
        for (j, (plane, &n)) in stage1
            .chunks_exact_mut(len)
            .zip(&self.stage1_planes)
            .enumerate()
        {
            for i in 0..n {
                let b = self.dim_bits[i] as u32;
                plane[i] = (1u32 << (b - 2 - j as u32)) as f32 * scale * rq[i];
            }
        }
        state.constant = -scale
            * (0..self.active)
                .map(|i| self.centre(i) * rq[i])
                .sum::<f32>();
        // Bounds of each term in `terms`' order (plane j's weights are `low` over its prefix
        // of dimensions; prefixes shrink as j grows, so one pass from the top plane down
        // extends a running sum).
        let planes = self.plane_dims.len();
        let mut bounds = [[0f32; 2]; 2 + MAX_DIM_BITS as usize];
        // An empty term stands for the first stage's planes where it has none (see `terms`).
        let extra_terms = extra.max(1);
        bounds[0] = term_bounds(&sign[..self.active]);
        for (j, (plane, &n)) in stage1
            .chunks_exact(len)
            .zip(&self.stage1_planes)
            .enumerate()
        {
            bounds[1 + j] = term_bounds(&plane[..n]);
        }
        let (mut covered, mut least, mut greatest) = (0, 0f32, 0f32);
        for (j, &n) in self.plane_dims.iter().enumerate().rev() {
            let [l, g] = term_bounds(&low[covered..n]);
            (least, greatest, covered) = (least + l, greatest + g, n);
            let scale = (1u32 << j) as f32;
            bounds[extra_terms + planes - j] = [scale * least, scale * greatest];
        }
        fill_remaining(&bounds[..1 + extra_terms + planes], &mut state.remaining);
    }

    /// The bit-plane terms of `code`'s estimate against the weights `table` of
    /// [`prepare_rotated`](Self::prepare_rotated), most significant first: the sign plane, the
    /// first stage's planes below it, then the remaining planes from the highest down.
    /// Returns how many of `terms` it filled.
    #[inline(always)]
    fn terms<'a>(&self, table: &'a [f32], code: &'a [u8], terms: &mut [BitTerm<'a>]) -> usize {
        let nb = self.nb();
        let weights = nb * 8;
        let extra = self.stage1_planes.len();
        let (sign, rest) = table.split_at(weights);
        let (stage1, low) = rest.split_at(extra * weights);
        terms[0] = BitTerm {
            weights: sign,
            bits: &code[..nb],
            scale: 1.0,
        };
        // Without planes below the sign, an empty term stands in for them, so that the
        // terms after the sign start at 2 as the early stop of `planes_estimate` expects.
        if extra == 0 {
            terms[1] = BitTerm {
                weights: sign,
                bits: &[],
                scale: 1.0,
            };
        }
        let extra_terms = extra.max(1);
        let mut at = nb;
        for (j, &n) in self.stage1_planes.iter().enumerate() {
            let len = n.div_ceil(8);
            terms[1 + j] = BitTerm {
                weights: &stage1[j * weights..(j + 1) * weights],
                bits: &code[at..at + len],
                scale: 1.0,
            };
            at += len;
        }
        let planes = self.plane_dims.len();
        at += self.factors.bytes();
        for (j, &n) in self.plane_dims.iter().enumerate() {
            let len = n.div_ceil(8);
            terms[extra_terms + planes - j] = BitTerm {
                weights: &low[..weights],
                bits: &code[at..at + len],
                scale: (1u32 << j) as f32,
            };
            at += len;
        }
        1 + extra_terms + planes
    }

    /// Encode one rotated residual `rr` (active,) against its rotated anchor `pc` (active,);
    /// `outside` is the squared norm of the residual outside the active dimensions.
    fn encode_one(
        &self,
        rr: &[f32],
        pc: &[f32],
        outside: f32,
        scratch: &mut EncodeScratch,
        code: &mut [u8],
    ) {
        let top = self.level_cap(0);
        choose_levels(rr, |i| self.level_cap(i), top, &mut scratch.levels);
        self.pack(
            rr,
            pc,
            outside,
            &scratch.levels.levels,
            &mut scratch.units,
            code,
        );
    }

    /// The residuals of `assignment.len()` rows of `points` (rows, dim) from their anchors
    /// (`anchors`: (num_anchors, dim)) in the coded basis, into `rotated` (rows, active),
    /// row-major, and each residual's squared norm outside the coded dimensions into
    /// `outside` (rows,) (zeros when every dimension is coded).
    fn rotate_residuals(
        &self,
        points: &[f32],
        anchors: &[f32],
        assignment: &[u32],
        rotated: &mut [f32],
        outside: &mut [f32],
    ) {
        let (dim, active, rows) = (self.dim, self.active, assignment.len());
        let mut residuals = vec![0f32; rows * dim];
        for ((res, x), &a) in residuals
            .chunks_exact_mut(dim)
            .zip(points.chunks_exact(dim))
            .zip(assignment)
        {
            let c = &anchors[a as usize * dim..(a as usize + 1) * dim];
            for ((o, x), c) in res.iter_mut().zip(x).zip(c) {
                *o = x - c;
            }
        }
        gemm_nt(&residuals, rows, &self.rotation, active, dim, rotated);
        for ((o, res), rr) in outside
            .iter_mut()
            .zip(residuals.chunks_exact(dim))
            .zip(rotated.chunks_exact(active))
        {
            // The residual's energy outside the coded dimensions (none when all are).
            *o = if active < dim {
                (dot(res, res) - dot(rr, rr)).max(0.0)
            } else {
                0.0
            };
        }
    }

    /// The largest magnitude level of coded dimension `i` (`dim_bits` are non-increasing, so
    /// dimension 0's is the largest).
    fn level_cap(&self, i: usize) -> u32 {
        (1u32 << (self.dim_bits[i] - 1)) - 1
    }

    /// Write the code of the rotated residual `rr` (active,) with magnitude `levels` (active,)
    /// from [`choose_levels`]: its bit planes and factors (see [`Self::encode_one`]).
    fn pack(
        &self,
        rr: &[f32],
        pc: &[f32],
        outside: f32,
        levels: &[u16],
        units: &mut Vec<u32>,
        code: &mut [u8],
    ) {
        let (active, nb) = (self.active, self.nb());
        code.fill(0);
        units.clear();
        units.extend((0..active).map(|i| {
            let half = 1u32 << (self.dim_bits[i] - 1);
            let x = levels[i] as u32;
            if rr[i] > 0.0 {
                half + x
            } else {
                half - 1 - x
            }
        }));
        let units = &units[..];
        let mut at = 0;
        for (i, &u) in units.iter().enumerate() {
            let b = self.dim_bits[i] as u32;
            code[i / 8] |= ((u >> (b - 1) & 1) as u8) << (i % 8);
        }
        at += nb;
        for (j, &n) in self.stage1_planes.iter().enumerate() {
            for (i, &u) in units[..n].iter().enumerate() {
                let b = self.dim_bits[i] as u32;
                code[at + i / 8] |= ((u >> (b - 2 - j as u32) & 1) as u8) << (i % 8);
            }
            at += n.div_ceil(8);
        }
        let coarse = |i: usize| {
            let shift = self.shift(i);
            let step = (1u32 << shift) as f32;
            (units[i] >> shift) as f32 * step + (step - 1.0) * 0.5 - self.centre(i)
        };
        let (f1, f2) = grid_factors(rr, pc, outside, coarse, self.factors);
        self.factors.write(&mut code[at..], f1, f2);
        at += self.factors.bytes();
        if self.single_stage() {
            return;
        }
        for (j, &n) in self.plane_dims.iter().enumerate() {
            for (i, &u) in units[..n].iter().enumerate() {
                code[at + i / 8] |= ((u >> j & 1) as u8) << (i % 8);
            }
            at += n.div_ceil(8);
        }
        let full_grid = |i: usize| units[i] as f32 - self.centre(i);
        let (f1, f2) = grid_factors(rr, pc, outside, full_grid, self.full_factors);
        self.full_factors.write(&mut code[at..], f1, f2);
    }

    /// The offset-binary value `u_i` of every dimension of `code`, into `out` (dim,).
    fn units(&self, code: &[u8], out: &mut [u32]) {
        let nb = self.nb();
        for (i, o) in out.iter_mut().enumerate() {
            let b = self.dim_bits[i] as u32;
            *o = ((code[i / 8] >> (i % 8) & 1) as u32) << (b - 1);
        }
        let mut at = nb;
        for (j, &n) in self.stage1_planes.iter().enumerate() {
            for (i, o) in out[..n].iter_mut().enumerate() {
                let b = self.dim_bits[i] as u32;
                *o |= ((code[at + i / 8] >> (i % 8) & 1) as u32) << (b - 2 - j as u32);
            }
            at += n.div_ceil(8);
        }
        at += self.factors.bytes();
        for (j, &n) in self.plane_dims.iter().enumerate() {
            for (i, o) in out[..n].iter_mut().enumerate() {
                *o |= ((code[at + i / 8] >> (i % 8) & 1) as u32) << j;
            }
            at += n.div_ceil(8);
        }
    }
}

impl ResidualCodec for PcaRaBitQ {
    fn kind(&self) -> CodecKind {
        CodecKind::PcaRaBitQ
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn code_size(&self) -> usize {
        self.code_size
    }

    fn prepare_anchors(&self, anchors: &[f32]) -> PreparedAnchors {
        let (dim, active) = (self.dim, self.active);
        let mut rotated = vec![0f32; anchors.len() / dim * active];
        // In blocks of anchors across the threads (one GEMM is single-threaded).
        const ANCHORS_PER_TASK: usize = 64;
        rotated
            .par_chunks_mut(ANCHORS_PER_TASK * active)
            .zip(anchors.par_chunks(ANCHORS_PER_TASK * dim))
            .for_each(|(out, block)| {
                gemm_nt(block, block.len() / dim, &self.rotation, active, dim, out)
            });
        PreparedAnchors { rotated }
    }

    fn encode_prepared(
        &self,
        prepared: &PreparedAnchors,
        points: &[f32],
        anchors: &[f32],
        assignment: &[u32],
        out: &mut [u8],
    ) {
        let (active, cs) = (self.active, self.code_size());
        let rotated_anchors = &prepared.rotated;
        debug_assert_eq!(rotated_anchors.len(), anchors.len() / self.dim * active);
        out.par_chunks_mut(ENCODE_BLOCK * cs)
            .enumerate()
            .for_each(|(b, out)| {
                let start = b * ENCODE_BLOCK;
                let rows = out.len() / cs;
                let mut rotated = vec![0f32; rows * active];
                let mut outside = vec![0f32; rows];
                self.rotate_residuals(
                    &points[start * self.dim..],
                    anchors,
                    &assignment[start..start + rows],
                    &mut rotated,
                    &mut outside,
                );
                let mut scratch = EncodeScratch::default();
                for (r, code) in out.chunks_exact_mut(cs).enumerate() {
                    let a = assignment[start + r] as usize;
                    self.encode_one(
                        &rotated[r * active..(r + 1) * active],
                        &rotated_anchors[a * active..(a + 1) * active],
                        outside[r],
                        &mut scratch,
                        code,
                    );
                }
            });
    }

    fn encode_on(
        &self,
        backend: &dyn Backend,
        prepared: &PreparedAnchors,
        points: &[f32],
        anchors: &[f32],
        assignment: &[u32],
        out: &mut [u8],
    ) -> Result<()> {
        let (active, cs) = (self.active, self.code_size());
        let caps: Vec<u32> = (0..active).map(|i| self.level_cap(i)).collect();
        let rotated_anchors = &prepared.rotated;
        let encoded = encode_through_backend(
            backend,
            &caps,
            cs,
            out,
            |first, rotated, outside| {
                rotated
                    .par_chunks_mut(ENCODE_BLOCK * active)
                    .zip(outside.par_chunks_mut(ENCODE_BLOCK))
                    .enumerate()
                    .for_each(|(b, (rotated, outside))| {
                        let start = first + b * ENCODE_BLOCK;
                        self.rotate_residuals(
                            &points[start * self.dim..],
                            anchors,
                            &assignment[start..start + outside.len()],
                            rotated,
                            outside,
                        );
                    });
            },
            |row, rr, outside, levels, units, code| {
                let a = assignment[row] as usize;
                self.pack(
                    rr,
                    &rotated_anchors[a * active..(a + 1) * active],
                    outside,
                    levels,
                    units,
                    code,
                );
            },
        )?;
        if !encoded {
            self.encode_prepared(prepared, points, anchors, assignment, out);
        }
        Ok(())
    }

    /// The reconstruction consistent with the estimator: `(−f2/√D) Pᵀ w`.
    fn decode(&self, code: &[u8], _anchor_id: u32, out: &mut [f32]) {
        let mut units = vec![0u32; self.active];
        self.units(code, &mut units);
        let scale = -self.finest_factors(code).1 / self.root();
        out.fill(0.0);
        for (i, row) in self.rotation.chunks_exact(self.dim).enumerate() {
            let w = scale * (units[i] as f32 - self.centre(i));
            for (o, p) in out.iter_mut().zip(row) {
                *o += w * p;
            }
        }
    }

    /// `table`: three weight vectors, see [`PcaRaBitQ::prepare_rotated`].
    fn prepare_query(&self, state: &mut QueryState) {
        let mut rq = Vec::new();
        self.rotate_query(&state.query, &mut rq);
        self.prepare_rotated(&rq, state);
    }

    /// The estimate of the full code.
    fn scan(
        &self,
        state: &mut QueryState,
        _anchor_id: u32,
        query_anchor_dist: f32,
        codes: &[u8],
        out: &mut [f32],
    ) {
        let mut terms = [BitTerm::EMPTY; 2 + MAX_DIM_BITS as usize];
        for (o, code) in out.iter_mut().zip(codes.chunks_exact(self.code_size)) {
            let n = self.terms(&state.table, code, &mut terms);
            *o = planes_full(
                &terms[..n],
                state.constant,
                query_anchor_dist,
                self.finest_factors(code),
            );
        }
    }

    fn estimate_below(
        &self,
        state: &mut QueryState,
        _anchor_id: u32,
        query_anchor_dist: f32,
        code: &[u8],
        limit: f32,
        guess: f32,
    ) -> Option<f32> {
        let mut terms = [BitTerm::EMPTY; 2 + MAX_DIM_BITS as usize];
        let n = self.terms(&state.table, code, &mut terms);
        planes_estimate(
            &terms[..n],
            &state.remaining,
            state.constant,
            query_anchor_dist,
            self.finest_factors(code),
            limit,
            guess,
        )
    }

    fn write_params(&self, out: &mut Vec<u8>) {
        out.extend(self.bits.to_bits().to_le_bytes());
        out.extend_from_slice(&self.dim_bits);
        match &self.stored_rotation {
            StoredRotation::F16 => {
                out.push(ROTATION_F16);
                out.extend(
                    self.rotation
                        .iter()
                        .flat_map(|&v| half::f16::from_f32(v).to_le_bytes()),
                );
            }
            StoredRotation::Int8 { scales, levels } => {
                out.push(ROTATION_INT8);
                super::put_f32s(out, scales);
                out.extend(levels.iter().map(|&l| l as u8));
            }
        }
        self.factors.write_params(out);
        self.full_factors.write_params(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_follows_variance_and_spends_the_budget() {
        // 32 axes, variance falling by 4x per block of 8, shared by neighbours: each block
        // deserves one bit fewer than the one before.
        let variances: Vec<f64> = (0..32i32).map(|d| 4f64.powi(-(d / 8))).collect();
        let model = ErrorModel::new(&variances, &[1.0; 4]);
        let widths = model.fill(10, MAX_DIM_BITS);
        assert_eq!(widths, vec![4, 3, 2, 1]);
        // Flat spectrum: uniform widths.
        let flat = ErrorModel::new(&[1.0; 24], &[0.5; 3]).fill(9, MAX_DIM_BITS);
        assert_eq!(flat, vec![3, 3, 3]);
        // The cap holds, and the budget left over goes to the next block.
        let capped = ErrorModel::new(&[1e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1.0], &[0.0; 2])
            .fill(MAX_DIM_BITS as usize + 2, MAX_DIM_BITS);
        assert_eq!(capped, vec![MAX_DIM_BITS, 2]);
        // Single-bit widths fill leading blocks only.
        assert_eq!(model.fill(3, 1), vec![1, 1, 1, 0]);
        // Where the weakest block is independent noise, the strongest gets its bit instead.
        let noisy_tail = ErrorModel::new(&variances, &[1.0, 1.0, 1.0, 0.0]);
        assert_eq!(noisy_tail.fill(10, MAX_DIM_BITS), vec![5, 3, 2, 0]);
    }

    #[test]
    fn coherent_axes_get_their_first_bit_before_a_third_elsewhere() {
        // A strong block and one of 0.4 times its variance, two bytes: independent noise in
        // the weaker block is worth less than a second bit on the strong one; structure that
        // neighbours share is worth more.
        let variances: Vec<f64> = (0..16).map(|d| if d < 8 { 1.0 } else { 0.4 }).collect();
        assert_eq!(
            ErrorModel::new(&variances, &[0.0, 0.0]).fill(2, 8),
            vec![2, 0]
        );
        assert_eq!(
            ErrorModel::new(&variances, &[1.0, 1.0]).fill(2, 8),
            vec![1, 1]
        );
    }

    #[test]
    fn widths_stay_non_increasing_under_uneven_coherence() {
        let mut rng = crate::rng::Rng::new(5);
        for case in 0..200 {
            let blocks = 1 + case % 13;
            let mut variances: Vec<f64> = (0..blocks * 8).map(|_| rng.next_f64()).collect();
            variances.sort_by(|a, b| b.total_cmp(a));
            let coherence: Vec<f64> = (0..blocks).map(|_| rng.next_f64()).collect();
            let model = ErrorModel::new(&variances, &coherence);
            let bytes = rng.below(blocks * 9 + 1);
            let widths = model.fill(bytes, MAX_DIM_BITS);
            assert!(widths.windows(2).all(|w| w[0] >= w[1]), "{widths:?}");
            let spent: usize = widths.iter().map(|&w| w as usize).sum();
            assert!(spent <= bytes, "{widths:?} for {bytes}");
            // The budget is spent unless every block is full.
            assert!(spent == bytes || widths.iter().all(|&w| w == MAX_DIM_BITS));
        }
    }

    #[test]
    fn a_second_stage_is_chosen_only_where_it_pays_for_its_factors() {
        // Variance spread evenly over 48 coherent blocks, 8 bytes: one bit on 12 blocks (the
        // 4 bytes of full-code factors spent on bits) beats two bits on 4.
        let flat = ErrorModel::new(&vec![1.0; 384], &[0.6; 48]);
        let widths = flat.widths(8, 4);
        assert_eq!(widths.iter().map(|&w| w as usize).sum::<usize>(), 12);
        assert!(widths.iter().all(|&w| w <= 1));
        // Variance in 4 blocks of 48 (a low-rank residual), 20 bytes: wide codes on those.
        let variances: Vec<f64> = (0..384).map(|d| if d < 32 { 1.0 } else { 1e-4 }).collect();
        let low_rank = ErrorModel::new(&variances, &[0.0; 48]);
        let widths = low_rank.widths(20, 4);
        assert!(widths[..4].iter().all(|&w| w >= 4), "{widths:?}");
        assert_eq!(widths.iter().map(|&w| w as usize).sum::<usize>(), 20);
        // The same where the strong blocks are coherent and the rest is independent noise.
        let coherence: Vec<f64> = (0..48).map(|b| if b < 4 { 0.3 } else { 0.0 }).collect();
        let widths = ErrorModel::new(&variances, &coherence).widths(20, 4);
        assert!(widths[..4].iter().all(|&w| w >= 4), "{widths:?}");
    }

    /// The allocation's error table describes the codes [`choose_levels`] makes: the
    /// inner-product estimate's relative error variance `(1 − cos²)/cos²` of Gaussian vectors
    /// at uniform widths, within 10% up to 4 bits (the widths low budgets use) and a factor of
    /// two above.
    #[test]
    fn grid_error_matches_the_codes() {
        let mut rng = crate::rng::Rng::new(1);
        let dim = 384;
        let mut scratch = LevelScratch::default();
        for bits in 1..=MAX_DIM_BITS as u32 {
            let top = (1u32 << (bits - 1)) - 1;
            let mut sum = 0f64;
            let trials = 100;
            for _ in 0..trials {
                let v: Vec<f32> = (0..dim).map(|_| rng.normal() as f32).collect();
                choose_levels(&v, |_| top, top, &mut scratch);
                let (mut wv, mut ww, mut vv) = (0f64, 0f64, 0f64);
                for (&level, &x) in scratch.levels.iter().zip(&v) {
                    let w = level as f64 + 0.5;
                    wv += w * x.abs() as f64;
                    ww += w * w;
                    vv += x as f64 * x as f64;
                }
                let cos_sq = wv * wv / (ww * vv);
                sum += (1.0 - cos_sq) / cos_sq;
            }
            let measured = sum / trials as f64;
            let ratio = GRID_ERROR[bits as usize - 1] / measured;
            let bound = if bits <= 4 { 1.1 } else { 2.0 };
            assert!(
                ratio < bound && ratio > 1.0 / bound,
                "{bits} bits: table {} vs measured {measured}",
                GRID_ERROR[bits as usize - 1]
            );
        }
    }

    #[test]
    fn neighbour_coherence_separates_shared_axes_from_noise() {
        // Pairs of points share a large component on axes 0..8 and have independent small
        // noise on all 16: the first block is coherent, the second is not. Four lists of 300
        // points, so that every member of a list is a candidate.
        let dim = 16;
        let mut rng = crate::rng::Rng::new(9);
        let mut points = Vec::new();
        for _ in 0..600 {
            let shared: Vec<f64> = (0..8).map(|_| 4.0 * rng.normal()).collect();
            for _ in 0..2 {
                for d in 0..dim {
                    let s = shared.get(d).copied().unwrap_or(0.0);
                    points.push((s + 0.3 * rng.normal()) as f32);
                }
            }
        }
        let anchors = vec![0f32; 4 * dim];
        let assignment: Vec<u32> = (0..points.len() / dim)
            .map(|i| (i / 2 % 4) as u32)
            .collect();
        let basis: Vec<f32> = (0..dim * dim)
            .map(|k| f32::from(k / dim == k % dim))
            .collect();
        let coherence = neighbour_coherence(&points, &anchors, &assignment, dim, &basis);
        assert_eq!(coherence.len(), 2);
        assert!(coherence[0] > 0.95, "{coherence:?}");
        assert!(coherence[1] < 0.2, "{coherence:?}");
        // No pairs (one point per list): no coherence.
        let lone = neighbour_coherence(&points[..2 * dim], &[0f32; 32], &[0, 1], dim, &basis);
        assert_eq!(lone, vec![0.0, 0.0]);
    }

    #[test]
    fn stage_one_reads_wide_axes_down_to_an_8_bit_axis_cell() {
        // The second-highest bit of the widest half, then one more plane per bit past 8.
        assert_eq!(stage1_planes(&[11, 11, 9, 9, 4, 4, 3, 3]), vec![4, 4, 2, 2]);
        assert_eq!(
            stage1_planes(&[12, 8, 8, 8, 7, 7, 7, 7]),
            vec![4, 1, 1, 1, 1]
        );
        // At most 8 bits: the second-highest bit only.
        assert_eq!(stage1_planes(&[8, 8, 7, 7, 7, 7, 6, 6]), vec![2]);
        assert_eq!(stage1_planes(&[3; 8]), Vec::<usize>::new());
        // A third plane on the 9-bit axes would leave them fewer bits for the remaining
        // planes than the 8-bit axes after them, which are not a prefix: not taken.
        assert_eq!(stage1_planes(&[9, 9, 8, 8, 8, 7, 6, 5]), vec![2]);
        // Whatever the widths, the bits left to the remaining planes are non-increasing.
        let mut rng = crate::rng::Rng::new(5);
        for _ in 0..2000 {
            let n = 1 + rng.below(40);
            let mut widths: Vec<u8> = (0..n)
                .map(|_| rng.below(MAX_DIM_BITS as usize + 1) as u8)
                .collect();
            widths.sort_unstable_by(|a, b| b.cmp(a));
            let active = widths.iter().filter(|&&b| b > 0).count();
            let planes = stage1_planes(&widths[..active]);
            assert!(
                planes.windows(2).all(|w| w[0] >= w[1]),
                "{widths:?}: {planes:?}"
            );
            let rest: Vec<usize> = (0..active)
                .map(|i| widths[i] as usize - 1 - stage1_covered(&planes, i))
                .collect();
            assert!(
                rest.windows(2).all(|w| w[0] >= w[1]),
                "{widths:?}: {planes:?}"
            );
        }
    }

    #[test]
    fn stage_one_takes_the_widest_prefix_up_to_half() {
        assert_eq!(stage1_prefix(&[5, 5, 4, 4, 3, 3, 2, 1]), 4);
        assert_eq!(stage1_prefix(&[3; 8]), 0);
        assert_eq!(stage1_prefix(&[4, 3, 3, 3, 2, 2, 2, 2]), 4);
        assert_eq!(stage1_prefix(&[4, 4, 4, 4, 4, 3, 3, 3]), 0);
        // Remaining planes: widths minus the first stage's bits, still a prefix each.
        let planes = plane_prefixes(&[5, 5, 4, 4, 3, 3, 2, 1], &[4]);
        assert_eq!(planes, vec![7, 6, 2]);
    }

    #[test]
    fn fast_scan_segments_only_where_one_step_would_round_away_narrow_axes() {
        let codec = |runs: &[(usize, u8)]| {
            let dim_bits: Vec<u8> = runs
                .iter()
                .flat_map(|&(n, b)| std::iter::repeat_n(b, n))
                .collect();
            PcaRaBitQ::from_parts(
                dim_bits.len(),
                4.0,
                dim_bits,
                Vec::new(),
                StoredRotation::F16,
                FactorFormat::F32,
                FactorFormat::F32,
            )
        };
        // 11- and 10-bit axes over 7-bit ones (the 500,000 x 384 set's `pcaq7.5`): the top
        // bits of the wide axes would set a step that rounds the 7-bit axes' tables away.
        let wide = codec(&[(16, 11), (48, 10), (304, 7), (16, 6)]);
        let hints = wide.stage1_hints().expect("segments for wide axes");
        assert_eq!(hints.len(), wide.stage1_bytes() * 8);
        assert_eq!(hints[0], 2f32.powi(21));
        assert_eq!(hints[100], 2f32.powi(13));
        // The planes below the sign weigh half as much per plane.
        assert_eq!(hints[384], 2f32.powi(20));
        // Widths of 7 bits down to 2 (the dev set's `pcaq5`) and a one-bit code: one step.
        let narrow = codec(&[(32, 7), (128, 6), (104, 5), (56, 4), (56, 3), (8, 2)]);
        assert_eq!(narrow.stage1_hints(), None);
        assert_eq!(codec(&[(64, 1)]).stage1_hints(), None);
    }
}
