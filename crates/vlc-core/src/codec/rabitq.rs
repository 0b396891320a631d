//! 1-bit residual codes with per-vector correction factors (RaBitQ-style).
//!
//! A random orthogonal rotation `P` ([`FastRotation`], regenerated from the stored seed) spreads the residual over all dimensions; a code keeps the
//! sign of each rotated coordinate. With `o = P r / ‖r‖` and `x̄ = sign(o)/√D`, the estimate
//! `⟨r, y⟩ ≈ ‖r‖ ⟨x̄, P y⟩ / ⟨x̄, o⟩` is unbiased. Writing `y = q − c` and storing
//! `f2 = −2‖r‖/⟨x̄, o⟩` and `f1 = ‖r‖² − f2 ⟨x̄, P c⟩` per vector gives
//! `‖q − c − r‖² ≈ ‖q − c‖² + f1 + f2 ⟨x̄, P q⟩`, whose only query-dependent term is read
//! from one byte-lookup table built once per query (not per list).
//!
//! Code layout (code_size = ⌈D/8⌉ + 8 bytes): sign bits (dimension d at byte d/8, bit d%8),
//! then `f32` f1, then `f32` f2.

use super::{read_f32, CodecKind, ParamReader, QueryState, ResidualCodec};
use crate::error::Result;
use crate::rotation::FastRotation;
use rayon::prelude::*;

/// Rows encoded per parallel task.
const ENCODE_BLOCK: usize = 1024;

#[derive(Clone, Debug)]
pub struct RaBitQ {
    dim: usize,
    seed: u64,
    rotation: FastRotation,
}

impl RaBitQ {
    pub(crate) fn train(dim: usize, seed: u64) -> Self {
        RaBitQ {
            dim,
            seed,
            rotation: FastRotation::new(dim, seed ^ 0x0b17_c0de),
        }
    }

    pub(crate) fn read_params(dim: usize, bytes: &[u8]) -> Result<Self> {
        let mut r = ParamReader::new(bytes, "rabitq codec");
        let seed = r.u64()?;
        r.finish()?;
        Ok(Self::train(dim, seed))
    }

    /// The tables of [`ResidualCodec::prepare_query`] from an already rotated query `rq`
    /// (as [`rotate_query`](Self::rotate_query) gives it).
    pub fn prepare_rotated(&self, rq: &[f32], state: &mut QueryState) {
        let inv_sqrt_d = 1.0 / (self.dim as f32).sqrt();
        state.constant = -rq.iter().sum::<f32>() * inv_sqrt_d;
        state.table.clear();
        state.table.resize(self.bytes() * 256, 0.0);
        for (g, entries) in state.table.chunks_exact_mut(256).enumerate() {
            for m in 1..256usize {
                let low = m.trailing_zeros() as usize;
                entries[m] = entries[m & (m - 1)] + 2.0 * inv_sqrt_d * rq[g * 8 + low];
            }
        }
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
}

impl ResidualCodec for RaBitQ {
    fn kind(&self) -> CodecKind {
        CodecKind::RaBitQ1
    }
    fn dim(&self) -> usize {
        self.dim
    }

    fn encode(&self, points: &[f32], anchors: &[f32], assignment: &[u32], out: &mut [u8]) {
        let (dim, cs, nb) = (self.dim, self.code_size(), self.bytes());
        let mut rotated_anchors = anchors.to_vec();
        rotated_anchors
            .par_chunks_mut(dim)
            .for_each(|a| self.rotation.apply(a));
        let inv_sqrt_d = 1.0 / (dim as f32).sqrt();
        out.par_chunks_mut(ENCODE_BLOCK * cs)
            .enumerate()
            .for_each(|(b, out)| {
                let start = b * ENCODE_BLOCK;
                let mut rr = vec![0f32; dim];
                for (i, code) in out.chunks_exact_mut(cs).enumerate() {
                    let a = assignment[start + i] as usize;
                    let x = &points[(start + i) * dim..(start + i + 1) * dim];
                    for (d, r) in rr.iter_mut().enumerate() {
                        *r = x[d] - anchors[a * dim + d];
                    }
                    self.rotation.apply(&mut rr);
                    let pc = &rotated_anchors[a * dim..(a + 1) * dim];
                    code[..nb].fill(0);
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
                    xbar_pc *= inv_sqrt_d;
                    let (f1, f2) = if abs_sum > 0.0 {
                        // ⟨x̄, o⟩ = Σ|rr| / (√D ‖r‖), so f2 = −2‖r‖/⟨x̄,o⟩ = −2‖r‖²√D / Σ|rr|.
                        let f2 = -2.0 * norm_sq / (abs_sum * inv_sqrt_d);
                        (norm_sq - f2 * xbar_pc, f2)
                    } else {
                        (0.0, 0.0)
                    };
                    code[nb..nb + 4].copy_from_slice(&f1.to_le_bytes());
                    code[nb + 4..nb + 8].copy_from_slice(&f2.to_le_bytes());
                }
            });
    }

    /// The reconstruction consistent with the estimator: `(−f2/2) Pᵀ x̄`.
    fn decode(&self, code: &[u8], _anchor_id: u32, out: &mut [f32]) {
        let scale = -0.5 * read_f32(code, self.bytes() + 4) / (self.dim as f32).sqrt();
        for (i, o) in out.iter_mut().enumerate() {
            *o = if code[i / 8] >> (i % 8) & 1 == 1 {
                scale
            } else {
                -scale
            };
        }
        self.rotation.apply_inverse(out);
    }

    /// `table`: (⌈D/8⌉, 256), entry `[g][m]` = (2/√D) Σ_{bit j of m} (P q)[8g + j];
    /// `constant` = −Σ (P q) / √D, so `⟨x̄, P q⟩ = constant + Σ_g table[g][code byte g]`.
    fn prepare_query(&self, state: &mut QueryState) {
        let mut rq = Vec::new();
        self.rotate_query(&state.query, &mut rq);
        self.prepare_rotated(&rq, state);
    }

    fn scan(
        &self,
        state: &mut QueryState,
        _anchor_id: u32,
        query_anchor_dist: f32,
        codes: &[u8],
        out: &mut [f32],
    ) {
        let (cs, nb) = (self.code_size(), self.bytes());
        let table = &state.table;
        for (o, code) in out.iter_mut().zip(codes.chunks_exact(cs)) {
            let mut s = [0f32; 4];
            let full = nb / 4;
            for c in 0..full {
                for j in 0..4 {
                    let g = c * 4 + j;
                    s[j] += table[g * 256 + code[g] as usize];
                }
            }
            let mut ip = state.constant + (s[0] + s[1]) + (s[2] + s[3]);
            for g in full * 4..nb {
                ip += table[g * 256 + code[g] as usize];
            }
            *o = query_anchor_dist + read_f32(code, nb) + read_f32(code, nb + 4) * ip;
        }
    }

    fn write_params(&self, out: &mut Vec<u8>) {
        out.extend(self.seed.to_le_bytes());
    }
}
