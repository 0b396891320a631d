//! A flat, codec-explicit view of an [`Index`] for device backends.
//!
//! GPU backends build their own copy of an index from the canonical CPU one. They need every
//! array in a plain layout and the parameters of each codec spelled out; [`Index::device_view`]
//! gives exactly that, so no backend reaches into codec internals.

use crate::codec::{Codec, CodecKind, FactorFormat, ResidualCodec};
use crate::index::{Index, Metric};
use std::borrow::Cow;

/// How one stage (the primary scan or the refine rerank) scores a code.
#[derive(Clone, Debug)]
pub enum StageCodec {
    /// No residual: every member of a list scores `‖q − anchor‖²`.
    AnchorOnly,
    /// RaBitQ-family code of `bits` bits per dimension (layout in [`crate::codec::rabitq`],
    /// always with `f32` factors here: codes stored with `f16` factors are widened for the
    /// device).
    RaBitQ {
        bits: u32,
        /// The rotation as a matrix: row `i` is `P e_i`, zero-padded, so the rotated query is
        /// `q · rotation`. Layout: (dim, padded_dim), row-major, padded_dim = 8·⌈dim/8⌉.
        rotation: Vec<f32>,
        padded_dim: usize,
    },
    /// Scalar code: residual `r̂_d = lo[row][d] + step[row][d] · level_d`, row = the anchor
    /// with a per-anchor Jacobian, else 0; the `f32` factor `‖r̂‖² + 2⟨r̂, c⟩` follows the
    /// levels.
    Scalar {
        bits: u32,
        per_anchor: bool,
        /// Layout: (num_anchors if per_anchor else 1, dim), row-major.
        lo: Vec<f32>,
        /// Layout: as `lo`.
        step: Vec<f32>,
    },
    /// A codec the device kernels do not score yet; a device search refuses the index with a
    /// typed error naming it, and the CPU search still serves it.
    Unsupported(crate::codec::CodecKind),
}

/// One stage's codec and codes.
#[derive(Clone, Debug)]
pub struct DeviceStage<'a> {
    pub codec: StageCodec,
    /// Bytes per code.
    pub code_size: usize,
    /// Codes in list order. Layout: (num_vectors, code_size), row-major.
    pub codes: Cow<'a, [u8]>,
}

/// Everything a batched device search needs.
#[derive(Clone, Debug)]
pub struct DeviceView<'a> {
    pub dim: usize,
    pub metric: Metric,
    pub num_vectors: usize,
    /// Layout: (num_anchors, dim), row-major.
    pub anchors: &'a [f32],
    /// Squared anchor norms. Layout: (num_anchors,).
    pub anchor_norms: &'a [f32],
    /// List `a` owns positions `list_offsets[a]..list_offsets[a+1]`. Layout: (num_anchors + 1,).
    pub list_offsets: &'a [u64],
    /// Caller ids in list order (unpacked). Layout: (num_vectors,).
    pub ids: Cow<'a, [u32]>,
    /// The stage that scans the probed lists. For RaBitQ codes the scan reads only the 1-bit
    /// part; the full code then rescores the candidate pool when there is no refine stage.
    pub primary: DeviceStage<'a>,
    /// The refine tier, when the index has one.
    pub refine: Option<DeviceStage<'a>>,
    /// Whether a second stage rescores the scan's candidate pool (see
    /// [`Index::has_second_stage`]); sizes the pool through [`crate::SearchParams::pool_size`].
    pub has_second_stage: bool,
    /// The index's energy ([`Index::energy`]), the scale of
    /// [`crate::SearchParams::probe_margin`].
    pub energy: f32,
}

/// Whether device kernels score `codec` (the others map to [`StageCodec::Unsupported`]).
fn device_scores(codec: &Codec) -> bool {
    matches!(
        codec,
        Codec::AnchorOnly(_) | Codec::RaBitQ(_) | Codec::Scalar(_)
    )
}

fn stage_codec(codec: &Codec) -> StageCodec {
    match codec {
        Codec::AnchorOnly(_) => StageCodec::AnchorOnly,
        Codec::RaBitQ(r) => {
            let (rotation, padded_dim) = r.rotation_matrix();
            StageCodec::RaBitQ {
                bits: r.bits(),
                rotation,
                padded_dim,
            }
        }
        Codec::Scalar(s) => StageCodec::Scalar {
            bits: s.bits(),
            per_anchor: s.per_anchor(),
            lo: s.lo().to_vec(),
            step: s.step().to_vec(),
        },
        Codec::Pca(p) => StageCodec::Unsupported(p.kind()),
        Codec::Float(h) => StageCodec::Unsupported(h.kind()),
    }
}

fn device_stage<'a>(codec: &Codec, codes: &'a [u8]) -> DeviceStage<'a> {
    let code_size = codec.code_size();
    match codec {
        Codec::RaBitQ(r)
            if r.factors() != FactorFormat::F32
                || (r.bits() > 1 && r.full_factors() != FactorFormat::F32) =>
        {
            // Widen both stages' factors to f32, the layout device kernels read: (sign plane,
            // f1, f2, low planes, f1, f2 of the full code when there is one).
            let nb = r.dim().div_ceil(8);
            let narrow = r.factors().bytes();
            let low = (r.bits() as usize - 1) * nb;
            let full = usize::from(r.bits() > 1);
            let wide = nb + 8 + low + 8 * full;
            let mut out = vec![0u8; codes.len() / code_size.max(1) * wide];
            for (o, c) in out
                .chunks_exact_mut(wide)
                .zip(codes.chunks_exact(code_size))
            {
                o[..nb].copy_from_slice(&c[..nb]);
                let (f1, f2) = r.factors().read(&c[nb..]);
                FactorFormat::F32.write(&mut o[nb..], f1, f2);
                o[nb + 8..nb + 8 + low].copy_from_slice(&c[nb + narrow..nb + narrow + low]);
                if full == 1 {
                    let (f1, f2) = r.full_factors().read(&c[nb + narrow + low..]);
                    FactorFormat::F32.write(&mut o[nb + 8 + low..], f1, f2);
                }
            }
            DeviceStage {
                codec: stage_codec(codec),
                code_size: wide,
                codes: Cow::Owned(out),
            }
        }
        _ => DeviceStage {
            codec: stage_codec(codec),
            code_size,
            codes: Cow::Borrowed(codes),
        },
    }
}

impl Index {
    /// The first of this index's codecs (primary, then refine tier) that device kernels do not
    /// score yet, if any: a device search of this index is refused, so callers choosing a
    /// backend automatically should search on the CPU. Cheap (no view is built).
    pub fn device_unsupported_codec(&self) -> Option<CodecKind> {
        std::iter::once(&self.codec)
            .chain(self.refine.as_ref().map(|(c, _)| c))
            .find(|c| !device_scores(c))
            .map(|c| c.kind())
    }

    /// The flat view a device backend builds its copy of this index from.
    pub fn device_view(&self) -> DeviceView<'_> {
        DeviceView {
            dim: self.dim,
            metric: self.metric,
            num_vectors: self.num_vectors,
            anchors: &self.anchors,
            anchor_norms: &self.anchor_norms,
            list_offsets: &self.list_offsets,
            ids: self.ids.to_u32(),
            primary: device_stage(&self.codec, &self.codes),
            refine: self
                .refine
                .as_ref()
                .map(|(c, codes)| device_stage(c, codes)),
            has_second_stage: self.has_second_stage(),
            energy: self.energy(),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::codec::{CodecKind, ResidualCodec};
    use crate::{BuildParams, CpuBackend, Index};

    #[test]
    fn rotation_matrix_matches_the_fast_rotation() {
        let dim = 20;
        let data = crate::synthetic::clustered(400, dim, 8, 0.3, 5);
        let params = BuildParams::default()
            .with_codec(CodecKind::RaBitQ2)
            .with_num_anchors(8);
        let (index, _) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
        let view = index.device_view();
        let crate::device_view::StageCodec::RaBitQ {
            rotation,
            padded_dim,
            bits,
        } = &view.primary.codec
        else {
            panic!("expected a RaBitQ stage");
        };
        assert_eq!((*bits, *padded_dim), (2, 24));
        let crate::codec::Codec::RaBitQ(r) = &index.codec else {
            unreachable!()
        };
        let q = &data[..dim];
        let mut fast = Vec::new();
        r.rotate_query(q, &mut fast);
        for j in 0..*padded_dim {
            let by_matrix: f32 = (0..dim).map(|i| q[i] * rotation[i * padded_dim + j]).sum();
            assert!((by_matrix - fast[j]).abs() < 1e-5, "column {j}");
        }
        // Both stages' factors widened to f32 for the device: 6 bytes more each than the 8-bit
        // ones in the file.
        assert_eq!(view.primary.code_size, index.codec.code_size() + 12);
        let cs = view.primary.code_size;
        assert_eq!(view.primary.codes.len(), index.len() * cs);
        // The widened factors are the stored ones, and the planes are unchanged: file (sign 3,
        // 8-bit factors 2, low plane 3, 8-bit full factors 2), device (3, 8, 3, 8).
        let (stage1, full) = (r.factors(), r.full_factors());
        assert!(matches!(stage1, crate::codec::FactorFormat::U8 { .. }));
        assert!(matches!(full, crate::codec::FactorFormat::U8 { .. }));
        let f32_pair = |b: &[u8]| {
            (
                f32::from_le_bytes(b[..4].try_into().unwrap()),
                f32::from_le_bytes(b[4..8].try_into().unwrap()),
            )
        };
        for (wide, narrow) in view
            .primary
            .codes
            .chunks_exact(cs)
            .zip(index.codes.chunks_exact(index.codec.code_size()))
        {
            assert_eq!(wide[..3], narrow[..3]);
            assert_eq!(f32_pair(&wide[3..11]), stage1.read(&narrow[3..]));
            assert_eq!(wide[11..14], narrow[5..8]);
            assert_eq!(f32_pair(&wide[14..22]), full.read(&narrow[8..]));
        }
        assert_eq!(view.list_offsets.len(), 9);
        assert!(view.refine.is_none());
    }

    #[test]
    fn unsupported_codecs_are_named_and_match_the_view() {
        let dim = 16;
        let data = crate::synthetic::clustered(300, dim, 4, 0.3, 7);
        let cases = [
            (CodecKind::RaBitQ1, Some(CodecKind::Sq8), None),
            (CodecKind::Sq4, None, None),
            (
                CodecKind::RaBitQ1,
                Some(CodecKind::F16),
                Some(CodecKind::F16),
            ),
            (CodecKind::PcaRaBitQ, None, Some(CodecKind::PcaRaBitQ)),
            (CodecKind::F32, None, Some(CodecKind::F32)),
        ];
        for (codec, refine, want) in cases {
            let params = BuildParams::default()
                .with_codec(codec)
                .with_refine(refine)
                .with_num_anchors(4);
            let (index, _) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
            assert_eq!(
                index.device_unsupported_codec(),
                want,
                "{codec} + {refine:?}"
            );
            let view = index.device_view();
            let unsupported = std::iter::once(&view.primary)
                .chain(view.refine.as_ref())
                .find_map(|s| match s.codec {
                    crate::device_view::StageCodec::Unsupported(k) => Some(k),
                    _ => None,
                });
            assert_eq!(unsupported, want, "{codec} + {refine:?}");
        }
    }
}
