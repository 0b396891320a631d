//! Float residuals: each dimension of `x − anchor` as an IEEE half (`f16`) or single (`f32`)
//! float, no training.
//!
//! Meant as the refine tier that reranks a candidate pool (`rabitq1+f16`, `rabitq1+f32`).
//! `f16`'s relative rounding per dimension (2⁻¹¹) is far below any quantiser's, so recall after
//! the rerank is what the probed lists allow, except between neighbours whose distances are a
//! few 10⁻⁵ apart (relative), which it may order either way. `f32` keeps the
//! residuals as the index computed them: the rerank is then exact up to f32 arithmetic, for
//! twice the bytes. Both also work as a primary codec (an uncompressed-like IVF index), but
//! every scan then reads 2 or 4 bytes per dimension.
//!
//! Code layout (code_size = w·dim + 4 bytes, w = 2 for f16 and 4 for f32): `dim` little-endian
//! residual values, then the `f32` factor `‖r̂‖² + 2⟨r̂, c⟩` (r̂ the stored residual, c the
//! anchor).

use super::PreparedAnchors;
use super::{read_f32, CodecKind, QueryState, ResidualCodec};
use crate::error::Result;
use rayon::prelude::*;

/// Storage width of [`FloatResidual`]'s values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloatWidth {
    /// IEEE half floats, 2 bytes per dimension.
    Half,
    /// IEEE single floats, 4 bytes per dimension.
    Single,
}

impl FloatWidth {
    /// Bytes per stored value.
    pub(crate) fn bytes(self) -> usize {
        match self {
            FloatWidth::Half => 2,
            FloatWidth::Single => 4,
        }
    }

    /// The width of a float codec kind (`F16` or `F32`); `None` for the others.
    pub fn of(kind: CodecKind) -> Option<FloatWidth> {
        match kind {
            CodecKind::F16 => Some(FloatWidth::Half),
            CodecKind::F32 => Some(FloatWidth::Single),
            _ => None,
        }
    }

    fn kind(self) -> CodecKind {
        match self {
            FloatWidth::Half => CodecKind::F16,
            FloatWidth::Single => CodecKind::F32,
        }
    }

    /// The value as stored (rounded for `Half`), and its little-endian bytes written to `out`.
    fn store(self, value: f32, out: &mut [u8]) -> f32 {
        match self {
            FloatWidth::Half => {
                let h = half::f16::from_f32(value);
                out.copy_from_slice(&h.to_le_bytes());
                h.to_f32()
            }
            FloatWidth::Single => {
                out.copy_from_slice(&value.to_le_bytes());
                value
            }
        }
    }

    fn load(self, bytes: &[u8]) -> f32 {
        match self {
            FloatWidth::Half => half::f16::from_le_bytes([bytes[0], bytes[1]]).to_f32(),
            FloatWidth::Single => read_f32(bytes, 0),
        }
    }
}

#[derive(Clone, Debug)]
pub struct FloatResidual {
    dim: usize,
    width: FloatWidth,
}

impl FloatResidual {
    pub fn new(dim: usize, width: FloatWidth) -> Self {
        FloatResidual { dim, width }
    }

    /// How the residual values are stored.
    pub fn width(&self) -> FloatWidth {
        self.width
    }

    pub(crate) fn read_params(dim: usize, width: FloatWidth, bytes: &[u8]) -> Result<Self> {
        super::expect_no_params(width.kind(), bytes)?;
        Ok(FloatResidual { dim, width })
    }
}

impl ResidualCodec for FloatResidual {
    fn kind(&self) -> CodecKind {
        self.width.kind()
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
        let (dim, cs, w) = (self.dim, self.code_size(), self.width.bytes());
        out.par_chunks_mut(cs).enumerate().for_each(|(i, code)| {
            let a = assignment[i] as usize;
            let anchor = &anchors[a * dim..(a + 1) * dim];
            let x = &points[i * dim..(i + 1) * dim];
            let mut factor = 0.0f32;
            for d in 0..dim {
                let rhat = self
                    .width
                    .store(x[d] - anchor[d], &mut code[w * d..w * (d + 1)]);
                factor += rhat * rhat + 2.0 * rhat * anchor[d];
            }
            code[w * dim..w * dim + 4].copy_from_slice(&factor.to_le_bytes());
        });
    }

    fn decode(&self, code: &[u8], _anchor_id: u32, out: &mut [f32]) {
        let w = self.width.bytes();
        for (d, o) in out.iter_mut().enumerate().take(self.dim) {
            *o = self.width.load(&code[w * d..w * (d + 1)]);
        }
    }

    fn prepare_query(&self, _state: &mut QueryState) {}

    fn scan(
        &self,
        state: &mut QueryState,
        _anchor_id: u32,
        query_anchor_dist: f32,
        codes: &[u8],
        out: &mut [f32],
    ) {
        let (cs, values) = (self.code_size(), self.width.bytes() * self.dim);
        for (o, code) in out.iter_mut().zip(codes.chunks_exact(cs)) {
            let ip = match self.width {
                FloatWidth::Half => crate::simd::dot_f16(&state.query, &code[..values]),
                FloatWidth::Single => crate::simd::dot_f32_bytes(&state.query, &code[..values]),
            };
            *o = query_anchor_dist + read_f32(code, values) - 2.0 * ip;
        }
    }

    fn write_params(&self, _out: &mut Vec<u8>) {}
}
