//! Half-float residuals: each dimension of `x − anchor` as an IEEE f16 value, no training.
//!
//! Meant as the refine tier that reranks a candidate pool almost exactly (`rabitq1+f16`): its
//! relative rounding per dimension (2⁻¹¹) is far below any quantiser's, so recall after the
//! rerank is what the probed lists allow. It also works as a primary codec (an uncompressed-like
//! IVF index at half the f32 bytes), but every scan then reads 2 bytes per dimension.
//!
//! Code layout (code_size = 2·dim + 4 bytes): `dim` little-endian f16 residual values, then the
//! `f32` factor `‖r̂‖² + 2⟨r̂, c⟩`.

use super::{read_f32, CodecKind, QueryState, ResidualCodec};
use crate::error::Result;
use rayon::prelude::*;

#[derive(Clone, Debug)]
pub struct Float16 {
    dim: usize,
}

impl Float16 {
    pub fn new(dim: usize) -> Self {
        Float16 { dim }
    }

    pub(crate) fn read_params(dim: usize, bytes: &[u8]) -> Result<Self> {
        super::expect_no_params(CodecKind::F16, bytes)?;
        Ok(Float16 { dim })
    }
}

impl ResidualCodec for Float16 {
    fn kind(&self) -> CodecKind {
        CodecKind::F16
    }
    fn dim(&self) -> usize {
        self.dim
    }

    fn encode(&self, points: &[f32], anchors: &[f32], assignment: &[u32], out: &mut [u8]) {
        let (dim, cs) = (self.dim, self.code_size());
        out.par_chunks_mut(cs).enumerate().for_each(|(i, code)| {
            let a = assignment[i] as usize;
            let anchor = &anchors[a * dim..(a + 1) * dim];
            let x = &points[i * dim..(i + 1) * dim];
            let mut factor = 0.0f32;
            for d in 0..dim {
                let h = half::f16::from_f32(x[d] - anchor[d]);
                let rhat = h.to_f32();
                factor += rhat * rhat + 2.0 * rhat * anchor[d];
                code[2 * d..2 * d + 2].copy_from_slice(&h.to_le_bytes());
            }
            code[2 * dim..2 * dim + 4].copy_from_slice(&factor.to_le_bytes());
        });
    }

    fn decode(&self, code: &[u8], _anchor_id: u32, out: &mut [f32]) {
        for (d, o) in out.iter_mut().enumerate().take(self.dim) {
            *o = half::f16::from_le_bytes([code[2 * d], code[2 * d + 1]]).to_f32();
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
        let (cs, values) = (self.code_size(), 2 * self.dim);
        for (o, code) in out.iter_mut().zip(codes.chunks_exact(cs)) {
            let ip = crate::simd::dot_f16(&state.query, &code[..values]);
            *o = query_anchor_dist + read_f32(code, values) - 2.0 * ip;
        }
    }

    fn write_params(&self, _out: &mut Vec<u8>) {}
}
