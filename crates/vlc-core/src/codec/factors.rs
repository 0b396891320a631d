//! How a code stores its per-vector factors `(f1, f2)` (see [`super::rabitq`] for what they
//! are).
//!
//! Each stage of a RaBitQ-family code (`rabitq1`-`4`, `pcaq`) carries its own two factors, a
//! fixed cost per vector whatever the rate: at 64 bytes per vector, f16 factors for two
//! stages took 8 of them. From format version 6 each factor is an 8- or 16-bit integer
//! ([`FactorRange`]: evenly spaced over the range the training sample's factors span, with
//! coarser codes beyond it for vectors unlike the sample), 2 or 4 bytes a stage. Which width
//! a stage gets follows its own estimation error ([`ResidualSpread::factor_bits`]): a byte's
//! rounding is negligible against a code of one or two bits per dimension, not against one
//! of six or eight, whose estimate is nearly exact. f1's cross term with the anchor is taken
//! with f2 as stored (see [`super::rabitq::grid_factors`]), so rounding f2 only rescales the
//! decoded residual. Versions 2 to 5 stored two scaled f16 (4 bytes), version 1 two f32 (8).
//!
//! The factors hold a cross term with the anchor of size about `‖r‖ ‖c‖ / √D`; when anchors
//! are much longer than residuals (tight clusters far apart; data far from the origin as a
//! whole is centred first, see [`crate::Index::centre`]) that term dominates and rounding
//! it would not be negligible, so [`ResidualSpread::compact`] says no there and such codes keep
//! `F32`.

use super::{put_f32s, read_f32, ParamReader, ResidualCodec};
use crate::error::Result;
use rayon::prelude::*;

/// How a code stores the two factors `(f1, f2)` of one stage.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FactorFormat {
    /// Two `f32` (8 bytes): format version 1, and anchors much longer than the residuals.
    F32,
    /// `f1 / f1_scale` and `f2 / f2_scale` as IEEE half floats (4 bytes), the scales being
    /// powers of two near the training sample's mean `‖r‖²` and `‖r‖`: format versions 2 to 5.
    F16 { f1_scale: f32, f2_scale: f32 },
    /// One byte per factor (2 bytes): format version 6 on, codes of a few bits per dimension.
    U8 { f1: FactorRange, f2: FactorRange },
    /// Two bytes per factor (4 bytes): format version 6 on, codes fine enough that a byte's
    /// rounding would show.
    U16 { f1: FactorRange, f2: FactorRange },
}

/// Anchors up to this multiple of the mean residual norm get compact factors.
const COMPACT_MAX_ANCHOR_RATIO: f64 = 16.0;

/// Sample rows whose factors fit the ranges of [`FactorFormat::U8`] and `U16`.
const FIT_ROWS: usize = 4096;

/// How far a fitted range reaches past the sample's least and greatest value, as a fraction of
/// their difference. A sample of 4,096 leaves about one vector in 4,000 beyond its own range,
/// and most of those just beyond it (so, with the margin, inside); the rest take a tail code,
/// off by up to a third of their excess. Costs 12% coarser steps, which
/// [`ResidualSpread::factor_bits`] counts.
pub const FIT_MARGIN: f32 = 1.0 / 16.0;

/// A factor stored as an unsigned integer of `bits` (8 or 16) bits: `2^bits − 1 − 4·bits`
/// evenly spaced values from `lo` to `hi` (codes `t ..= 2^bits − 1 − t`, `t = 2·bits` tail
/// codes on each side), and beyond them tail code `j` (1..=t) at `(2^j − 1)` steps past the
/// last evenly spaced value on its side. So a value outside the fitted range (a vector unlike
/// the training sample) keeps its side and order of magnitude, up to 2^t steps out (about 290
/// ranges at 8 bits), instead of being clamped. `step` is `(hi − lo)` over the number of
/// spaces, or a small fraction of `|lo|` for an empty range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FactorRange {
    pub lo: f32,
    pub hi: f32,
}

impl FactorRange {
    /// The range of `values` (all finite) widened by `FIT_MARGIN` of its span on each side;
    /// `[0, 0]` when there are none.
    pub fn fit(values: impl Iterator<Item = f32>) -> Self {
        let (lo, hi) = values.fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
        if lo <= hi {
            let margin = (hi - lo) * FIT_MARGIN;
            FactorRange {
                lo: lo - margin,
                hi: hi + margin,
            }
        } else {
            FactorRange { lo: 0.0, hi: 0.0 }
        }
    }

    /// Tail codes on each side at `bits`.
    #[inline]
    fn tail(bits: u32) -> i64 {
        2 * bits as i64
    }

    /// Steps between `lo` and `hi` at `bits`: 223 at 8 bits, 65,471 at 16.
    #[inline]
    fn core_steps(bits: u32) -> i64 {
        (1i64 << bits) - 1 - 2 * Self::tail(bits)
    }

    /// The spacing of the evenly spaced codes at `bits`.
    #[inline]
    pub fn step(self, bits: u32) -> f32 {
        let step = (self.hi - self.lo) / Self::core_steps(bits) as f32;
        if step > 0.0 {
            step
        } else {
            self.lo.abs().max(f32::MIN_POSITIVE) / 4096.0
        }
    }

    /// The last evenly spaced value: `hi`, or above it for an empty range.
    #[inline]
    fn top(self, bits: u32, step: f32) -> f32 {
        self.lo + step * Self::core_steps(bits) as f32
    }

    /// The value of `code` at `bits`.
    #[inline]
    pub fn decode(self, bits: u32, code: u32) -> f32 {
        let (tail, core) = (Self::tail(bits), Self::core_steps(bits));
        let k = code as i64 - tail;
        let step = self.step(bits);
        if k < 0 {
            self.lo - step * ((-k as f64).exp2() - 1.0) as f32
        } else if k > core {
            self.top(bits, step) + step * (((k - core) as f64).exp2() - 1.0) as f32
        } else {
            self.lo + step * k as f32
        }
    }

    /// The code at `bits` whose value is nearest `v` (NaN gives `lo`'s code).
    pub fn encode(self, bits: u32, v: f32) -> u32 {
        let (tail, core) = (Self::tail(bits), Self::core_steps(bits));
        if v.is_nan() {
            return tail as u32;
        }
        let step = self.step(bits);
        let k = ((v - self.lo) / step).round();
        if k < 0.0 {
            return (tail - Self::tail_code(bits, ((self.lo - v) / step) as f64)) as u32;
        }
        if k <= core as f32 {
            return (tail + k as i64) as u32;
        }
        let excess = ((v - self.top(bits, step)) / step) as f64;
        (tail + core + Self::tail_code(bits, excess)) as u32
    }

    /// The tail code `j` in 1..=t whose `2^j − 1` is nearest `excess` (> 0.5).
    fn tail_code(bits: u32, excess: f64) -> i64 {
        let tail = Self::tail(bits);
        let below = ((excess + 1.0).log2().floor().min(tail as f64) as i64).clamp(1, tail);
        let above = (below + 1).min(tail);
        let value = |j: i64| (j as f64).exp2() - 1.0;
        if (value(above) - excess).abs() < (excess - value(below)).abs() {
            above
        } else {
            below
        }
    }
}

/// What a training sample's residuals tell about the factors they will have: whether they
/// can be stored compactly at all, and how widely they spread, which with a code's own error
/// decides between 8 and 16 bits ([`ResidualSpread::factor_bits`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ResidualSpread {
    /// Mean `‖r‖²`.
    pub mean_sq: f64,
    /// `max ‖r‖² − min ‖r‖²`: about the spread of f1.
    pub sq_span: f64,
    /// `(max ‖r‖ − min ‖r‖) / mean ‖r‖`: about the spread of f2 relative to its size.
    pub relative_norm_span: f64,
    /// Whether compact (8- or 16-bit) factors suit the data: not where the anchors are much
    /// longer than the residuals (see the module docs), nor for an empty sample or one whose
    /// residuals are all zero.
    pub compact: bool,
}

/// Rounding of the stored factors may add at most this fraction to the variance of a code's
/// own distance estimation error (so at most half a percent to its standard deviation).
const ROUNDING_SHARE: f64 = 0.01;

impl ResidualSpread {
    /// Measure the residuals `points − anchors[assignment]` of a training sample: `points`
    /// (m, dim), `anchors` (num_anchors, dim), `assignment` (m,).
    pub fn measure(points: &[f32], anchors: &[f32], assignment: &[u32], dim: usize) -> Self {
        let m = assignment.len();
        let empty = ResidualSpread {
            mean_sq: 0.0,
            sq_span: 0.0,
            relative_norm_span: 0.0,
            compact: false,
        };
        if m == 0 || dim == 0 {
            return empty;
        }
        // (Σ‖r‖², Σ‖r‖, Σ‖c‖, min ‖r‖², max ‖r‖²)
        // Per row in parallel, summed in row order: the same sums (and so the same widths)
        // whatever the thread count.
        let rows: Vec<(f64, f64)> = (0..m)
            .into_par_iter()
            .map(|i| {
                let a = assignment[i] as usize;
                let c = &anchors[a * dim..(a + 1) * dim];
                let d = crate::linalg::l2_sq(&points[i * dim..(i + 1) * dim], c) as f64;
                (d, (crate::linalg::dot(c, c) as f64).sqrt())
            })
            .collect();
        let (r_sq, r, c, least, most) = rows.iter().fold(
            (0.0, 0.0, 0.0, f64::INFINITY, 0.0f64),
            |(s, n, c, lo, hi), &(d, anchor)| {
                (s + d, n + d.sqrt(), c + anchor, lo.min(d), hi.max(d))
            },
        );
        let (mean_sq, mean, c) = (r_sq / m as f64, r / m as f64, c / m as f64);
        if !(mean.is_finite() && mean > 0.0 && mean_sq.is_finite()) {
            return empty;
        }
        ResidualSpread {
            mean_sq,
            sq_span: most - least,
            relative_norm_span: (most.sqrt() - least.sqrt()) / mean,
            compact: c <= COMPACT_MAX_ANCHOR_RATIO * mean,
        }
    }

    /// Bits per stored factor (8 or 16) for a code of `dim` dimensions whose estimate of
    /// `⟨y, r⟩` has a relative error variance of `relative_error` (its squared error over
    /// `‖y‖² ‖r‖² / dim`; [`super::pca`]'s grid error at the code's widths): 8 where rounding
    /// f1 and f2 to 8 bits over their spread adds at most 1% to the variance of the code's
    /// own distance error for a query at the typical residual distance `‖q − c‖² = E‖r‖²`,
    /// else 16. At one bit per dimension a byte is ample; near 8 bits, where the code is
    /// almost exact, it is not.
    pub fn factor_bits(&self, relative_error: f64, dim: usize) -> u32 {
        let steps = FactorRange::core_steps(8) as f64;
        // Code: 2⟨q − c, r − r̂⟩ has variance 4 E‖q − c‖² E‖r‖² relative_error / dim.
        let code = 4.0 * self.mean_sq * self.mean_sq * relative_error / dim as f64;
        // f1 rounds by a uniform error over one step of its span; f2 by one step relative to
        // its size, scaling the estimated 2⟨q − c, r̂⟩ (variance 4 E‖q − c‖² E‖r̂‖² / dim).
        let widen = 1.0 + 2.0 * FIT_MARGIN as f64;
        let f1 = (widen * self.sq_span / steps).powi(2) / 12.0;
        let f2 = (widen * self.relative_norm_span / steps).powi(2) / 12.0
            * 4.0
            * self.mean_sq
            * self.mean_sq
            / dim as f64;
        if f1 + f2 <= ROUNDING_SHARE * code {
            8
        } else {
            16
        }
    }
}

impl FactorFormat {
    /// The format of `bits` (8 or 16) per factor before its ranges are fitted: the right size,
    /// for sizing a codec.
    pub fn unfitted(bits: u32) -> FactorFormat {
        Self::fitted(bits, &[])
    }

    /// The format of `bits` (8 or 16) per factor, fitted to `(f1, f2)` pairs.
    pub fn fitted(bits: u32, pairs: &[(f32, f32)]) -> FactorFormat {
        let f1 = FactorRange::fit(pairs.iter().map(|p| p.0));
        let f2 = FactorRange::fit(pairs.iter().map(|p| p.1));
        if bits == 8 {
            FactorFormat::U8 { f1, f2 }
        } else {
            FactorFormat::U16 { f1, f2 }
        }
    }

    /// Bytes of the two factors in a code.
    pub fn bytes(self) -> usize {
        match self {
            FactorFormat::F32 => 8,
            FactorFormat::F16 { .. } | FactorFormat::U16 { .. } => 4,
            FactorFormat::U8 { .. } => 2,
        }
    }

    /// The value f2 = `v` reads back as once written.
    #[inline]
    pub fn stored(self, v: f32) -> f32 {
        match self {
            FactorFormat::F32 => v,
            FactorFormat::F16 { f2_scale, .. } => {
                half::f16::from_f32((v / f2_scale).clamp(-65504.0, 65504.0)).to_f32() * f2_scale
            }
            FactorFormat::U8 { f2, .. } => f2.decode(8, f2.encode(8, v)),
            FactorFormat::U16 { f2, .. } => f2.decode(16, f2.encode(16, v)),
        }
    }

    /// Write `(f1, f2)` at the start of `out` (f16 values saturate at ±65504 times the scale).
    #[inline]
    pub fn write(self, out: &mut [u8], f1: f32, f2: f32) {
        match self {
            FactorFormat::F32 => {
                out[..4].copy_from_slice(&f1.to_le_bytes());
                out[4..8].copy_from_slice(&f2.to_le_bytes());
            }
            FactorFormat::F16 { f1_scale, f2_scale } => {
                let h = |v: f32| half::f16::from_f32((v).clamp(-65504.0, 65504.0)).to_le_bytes();
                out[..2].copy_from_slice(&h(f1 / f1_scale));
                out[2..4].copy_from_slice(&h(f2 / f2_scale));
            }
            FactorFormat::U8 { f1: r1, f2: r2 } => {
                out[0] = r1.encode(8, f1) as u8;
                out[1] = r2.encode(8, f2) as u8;
            }
            FactorFormat::U16 { f1: r1, f2: r2 } => {
                out[..2].copy_from_slice(&(r1.encode(16, f1) as u16).to_le_bytes());
                out[2..4].copy_from_slice(&(r2.encode(16, f2) as u16).to_le_bytes());
            }
        }
    }

    /// The factors stored at the start of `code`.
    #[inline]
    pub fn read(self, code: &[u8]) -> (f32, f32) {
        match self {
            FactorFormat::F32 => (read_f32(code, 0), read_f32(code, 4)),
            FactorFormat::F16 { f1_scale, f2_scale } => (
                half::f16::from_le_bytes([code[0], code[1]]).to_f32() * f1_scale,
                half::f16::from_le_bytes([code[2], code[3]]).to_f32() * f2_scale,
            ),
            FactorFormat::U8 { f1, f2 } => {
                (f1.decode(8, code[0] as u32), f2.decode(8, code[1] as u32))
            }
            FactorFormat::U16 { f1, f2 } => (
                f1.decode(16, u16::from_le_bytes([code[0], code[1]]) as u32),
                f2.decode(16, u16::from_le_bytes([code[2], code[3]]) as u32),
            ),
        }
    }

    /// Serialise: one tag byte (0 = f32, 1 = f16, 2 = 8-bit, 3 = 16-bit), then the two scales
    /// for f16, or `lo` and `hi` of f1's range and of f2's for 8 and 16 bits.
    pub(crate) fn write_params(self, out: &mut Vec<u8>) {
        match self {
            FactorFormat::F32 => out.push(0),
            FactorFormat::F16 { f1_scale, f2_scale } => {
                out.push(1);
                put_f32s(out, &[f1_scale, f2_scale]);
            }
            FactorFormat::U8 { f1, f2 } | FactorFormat::U16 { f1, f2 } => {
                out.push(if matches!(self, FactorFormat::U8 { .. }) {
                    2
                } else {
                    3
                });
                put_f32s(out, &[f1.lo, f1.hi, f2.lo, f2.hi]);
            }
        }
    }

    /// Read what [`write_params`](Self::write_params) wrote; parameters written before this
    /// field existed (nothing left to read) mean f32.
    pub(crate) fn read_params(r: &mut ParamReader) -> Result<Self> {
        if r.remaining() == 0 {
            return Ok(FactorFormat::F32);
        }
        match r.bytes(1)?[0] {
            0 => Ok(FactorFormat::F32),
            1 => {
                let s = r.f32s(2)?;
                if s.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
                    return Err(r.corrupt("factor scales must be positive and finite"));
                }
                Ok(FactorFormat::F16 {
                    f1_scale: s[0],
                    f2_scale: s[1],
                })
            }
            tag @ (2 | 3) => {
                let s = r.f32s(4)?;
                if s.iter().any(|v| !v.is_finite()) || s[0] > s[1] || s[2] > s[3] {
                    return Err(r.corrupt(&format!(
                        "factor ranges must be finite with lo <= hi, got {s:?}"
                    )));
                }
                let (f1, f2) = (
                    FactorRange { lo: s[0], hi: s[1] },
                    FactorRange { lo: s[2], hi: s[3] },
                );
                Ok(if tag == 2 {
                    FactorFormat::U8 { f1, f2 }
                } else {
                    FactorFormat::U16 { f1, f2 }
                })
            }
            t => Err(r.corrupt(&format!("unknown factor format {t}"))),
        }
    }
}

impl std::fmt::Display for FactorFormat {
    /// "f32", "f16", "8-bit" or "16-bit".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FactorFormat::F32 => "f32",
            FactorFormat::F16 { .. } => "f16",
            FactorFormat::U8 { .. } => "8-bit",
            FactorFormat::U16 { .. } => "16-bit",
        })
    }
}

/// `formats` (of the first stage and the full code, 8- or 16-bit, not yet fitted) with their
/// ranges fitted to the factors that `wide` (the same codec with [`FactorFormat::F32`] factors,
/// otherwise laid out alike) writes for up to 4,096 evenly spaced rows of a training sample:
/// `points` (m, dim) under `assignment` (m,) against `anchors` (num_anchors, dim). `at` holds
/// the byte offsets of the first stage's factors and of the full code's (`None` for a
/// single-stage code, whose second format is then a copy of the first) in `wide`'s codes.
pub(crate) fn fit_formats<C: ResidualCodec>(
    wide: &C,
    at: (usize, Option<usize>),
    formats: (FactorFormat, FactorFormat),
    points: &[f32],
    anchors: &[f32],
    assignment: &[u32],
) -> (FactorFormat, FactorFormat) {
    let (dim, m) = (wide.dim(), assignment.len());
    let rows: Vec<usize> = (0..m).step_by(m.div_ceil(FIT_ROWS).max(1)).collect();
    let sample: Vec<f32> = rows
        .iter()
        .flat_map(|&i| &points[i * dim..(i + 1) * dim])
        .copied()
        .collect();
    let sample_assignment: Vec<u32> = rows.iter().map(|&i| assignment[i]).collect();
    let cs = wide.code_size();
    let mut codes = vec![0u8; rows.len() * cs];
    wide.encode(&sample, anchors, &sample_assignment, &mut codes);
    let fit = |offset: usize, format: FactorFormat| {
        let pairs: Vec<(f32, f32)> = codes
            .chunks_exact(cs)
            .map(|c| FactorFormat::F32.read(&c[offset..]))
            .collect();
        let bits = if matches!(format, FactorFormat::U16 { .. }) {
            16
        } else {
            8
        };
        FactorFormat::fitted(bits, &pairs)
    };
    let first = fit(at.0, formats.0);
    (first, at.1.map_or(first, |offset| fit(offset, formats.1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges() -> Vec<FactorRange> {
        [
            (0.02, 0.83),
            (-1.38, -0.28),
            (-3.0, 5.0),
            (2.5, 2.5),
            (0.0, 0.0),
            (1e-30, 1e30),
        ]
        .into_iter()
        .map(|(lo, hi)| FactorRange { lo, hi })
        .collect()
    }

    /// Inside the range a code is off by at most half a step; the codes' values rise with
    /// the code; every code decodes to a finite value and encodes back to itself.
    #[test]
    fn codes_round_trip_within_half_a_step() {
        for bits in [8u32, 16] {
            for r in ranges() {
                let step = r.step(bits);
                assert!(step > 0.0, "{r:?}");
                for i in 0..=10_000 {
                    let v = r.lo + (r.hi - r.lo) * i as f32 / 10_000.0;
                    let back = r.decode(bits, r.encode(bits, v));
                    // Half a step, and f32 rounding of lo + k · step.
                    let rounding = 4.0 * f32::EPSILON * (r.lo.abs() + r.hi.abs() + v.abs());
                    assert!(
                        (back - v).abs() <= 0.5001 * step + rounding,
                        "{bits} {r:?}: {v} -> {back}"
                    );
                }
                let mut last = f32::NEG_INFINITY;
                for code in 0..1u32 << bits {
                    let v = r.decode(bits, code);
                    assert!(v.is_finite() && v > last, "{bits} {r:?}: code {code}");
                    assert_eq!(r.encode(bits, v), code, "{bits} {r:?}: {v}");
                    last = v;
                }
            }
        }
    }

    /// Outside the range the nearest tail code is chosen: no farther from the value than
    /// the next code on either side, and within a factor of two of the excess; values beyond
    /// the last tail code take it.
    #[test]
    fn outliers_keep_their_side_and_magnitude() {
        for bits in [8u32, 16] {
            let last = (1u32 << bits) - 1;
            for r in ranges() {
                let step = r.step(bits);
                let top = r.top(bits, step);
                for excess in [0.6f32, 1.0, 2.4, 3.0, 100.0, 777.7, 40_000.0, 65_535.0] {
                    for (v, edge, side) in [
                        (top + excess * step, top, 1.0f32),
                        (r.lo - excess * step, r.lo, -1.0),
                    ] {
                        let code = r.encode(bits, v);
                        let back = r.decode(bits, code);
                        let stored = (back - edge) * side / step;
                        assert!(stored >= 0.999, "{r:?} {v}: {back}");
                        assert!(
                            stored <= 2.0 * excess + 1.0 && 2.0 * stored + 1.0 >= excess,
                            "{bits} {r:?}: {excess} -> {stored}"
                        );
                        for neighbour in [code.saturating_sub(1), (code + 1).min(last)] {
                            let err = (back - v).abs();
                            let other = (r.decode(bits, neighbour) - v).abs();
                            assert!(err <= other * 1.0001 + 1e-6 * v.abs(), "{r:?}: {v} {code}");
                        }
                    }
                }
                // 2^33 steps out: past the last tail code at either width.
                let far = 2f32.powi(33) * step;
                assert_eq!(r.encode(bits, top + far), last);
                assert_eq!(r.encode(bits, r.lo - far), 0);
                assert_eq!(r.encode(bits, f32::NAN), 2 * bits);
            }
        }
    }

    /// Both widths read back what they wrote, to half a step, as their serialised parameters
    /// do; out-of-order or non-finite ranges are refused.
    #[test]
    fn fixed_formats_round_trip_and_check_their_parameters() {
        let pairs: Vec<(f32, f32)> = (0..100)
            .map(|i| (0.1 + i as f32 * 0.007, -1.2 + i as f32 * 0.009))
            .collect();
        for bits in [8u32, 16] {
            let format = FactorFormat::fitted(bits, &pairs);
            assert_eq!(format.bytes(), bits as usize / 4);
            let (FactorFormat::U8 { f1, f2 } | FactorFormat::U16 { f1, f2 }) = format else {
                panic!("{format:?}")
            };
            let margin = 99.0 * 0.007 * FIT_MARGIN;
            assert!((f1.lo - (0.1 - margin)).abs() < 1e-6, "{f1:?}");
            assert!(
                (f1.hi - (0.1 + 99.0 * 0.007 + margin)).abs() < 1e-6,
                "{f1:?}"
            );
            let mut bytes = [0u8; 4];
            for &(a, b) in &pairs {
                format.write(&mut bytes, a, b);
                let (x, y) = format.read(&bytes);
                assert!((x - a).abs() <= 0.5001 * f1.step(bits), "{a} {x}");
                assert!((y - b).abs() <= 0.5001 * f2.step(bits), "{b} {y}");
                assert_eq!(y, format.stored(b));
            }
            let mut params = Vec::new();
            format.write_params(&mut params);
            assert_eq!(params.len(), 1 + 16);
            let mut r = ParamReader::new(&params, "test");
            assert_eq!(FactorFormat::read_params(&mut r).unwrap(), format);
            for (at, value) in [(1, f32::NAN), (5, -10.0), (13, f32::INFINITY)] {
                let mut bad = params.clone();
                bad[at..at + 4].copy_from_slice(&value.to_le_bytes());
                let mut r = ParamReader::new(&bad, "test");
                assert!(FactorFormat::read_params(&mut r).is_err(), "{at} {value}");
            }
        }
    }

    /// A byte per factor for coarse codes, two for fine ones, the switch moving with the
    /// factors' spread and the dimension: rounding matters more against a finer code, a
    /// wider spread, and more dimensions (over which the code's error averages out).
    #[test]
    fn factor_width_follows_the_codes_error() {
        let spread = ResidualSpread {
            mean_sq: 0.5,
            sq_span: 0.8,
            relative_norm_span: 1.2,
            compact: true,
        };
        assert_eq!(spread.factor_bits(0.5, 384), 8);
        assert_eq!(spread.factor_bits(1e-3, 384), 16);
        let switch = |s: &ResidualSpread, dim: usize| {
            (0..400)
                .map(|i| 10f64.powf(-4.0 + i as f64 / 100.0))
                .find(|&e| s.factor_bits(e, dim) == 8)
                .unwrap()
        };
        let base = switch(&spread, 384);
        let wider = ResidualSpread {
            sq_span: 1.6,
            ..spread
        };
        assert!(switch(&wider, 384) > base);
        assert!(switch(&spread, 1024) > base);
        assert!(switch(&spread, 128) < base);
    }

    /// The residuals' spread: mean and span of ‖r‖², span of ‖r‖ relative to its mean;
    /// compact only near the origin and for non-zero residuals.
    #[test]
    fn residual_spread_is_measured() {
        // Residuals of norm 1 and 3 along the first axis against anchors at the origin.
        let dim = 4;
        let points = [1.0, 0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 0.0];
        let anchors = [0.0f32; 4];
        let s = ResidualSpread::measure(&points, &anchors, &[0, 0], dim);
        assert!((s.mean_sq - 5.0).abs() < 1e-9, "{s:?}");
        assert!((s.sq_span - 8.0).abs() < 1e-9, "{s:?}");
        assert!((s.relative_norm_span - 1.0).abs() < 1e-9, "{s:?}");
        assert!(s.compact);
        let far_anchor = [100.0f32, 0.0, 0.0, 0.0];
        let far: Vec<f32> = points
            .iter()
            .enumerate()
            .map(|(i, v)| v + far_anchor[i % 4])
            .collect();
        assert!(!ResidualSpread::measure(&far, &far_anchor, &[0, 0], dim).compact);
        assert!(!ResidualSpread::measure(&[0.0; 4], &anchors, &[0], dim).compact);
        assert!(!ResidualSpread::measure(&[], &anchors, &[], dim).compact);
    }
}
