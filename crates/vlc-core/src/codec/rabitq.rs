//! RaBitQ-family residual codes: 1 bit per dimension with per-vector correction factors, and
//! extended codes of 2-8 bits per dimension whose top bit is that same 1-bit code.
//!
//! A random orthogonal rotation `P` ([`FastRotation`], regenerated from the stored seed) spreads
//! the residual `r` over all dimensions. A `b`-bit code stores per dimension an unsigned integer
//! `u_i` in `0..2^b`; its grid point is `w_i = u_i − (2^b − 1)/2`, a half-integer with the sign
//! of `(P r)_i`. With `x̄ = w/‖w‖` and `o = P r/‖r‖`, the estimate
//! `⟨r, y⟩ ≈ ‖r‖ ⟨x̄, P y⟩ / ⟨x̄, o⟩` is unbiased (RaBitQ; extended RaBitQ for `b > 1`).
//! Writing `y = q − c` and storing per vector
//! `f2 = −‖r‖² √D / ⟨w, P r⟩` and `f1 = ‖r‖² + 2‖r‖² ⟨w, P c⟩ / ⟨w, P r⟩` gives
//! `‖q − c − r‖² ≈ ‖q − c‖² + f1 + f2 · (2/√D) ⟨w, P q⟩`, whose query-dependent part comes
//! from one weight vector per query (not per list): bit plane `j` of `u` contributes
//! `2^j Σ_{set bits i} (2/√D)(P q)_i` ([`crate::simd::weighted_bit_sums`]); the fast scan quantises the
//! same weights into nibble lookup tables ([`crate::fastscan`]).
//!
//! For `b = 1` (`w = ±½`) this is the classic 1-bit estimator. For `b > 1`, the grid `x` of
//! magnitudes maximising `⟨x̄, o⟩` is found exactly among the critical scales at which a
//! coordinate's level changes (extended RaBitQ; searched by branch and bound, see
//! `codec::levels`). The top bit of `u` is the sign of `(P r)_i`,
//! so every code starts with a complete 1-bit code and its own factors: search scans that part
//! with the fast-scan kernel and rescores only its candidate pool with the full code.
//!
//! Code layout, `nb = ⌈D/8⌉`, dimension `d` at byte `d/8`, bit `d%8` of each plane:
//! - sign plane (`nb` bytes), then f1, f2 of the 1-bit code in the codec's
//!   [`FactorFormat`] (8 or 16 bits each from format version 6, as fine as the code's error
//!   needs, see [`ResidualSpread::factor_bits`]; two scaled `f16` in versions 2 to 5; two
//!   `f32` in version 1 and for anchors much longer than the residuals);
//! - for `b > 1`: planes of bits `0..b−1` of `u` (`nb` bytes each), then f1, f2 of the full
//!   code in its own [`FactorFormat`] (8 or 16 bits each from format version 6; like the first
//!   stage's in versions 4 and 5; two `f32` before).

use super::factors::{fit_formats, ResidualSpread};
use super::levels::{choose_levels, encode_through_backend, LevelScratch};
use super::pca::GRID_ERROR;
use super::PreparedAnchors;
use super::{
    fill_remaining, planes_estimate, planes_full, term_bounds, CodecKind, FactorFormat,
    ParamReader, QueryState, ResidualCodec,
};
use crate::backend::Backend;
use crate::error::Result;
use crate::rotation::FastRotation;
use crate::simd::BitTerm;
use rayon::prelude::*;

/// Rows encoded per parallel task.
const ENCODE_BLOCK: usize = 1024;

/// Bytes of one vector's code at `dim` dimensions and `bits` bits per dimension (1..=8),
/// with the first stage's factors in `factors` and the full code's in `full_factors`.
pub fn code_size(
    dim: usize,
    bits: u32,
    factors: FactorFormat,
    full_factors: FactorFormat,
) -> usize {
    let nb = dim.div_ceil(8);
    nb + factors.bytes()
        + if bits > 1 {
            (bits as usize - 1) * nb + full_factors.bytes()
        } else {
            0
        }
}

/// Most bits per dimension.
pub const MAX_BITS: u32 = 8;

#[derive(Clone, Debug)]
pub struct RaBitQ {
    dim: usize,
    /// Bits per dimension, 1..=8.
    bits: u32,
    seed: u64,
    rotation: FastRotation,
    /// How the 1-bit stage's factors are stored.
    factors: FactorFormat,
    /// How the full code's factors are stored (`b > 1`): like the 1-bit stage's since format
    /// version 4, `f32` in older files.
    full_factors: FactorFormat,
    code_size: usize,
}

/// Per-thread encoding scratch.
#[derive(Default)]
struct EncodeScratch {
    /// Rotated residual. Layout: (dim,).
    rotated: Vec<f32>,
    levels: LevelScratch,
}

/// `(f1, f2)` of the estimator for grid `w` (given by `grid(i)`), rotated residual `rr` and
/// rotated anchor `pc` (see the module docs), as `format` will store them; f2 is 0 (as stored)
/// when `⟨w, P r⟩ ≤ 0`. `outside` is the squared norm of the residual outside the coded dimensions
/// (0 when every dimension is coded): it adds to `‖r‖²` in f1 and is otherwise not estimated.
///
/// f1's cross term with the anchor, `2‖r‖² ⟨w, P c⟩ / ⟨w, P r⟩ = −(2/√D) f2 ⟨w, P c⟩`, is
/// taken with f2 as stored ([`FactorFormat::stored`]), so the estimate is exactly
/// `‖q − c − r̂‖² − ‖r̂‖² + ‖r‖²` for the residual `r̂ = (−f2/√D) Pᵀ w` the code decodes to,
/// whatever f2's rounding, up to f1's own.
pub(crate) fn grid_factors(
    rr: &[f32],
    pc: &[f32],
    outside: f32,
    grid: impl Fn(usize) -> f32,
    format: FactorFormat,
) -> (f32, f32) {
    let (mut norm_sq, mut w_r, mut w_c) = (0f32, 0f32, 0f32);
    for d in 0..rr.len() {
        let w = grid(d);
        norm_sq += rr[d] * rr[d];
        w_r += w * rr[d];
        w_c += w * pc[d];
    }
    let sqrt_d = (rr.len() as f32).sqrt();
    let f2 = format.stored(if w_r > 0.0 {
        -norm_sq * sqrt_d / w_r
    } else {
        0.0
    });
    (norm_sq + outside - 2.0 * f2 * w_c / sqrt_d, f2)
}

impl RaBitQ {
    /// A codec whose full-code factors are stored like the 1-bit stage's.
    pub(crate) fn new(dim: usize, bits: u32, seed: u64, factors: FactorFormat) -> Self {
        Self::with_full_factors(dim, bits, seed, factors, factors)
    }

    /// The codec for the training sample `points` (m, dim) under `assignment` (m,) against
    /// `anchors` (num_anchors, dim): factors of 8 or 16 bits each
    /// ([`ResidualSpread::factor_bits`] at each stage's grid error), fitted to the sample's,
    /// where the data allow compact factors; else f32.
    pub(crate) fn train(
        dim: usize,
        bits: u32,
        seed: u64,
        points: &[f32],
        anchors: &[f32],
        assignment: &[u32],
    ) -> Self {
        let wide = Self::new(dim, bits, seed, FactorFormat::F32);
        let spread = ResidualSpread::measure(points, anchors, assignment, dim);
        if !spread.compact {
            return wide;
        }
        let format =
            |b: u32| FactorFormat::unfitted(spread.factor_bits(GRID_ERROR[b as usize - 1], dim));
        let full = (bits > 1).then(|| wide.full_factors_offset());
        let (factors, full_factors) = fit_formats(
            &wide,
            (wide.bytes(), full),
            (format(1), format(bits)),
            points,
            anchors,
            assignment,
        );
        Self::with_full_factors(dim, bits, seed, factors, full_factors)
    }

    fn with_full_factors(
        dim: usize,
        bits: u32,
        seed: u64,
        factors: FactorFormat,
        full_factors: FactorFormat,
    ) -> Self {
        assert!((1..=MAX_BITS).contains(&bits), "RaBitQ bits must be 1..=8");
        RaBitQ {
            dim,
            bits,
            seed,
            rotation: FastRotation::new(dim, seed ^ 0x0b17_c0de),
            factors,
            full_factors,
            code_size: code_size(dim, bits, factors, full_factors),
        }
    }

    pub(crate) fn read_params(dim: usize, bits: u32, bytes: &[u8]) -> Result<Self> {
        let mut r = ParamReader::new(bytes, "rabitq codec");
        let seed = r.u64()?;
        let factors = FactorFormat::read_params(&mut r)?;
        // Absent before format version 4, whose full-code factors were f32.
        let full_factors = FactorFormat::read_params(&mut r)?;
        r.finish()?;
        Ok(Self::with_full_factors(
            dim,
            bits,
            seed,
            factors,
            full_factors,
        ))
    }

    /// How the 1-bit stage's factors are stored.
    pub fn factors(&self) -> FactorFormat {
        self.factors
    }

    /// How the full code's factors are stored (codes of more than one bit).
    pub fn full_factors(&self) -> FactorFormat {
        self.full_factors
    }

    /// Bits per dimension.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// The tables of [`ResidualCodec::prepare_query`] from an already rotated query `rq`
    /// (as [`rotate_query`](Self::rotate_query) gives it).
    pub fn prepare_rotated(&self, rq: &[f32], state: &mut QueryState) {
        let inv_sqrt_d = 1.0 / (self.dim as f32).sqrt();
        state.constant = -rq.iter().sum::<f32>() * inv_sqrt_d;
        state.table.clear();
        state.table.extend(rq.iter().map(|v| 2.0 * inv_sqrt_d * v));
        state.table.resize(self.bytes() * 8, 0.0);
        let [least, greatest] = term_bounds(&state.table);
        // Term t (most significant first) weighs the table by 2^(b−1−t).
        let mut bounds = [[0f32; 2]; MAX_BITS as usize];
        for (t, b) in bounds.iter_mut().enumerate().take(self.bits as usize) {
            let scale = (1u32 << (self.bits as usize - 1 - t)) as f32;
            *b = [scale * least, scale * greatest];
        }
        fill_remaining(&bounds[..self.bits as usize], &mut state.remaining);
    }

    /// The rotation as a matrix for batched (GEMM) use: row `i` is `P e_i`, zero-padded, so
    /// `q · matrix` is [`rotate_query`](Self::rotate_query)'s output up to rounding. Returns
    /// the matrix, layout (dim, padded_dim) row-major, and padded_dim = 8·⌈dim/8⌉.
    pub fn rotation_matrix(&self) -> (Vec<f32>, usize) {
        let padded = self.bytes() * 8;
        let mut matrix = vec![0f32; self.dim * padded];
        let mut unit = vec![0f32; self.dim];
        for (i, row) in matrix.chunks_exact_mut(padded).enumerate() {
            unit.fill(0.0);
            unit[i] = 1.0;
            self.rotation.apply(&mut unit);
            row[..self.dim].copy_from_slice(&unit);
        }
        (matrix, padded)
    }

    /// `P q`, zero-padded to ⌈D/8⌉·8 entries (for the fast-scan tables).
    pub fn rotate_query(&self, query: &[f32], out: &mut Vec<f32>) {
        out.clear();
        out.extend_from_slice(query);
        self.rotation.apply(out);
        out.resize(self.bytes() * 8, 0.0);
    }

    fn bytes(&self) -> usize {
        self.dim.div_ceil(8)
    }

    /// `(2^b − 1) · constant`: the grid-centre term of the full code's estimate.
    fn constant_weight(&self, state: &QueryState) -> f32 {
        ((1u32 << self.bits) - 1) as f32 * state.constant
    }

    /// The bit-plane terms of `code`'s estimate against the weights `table`, most significant
    /// first: the sign plane (`2^(b−1)`), then the extended planes from the highest down.
    /// Returns how many of `terms` it filled.
    #[inline(always)]
    fn terms<'a>(&self, table: &'a [f32], code: &'a [u8], terms: &mut [BitTerm<'a>]) -> usize {
        let nb = self.bytes();
        let low_planes = self.bits as usize - 1;
        let ex = self.ex_offset();
        terms[0] = BitTerm {
            weights: table,
            bits: &code[..nb],
            scale: (1u32 << low_planes) as f32,
        };
        for j in 0..low_planes {
            terms[low_planes - j] = BitTerm {
                weights: table,
                bits: &code[ex + j * nb..ex + (j + 1) * nb],
                scale: (1u32 << j) as f32,
            };
        }
        1 + low_planes
    }

    /// `(f1, f2)` of the finest grid `code` holds: the 1-bit stage's for `bits = 1`, else the
    /// full code's.
    #[inline]
    fn finest_factors(&self, code: &[u8]) -> (f32, f32) {
        let nb = self.bytes();
        if self.bits == 1 {
            self.factors.read(&code[nb..])
        } else {
            self.full_factors.read(&code[self.full_factors_offset()..])
        }
    }

    /// Offset of the extended part (low planes, then its factors) in a code.
    fn ex_offset(&self) -> usize {
        self.bytes() + self.factors.bytes()
    }

    /// Offset of the full code's factors (after the low planes) in a code of `b > 1` bits.
    fn full_factors_offset(&self) -> usize {
        self.ex_offset() + (self.bits as usize - 1) * self.bytes()
    }

    fn encode_one(&self, pc: &[f32], scratch: &mut EncodeScratch, code: &mut [u8]) {
        self.encode_sign(&scratch.rotated, pc, code);
        if self.bits == 1 {
            return;
        }
        let max_level = self.max_level();
        choose_levels(
            &scratch.rotated,
            |_| max_level,
            max_level,
            &mut scratch.levels,
        );
        self.encode_levels(&scratch.rotated, pc, &scratch.levels.levels, code);
    }

    /// The residual `x − c` of a point from its anchor (both (dim,)) in the rotated basis, into
    /// `out` (dim,).
    fn rotate_residual(&self, x: &[f32], c: &[f32], out: &mut [f32]) {
        for ((o, x), c) in out.iter_mut().zip(x).zip(c) {
            *o = x - c;
        }
        self.rotation.apply(out);
    }

    /// The largest magnitude level of a dimension of the full code.
    fn max_level(&self) -> u32 {
        (1u32 << (self.bits - 1)) - 1
    }

    /// Clear `code` and write its 1-bit stage (signs and factors) for the rotated residual
    /// `rr` (dim,) against the rotated anchor `pc` (dim,).
    fn encode_sign(&self, rr: &[f32], pc: &[f32], code: &mut [u8]) {
        let (dim, nb) = (self.dim, self.bytes());
        code.fill(0);
        let (mut norm_sq, mut abs_sum, mut xbar_pc) = (0f32, 0f32, 0f32);
        for d in 0..dim {
            norm_sq += rr[d] * rr[d];
            abs_sum += rr[d].abs();
            if rr[d] > 0.0 {
                code[d / 8] |= 1 << (d % 8);
                xbar_pc += pc[d];
            } else {
                xbar_pc -= pc[d];
            }
        }
        let inv_sqrt_d = 1.0 / (dim as f32).sqrt();
        xbar_pc *= inv_sqrt_d;
        // ⟨x̄, o⟩ = Σ|rr| / (√D ‖r‖), so f2 = −2‖r‖/⟨x̄,o⟩ = −2‖r‖²√D / Σ|rr| (0 for a zero
        // residual); f1's cross term takes f2 as stored (see `grid_factors`).
        let f2 = self.factors.stored(if abs_sum > 0.0 {
            -2.0 * norm_sq / (abs_sum * inv_sqrt_d)
        } else {
            0.0
        });
        let f1 = norm_sq - f2 * xbar_pc;
        self.factors.write(&mut code[nb..], f1, f2);
    }

    /// Write the full code's low planes and factors (codes of more than 1 bit) from the
    /// magnitude `levels` (dim,) that `choose_levels` gives `rr`.
    fn encode_levels(&self, rr: &[f32], pc: &[f32], levels: &[u16], code: &mut [u8]) {
        let (dim, nb) = (self.dim, self.bytes());
        let half = 1u32 << (self.bits - 1);
        let ex = self.ex_offset();
        for d in 0..dim {
            let x = levels[d] as u32;
            let u = if rr[d] > 0.0 { half + x } else { half - 1 - x };
            for j in 0..self.bits as usize - 1 {
                if u >> j & 1 == 1 {
                    code[ex + j * nb + d / 8] |= 1 << (d % 8);
                }
            }
        }
        let grid = |d: usize| {
            let w = levels[d] as f32 + 0.5;
            if rr[d] > 0.0 {
                w
            } else {
                -w
            }
        };
        let (f1, f2) = grid_factors(rr, pc, 0.0, grid, self.full_factors);
        self.full_factors
            .write(&mut code[self.full_factors_offset()..], f1, f2);
    }
}

impl ResidualCodec for RaBitQ {
    fn kind(&self) -> CodecKind {
        match self.bits {
            1 => CodecKind::RaBitQ1,
            2 => CodecKind::RaBitQ2,
            3 => CodecKind::RaBitQ3,
            4 => CodecKind::RaBitQ4,
            5 => CodecKind::RaBitQ5,
            6 => CodecKind::RaBitQ6,
            7 => CodecKind::RaBitQ7,
            _ => CodecKind::RaBitQ8,
        }
    }
    fn dim(&self) -> usize {
        self.dim
    }

    fn prepare_anchors(&self, anchors: &[f32]) -> PreparedAnchors {
        let mut rotated = anchors.to_vec();
        rotated
            .par_chunks_mut(self.dim)
            .for_each(|a| self.rotation.apply(a));
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
        let (dim, cs) = (self.dim, self.code_size());
        let rotated_anchors = &prepared.rotated;
        debug_assert_eq!(rotated_anchors.len(), anchors.len());
        out.par_chunks_mut(ENCODE_BLOCK * cs)
            .enumerate()
            .for_each(|(b, out)| {
                let start = b * ENCODE_BLOCK;
                let mut scratch = EncodeScratch::default();
                for (i, code) in out.chunks_exact_mut(cs).enumerate() {
                    let a = assignment[start + i] as usize;
                    scratch.rotated.resize(dim, 0.0);
                    self.rotate_residual(
                        &points[(start + i) * dim..(start + i + 1) * dim],
                        &anchors[a * dim..(a + 1) * dim],
                        &mut scratch.rotated,
                    );
                    self.encode_one(&rotated_anchors[a * dim..(a + 1) * dim], &mut scratch, code);
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
        let (dim, cs) = (self.dim, self.code_size());
        let rotated_anchors = &prepared.rotated;
        // 1-bit codes have no levels to choose.
        let encoded = self.bits > 1
            && encode_through_backend(
                backend,
                &vec![self.max_level(); dim],
                cs,
                out,
                |first, rotated, _| {
                    rotated.par_chunks_mut(dim).enumerate().for_each(|(r, rr)| {
                        let (i, a) = (first + r, assignment[first + r] as usize);
                        self.rotate_residual(
                            &points[i * dim..(i + 1) * dim],
                            &anchors[a * dim..(a + 1) * dim],
                            rr,
                        );
                    });
                },
                |row, rr, _, levels, _, code| {
                    let a = assignment[row] as usize;
                    let pc = &rotated_anchors[a * dim..(a + 1) * dim];
                    self.encode_sign(rr, pc, code);
                    self.encode_levels(rr, pc, levels, code);
                },
            )?;
        if !encoded {
            self.encode_prepared(prepared, points, anchors, assignment, out);
        }
        Ok(())
    }

    /// The reconstruction consistent with the estimator: `(−f2/√D) Pᵀ w` with the finest
    /// grid `w` the code holds.
    fn decode(&self, code: &[u8], _anchor_id: u32, out: &mut [f32]) {
        let nb = self.bytes();
        let sqrt_d = (self.dim as f32).sqrt();
        if self.bits == 1 {
            let scale = -0.5 * self.finest_factors(code).1 / sqrt_d;
            for (i, o) in out.iter_mut().enumerate() {
                *o = if code[i / 8] >> (i % 8) & 1 == 1 {
                    scale
                } else {
                    -scale
                };
            }
        } else {
            let ex = self.ex_offset();
            let low_planes = self.bits as usize - 1;
            let scale = -self.finest_factors(code).1 / sqrt_d;
            let centre = ((1u32 << self.bits) - 1) as f32 * 0.5;
            for (i, o) in out.iter_mut().enumerate() {
                let mut u = ((code[i / 8] >> (i % 8) & 1) as u32) << low_planes;
                for j in 0..low_planes {
                    u |= ((code[ex + j * nb + i / 8] >> (i % 8) & 1) as u32) << j;
                }
                *o = scale * (u as f32 - centre);
            }
        }
        self.rotation.apply_inverse(out);
    }

    /// `table`: the weights `(2/√D)(P q)_i`, zero-padded to 8·⌈D/8⌉; `constant` =
    /// −Σ (P q) / √D, so `(2/√D)⟨w, P q⟩ = (2^b − 1)·constant + Σ_planes 2^j bit_sum(table,
    /// plane)`.
    fn prepare_query(&self, state: &mut QueryState) {
        let mut rq = Vec::new();
        self.rotate_query(&state.query, &mut rq);
        self.prepare_rotated(&rq, state);
    }

    /// The estimate of the full code (all `b` bits).
    fn scan(
        &self,
        state: &mut QueryState,
        _anchor_id: u32,
        query_anchor_dist: f32,
        codes: &[u8],
        out: &mut [f32],
    ) {
        let constant = self.constant_weight(state);
        let mut terms = [BitTerm::EMPTY; MAX_BITS as usize];
        for (o, code) in out.iter_mut().zip(codes.chunks_exact(self.code_size)) {
            let n = self.terms(&state.table, code, &mut terms);
            *o = planes_full(
                &terms[..n],
                constant,
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
        let mut terms = [BitTerm::EMPTY; MAX_BITS as usize];
        let n = self.terms(&state.table, code, &mut terms);
        planes_estimate(
            &terms[..n],
            &state.remaining,
            self.constant_weight(state),
            query_anchor_dist,
            self.finest_factors(code),
            limit,
            guess,
        )
    }

    fn code_size(&self) -> usize {
        self.code_size
    }

    fn write_params(&self, out: &mut Vec<u8>) {
        out.extend(self.seed.to_le_bytes());
        self.factors.write_params(out);
        self.full_factors.write_params(out);
    }
}
