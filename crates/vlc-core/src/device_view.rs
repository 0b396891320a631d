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
    /// `pcaq` code (layout in [`crate::codec::pca`]), laid out afresh for the device so that
    /// every part starts on a 4-byte boundary: the sign plane (`padded_dim / 8` bytes), the
    /// first stage's `E` planes below it (`4·⌈n/32⌉` bytes for each of their dimension counts
    /// `n` in `planes`), f1 and f2 of the first stage as `f32`, then, for a two-stage code, the
    /// `L` remaining planes (likewise, bit `j` of `u` in plane `j`) and f1 and f2 of the full
    /// code as `f32`; bit `i % 8` of byte `i / 8` of a plane is dimension `i`, and padding
    /// bytes are 0. With `rq = P q`, `s = scale` and `bit_ij` dimension `i`'s bit in the
    /// first stage's plane `j` below the sign, the first stage's inner product is
    /// `s·Σ_i rq_i·(top_i·(sign_i + Σ_j 2^−(j+1)·bit_ij) + coarse_offset_i)` and the full
    /// code's `s·Σ_i rq_i·(top_i·(sign_i + Σ_j 2^−(j+1)·bit_ij) + Σ_j 2^j·low_ij +
    /// full_offset_i)`, `low_ij` its bit in remaining plane `j`; the estimate is
    /// `‖q − c‖² + f1 + f2 · inner product`.
    Pca {
        /// `2/√active`, `active` being the dimensions with at least one bit.
        scale: f32,
        /// `32·⌈active/32⌉`, so that the sign plane is whole 4-byte words.
        padded_dim: usize,
        /// `P` as a matrix, so the rotated query is `q · rotation`. Layout: (dim, padded_dim),
        /// row-major.
        rotation: Vec<f32>,
        /// `2^(b_i − 1)`, the weight of dimension `i`'s top bit (0 past `active`). Layout:
        /// (padded_dim,).
        top: Vec<f32>,
        /// The first stage's grid-centre offset per dimension. Layout: (padded_dim,).
        coarse_offset: Vec<f32>,
        /// The full code's grid-centre offset per dimension. Layout: (padded_dim,).
        full_offset: Vec<f32>,
        /// `E` (the first stage's planes below the sign plane), `L` (the remaining planes),
        /// then the dimensions that each of those `E` planes covers (highest bit first) and
        /// that each of the `L` covers (lowest bit first), all prefixes. Layout: (2 + E + L,).
        planes: Vec<u32>,
        /// Whether the code has a second stage (else it ends after the first stage's factors).
        two_stage: bool,
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
    /// Float residuals (layout in [`crate::codec::float`]): `dim` little-endian values of
    /// `bits` (16: IEEE half, 32: single) bits each, then the `f32` factor
    /// `‖r̂‖² + 2⟨r̂, c⟩`; the estimate is `‖q − c‖² + factor − 2⟨q, r̂⟩`.
    Float { bits: u32 },
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

/// Threads (CUDA lanes of a warp, WGPU invocations of a workgroup) that score one
/// second-stage code of `code_size` bytes together in the GPU search kernels: a power of two,
/// with at least 16 bytes of the code each (one for codes under 32 bytes, 32 from 512 bytes),
/// so that a long code is read in a few wide, coalesced steps rather than byte by byte by one
/// thread.
pub fn second_stage_group(code_size: usize) -> usize {
    let units = (code_size / 16).max(1);
    (1usize << units.ilog2()).min(32)
}

/// Everything a batched device search needs.
#[derive(Clone, Debug)]
pub struct DeviceView<'a> {
    pub dim: usize,
    pub metric: Metric,
    /// Subtracted from every query after normalisation ([`Index::centre`]). Layout: (dim,).
    pub centre: Option<&'a [f32]>,
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
    /// part, for `pcaq` only its first stage; the full code then rescores the candidate pool
    /// when there is no refine stage.
    pub primary: DeviceStage<'a>,
    /// The refine tier, when the index has one.
    pub refine: Option<DeviceStage<'a>>,
    /// Whether a second stage rescores the scan's candidate pool (see
    /// [`Index::has_second_stage`]); sizes the pool through [`crate::SearchParams::pool_size`].
    pub has_second_stage: bool,
    /// The index's energy ([`Index::energy`]), the scale of
    /// [`crate::SearchParams::probe_margin`].
    pub energy: f32,
    /// Which index value this is (each build, load, add and remove makes a new one): a device
    /// copy keeps it to refuse a [`DeviceFilter`] made with another index
    /// ([`Index::device_filter`]).
    pub instance: u64,
}

/// What a device needs to rank a filtered batch's lists itself ([`Index::device_filter_lists`]),
/// as [`Index::device_filter`] ranks them on the CPU: among the lists that hold an allowed
/// vector (`starts[a + 1] > starts[a]` in `allowed`), the `lists_to_rank` nearest the query
/// (ties by anchor id), nearest first; of them, lists in order until their shares of allowed
/// vectors (`allowed.shares`, [`crate::list_share`], added in integers in that order) reach
/// `nprobe · SHARE_ONE` ([`crate::SHARE_ONE`]), or all of them where they fall short and they are every list holding one
/// (`lists_to_rank` = `lists_with_allowed`); a query whose ranked lists fall short while
/// others remain takes [`Index::device_filter`]'s lists instead. Adaptive probing then counts
/// each list's allowed vectors.
#[derive(Clone, Debug)]
pub struct DeviceFilterLists<'a> {
    /// The index value the filter was made for ([`DeviceView::instance`]).
    pub instance: u64,
    /// Lists holding an allowed vector that a query ranks first.
    pub lists_to_rank: usize,
    /// Lists that hold an allowed vector.
    pub lists_with_allowed: usize,
    /// Vectors the filter allows, in all (0: every row is padding).
    pub allowed_count: usize,
    /// The allowed vectors list by list.
    pub allowed: &'a crate::filter::AllowedByList,
}

/// What a device search of a batch needs of an [`crate::IdFilter`]
/// ([`Index::device_filter`]): the lists each query probes, as the CPU's filtered batch
/// search probes them, and the vectors the filter allows, list by list. The device scans
/// only the allowed vectors of those lists (a narrow filter's few), so that its results match
/// the CPU's filtered search as its unfiltered ones match the CPU's unfiltered search.
#[derive(Clone, Debug)]
pub struct DeviceFilter<'a> {
    /// The index value the probes were ranked in ([`DeviceView::instance`]).
    pub instance: u64,
    /// The lists (anchors) each query probes, nearest first: query `i`'s are entries
    /// `probe_offsets[i]..probe_offsets[i + 1]`. Layout: (total probes,).
    pub probe_anchors: Vec<u32>,
    /// The query's squared distance to each probed anchor. Layout: as `probe_anchors`.
    pub probe_distances: Vec<f32>,
    /// Layout: (num_queries + 1,).
    pub probe_offsets: Vec<u32>,
    /// The most lists one query probes.
    pub max_probes: usize,
    /// Vectors the filter allows, in all (0: every row is padding).
    pub allowed_count: usize,
    /// The allowed vectors list by list ([`crate::IdFilter::allowed_by_list`]): a device
    /// scans entries `starts[a]..starts[a + 1]` of `positions` for probed list `a`, and
    /// nothing else.
    pub allowed: &'a crate::filter::AllowedByList,
}

/// Whether device kernels score `codec` (the others map to [`StageCodec::Unsupported`]).
fn device_scores(codec: &Codec) -> bool {
    matches!(
        codec,
        Codec::AnchorOnly(_)
            | Codec::RaBitQ(_)
            | Codec::Scalar(_)
            | Codec::Pca(_)
            | Codec::Float(_)
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
        Codec::Pca(p) => {
            let padded_dim = p.active_dims().div_ceil(32) * 32;
            let [top, coarse_offset, full_offset] = p.grid_weights(padded_dim);
            let (stage1, low) = (p.stage1_plane_dims(), p.low_plane_dims());
            let planes = [stage1.len(), low.len()]
                .iter()
                .chain(stage1)
                .chain(low)
                .map(|&n| n as u32)
                .collect();
            StageCodec::Pca {
                scale: 2.0 / (p.active_dims() as f32).sqrt(),
                padded_dim,
                rotation: p.rotation_matrix(padded_dim),
                top,
                coarse_offset,
                full_offset,
                planes,
                two_stage: p.two_stage(),
            }
        }
        Codec::Float(h) => StageCodec::Float {
            bits: 8 * h.width().bytes() as u32,
        },
    }
}

fn device_stage<'a>(codec: &Codec, codes: &'a [u8]) -> DeviceStage<'a> {
    let code_size = codec.code_size();
    match codec {
        Codec::RaBitQ(r)
            if r.factors() != FactorFormat::F32
                || (r.bits() > 1 && r.full_factors() != FactorFormat::F32) =>
        {
            // Both stages' factors widened to f32, the layout device kernels read: (sign plane,
            // f1, f2, low planes, f1, f2 of the full code when there is one).
            let nb = r.dim().div_ceil(8);
            let mut parts = vec![Part::Plane(nb, nb), Part::Factors(r.factors())];
            if r.bits() > 1 {
                let low = (r.bits() as usize - 1) * nb;
                parts.extend([Part::Plane(low, low), Part::Factors(r.full_factors())]);
            }
            relayout(codec, codes, &parts)
        }
        Codec::Pca(p) => {
            // Every plane padded to whole 4-byte words (see `StageCodec::Pca`).
            let plane = |n: usize| Part::Plane(n.div_ceil(8), n.div_ceil(32) * 4);
            let mut parts: Vec<Part> = std::iter::once(p.active_dims())
                .chain(p.stage1_plane_dims().iter().copied())
                .map(plane)
                .collect();
            parts.push(Part::Factors(p.factors()));
            if p.two_stage() {
                parts.extend(p.low_plane_dims().iter().map(|&n| plane(n)));
                parts.push(Part::Factors(p.full_factors()));
            }
            relayout(codec, codes, &parts)
        }
        _ => DeviceStage {
            codec: stage_codec(codec),
            code_size,
            codes: Cow::Borrowed(codes),
        },
    }
}

/// One part of a code as the device reads it, in code order.
enum Part {
    /// Bit-plane bytes: how many the file holds and how many the device gets (the rest zero).
    Plane(usize, usize),
    /// A pair of factors stored in this format, `f32` on the device.
    Factors(FactorFormat),
}

/// `codec`'s codes laid out afresh for the device, part by part.
fn relayout<'a>(codec: &Codec, codes: &[u8], parts: &[Part]) -> DeviceStage<'a> {
    let code_size: usize = parts
        .iter()
        .map(|part| match part {
            Part::Plane(_, device) => *device,
            Part::Factors(_) => 8,
        })
        .sum();
    let file_size = codec.code_size();
    let mut out = vec![0u8; codes.len() / file_size.max(1) * code_size];
    for (o, c) in out
        .chunks_exact_mut(code_size)
        .zip(codes.chunks_exact(file_size))
    {
        let (mut at, mut to) = (0, 0);
        for part in parts {
            match *part {
                Part::Plane(file, device) => {
                    o[to..to + file].copy_from_slice(&c[at..at + file]);
                    (at, to) = (at + file, to + device);
                }
                Part::Factors(format) => {
                    let (f1, f2) = format.read(&c[at..]);
                    FactorFormat::F32.write(&mut o[to..], f1, f2);
                    (at, to) = (at + format.bytes(), to + 8);
                }
            }
        }
        debug_assert_eq!((at, to), (file_size, code_size));
    }
    DeviceStage {
        codec: stage_codec(codec),
        code_size,
        codes: Cow::Owned(out),
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
            centre: self.centre.as_deref(),
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
            instance: self.instance,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::second_stage_group;
    use crate::codec::{CodecKind, ResidualCodec};
    use crate::{BuildParams, CpuBackend, Index};

    #[test]
    fn second_stage_groups_are_powers_of_two_with_16_bytes_each() {
        // (code size, group): the edges of the rule, and the second stages sq8 at 128 d
        // (132 B) and 384 d (388 B), f16 at 128 d (260 B), f32 at 128 d (516 B) and 1536 d
        // (6,148 B).
        for (code_size, group) in [
            (0, 1),
            (20, 1),
            (31, 1),
            (32, 2),
            (132, 8),
            (260, 16),
            (388, 16),
            (511, 16),
            (516, 32),
            (6148, 32),
        ] {
            assert_eq!(
                second_stage_group(code_size),
                group,
                "code size {code_size}"
            );
        }
        for code_size in 0..10_000 {
            let g = second_stage_group(code_size);
            assert!(g.is_power_of_two() && g <= 32, "{code_size}: {g}");
            assert!(
                g == 1 || code_size >= 16 * g,
                "{code_size}: {g} threads under 16 B each"
            );
            assert!(
                g == 32 || code_size < 32 * g,
                "{code_size}: {g} threads over 32 B each"
            );
        }
    }

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

    /// The device layout of `pcaq` codes, scored by `StageCodec::Pca`'s formulas, gives the
    /// CPU's full-code estimates and the first-stage estimates its fast scan quantises
    /// (`stage1_weights` over the file's first-stage bits, in f32), on a code with planes below
    /// the sign in its first stage and axes past 8 bits.
    #[test]
    fn pca_view_scores_like_the_cpu() {
        use crate::codec::{QueryState, ResidualCodec};
        let (dim, n) = (40, 3000);
        let mut data = crate::synthetic::clustered(n + 20, dim, 8, 0.3, 3);
        for row in data.chunks_exact_mut(dim) {
            row[8..].iter_mut().for_each(|v| *v /= 64.0);
        }
        let (data, queries) = data.split_at(n * dim);
        let mut params = BuildParams::default()
            .with_codec(CodecKind::PcaRaBitQ)
            .with_num_anchors(8);
        params.codec_params.bits = 5.0;
        let (index, _) = Index::build(data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
        let crate::codec::Codec::Pca(p) = &index.codec else {
            unreachable!()
        };
        assert!(p.dim_bits()[0] > 8 && !p.stage1_plane_dims().is_empty());
        let view = index.device_view();
        let crate::device_view::StageCodec::Pca {
            scale,
            padded_dim,
            rotation,
            top,
            coarse_offset,
            full_offset,
            planes,
            two_stage,
        } = &view.primary.codec
        else {
            panic!("expected a pcaq stage");
        };
        assert!(*two_stage && padded_dim % 32 == 0 && view.primary.code_size % 4 == 0);
        let cs = view.primary.code_size;
        let bit = |plane: &[u8], i: usize| (plane[i / 8] >> (i % 8) & 1) as f32;
        let f32_at = |c: &[u8], at: usize| f32::from_le_bytes(c[at..at + 4].try_into().unwrap());
        let s = *scale;
        let e = planes[0] as usize;
        let (stage1_planes, low_planes) = planes[2..].split_at(e);
        assert_eq!(low_planes.len(), planes[1] as usize);
        let (mut rotated, mut weights) = (Vec::new(), Vec::new());
        let (mut worst_full, mut worst_first) = (0f32, 0f32);
        for q in queries.chunks_exact(dim) {
            let rq: Vec<f32> = (0..*padded_dim)
                .map(|j| (0..dim).map(|d| q[d] * rotation[d * padded_dim + j]).sum())
                .collect();
            let mut state = QueryState {
                query: q.to_vec(),
                ..Default::default()
            };
            index.codec.prepare_query(&mut state);
            p.rotate_query(q, &mut rotated);
            let offset = p.stage1_weights(&rotated, &mut weights);
            for a in 0..index.num_anchors() {
                let (lo, hi) = (
                    index.list_offsets[a] as usize,
                    index.list_offsets[a + 1] as usize,
                );
                let c = &index.anchors[a * dim..(a + 1) * dim];
                let qad: f32 = q.iter().zip(c).map(|(x, y)| (x - y) * (x - y)).sum();
                let mut cpu = vec![0f32; hi - lo];
                let file_codes = &index.codes[lo * p.code_size()..hi * p.code_size()];
                index
                    .codec
                    .scan(&mut state, a as u32, qad, file_codes, &mut cpu);

                for (r, code) in view.primary.codes[lo * cs..hi * cs]
                    .chunks_exact(cs)
                    .enumerate()
                {
                    let mut at = padded_dim / 8;
                    let mut upper: Vec<f32> = (0..*padded_dim).map(|i| bit(code, i)).collect();
                    for (j, &dims) in stage1_planes.iter().enumerate() {
                        for (i, u) in upper.iter_mut().enumerate().take(dims as usize) {
                            *u += bit(&code[at..], i) / (1 << (j + 1)) as f32;
                        }
                        at += (dims as usize).div_ceil(32) * 4;
                    }
                    let first_ip: f32 = (0..*padded_dim)
                        .map(|i| s * rq[i] * (top[i] * upper[i] + coarse_offset[i]))
                        .sum();
                    let first = qad + f32_at(code, at) + f32_at(code, at + 4) * first_ip;
                    at += 8;
                    let mut low = vec![0f32; *padded_dim];
                    for (j, &dims) in low_planes.iter().enumerate() {
                        for (i, l) in low.iter_mut().enumerate().take(dims as usize) {
                            *l += bit(&code[at..], i) * (1 << j) as f32;
                        }
                        at += (dims as usize).div_ceil(32) * 4;
                    }
                    let full_ip: f32 = (0..*padded_dim)
                        .map(|i| s * rq[i] * (top[i] * upper[i] + low[i] + full_offset[i]))
                        .sum();
                    let full = qad + f32_at(code, at) + f32_at(code, at + 4) * full_ip;
                    assert_eq!(at + 8, cs);
                    let want = cpu[r];
                    worst_full = worst_full.max((full - want).abs() / (1.0 + want.abs()));
                    let file_code = &file_codes[r * p.code_size()..(r + 1) * p.code_size()];
                    let sum: f32 = (0..weights.len())
                        .map(|i| bit(file_code, i) * weights[i])
                        .sum();
                    let (f1, f2) = p.factors().read(&file_code[p.stage1_bytes()..]);
                    let want = qad + f1 + f2 * (s * sum - offset);
                    worst_first = worst_first.max((first - want).abs() / (1.0 + want.abs()));
                }
            }
        }
        // Sums in another order: f32 rounding of terms up to 2^11 times a coordinate.
        assert!(
            worst_full < 1e-4,
            "full code off by {worst_full} (relative)"
        );
        assert!(
            worst_first < 1e-4,
            "first stage off by {worst_first} (relative)"
        );
    }

    /// Every codec, as the primary code and as a refine tier, is scored by the device kernels
    /// today: no index is refused (`device_unsupported_codec`) and no view stage is
    /// `Unsupported`. A codec added without device kernels fails here until it is mapped to
    /// `Unsupported` on purpose (and this test and the README say so).
    #[test]
    fn every_codec_is_scored_on_the_device() {
        let dim = 16;
        let data = crate::synthetic::clustered(300, dim, 4, 0.3, 7);
        let refines = [
            CodecKind::Sq8,
            CodecKind::Sq4,
            CodecKind::F16,
            CodecKind::F32,
        ];
        let cases = CodecKind::ALL
            .iter()
            .map(|&c| (c, None))
            .chain(refines.iter().map(|&r| (CodecKind::RaBitQ1, Some(r))));
        for (codec, refine) in cases {
            let params = BuildParams::default()
                .with_codec(codec)
                .with_refine(refine)
                .with_num_anchors(4);
            let (index, _) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
            assert_eq!(
                index.device_unsupported_codec(),
                None,
                "{codec} + {refine:?}"
            );
            let view = index.device_view();
            for stage in std::iter::once(&view.primary).chain(view.refine.as_ref()) {
                assert!(
                    !matches!(stage.codec, crate::device_view::StageCodec::Unsupported(_)),
                    "{codec} + {refine:?}"
                );
                assert_eq!(stage.codes.len(), index.len() * stage.code_size);
            }
        }
    }
}
