//! Scalar quantisation of residuals: 8 or 4 bits per dimension on a uniform grid per dimension,
//! optionally per anchor (a diagonal Jacobian: each anchor scales each dimension's range to its
//! own residual spread).
//!
//! Code layout (code_size bytes): the packed levels (8-bit: one byte per dimension; 4-bit: two
//! dimensions per byte, low nibble first), then `f32` factor `‖r̂‖² + 2⟨r̂, c⟩`.

use super::PreparedAnchors;
use super::{put_f32s, read_f32, CodecKind, ParamReader, QueryState, ResidualCodec};
use crate::error::{Result, VlcError};
use crate::linalg::dot;
use rayon::prelude::*;

/// Fewest members an anchor needs for ranges of its own; smaller anchors use the global range.
const MIN_MEMBERS_FOR_JACOBIAN: usize = 16;
/// Residual rows used to fit the global ranges.
const RANGE_SAMPLE: usize = 32_768;

#[derive(Clone, Debug)]
pub struct ScalarQuantizer {
    bits: u32,
    dim: usize,
    per_anchor: bool,
    /// Lower end of each dimension's range. Layout: (rows, dim), rows = num_anchors with a
    /// Jacobian, else 1.
    lo: Vec<f32>,
    /// Grid step of each dimension. Layout: same as `lo`.
    step: Vec<f32>,
}

/// Fraction of residual values clipped at each end when fitting ranges.
fn clip_fraction(bits: u32) -> f64 {
    if bits >= 8 {
        1e-4
    } else {
        2e-3
    }
}

fn fit_range(values: &mut [f32], bits: u32) -> (f32, f32) {
    let n = values.len();
    let levels = ((1u32 << bits) - 1) as f32;
    let p = clip_fraction(bits);
    let lo_i = ((n as f64 * p) as usize).min(n - 1);
    let hi_i = ((n as f64 * (1.0 - p)) as usize).min(n - 1).max(lo_i);
    let (_, &mut lo, _) = values.select_nth_unstable_by(lo_i, f32::total_cmp);
    let (_, &mut hi, _) = values.select_nth_unstable_by(hi_i, f32::total_cmp);
    (lo, (hi - lo).max(0.0) / levels)
}

impl ScalarQuantizer {
    pub(crate) fn train(
        bits: u32,
        per_anchor: bool,
        points: &[f32],
        anchors: &[f32],
        assignment: &[u32],
        dim: usize,
    ) -> Result<Self> {
        let m = assignment.len();
        if m == 0 {
            return Err(VlcError::EmptyInput {
                what: "codec training sample".into(),
            });
        }
        let residual =
            |i: usize, d: usize| points[i * dim + d] - anchors[assignment[i] as usize * dim + d];
        let stride = m.div_ceil(RANGE_SAMPLE).max(1);
        let sample: Vec<usize> = (0..m).step_by(stride).collect();
        let (glo, gstep): (Vec<f32>, Vec<f32>) = (0..dim)
            .into_par_iter()
            .map(|d| {
                fit_range(
                    &mut sample.iter().map(|&i| residual(i, d)).collect::<Vec<_>>(),
                    bits,
                )
            })
            .unzip();
        if !per_anchor {
            return Ok(ScalarQuantizer {
                bits,
                dim,
                per_anchor,
                lo: glo,
                step: gstep,
            });
        }
        let num_anchors = anchors.len() / dim;
        let (offsets, members) = crate::backend::group_by_anchor(assignment, num_anchors);
        let rows: Vec<(Vec<f32>, Vec<f32>)> = (0..num_anchors)
            .into_par_iter()
            .map(|a| {
                let mem = &members[offsets[a]..offsets[a + 1]];
                if mem.len() < MIN_MEMBERS_FOR_JACOBIAN {
                    return (glo.clone(), gstep.clone());
                }
                (0..dim)
                    .map(|d| {
                        fit_range(
                            &mut mem
                                .iter()
                                .map(|&i| residual(i as usize, d))
                                .collect::<Vec<_>>(),
                            bits,
                        )
                    })
                    .unzip()
            })
            .collect();
        let lo = rows.iter().flat_map(|r| r.0.iter().copied()).collect();
        let step = rows.iter().flat_map(|r| r.1.iter().copied()).collect();
        Ok(ScalarQuantizer {
            bits,
            dim,
            per_anchor,
            lo,
            step,
        })
    }

    pub(crate) fn read_params(
        kind: CodecKind,
        dim: usize,
        num_anchors: usize,
        bytes: &[u8],
    ) -> Result<Self> {
        let mut r = ParamReader::new(bytes, "scalar codec");
        let bits = r.u32()?;
        let per_anchor = r.u32()? != 0;
        let want_bits = if kind == CodecKind::Sq8 { 8 } else { 4 };
        if bits != want_bits {
            return Err(VlcError::Corrupt {
                what: format!("scalar codec bits {bits} do not match codec {kind}"),
                offset: 0,
            });
        }
        let rows = if per_anchor { num_anchors } else { 1 };
        let lo = r.f32s(rows * dim)?;
        let step = r.f32s(rows * dim)?;
        r.finish()?;
        if lo.iter().chain(&step).any(|v| !v.is_finite()) || step.iter().any(|s| *s < 0.0) {
            return Err(VlcError::Corrupt {
                what: "scalar codec ranges are not finite".into(),
                offset: 8,
            });
        }
        Ok(ScalarQuantizer {
            bits,
            dim,
            per_anchor,
            lo,
            step,
        })
    }

    pub fn per_anchor(&self) -> bool {
        self.per_anchor
    }

    /// Bits per dimension (8 or 4).
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// Lower end of each dimension's range. Layout: (num_anchors with a Jacobian, else 1, dim).
    pub fn lo(&self) -> &[f32] {
        &self.lo
    }

    /// Grid step of each dimension. Layout: as [`lo`](Self::lo).
    pub fn step(&self) -> &[f32] {
        &self.step
    }

    fn row(&self, anchor_id: u32) -> (&[f32], &[f32]) {
        let r = if self.per_anchor {
            anchor_id as usize
        } else {
            0
        };
        (
            &self.lo[r * self.dim..(r + 1) * self.dim],
            &self.step[r * self.dim..(r + 1) * self.dim],
        )
    }

    fn packed_len(&self) -> usize {
        if self.bits == 8 {
            self.dim
        } else {
            self.dim.div_ceil(2)
        }
    }

    /// Level of dimension `d` in a packed code.
    #[inline]
    fn level(&self, code: &[u8], d: usize) -> u8 {
        if self.bits == 8 {
            code[d]
        } else {
            (code[d / 2] >> ((d & 1) * 4)) & 0x0f
        }
    }

    /// Σ_d weights[d] · level_d over one packed code.
    #[inline]
    fn weighted_levels(&self, weights: &[f32], code: &[u8]) -> f32 {
        if self.bits == 8 {
            crate::simd::dot_u8(weights, &code[..self.dim])
        } else {
            crate::simd::dot_u4(weights, &code[..self.packed_len()])
        }
    }
}

impl ResidualCodec for ScalarQuantizer {
    fn kind(&self) -> CodecKind {
        if self.bits == 8 {
            CodecKind::Sq8
        } else {
            CodecKind::Sq4
        }
    }
    fn dim(&self) -> usize {
        self.dim
    }

    fn encode_prepared(
        &self,
        _prepared: &PreparedAnchors,
        points: &[f32],
        anchors: &[f32],
        assignment: &[u32],
        out: &mut [u8],
    ) {
        let (dim, cs, packed) = (self.dim, self.code_size(), self.packed_len());
        let levels = ((1u32 << self.bits) - 1) as f32;
        out.par_chunks_mut(cs).enumerate().for_each(|(i, code)| {
            let a = assignment[i];
            let anchor = &anchors[a as usize * dim..(a as usize + 1) * dim];
            let x = &points[i * dim..(i + 1) * dim];
            let (lo, step) = self.row(a);
            code[..packed].fill(0);
            let mut factor = 0.0f32;
            for d in 0..dim {
                let level = if step[d] > 0.0 {
                    ((x[d] - anchor[d] - lo[d]) / step[d])
                        .round()
                        .clamp(0.0, levels)
                } else {
                    0.0
                };
                let rhat = lo[d] + level * step[d];
                factor += rhat * rhat + 2.0 * rhat * anchor[d];
                if self.bits == 8 {
                    code[d] = level as u8;
                } else {
                    code[d / 2] |= (level as u8) << ((d & 1) * 4);
                }
            }
            code[packed..packed + 4].copy_from_slice(&factor.to_le_bytes());
        });
    }

    fn decode(&self, code: &[u8], anchor_id: u32, out: &mut [f32]) {
        let (lo, step) = self.row(anchor_id);
        for d in 0..self.dim {
            out[d] = lo[d] + self.level(code, d) as f32 * step[d];
        }
    }

    /// Without a Jacobian: `table` = q ∘ step (dim,), `constant` = ⟨q, lo⟩.
    fn prepare_query(&self, state: &mut QueryState) {
        if self.per_anchor {
            return;
        }
        state.table.clear();
        state
            .table
            .extend(state.query.iter().zip(&self.step).map(|(q, s)| q * s));
        state.constant = dot(&state.query, &self.lo);
    }

    fn scan(
        &self,
        state: &mut QueryState,
        anchor_id: u32,
        query_anchor_dist: f32,
        codes: &[u8],
        out: &mut [f32],
    ) {
        let (cs, packed) = (self.code_size(), self.packed_len());
        let (weights, constant) = if self.per_anchor {
            let (lo, step) = self.row(anchor_id);
            state.list_weights.clear();
            state
                .list_weights
                .extend(state.query.iter().zip(step).map(|(q, s)| q * s));
            (&state.list_weights, dot(&state.query, lo))
        } else {
            (&state.table, state.constant)
        };
        for (o, code) in out.iter_mut().zip(codes.chunks_exact(cs)) {
            let ip = constant + self.weighted_levels(weights, code);
            *o = query_anchor_dist + read_f32(code, packed) - 2.0 * ip;
        }
    }

    fn write_params(&self, out: &mut Vec<u8>) {
        out.extend(self.bits.to_le_bytes());
        out.extend((self.per_anchor as u32).to_le_bytes());
        put_f32s(out, &self.lo);
        put_f32s(out, &self.step);
    }
}
