//! `pcaq`: extended RaBitQ codes in a data-shaped basis, with bits spent where the residuals
//! vary.
//!
//! Embedding residuals are far from isotropic: a few principal directions hold much of their
//! variance. A random rotation (the
//! `rabitq*` codecs) spreads that variance evenly and every dimension gets the same bits; this
//! codec instead rotates into the principal axes of the training residuals and allocates the
//! bits by reverse water-filling: each further bit goes to the block of 8 axes whose quantisation
//! error it reduces most (error ∝ variance · 4^−bits), up to `bits · dim` bits in all. Axes with
//! the same bit count then get one random rotation among themselves, so their coordinates are
//! Gaussian-like and of equal variance, as extended RaBitQ's grid assumes.
//!
//! Codes are extended RaBitQ codes with a per-dimension width `b_i` (non-increasing in `i`):
//! an unsigned `u_i ∈ 0..2^b_i` whose grid point is `w_i = u_i − (2^b_i − 1)/2`, all dimensions
//! sharing one scale chosen per vector to maximise the cosine between `w` and the rotated
//! residual (the same estimator and factors as [`super::rabitq`]).
//!
//! Search runs in two stages. The first stage reads the top bit of every dimension and the
//! second-highest bit of the widest dimensions (a prefix of `stage1_dims` axes, at most half),
//! i.e. the code truncated to its coarse grid, with factors of its own: this is what the fast
//! scan scores (a sign-only first stage prunes poorly in this basis, where the variance is
//! uneven). The full code then rescores the candidate pool.
//!
//! Code layout, `nb = ⌈D/8⌉`, dimension `d` at byte `d/8`, bit `d%8` of each plane:
//! - first stage: the sign plane (top bit of `u`, `nb` bytes), the second-highest bit of
//!   dimensions `0..stage1_dims` (`⌈stage1_dims/8⌉` bytes), f1 and f2 of the coarse grid in
//!   the codec's [`FactorFormat`] (two scaled `f16`, or two `f32`);
//! - the remaining bits of `u`, low bit first: plane `j` holds bit `j` of the first
//!   `plane_dims[j]` dimensions (a prefix, as the remaining widths are non-increasing), then
//!   `f32` f1 and f2 of the full code.
//!
//! At `bits ≤ 1` per dimension on average, only the leading `bits · dim` principal axes (whole
//! bytes of them) get one bit each and the others none: those axes form the one run of equal
//! width, the code is their sign plane and one factor pair (a single stage, scanned and
//! rescored like `rabitq1`), the estimator's `√D` becomes `√active`, and the residual energy
//! outside the coded axes enters only the `‖r‖²` term of f1 (its inner product with the query
//! is not estimated).
//!
//! The rotation's rows of the coded axes are stored as an f16 matrix (active · dim · 2 bytes in
//! the file) and used at that precision everywhere, so a loaded index encodes and searches
//! exactly like the built one.

use super::rabitq::{choose_levels, grid_factors, LevelScratch};
use super::{read_f32, CodecKind, FactorFormat, ParamReader, QueryState, ResidualCodec};
use crate::error::{Result, VlcError};
use crate::linalg::{dot, gemm_nt};
use crate::simd::bit_sum;
use rayon::prelude::*;

/// Rows encoded per parallel task.
const ENCODE_BLOCK: usize = 1024;
/// Most training residuals used for the covariance.
const COVARIANCE_ROWS: usize = 16_384;
/// Widest dimension, in bits.
pub const MAX_DIM_BITS: u8 = 8;
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
    /// Dimensions whose second-highest bit belongs to the first stage (a prefix).
    stage1_dims: usize,
    /// Plane `j` of the remaining bits covers dimensions `0..plane_dims[j]`.
    plane_dims: Vec<usize>,
    /// Rows are the basis vectors of the active dimensions, rounded to f16. Layout: (active,
    /// dim), row-major.
    rotation: Vec<f32>,
    /// How the first stage's factors are stored.
    factors: FactorFormat,
    /// Bytes of one code (fixed by the widths; kept so the scan does not recount it).
    code_size: usize,
}

#[derive(Default)]
struct EncodeScratch {
    levels: LevelScratch,
    /// Offset-binary code of each dimension. Layout: (dim,).
    units: Vec<u32>,
}

/// Bits per block of 8 principal axes (the last block may be shorter) by greedy reverse
/// water-filling: `extra_bytes` times, the block whose error `variance · 4^−bits` is largest
/// gains one bit (one byte per code), ties to the lower block, at most [`MAX_DIM_BITS`].
/// `variances` are non-increasing, so the result is too.
fn allocate(variances: &[f64], extra_bytes: usize) -> Vec<u8> {
    let blocks = variances.len().div_ceil(8);
    let mean: Vec<f64> = variances
        .chunks(8)
        .map(|c| c.iter().sum::<f64>() / c.len() as f64)
        .collect();
    let mut bits = vec![1u8; blocks];
    for _ in 0..extra_bytes {
        let mut best: Option<(f64, usize)> = None;
        for b in 0..blocks {
            if bits[b] >= MAX_DIM_BITS {
                continue;
            }
            let gain = mean[b] * 0.25f64.powi(bits[b] as i32);
            if best.is_none_or(|(g, _)| gain > g) {
                best = Some((gain, b));
            }
        }
        match best {
            Some((_, b)) => bits[b] += 1,
            None => break,
        }
    }
    (0..variances.len()).map(|d| bits[d / 8]).collect()
}

/// Widths at `bits ≤ 1` per dimension on average: one bit for the `bits · dim` leading
/// principal axes (rounded to whole bytes, at least 8 axes or all), none for the others.
fn one_bit_prefix(dim: usize, bits: f32) -> Vec<u8> {
    let active = ((bits as f64 * dim as f64 / 8.0).round() as usize * 8).clamp(8.min(dim), dim);
    (0..dim).map(|d| u8::from(d < active)).collect()
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

/// Widths of the remaining planes' prefixes: plane `j` covers the dimensions with more than
/// `j` bits left after the first stage.
fn plane_prefixes(dim_bits: &[u8], stage1_dims: usize) -> Vec<usize> {
    let rest = |i: usize| dim_bits[i] as usize - 1 - usize::from(i < stage1_dims);
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
        if !(bits > 0.0 && bits <= MAX_DIM_BITS as f32) {
            return Err(VlcError::param(
                "bits",
                format!("pcaq needs more than 0 and at most {MAX_DIM_BITS} bits per dimension, got {bits}"),
            ));
        }
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
        let cov = nalgebra::DMatrix::<f64>::from_fn(dim, dim, |i, j| {
            covariance[i * dim + j] as f64 / rows.len() as f64
        });
        let eigen = cov.symmetric_eigen();
        let mut axes: Vec<usize> = (0..dim).collect();
        axes.sort_by(|&a, &b| {
            eigen.eigenvalues[b]
                .total_cmp(&eigen.eigenvalues[a])
                .then(a.cmp(&b))
        });
        let variances: Vec<f64> = axes
            .iter()
            .map(|&a| eigen.eigenvalues[a].max(0.0))
            .collect();
        let dim_bits = if bits > 1.0 {
            let extra_bytes = (((bits - 1.0) as f64) * dim as f64 / 8.0).round() as usize;
            allocate(&variances, extra_bytes)
        } else {
            one_bit_prefix(dim, bits)
        };
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
            let mix = random_orthogonal(n, seed ^ (start as u64).wrapping_mul(0x9e37_79b9));
            for a in 0..n {
                let row = &mut rotation[(start + a) * dim..(start + a + 1) * dim];
                for b in 0..n {
                    let weight = mix[a * n + b] as f64;
                    let axis = axes[start + b];
                    for (d, r) in row.iter_mut().enumerate() {
                        *r += (weight * eigen.eigenvectors[(d, axis)]) as f32;
                    }
                }
            }
            start = end;
        }
        for r in rotation.iter_mut() {
            *r = half::f16::from_f32(*r).to_f32();
        }
        let factors = FactorFormat::fit(points, anchors, assignment, dim);
        Ok(Self::from_parts(dim, bits, dim_bits, rotation, factors))
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
        self.plane_dims.is_empty() && self.stage1_dims == 0
    }

    /// `(f1, f2)` of the finest grid `code` holds: the full code's (its last 8 bytes), or the
    /// first stage's for a single-stage code.
    #[inline]
    fn finest_factors(&self, code: &[u8]) -> (f32, f32) {
        if self.single_stage() {
            self.factors.read(&code[self.stage1_bytes()..])
        } else {
            let at = self.code_size - 8;
            (read_f32(code, at), read_f32(code, at + 4))
        }
    }

    fn from_parts(
        dim: usize,
        bits: f32,
        dim_bits: Vec<u8>,
        rotation: Vec<f32>,
        factors: FactorFormat,
    ) -> Self {
        let active = dim_bits.iter().filter(|&&b| b > 0).count();
        let stage1_dims = stage1_prefix(&dim_bits[..active]);
        let plane_dims = plane_prefixes(&dim_bits[..active], stage1_dims);
        let full_factors = if plane_dims.is_empty() && stage1_dims == 0 {
            0
        } else {
            8
        };
        let code_size = active.div_ceil(8)
            + stage1_dims.div_ceil(8)
            + factors.bytes()
            + plane_dims.iter().map(|n| n.div_ceil(8)).sum::<usize>()
            + full_factors;
        PcaRaBitQ {
            dim,
            active,
            bits,
            dim_bits,
            stage1_dims,
            plane_dims,
            rotation,
            factors,
            code_size,
        }
    }

    pub(crate) fn read_params(dim: usize, bytes: &[u8]) -> Result<Self> {
        let mut r = ParamReader::new(bytes, "pcaq codec");
        let bits = f32::from_bits(r.u32()?);
        let dim_bits = r.bytes(dim)?.to_vec();
        let active = dim_bits.iter().filter(|&&b| b > 0).count();
        let rotation: Vec<f32> = r
            .bytes(active * dim * 2)?
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect();
        let factors = FactorFormat::read_params(&mut r)?;
        r.finish()?;
        let corrupt = |what: &str| VlcError::Corrupt {
            what: format!("pcaq codec parameters: {what}"),
            offset: 0,
        };
        if !(bits > 0.0 && bits <= MAX_DIM_BITS as f32) {
            return Err(corrupt(&format!("average bits {bits} out of range")));
        }
        if active == 0
            || dim_bits.iter().any(|&b| b > MAX_DIM_BITS)
            || dim_bits.windows(2).any(|w| w[0] < w[1])
            || (bits > 1.0 && active < dim)
        {
            return Err(corrupt("dimension widths are not non-increasing in 0..=8"));
        }
        if rotation.iter().any(|v| !v.is_finite()) {
            return Err(corrupt("non-finite rotation entry"));
        }
        Ok(Self::from_parts(dim, bits, dim_bits, rotation, factors))
    }

    /// How the first stage's factors are stored.
    pub fn factors(&self) -> FactorFormat {
        self.factors
    }

    /// Bytes of the first stage's bit planes (sign plane, then the second-bit plane).
    pub fn stage1_bytes(&self) -> usize {
        self.nb() + self.stage1_dims.div_ceil(8)
    }

    /// The average bits per dimension asked for.
    pub fn bits(&self) -> f32 {
        self.bits
    }

    /// Bits of each rotated dimension. Layout: (dim,).
    pub fn dim_bits(&self) -> &[u8] {
        &self.dim_bits
    }

    fn nb(&self) -> usize {
        self.active.div_ceil(8)
    }

    /// `(2^b_i − 1)/2`, the centre of dimension `i`'s grid.
    fn centre(&self, i: usize) -> f32 {
        ((1u32 << self.dim_bits[i]) - 1) as f32 * 0.5
    }

    /// Bits of dimension `i` below the first stage's.
    fn shift(&self, i: usize) -> u32 {
        self.dim_bits[i] as u32 - 1 - u32::from(i < self.stage1_dims)
    }

    /// `P q`, zero-padded to ⌈D/8⌉·8 entries.
    pub fn rotate_query(&self, query: &[f32], out: &mut Vec<f32>) {
        out.clear();
        out.extend(
            self.rotation
                .chunks_exact(self.dim)
                .map(|row| dot(row, query)),
        );
        out.resize(self.nb() * 8, 0.0);
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
    /// `i` weighs `2^(b_i−1) rq_i`, the second-bit plane's `2^(b_i−2) rq_i`; `weights` gets
    /// `stage1_bytes · 8` entries. Returns the offset of [`crate::fastscan::FastScan::prepare`]
    /// for scale 2/√D.
    pub fn stage1_weights(&self, rq: &[f32], weights: &mut Vec<f32>) -> f32 {
        let nb8 = self.nb() * 8;
        weights.clear();
        weights.resize(self.stage1_bytes() * 8, 0.0);
        let mut constant = 0f32;
        for i in 0..self.active {
            let b = self.dim_bits[i] as u32;
            weights[i] = (1u32 << (b - 1)) as f32 * rq[i];
            if i < self.stage1_dims {
                weights[nb8 + i] = (1u32 << (b - 2)) as f32 * rq[i];
            }
            // The coarse grid point is (prefix · 2^shift) + (2^shift − 1)/2 − centre.
            let step = (1u32 << self.shift(i)) as f32;
            constant += ((step - 1.0) * 0.5 - self.centre(i)) * rq[i];
        }
        -2.0 / self.root() * constant
    }

    /// The full code's weights from a rotated query `rq`: three vectors of 8·⌈active/8⌉
    /// (sign plane `2^(b_i−1) s rq_i`, second-bit plane `2^(b_i−2) s rq_i` on the first-stage
    /// prefix, remaining planes `s rq_i`, with `s = 2/√active`), and the grid-centre term in
    /// `constant`.
    pub fn prepare_rotated(&self, rq: &[f32], state: &mut QueryState) {
        let scale = 2.0 / self.root();
        let len = self.nb() * 8;
        state.table.clear();
        state.table.resize(3 * len, 0.0);
        let (sign, rest) = state.table.split_at_mut(len);
        let (second, low) = rest.split_at_mut(len);
        for i in 0..self.active {
            let b = self.dim_bits[i] as u32;
            let v = scale * rq[i];
            sign[i] = (1u32 << (b - 1)) as f32 * v;
            if i < self.stage1_dims {
                second[i] = (1u32 << (b - 2)) as f32 * v;
            }
            low[i] = v;
        }
        state.constant = -scale
            * (0..self.active)
                .map(|i| self.centre(i) * rq[i])
                .sum::<f32>();
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
        let (active, nb) = (self.active, self.nb());
        code.fill(0);
        let top = (1u32 << (self.dim_bits[0] - 1)) - 1;
        choose_levels(
            rr,
            |i| (1u32 << (self.dim_bits[i] - 1)) - 1,
            top,
            &mut scratch.levels,
        );
        let levels = &scratch.levels.levels;
        scratch.units.clear();
        scratch.units.extend((0..active).map(|i| {
            let half = 1u32 << (self.dim_bits[i] - 1);
            let x = levels[i] as u32;
            if rr[i] > 0.0 {
                half + x
            } else {
                half - 1 - x
            }
        }));
        let units = &scratch.units;
        let mut at = 0;
        for (i, &u) in units.iter().enumerate() {
            let b = self.dim_bits[i] as u32;
            code[i / 8] |= ((u >> (b - 1) & 1) as u8) << (i % 8);
            if i < self.stage1_dims {
                code[nb + i / 8] |= ((u >> (b - 2) & 1) as u8) << (i % 8);
            }
        }
        at += self.stage1_bytes();
        let coarse = |i: usize| {
            let shift = self.shift(i);
            let step = (1u32 << shift) as f32;
            (units[i] >> shift) as f32 * step + (step - 1.0) * 0.5 - self.centre(i)
        };
        let (f1, f2) = grid_factors(rr, pc, outside, coarse);
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
        let (f1, f2) = grid_factors(rr, pc, outside, |i| units[i] as f32 - self.centre(i));
        code[at..at + 4].copy_from_slice(&f1.to_le_bytes());
        code[at + 4..at + 8].copy_from_slice(&f2.to_le_bytes());
    }

    /// The offset-binary value `u_i` of every dimension of `code`, into `out` (dim,).
    fn units(&self, code: &[u8], out: &mut [u32]) {
        let nb = self.nb();
        for (i, o) in out.iter_mut().enumerate() {
            let b = self.dim_bits[i] as u32;
            let mut u = ((code[i / 8] >> (i % 8) & 1) as u32) << (b - 1);
            if i < self.stage1_dims {
                u |= ((code[nb + i / 8] >> (i % 8) & 1) as u32) << (b - 2);
            }
            *o = u;
        }
        let mut at = self.stage1_bytes() + self.factors.bytes();
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

    fn encode(&self, points: &[f32], anchors: &[f32], assignment: &[u32], out: &mut [u8]) {
        let (dim, active, cs) = (self.dim, self.active, self.code_size());
        let num_anchors = anchors.len() / dim;
        let mut rotated_anchors = vec![0f32; num_anchors * active];
        gemm_nt(
            anchors,
            num_anchors,
            &self.rotation,
            active,
            dim,
            &mut rotated_anchors,
        );
        out.par_chunks_mut(ENCODE_BLOCK * cs)
            .enumerate()
            .for_each(|(b, out)| {
                let start = b * ENCODE_BLOCK;
                let rows = out.len() / cs;
                let mut residuals = vec![0f32; rows * dim];
                for (r, res) in residuals.chunks_exact_mut(dim).enumerate() {
                    let a = assignment[start + r] as usize;
                    let x = &points[(start + r) * dim..(start + r + 1) * dim];
                    for ((o, x), c) in res.iter_mut().zip(x).zip(&anchors[a * dim..]) {
                        *o = x - c;
                    }
                }
                let mut rotated = vec![0f32; rows * active];
                gemm_nt(&residuals, rows, &self.rotation, active, dim, &mut rotated);
                let mut scratch = EncodeScratch::default();
                for (r, code) in out.chunks_exact_mut(cs).enumerate() {
                    let a = assignment[start + r] as usize;
                    let rr = &rotated[r * active..(r + 1) * active];
                    // The residual's energy outside the coded dimensions (none when all are).
                    let outside = if active < dim {
                        let res = &residuals[r * dim..(r + 1) * dim];
                        (dot(res, res) - dot(rr, rr)).max(0.0)
                    } else {
                        0.0
                    };
                    self.encode_one(
                        rr,
                        &rotated_anchors[a * active..(a + 1) * active],
                        outside,
                        &mut scratch,
                        code,
                    );
                }
            });
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
        let (cs, nb) = (self.code_size(), self.nb());
        let weights = nb * 8;
        let (sign, rest) = state.table.split_at(weights);
        let (second, low) = rest.split_at(weights);
        let s1 = self.stage1_bytes();
        for (o, code) in out.iter_mut().zip(codes.chunks_exact(cs)) {
            let mut ip =
                state.constant + bit_sum(sign, &code[..nb]) + bit_sum(second, &code[nb..s1]);
            let mut at = s1 + self.factors.bytes();
            for (j, &n) in self.plane_dims.iter().enumerate() {
                let len = n.div_ceil(8);
                ip += (1u32 << j) as f32 * bit_sum(low, &code[at..at + len]);
                at += len;
            }
            let (f1, f2) = self.finest_factors(code);
            *o = query_anchor_dist + f1 + f2 * ip;
        }
    }

    fn write_params(&self, out: &mut Vec<u8>) {
        out.extend(self.bits.to_bits().to_le_bytes());
        out.extend_from_slice(&self.dim_bits);
        out.extend(
            self.rotation
                .iter()
                .flat_map(|&v| half::f16::from_f32(v).to_le_bytes()),
        );
        self.factors.write_params(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_follows_variance_and_spends_the_budget() {
        // 32 axes, variance falling by 4x per block of 8: each block deserves one bit fewer.
        let variances: Vec<f64> = (0..32).map(|d| 4f64.powi(-((d / 8) as i32))).collect();
        let bits = allocate(&variances, 6);
        let per_block: Vec<u8> = bits.chunks(8).map(|c| c[0]).collect();
        assert_eq!(per_block, vec![4, 3, 2, 1]);
        assert_eq!(bits.iter().map(|&b| b as usize - 1).sum::<usize>(), 6 * 8);
        // Flat spectrum: uniform widths.
        let flat = allocate(&[1.0; 24], 6);
        assert!(flat.iter().all(|&b| b == 3), "{flat:?}");
        // The cap holds.
        let capped = allocate(&[1e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1.0], 20);
        assert_eq!(capped[0], MAX_DIM_BITS);
    }

    #[test]
    fn stage_one_takes_the_widest_prefix_up_to_half() {
        assert_eq!(stage1_prefix(&[5, 5, 4, 4, 3, 3, 2, 1]), 4);
        assert_eq!(stage1_prefix(&[3; 8]), 0);
        assert_eq!(stage1_prefix(&[4, 3, 3, 3, 2, 2, 2, 2]), 4);
        assert_eq!(stage1_prefix(&[4, 4, 4, 4, 4, 3, 3, 3]), 0);
        // Remaining planes: widths minus the first stage's bits, still a prefix each.
        let planes = plane_prefixes(&[5, 5, 4, 4, 3, 3, 2, 1], 4);
        assert_eq!(planes, vec![7, 6, 2]);
    }
}
