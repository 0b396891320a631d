//! Residual codecs: how a vector's residual `x − anchor` is stored.
//!
//! Every codec implements [`ResidualCodec`] (train / encode / decode / prepare-query / scan);
//! the closed enum [`Codec`] dispatches to them once per inverted list, and is what the index
//! file serialises (a [`CodecKind`] byte plus the codec's parameter blob).
//!
//! All estimators use the decomposition, for query `q`, anchor `c` and reconstructed residual
//! `r̂`: `‖q − c − r̂‖² = ‖q − c‖² + (‖r̂‖² + 2⟨r̂, c⟩) − 2⟨r̂, q⟩`. The middle term is stored
//! per vector, so a query needs only `⟨r̂, q⟩`, computed from tables built once per query.

pub mod anchor_only;
mod factors;
pub mod float;
pub mod levels;
pub mod pca;
pub mod rabitq;
pub mod scalar;

use crate::error::{Result, VlcError};
pub use anchor_only::AnchorOnly;
pub use factors::{FactorFormat, FactorRange, ResidualSpread};
pub use float::{FloatResidual, FloatWidth};
pub use pca::PcaRaBitQ;
pub use rabitq::RaBitQ;
pub use scalar::ScalarQuantizer;

/// Which codec; the byte value is part of the file format and never changes meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CodecKind {
    /// No residual at all: a vector is its anchor (the original VLC "2-3%" mode).
    AnchorOnly = 0,
    /// 8 bits per dimension, uniform per-dimension ranges.
    Sq8 = 1,
    /// 4 bits per dimension, uniform per-dimension ranges (two dimensions per byte).
    Sq4 = 2,
    /// 1 bit per dimension after a random rotation, with two per-vector correction factors
    /// (RaBitQ-style unbiased inner-product estimate).
    RaBitQ1 = 3,
    /// Extended RaBitQ with 2 bits per dimension: the 1-bit code above (scanned first, fast)
    /// plus a finer bit plane that rescores the candidates; four per-vector factors.
    RaBitQ2 = 4,
    /// Extended RaBitQ with 3 bits per dimension (1-bit pass, then two finer planes).
    RaBitQ3 = 5,
    /// Extended RaBitQ with 4 bits per dimension (1-bit pass, then three finer planes).
    RaBitQ4 = 6,
    /// Extended RaBitQ in the principal axes of the residuals, with bits per dimension
    /// allocated by variance: any average from just over 1 to 8 bits ([`CodecParams::bits`]).
    PcaRaBitQ = 7,
    /// Each residual dimension as a half float (2 bytes per dimension): the near-exact refine
    /// tier (`rabitq1+f16`).
    F16 = 8,
    /// Each residual dimension as an f32 (4 bytes per dimension): the exact refine tier
    /// (`rabitq1+f32`), which also orders neighbours whose distances `f16` cannot separate.
    F32 = 9,
    /// Extended RaBitQ with 5 bits per dimension (1-bit pass, then four finer planes). Like
    /// the 6- to 8-bit codes below, a high-rate code with nothing stored for its rotation and
    /// an O(D log D) query rotation, where `pcaq` stores up to D x D bytes and multiplies by
    /// them: the codec for high rates on small collections of high-dimensional vectors.
    RaBitQ5 = 10,
    /// Extended RaBitQ with 6 bits per dimension.
    RaBitQ6 = 11,
    /// Extended RaBitQ with 7 bits per dimension.
    RaBitQ7 = 12,
    /// Extended RaBitQ with 8 bits per dimension.
    RaBitQ8 = 13,
}

/// The pattern that matches every fixed-width RaBitQ kind (`rabitq1` to `rabitq8`).
macro_rules! rabitq_kinds {
    () => {
        CodecKind::RaBitQ1
            | CodecKind::RaBitQ2
            | CodecKind::RaBitQ3
            | CodecKind::RaBitQ4
            | CodecKind::RaBitQ5
            | CodecKind::RaBitQ6
            | CodecKind::RaBitQ7
            | CodecKind::RaBitQ8
    };
}

impl CodecKind {
    pub const ALL: [CodecKind; 14] = [
        CodecKind::AnchorOnly,
        CodecKind::Sq8,
        CodecKind::Sq4,
        CodecKind::RaBitQ1,
        CodecKind::RaBitQ2,
        CodecKind::RaBitQ3,
        CodecKind::RaBitQ4,
        CodecKind::PcaRaBitQ,
        CodecKind::F16,
        CodecKind::F32,
        CodecKind::RaBitQ5,
        CodecKind::RaBitQ6,
        CodecKind::RaBitQ7,
        CodecKind::RaBitQ8,
    ];

    pub fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|k| *k as u8 == v)
    }

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            CodecKind::AnchorOnly => "anchor-only",
            CodecKind::Sq8 => "sq8",
            CodecKind::Sq4 => "sq4",
            CodecKind::RaBitQ1 => "rabitq1",
            CodecKind::RaBitQ2 => "rabitq2",
            CodecKind::RaBitQ3 => "rabitq3",
            CodecKind::RaBitQ4 => "rabitq4",
            CodecKind::RaBitQ5 => "rabitq5",
            CodecKind::RaBitQ6 => "rabitq6",
            CodecKind::RaBitQ7 => "rabitq7",
            CodecKind::RaBitQ8 => "rabitq8",
            CodecKind::PcaRaBitQ => "pcaq",
            CodecKind::F16 => "f16",
            CodecKind::F32 => "f32",
        }
    }

    /// Bits per dimension of a RaBitQ-family codec; `None` for the others.
    pub fn rabitq_bits(self) -> Option<u32> {
        match self {
            CodecKind::RaBitQ1 => Some(1),
            CodecKind::RaBitQ2 => Some(2),
            CodecKind::RaBitQ3 => Some(3),
            CodecKind::RaBitQ4 => Some(4),
            CodecKind::RaBitQ5 => Some(5),
            CodecKind::RaBitQ6 => Some(6),
            CodecKind::RaBitQ7 => Some(7),
            CodecKind::RaBitQ8 => Some(8),
            _ => None,
        }
    }

    /// Bytes one vector's code takes at dimension `dim` (factors included); `None` for the
    /// RaBitQ family, whose size follows training (the factor format, and for `pcaq` the bit
    /// allocation; see [`ResidualCodec::code_size`]).
    pub fn code_size(self, dim: usize) -> Option<usize> {
        Some(match self {
            CodecKind::AnchorOnly => 0,
            CodecKind::Sq8 => dim + 4,
            CodecKind::Sq4 => dim.div_ceil(2) + 4,
            CodecKind::F16 => 2 * dim + 4,
            CodecKind::F32 => 4 * dim + 4,
            _ => return None,
        })
    }
}

impl std::str::FromStr for CodecKind {
    type Err = VlcError;
    fn from_str(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s.to_ascii_lowercase())
            .ok_or_else(|| {
                VlcError::param(
                    "codec",
                    format!("unknown codec `{s}` (expected anchor-only, sq8, sq4, f16, f32, rabitq1 to rabitq8, or pcaq)"),
                )
            })
    }
}

/// Parse a codec spec: a codec name, or `pcaq` followed by its average bits per dimension
/// (`pcaq3.2`). Returns the kind and the bits when the spec gives them.
pub fn parse_codec_spec(text: &str) -> Result<(CodecKind, Option<f32>)> {
    let lower = text.trim().to_ascii_lowercase();
    if let Some(rest) = lower.strip_prefix("pcaq") {
        if rest.is_empty() {
            return Ok((CodecKind::PcaRaBitQ, None));
        }
        let bits: f32 = rest.parse().map_err(|_| {
            VlcError::param(
                "codec",
                format!("`{text}`: expected pcaq followed by bits per dimension, e.g. pcaq3.2"),
            )
        })?;
        if !(bits > 0.0 && bits <= pca::MAX_AVERAGE_BITS as f32) {
            return Err(VlcError::param(
                "codec",
                format!("`{text}`: pcaq needs more than 0 and at most 8 bits per dimension"),
            ));
        }
        return Ok((CodecKind::PcaRaBitQ, Some(bits)));
    }
    Ok((lower.parse()?, None))
}

/// Parse a refine tier: `none`, or one of the codecs that rerank well (`sq4`, `sq8`, `f16`,
/// `f32`); `None` for `none`.
pub fn parse_refine(text: &str) -> Result<Option<CodecKind>> {
    if text.trim().eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let kind: CodecKind = text.trim().parse().map_err(|_| {
        VlcError::param(
            "refine",
            format!("unknown refine tier `{text}` (expected none, f32, f16, sq8 or sq4)"),
        )
    })?;
    if !matches!(
        kind,
        CodecKind::Sq8 | CodecKind::Sq4 | CodecKind::F16 | CodecKind::F32
    ) {
        return Err(VlcError::param(
            "refine",
            format!("must be none, f32, f16, sq8 or sq4 (got {kind})"),
        ));
    }
    Ok(Some(kind))
}

impl std::fmt::Display for CodecKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Per-query, per-thread scratch that codecs fill in [`ResidualCodec::prepare_query`] and read
/// while scanning. Reused across queries so the hot path does not allocate.
#[derive(Clone, Debug, Default)]
pub struct QueryState {
    /// The query, as given. Layout: (dim,).
    pub query: Vec<f32>,
    /// Codec lookup table or weights. Layout is codec specific (documented there).
    pub table: Vec<f32>,
    /// Per-list weights for codecs whose tables depend on the anchor. Layout: (dim,).
    pub list_weights: Vec<f32>,
    /// Codec-specific query constant.
    pub constant: f32,
    /// For codecs whose estimate is a sum of bit-plane terms (see `planes_estimate`): entry
    /// `t` is the least and the greatest that terms `t..` can add for this query, so entry 0
    /// spans every code and the last entry is `[0, 0]`. Layout: (terms + 1,).
    pub remaining: Vec<[f32; 2]>,
}

/// Fill `remaining` (see [`QueryState::remaining`]) from each term's own least and greatest
/// contribution, in term order.
pub(crate) fn fill_remaining(term_bounds: &[[f32; 2]], remaining: &mut Vec<[f32; 2]>) {
    remaining.clear();
    remaining.resize(term_bounds.len() + 1, [0.0, 0.0]);
    for t in (0..term_bounds.len()).rev() {
        remaining[t] = [
            remaining[t + 1][0] + term_bounds[t][0],
            remaining[t + 1][1] + term_bounds[t][1],
        ];
    }
}

/// The least and greatest `Σ_{i in S} weights[i]` over every subset `S`: the sums of the
/// negative and of the positive weights.
pub(crate) fn term_bounds(weights: &[f32]) -> [f32; 2] {
    // Lane-wise, branch-free sums (signs of query weights are unpredictable), which the
    // compiler vectorises.
    const LANES: usize = 16;
    let (mut least, mut greatest) = ([0f32; LANES], [0f32; LANES]);
    let chunks = weights.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for ((l, g), &w) in least.iter_mut().zip(greatest.iter_mut()).zip(chunk) {
            *l += w.min(0.0);
            *g += w.max(0.0);
        }
    }
    for ((l, g), &w) in least.iter_mut().zip(greatest.iter_mut()).zip(tail) {
        *l += w.min(0.0);
        *g += w.max(0.0);
    }
    [least.iter().sum::<f32>(), greatest.iter().sum::<f32>()]
}

/// A bit-plane code's full estimate `query_anchor_dist + f1 + f2 · (constant + Σ_t terms_t)`:
/// [`planes_estimate`] without a limit.
#[inline(always)]
pub(crate) fn planes_full(
    terms: &[crate::simd::BitTerm],
    constant: f32,
    query_anchor_dist: f32,
    factors: (f32, f32),
) -> f32 {
    planes_estimate(
        terms,
        &[],
        constant,
        query_anchor_dist,
        factors,
        f32::INFINITY,
        f32::INFINITY,
    )
    .expect("without a limit nothing stops the sum")
}

/// A bit-plane code's estimate `query_anchor_dist + f1 + f2 · (constant + Σ_t terms_t)` (the
/// terms most significant first), or `None` once the terms summed so far and the bounds of the
/// rest (`remaining`, see [`QueryState::remaining`]) prove it above `limit`. `Some(..)` is
/// bit-identical to the estimate computed without any check.
///
/// A check costs a horizontal sum, about as much as a short plane, so checks start only at the
/// first term after which the bound could plausibly exclude the code: where the band the
/// remaining terms leave open is under twice `guess − limit`, `guess` being an earlier
/// estimate of the same code (the first stage's). The guess only schedules the checks; the
/// outcome never depends on it.
#[inline(always)]
pub(crate) fn planes_estimate(
    terms: &[crate::simd::BitTerm],
    remaining: &[[f32; 2]],
    constant: f32,
    query_anchor_dist: f32,
    (f1, f2): (f32, f32),
    limit: f32,
    guess: f32,
) -> Option<f32> {
    let finish = |sum: f32| query_anchor_dist + f1 + f2 * (constant + sum);
    let margin = guess - limit;
    // The band left after term t is |f2| · (hi − lo) of remaining[t + 1]; the sign plane
    // (t = 0) dominates the first stage, by which the candidates are already ordered.
    let first_check = if remaining.len() == terms.len() + 1 && margin > 0.0 {
        (1..terms.len()).find(|&t| {
            let [lo, hi] = remaining[t + 1];
            f2.abs() * (hi - lo) <= 2.0 * margin
        })
    } else {
        None
    };
    let Some(first_check) = first_check else {
        return Some(finish(crate::simd::weighted_bit_sums(terms)));
    };
    let base = query_anchor_dist + f1 + f2 * constant;
    // Rounding of the partial sums against the full one: far below this slack, which scales
    // with the largest magnitudes the estimate adds up.
    let [least, greatest] = remaining[0];
    let slack = 1e-5
        * (query_anchor_dist.abs() + f1.abs() + f2.abs() * (constant.abs() + greatest - least));
    let sum = crate::simd::weighted_bit_sums_checked(terms, first_check, |t, partial| {
        let [lo, hi] = remaining[t + 1];
        base + f2 * partial + (f2 * lo).min(f2 * hi) - slack <= limit
    })?;
    Some(finish(sum))
}

/// Anchor data a codec derives once for many [`ResidualCodec::encode_prepared`] calls.
#[derive(Clone, Debug, Default)]
pub struct PreparedAnchors {
    /// The anchors in the codec's rotated basis; empty for codecs without one.
    /// Layout: (num_anchors, the codec's coded width: `dim`, or `pcaq`'s coded axes), row-major.
    pub rotated: Vec<f32>,
}

/// What a codec does. Implementations hold only trained parameters; codes live in the index.
pub trait ResidualCodec {
    fn kind(&self) -> CodecKind;
    fn dim(&self) -> usize;
    /// Bytes per encoded vector (per-vector factors included).
    fn code_size(&self) -> usize {
        self.kind()
            .code_size(self.dim())
            .expect("codecs whose size depends on training override code_size")
    }
    /// Encode a block of points against their anchors.
    /// `points`: (m, dim); `anchors`: (num_anchors, dim); `assignment`: (m,);
    /// `out`: (m, code_size), row-major.
    fn encode(&self, points: &[f32], anchors: &[f32], assignment: &[u32], out: &mut [u8]) {
        let prepared = self.prepare_anchors(anchors);
        self.encode_prepared(&prepared, points, anchors, assignment, out)
    }
    /// What [`encode`](Self::encode) derives from the anchors alone (the rotated codecs'
    /// anchors in their basis), computed once for the many blocks of a build.
    fn prepare_anchors(&self, _anchors: &[f32]) -> PreparedAnchors {
        PreparedAnchors::default()
    }
    /// [`encode`](Self::encode) with `prepared` from [`prepare_anchors`](Self::prepare_anchors)
    /// of the same `anchors`.
    fn encode_prepared(
        &self,
        prepared: &PreparedAnchors,
        points: &[f32],
        anchors: &[f32],
        assignment: &[u32],
        out: &mut [u8],
    );
    /// [`encode_prepared`](Self::encode_prepared) with the encode primitive
    /// ([`Backend::code_levels`](crate::Backend::code_levels)) on `backend` where this codec has one and the backend offers
    /// it; the codes are the same byte for byte. The default encodes on the CPU.
    fn encode_on(
        &self,
        _backend: &dyn crate::Backend,
        prepared: &PreparedAnchors,
        points: &[f32],
        anchors: &[f32],
        assignment: &[u32],
        out: &mut [u8],
    ) -> Result<()> {
        self.encode_prepared(prepared, points, anchors, assignment, out);
        Ok(())
    }
    /// Reconstruct the residual of one code into `out` (dim,).
    fn decode(&self, code: &[u8], anchor_id: u32, out: &mut [f32]);
    /// Build the per-query tables in `state` (its `query` field is already set).
    fn prepare_query(&self, state: &mut QueryState);
    /// Estimated squared distances from the prepared query to every code of one list.
    /// `codes`: (len, code_size); `out`: (len,). `query_anchor_dist` is `‖q − c‖²`.
    fn scan(
        &self,
        state: &mut QueryState,
        anchor_id: u32,
        query_anchor_dist: f32,
        codes: &[u8],
        out: &mut [f32],
    );
    /// [`scan`](Self::scan)'s estimate for one code, or `None` when it is certain to exceed
    /// `limit`: codecs whose estimate is a sum of bit planes stop as soon as the planes left
    /// cannot bring it back to `limit` (the candidates a pool rescoring would drop anyway).
    /// `guess` is an earlier estimate of the same code (a first stage's), which such codecs
    /// use to decide when checking is worth its cost; the result does not depend on it.
    /// The default scores the whole code.
    fn estimate_below(
        &self,
        state: &mut QueryState,
        anchor_id: u32,
        query_anchor_dist: f32,
        code: &[u8],
        limit: f32,
        guess: f32,
    ) -> Option<f32> {
        let _ = (limit, guess);
        let mut out = [0f32];
        self.scan(state, anchor_id, query_anchor_dist, code, &mut out);
        Some(out[0])
    }
    /// Serialise the trained parameters (little-endian).
    fn write_params(&self, out: &mut Vec<u8>);
}

/// Knobs for codec training.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CodecParams {
    /// Scale quantisation ranges per anchor and dimension (a diagonal Jacobian). Scalar codecs
    /// only; costs 8 bytes × dim per anchor in the file.
    pub jacobian: bool,
    /// Seed for random parts (the RaBitQ rotation).
    pub seed: u64,
    /// Average bits per dimension of `pcaq` (more than 0, at most 8); ignored by the others.
    #[serde(default = "default_pca_bits")]
    pub bits: f32,
}

fn default_pca_bits() -> f32 {
    pca::DEFAULT_BITS
}

impl Default for CodecParams {
    fn default() -> Self {
        CodecParams {
            jacobian: false,
            seed: 0x5eed,
            bits: pca::DEFAULT_BITS,
        }
    }
}

/// The closed set of codecs, for dispatch and serialisation.
#[derive(Clone, Debug)]
pub enum Codec {
    AnchorOnly(AnchorOnly),
    Scalar(ScalarQuantizer),
    RaBitQ(RaBitQ),
    Pca(PcaRaBitQ),
    Float(FloatResidual),
}

macro_rules! dispatch {
    ($self:expr, $c:ident => $body:expr) => {
        match $self {
            Codec::AnchorOnly($c) => $body,
            Codec::Scalar($c) => $body,
            Codec::RaBitQ($c) => $body,
            Codec::Pca($c) => $body,
            Codec::Float($c) => $body,
        }
    };
}

impl Codec {
    /// Train a codec of `kind` on sample points already assigned to `anchors`.
    /// `points`: (m, dim); `anchors`: (num_anchors, dim); `assignment`: (m,).
    pub fn train(
        kind: CodecKind,
        params: &CodecParams,
        points: &[f32],
        anchors: &[f32],
        assignment: &[u32],
        dim: usize,
    ) -> Result<Codec> {
        if params.jacobian && !matches!(kind, CodecKind::Sq8 | CodecKind::Sq4) {
            return Err(VlcError::param(
                "jacobian",
                format!("only the scalar codecs (sq8, sq4) support it, not {kind}"),
            ));
        }
        Ok(match kind {
            CodecKind::AnchorOnly => Codec::AnchorOnly(AnchorOnly::new(dim)),
            CodecKind::F16 | CodecKind::F32 => {
                Codec::Float(FloatResidual::new(dim, FloatWidth::of(kind).unwrap()))
            }
            CodecKind::Sq8 | CodecKind::Sq4 => {
                let bits = if kind == CodecKind::Sq8 { 8 } else { 4 };
                Codec::Scalar(ScalarQuantizer::train(
                    bits,
                    params.jacobian,
                    points,
                    anchors,
                    assignment,
                    dim,
                )?)
            }
            rabitq_kinds!() => Codec::RaBitQ(RaBitQ::train(
                dim,
                kind.rabitq_bits().unwrap(),
                params.seed,
                points,
                anchors,
                assignment,
            )),
            CodecKind::PcaRaBitQ => Codec::Pca(PcaRaBitQ::train(
                dim,
                params.bits,
                params.seed,
                points,
                anchors,
                assignment,
            )?),
        })
    }

    /// Rebuild a codec from parameters serialised by this version, checking every length.
    pub fn read_params(
        kind: CodecKind,
        dim: usize,
        num_anchors: usize,
        bytes: &[u8],
    ) -> Result<Codec> {
        Self::read_params_of_version(kind, dim, num_anchors, crate::format::FORMAT_VERSION, bytes)
    }

    /// Rebuild a codec from parameters serialised by index format `version`.
    pub fn read_params_of_version(
        kind: CodecKind,
        dim: usize,
        num_anchors: usize,
        version: u32,
        bytes: &[u8],
    ) -> Result<Codec> {
        Ok(match kind {
            CodecKind::AnchorOnly => Codec::AnchorOnly(AnchorOnly::read_params(dim, bytes)?),
            CodecKind::F16 | CodecKind::F32 => Codec::Float(FloatResidual::read_params(
                dim,
                FloatWidth::of(kind).unwrap(),
                bytes,
            )?),
            CodecKind::Sq8 | CodecKind::Sq4 => {
                Codec::Scalar(ScalarQuantizer::read_params(kind, dim, num_anchors, bytes)?)
            }
            rabitq_kinds!() => Codec::RaBitQ(RaBitQ::read_params(
                dim,
                kind.rabitq_bits().unwrap(),
                bytes,
            )?),
            CodecKind::PcaRaBitQ => Codec::Pca(PcaRaBitQ::read_params(dim, version, bytes)?),
        })
    }

    /// Whether parameters depend on anchors (per-anchor Jacobian).
    pub fn has_jacobian(&self) -> bool {
        matches!(self, Codec::Scalar(s) if s.per_anchor())
    }

    /// For codecs searched in two stages (the RaBitQ family): the bytes of bit planes at the
    /// start of each code that the fast scan reads, and the format of the two factors that
    /// follow them.
    /// How the per-vector factors are stored: the first stage's, and the full code's for
    /// two-stage codes; `None` for codecs without such factors.
    pub fn factor_formats(&self) -> Option<(FactorFormat, Option<FactorFormat>)> {
        match self {
            Codec::RaBitQ(r) => Some((r.factors(), (r.bits() > 1).then(|| r.full_factors()))),
            Codec::Pca(p) => Some((p.factors(), p.two_stage().then(|| p.full_factors()))),
            _ => None,
        }
    }

    pub fn fast_scan_bytes(&self) -> Option<(usize, FactorFormat)> {
        match self {
            Codec::RaBitQ(r) => Some((r.dim().div_ceil(8), r.factors())),
            Codec::Pca(p) => Some((p.stage1_bytes(), p.factors())),
            _ => None,
        }
    }

    /// A typical magnitude of the weight of each bit the fast scan reads, where they differ
    /// enough that one quantisation step would round the light ones away (`pcaq` with wide
    /// axes; see [`crate::fastscan`] and [`pca::PcaRaBitQ::stage1_hints`]); `None` where one
    /// step serves. Layout: (fast-scan bytes · 8,).
    pub fn fast_scan_hints(&self) -> Option<Vec<f32>> {
        match self {
            Codec::Pca(p) => p.stage1_hints(),
            _ => None,
        }
    }

    /// Rotate a block of queries (m, dim) into the codec's basis with one GEMM, for codecs
    /// whose rotation is a dense matrix (`pcaq`); `None` for the others (RaBitQ's structured
    /// rotation is cheap per query). Returns the rotated block, layout (m, width) row-major,
    /// and its width (the coded dimensions).
    pub(crate) fn rotate_queries(&self, queries: &[f32]) -> Option<(Vec<f32>, usize)> {
        match self {
            Codec::Pca(p) => Some((p.rotate_queries(queries), p.active_dims())),
            _ => None,
        }
    }

    /// Prepare query `q` for a two-stage scan: the fast scan's table into `lut` and, when
    /// `full` is given, the full code's tables into it. `rotated` and `weights` are scratch;
    /// `pre_rotated` is `q` already rotated by [`rotate_queries`](Self::rotate_queries).
    /// Does nothing for codecs without a fast scan.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn prepare_fast_scan(
        &self,
        q: &[f32],
        pre_rotated: Option<&[f32]>,
        fast_scan: &crate::fastscan::FastScan,
        rotated: &mut Vec<f32>,
        weights: &mut Vec<f32>,
        lut: &mut crate::fastscan::QueryLut,
        full: Option<&mut QueryState>,
    ) {
        let inv_sqrt_d = 1.0 / (self.dim() as f32).sqrt();
        match self {
            Codec::RaBitQ(r) => {
                r.rotate_query(q, rotated);
                let offset = rotated.iter().sum::<f32>() * inv_sqrt_d;
                fast_scan.prepare(rotated, 2.0 * inv_sqrt_d, offset, lut);
                if let Some(state) = full {
                    r.prepare_rotated(rotated, state);
                }
            }
            Codec::Pca(p) => {
                match pre_rotated {
                    Some(r) => {
                        rotated.clear();
                        rotated.extend_from_slice(r);
                        rotated.resize(p.active_dims().div_ceil(8) * 8, 0.0);
                    }
                    None => p.rotate_query(q, rotated),
                }
                let offset = p.stage1_weights(rotated, weights);
                let scale = 2.0 / (p.active_dims() as f32).sqrt();
                fast_scan.prepare(weights, scale, offset, lut);
                if let Some(state) = full {
                    p.prepare_rotated(rotated, state);
                }
            }
            _ => {}
        }
    }
}

impl ResidualCodec for Codec {
    fn kind(&self) -> CodecKind {
        dispatch!(self, c => c.kind())
    }
    fn dim(&self) -> usize {
        dispatch!(self, c => c.dim())
    }
    fn code_size(&self) -> usize {
        dispatch!(self, c => c.code_size())
    }
    fn prepare_anchors(&self, anchors: &[f32]) -> PreparedAnchors {
        dispatch!(self, c => c.prepare_anchors(anchors))
    }
    fn encode_prepared(
        &self,
        prepared: &PreparedAnchors,
        points: &[f32],
        anchors: &[f32],
        assignment: &[u32],
        out: &mut [u8],
    ) {
        dispatch!(self, c => c.encode_prepared(prepared, points, anchors, assignment, out))
    }
    fn encode_on(
        &self,
        backend: &dyn crate::Backend,
        prepared: &PreparedAnchors,
        points: &[f32],
        anchors: &[f32],
        assignment: &[u32],
        out: &mut [u8],
    ) -> Result<()> {
        dispatch!(self, c => c.encode_on(backend, prepared, points, anchors, assignment, out))
    }
    fn decode(&self, code: &[u8], anchor_id: u32, out: &mut [f32]) {
        dispatch!(self, c => c.decode(code, anchor_id, out))
    }
    fn prepare_query(&self, state: &mut QueryState) {
        dispatch!(self, c => c.prepare_query(state))
    }
    fn scan(
        &self,
        state: &mut QueryState,
        anchor_id: u32,
        query_anchor_dist: f32,
        codes: &[u8],
        out: &mut [f32],
    ) {
        dispatch!(self, c => c.scan(state, anchor_id, query_anchor_dist, codes, out))
    }
    fn estimate_below(
        &self,
        state: &mut QueryState,
        anchor_id: u32,
        query_anchor_dist: f32,
        code: &[u8],
        limit: f32,
        guess: f32,
    ) -> Option<f32> {
        dispatch!(self, c => c.estimate_below(state, anchor_id, query_anchor_dist, code, limit, guess))
    }
    fn write_params(&self, out: &mut Vec<u8>) {
        dispatch!(self, c => c.write_params(out))
    }
}

/// Reads little-endian values from a parameter blob, failing with a typed error when short.
pub(crate) struct ParamReader<'a> {
    bytes: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> ParamReader<'a> {
    pub(crate) fn new(bytes: &'a [u8], what: &'static str) -> Self {
        ParamReader {
            bytes,
            pos: 0,
            what,
        }
    }
    pub(crate) fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes(b.try_into().unwrap()))
    }
    pub(crate) fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap()))
    }
    pub(crate) fn bytes(&mut self, count: usize) -> Result<&'a [u8]> {
        self.take(count)
    }
    pub(crate) fn f32s(&mut self, count: usize) -> Result<Vec<f32>> {
        let len = count
            .checked_mul(4)
            .ok_or_else(|| self.corrupt("length overflow"))?;
        let b = self.take(len)?;
        Ok(b.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect())
    }
    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }
    pub(crate) fn finish(self) -> Result<()> {
        if self.pos != self.bytes.len() {
            return Err(self.corrupt(&format!("{} trailing bytes", self.bytes.len() - self.pos)));
        }
        Ok(())
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.bytes.len() - self.pos < n {
            return Err(self.corrupt(&format!(
                "needs {n} more bytes at {}, has {}",
                self.pos,
                self.bytes.len() - self.pos
            )));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    pub(crate) fn corrupt(&self, reason: &str) -> VlcError {
        VlcError::Corrupt {
            what: format!("{} parameters: {reason}", self.what),
            offset: self.pos as u64,
        }
    }
}

/// Check the parameter blob of a codec that has none (`anchor-only`, `f16`).
pub(crate) fn expect_no_params(kind: CodecKind, bytes: &[u8]) -> Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    Err(VlcError::Corrupt {
        what: format!(
            "{kind} codec parameters must be empty, found {} bytes",
            bytes.len()
        ),
        offset: 0,
    })
}

pub(crate) fn put_f32s(out: &mut Vec<u8>, values: &[f32]) {
    out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
}

#[inline]
pub(crate) fn read_f32(bytes: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}
