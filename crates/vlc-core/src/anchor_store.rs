//! How anchors are stored in an index file: f32, f16, 8-bit integers with one scale per
//! anchor (the default, a quarter of the f32 bytes), or 4-bit integers with one scale per
//! anchor (an eighth).
//!
//! A build rounds its trained anchors to the chosen precision *before* any vector is assigned
//! or encoded, so every residual code is exact relative to the stored anchor and nothing is
//! lost downstream; only the anchors themselves move (by at most half a quantisation step per
//! coordinate). Loading decodes the same values bit for bit.

use crate::error::{Result, VlcError};
use serde::{Deserialize, Serialize};

/// Storage precision of the anchors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnchorPrecision {
    /// 4 bytes per coordinate.
    F32,
    /// 2 bytes per coordinate; anchors with a value beyond the f16 range are kept as f32.
    F16,
    /// 1 byte per coordinate plus an f32 scale per anchor: `value = scale · q`, `q` in
    /// −127..=127, `scale = max |value| / 127` of the anchor.
    #[default]
    Int8,
    /// Half a byte per coordinate plus an f32 scale per anchor: `value = scale · q`, `q` in
    /// −7..=7, the scale chosen per anchor to minimise the squared rounding error (so the
    /// largest values may be clipped). The rounding moves each vector's residual, not its
    /// code's accuracy: worth it where anchors are a large share of the file (small
    /// collections, high dims, few code bytes).
    Int4,
}

impl AnchorPrecision {
    pub fn name(self) -> &'static str {
        match self {
            AnchorPrecision::F32 => "f32",
            AnchorPrecision::F16 => "f16",
            AnchorPrecision::Int8 => "int8",
            AnchorPrecision::Int4 => "int4",
        }
    }

    /// Section bytes for `num_anchors` anchors of `dim` values.
    pub fn section_bytes(self, num_anchors: usize, dim: usize) -> Option<usize> {
        let values = num_anchors.checked_mul(dim)?;
        match self {
            AnchorPrecision::F32 => values.checked_mul(4),
            AnchorPrecision::F16 => values.checked_mul(2),
            AnchorPrecision::Int8 => values.checked_add(num_anchors.checked_mul(4)?),
            AnchorPrecision::Int4 => num_anchors
                .checked_mul(dim.div_ceil(2))?
                .checked_add(num_anchors.checked_mul(4)?),
        }
    }

    /// The precision actually used for `anchors`: f16 falls back to f32 when a value is beyond
    /// its range.
    pub fn effective(self, anchors: &[f32]) -> Self {
        if self == AnchorPrecision::F16 && anchors.iter().any(|v| v.abs() >= 60_000.0) {
            AnchorPrecision::F32
        } else {
            self
        }
    }
}

impl std::str::FromStr for AnchorPrecision {
    type Err = VlcError;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Ok(AnchorPrecision::F32),
            "f16" => Ok(AnchorPrecision::F16),
            "int8" | "i8" => Ok(AnchorPrecision::Int8),
            "int4" | "i4" => Ok(AnchorPrecision::Int4),
            _ => Err(VlcError::param(
                "anchor precision",
                format!("unknown precision `{s}` (expected int8, int4, f16 or f32)"),
            )),
        }
    }
}

impl std::fmt::Display for AnchorPrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The 8-bit levels and scale of one anchor row.
pub(crate) fn quantize_row(row: &[f32]) -> (f32, impl Iterator<Item = i8> + '_) {
    let max = row.iter().fold(0f32, |m, v| m.max(v.abs()));
    let scale = max / 127.0;
    let inverse = if scale > 0.0 { 1.0 / scale } else { 0.0 };
    (
        scale,
        row.iter()
            .map(move |v| (v * inverse).round().clamp(-127.0, 127.0) as i8),
    )
}

/// Largest 4-bit level.
const INT4_MAX: f32 = 7.0;
/// Clipping fractions of the largest value tried for a 4-bit scale: `INT4_STEPS` in geometric
/// progression from 1 down to `INT4_MIN_CLIP`.
const INT4_STEPS: usize = 48;
const INT4_MIN_CLIP: f32 = 0.1;

/// The 4-bit levels (−7..=7) and scale of one anchor row: of the scales `c · max|v| / 7` for
/// clipping fractions `c` from 1 down to 0.1, the one with the least squared rounding error
/// (ties to the larger scale). Gaussian-like rows lose less to clipping their tails than to a
/// coarse step, and rows with a few outlying coordinates (as embeddings have) far less.
pub(crate) fn quantize_row_int4(row: &[f32]) -> (f32, impl Iterator<Item = i8> + '_) {
    let max = row.iter().fold(0f32, |m, v| m.max(v.abs()));
    let mut best = (f32::INFINITY, max / INT4_MAX);
    if max > 0.0 {
        for step in 0..INT4_STEPS {
            let clip = INT4_MIN_CLIP.powf(step as f32 / (INT4_STEPS - 1) as f32);
            let scale = clip * max / INT4_MAX;
            let inverse = 1.0 / scale;
            let error: f32 = row
                .iter()
                .map(|v| {
                    let e = v - scale * (v * inverse).round().clamp(-INT4_MAX, INT4_MAX);
                    e * e
                })
                .sum();
            if error < best.0 {
                best = (error, scale);
            }
        }
    }
    let scale = best.1;
    let inverse = if scale > 0.0 { 1.0 / scale } else { 0.0 };
    (
        scale,
        row.iter()
            .map(move |v| (v * inverse).round().clamp(-INT4_MAX, INT4_MAX) as i8),
    )
}

/// Anchors as an index file stores them: the precision and the section bytes. Int8 layout:
/// the `num_anchors` f32 scales, then the levels, (num_anchors, dim) row-major. Int4 layout:
/// the scales, then per anchor ⌈dim/2⌉ bytes, coordinate `2j` in the low nibble of byte `j`
/// and `2j + 1` in the high one, each as `q + 8` (an odd dim leaves the last high nibble 0).
#[derive(Clone, Debug, PartialEq)]
pub struct StoredAnchors {
    pub precision: AnchorPrecision,
    pub bytes: Vec<u8>,
}

impl StoredAnchors {
    /// Encode `anchors` (num_anchors, dim), row-major, at `precision` (or f32 where f16 cannot
    /// hold a value). Use [`decode`](Self::decode)'s values from then on: they are what the file
    /// holds.
    pub fn encode(anchors: &[f32], dim: usize, precision: AnchorPrecision) -> Self {
        let precision = precision.effective(anchors);
        let bytes = match precision {
            AnchorPrecision::F32 => bytemuck::cast_slice(anchors).to_vec(),
            AnchorPrecision::F16 => anchors
                .iter()
                .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                .collect(),
            AnchorPrecision::Int8 => {
                let rows = anchors.len() / dim.max(1);
                let mut scales = Vec::with_capacity(rows * 4 + anchors.len());
                let mut levels = Vec::with_capacity(anchors.len());
                for row in anchors.chunks_exact(dim) {
                    let (scale, q) = quantize_row(row);
                    scales.extend(scale.to_le_bytes());
                    levels.extend(q.map(|q| q as u8));
                }
                scales.extend(levels);
                scales
            }
            AnchorPrecision::Int4 => {
                let rows = anchors.len() / dim.max(1);
                let mut scales = Vec::with_capacity(rows * (4 + dim.div_ceil(2)));
                let mut levels = Vec::with_capacity(rows * dim.div_ceil(2));
                let mut row_levels = Vec::with_capacity(dim);
                for row in anchors.chunks_exact(dim) {
                    let (scale, q) = quantize_row_int4(row);
                    scales.extend(scale.to_le_bytes());
                    row_levels.clear();
                    row_levels.extend(q.map(|q| (q + 8) as u8));
                    levels.extend(
                        row_levels
                            .chunks(2)
                            .map(|p| p[0] | p.get(1).map_or(0, |h| h << 4)),
                    );
                }
                scales.extend(levels);
                scales
            }
        };
        StoredAnchors { precision, bytes }
    }

    /// The anchor values, (num_anchors, dim) row-major; the same bits on every machine. The
    /// length of `bytes` must have been checked against [`AnchorPrecision::section_bytes`].
    pub fn decode(&self, dim: usize) -> Vec<f32> {
        let bytes = &self.bytes;
        match self.precision {
            AnchorPrecision::F32 => bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            AnchorPrecision::F16 => bytes
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            AnchorPrecision::Int8 => {
                let rows = bytes.len() / (dim + 4);
                let (scales, levels) = bytes.split_at(rows * 4);
                let mut out = Vec::with_capacity(rows * dim);
                for (s, row) in scales.chunks_exact(4).zip(levels.chunks_exact(dim)) {
                    let scale = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                    out.extend(row.iter().map(|&q| q as i8 as f32 * scale));
                }
                out
            }
            AnchorPrecision::Int4 => {
                let stride = dim.div_ceil(2);
                let rows = bytes.len() / (stride + 4);
                let (scales, levels) = bytes.split_at(rows * 4);
                let mut out = Vec::with_capacity(rows * dim);
                for (s, row) in scales.chunks_exact(4).zip(levels.chunks_exact(stride)) {
                    let scale = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                    let nibble = |j: usize| (row[j / 2] >> (4 * (j % 2)) & 15) as f32 - 8.0;
                    out.extend((0..dim).map(|j| nibble(j) * scale));
                }
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_precision_stays_within_half_a_step() {
        let dim = 7;
        let mut rng = crate::Rng::new(3);
        let mut anchors: Vec<f32> = (0..5 * dim).map(|_| rng.normal() as f32 * 0.3).collect();
        anchors[dim..2 * dim].fill(0.0); // an all-zero anchor
        for p in [
            AnchorPrecision::F32,
            AnchorPrecision::F16,
            AnchorPrecision::Int8,
        ] {
            let stored = StoredAnchors::encode(&anchors, dim, p);
            assert_eq!(stored.precision, p);
            assert_eq!(Some(stored.bytes.len()), p.section_bytes(5, dim));
            let rounded = stored.decode(dim);
            // Within half a quantisation step of the input.
            for (row, got) in anchors.chunks(dim).zip(rounded.chunks(dim)) {
                let max = row.iter().fold(0f32, |m, v| m.max(v.abs()));
                let tolerance = match p {
                    AnchorPrecision::F32 => 0.0,
                    AnchorPrecision::F16 => max * 1e-3,
                    AnchorPrecision::Int8 => max / 127.0 * 0.5 + 1e-7,
                    AnchorPrecision::Int4 => unreachable!("tested on its own"),
                };
                for (a, b) in row.iter().zip(got) {
                    assert!((a - b).abs() <= tolerance, "{p}: {a} vs {b}");
                }
            }
        }
    }

    #[test]
    fn f16_falls_back_to_f32_beyond_its_range() {
        assert_eq!(
            AnchorPrecision::F16.effective(&[1.0, 70_000.0]),
            AnchorPrecision::F32
        );
        assert_eq!(
            AnchorPrecision::Int8.effective(&[1.0, 70_000.0]),
            AnchorPrecision::Int8
        );
        assert!("int2".parse::<AnchorPrecision>().is_err());
        assert_eq!(
            "int4".parse::<AnchorPrecision>().unwrap(),
            AnchorPrecision::Int4
        );
        assert_eq!(
            "INT8".parse::<AnchorPrecision>().unwrap(),
            AnchorPrecision::Int8
        );
    }

    #[test]
    fn int4_rows_are_a_scale_times_small_integers_with_no_more_error_than_max_scaling() {
        for dim in [1, 2, 7, 64, 385] {
            let mut rng = crate::Rng::new(dim as u64);
            let mut anchors: Vec<f32> = (0..6 * dim).map(|_| rng.normal() as f32 * 0.05).collect();
            anchors[dim..2 * dim].fill(0.0); // an all-zero anchor
            anchors[2 * dim] = 0.3; // one outlier (6 σ) in a row
            let stored = StoredAnchors::encode(&anchors, dim, AnchorPrecision::Int4);
            assert_eq!(stored.precision, AnchorPrecision::Int4);
            assert_eq!(
                Some(stored.bytes.len()),
                AnchorPrecision::Int4.section_bytes(6, dim)
            );
            let rounded = stored.decode(dim);
            assert_eq!(rounded.len(), anchors.len());
            let scales: Vec<f32> = stored.bytes[..24]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let levels = &stored.bytes[24..];
            let stride = dim.div_ceil(2);
            for (r, (row, got)) in anchors.chunks(dim).zip(rounded.chunks(dim)).enumerate() {
                let scale = scales[r];
                let mut error = 0f64;
                for (a, b) in row.iter().zip(got) {
                    let q = b / scale.max(f32::MIN_POSITIVE);
                    assert!(
                        q.abs() <= 7.0 && (q - q.round()).abs() < 1e-4,
                        "{b} / {scale}"
                    );
                    error += ((a - b) as f64).powi(2);
                }
                // Max scaling (clip fraction 1) is one of the candidates.
                let max = row.iter().fold(0f32, |m, v| m.max(v.abs()));
                let s = max / 7.0;
                let max_scaled: f64 = row
                    .iter()
                    .map(|v| {
                        let q = if s > 0.0 { (v / s).round() } else { 0.0 };
                        ((v - q * s) as f64).powi(2)
                    })
                    .sum();
                assert!(
                    error <= max_scaled * (1.0 + 1e-5) + 1e-12,
                    "{error} > {max_scaled}"
                );
                if r == 2 && dim >= 64 {
                    // The outlier row: clipping it beats a step set by the outlier.
                    assert!(error < max_scaled, "{error} vs {max_scaled}");
                }
                if dim % 2 == 1 {
                    assert_eq!(levels[r * stride + stride - 1] >> 4, 0, "padding nibble");
                }
            }
            // Encoding is deterministic.
            let again = StoredAnchors::encode(&anchors, dim, AnchorPrecision::Int4);
            assert_eq!(again, stored);
        }
    }
}
