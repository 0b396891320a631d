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
pub mod rabitq;
pub mod scalar;

use crate::error::{Result, VlcError};
pub use anchor_only::AnchorOnly;
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
}

impl CodecKind {
    pub const ALL: [CodecKind; 7] = [
        CodecKind::AnchorOnly,
        CodecKind::Sq8,
        CodecKind::Sq4,
        CodecKind::RaBitQ1,
        CodecKind::RaBitQ2,
        CodecKind::RaBitQ3,
        CodecKind::RaBitQ4,
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
        }
    }

    /// Bits per dimension of a RaBitQ-family codec; `None` for the others.
    pub fn rabitq_bits(self) -> Option<u32> {
        match self {
            CodecKind::RaBitQ1 => Some(1),
            CodecKind::RaBitQ2 => Some(2),
            CodecKind::RaBitQ3 => Some(3),
            CodecKind::RaBitQ4 => Some(4),
            _ => None,
        }
    }

    /// Bytes one vector's code takes at dimension `dim` (factors included).
    pub fn code_size(self, dim: usize) -> usize {
        match self {
            CodecKind::AnchorOnly => 0,
            CodecKind::Sq8 => dim + 4,
            CodecKind::Sq4 => dim.div_ceil(2) + 4,
            CodecKind::RaBitQ1 | CodecKind::RaBitQ2 | CodecKind::RaBitQ3 | CodecKind::RaBitQ4 => {
                rabitq::code_size(dim, self.rabitq_bits().unwrap())
            }
        }
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
                    format!("unknown codec `{s}` (expected anchor-only, sq8, sq4, rabitq1, rabitq2, rabitq3 or rabitq4)"),
                )
            })
    }
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
}

/// What a codec does. Implementations hold only trained parameters; codes live in the index.
pub trait ResidualCodec {
    fn kind(&self) -> CodecKind;
    fn dim(&self) -> usize;
    /// Bytes per encoded vector (per-vector factors included).
    fn code_size(&self) -> usize {
        self.kind().code_size(self.dim())
    }
    /// Encode a block of points against their anchors.
    /// `points`: (m, dim); `anchors`: (num_anchors, dim); `assignment`: (m,);
    /// `out`: (m, code_size), row-major.
    fn encode(&self, points: &[f32], anchors: &[f32], assignment: &[u32], out: &mut [u8]);
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
}

impl Default for CodecParams {
    fn default() -> Self {
        CodecParams {
            jacobian: false,
            seed: 0x5eed,
        }
    }
}

/// The closed set of codecs, for dispatch and serialisation.
#[derive(Clone, Debug)]
pub enum Codec {
    AnchorOnly(AnchorOnly),
    Scalar(ScalarQuantizer),
    RaBitQ(RaBitQ),
}

macro_rules! dispatch {
    ($self:expr, $c:ident => $body:expr) => {
        match $self {
            Codec::AnchorOnly($c) => $body,
            Codec::Scalar($c) => $body,
            Codec::RaBitQ($c) => $body,
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
            CodecKind::RaBitQ1 | CodecKind::RaBitQ2 | CodecKind::RaBitQ3 | CodecKind::RaBitQ4 => {
                Codec::RaBitQ(RaBitQ::train(dim, kind.rabitq_bits().unwrap(), params.seed))
            }
        })
    }

    /// Rebuild a codec from its serialised parameters, checking every length.
    pub fn read_params(
        kind: CodecKind,
        dim: usize,
        num_anchors: usize,
        bytes: &[u8],
    ) -> Result<Codec> {
        Ok(match kind {
            CodecKind::AnchorOnly => Codec::AnchorOnly(AnchorOnly::read_params(dim, bytes)?),
            CodecKind::Sq8 | CodecKind::Sq4 => {
                Codec::Scalar(ScalarQuantizer::read_params(kind, dim, num_anchors, bytes)?)
            }
            CodecKind::RaBitQ1 | CodecKind::RaBitQ2 | CodecKind::RaBitQ3 | CodecKind::RaBitQ4 => {
                Codec::RaBitQ(RaBitQ::read_params(
                    dim,
                    kind.rabitq_bits().unwrap(),
                    bytes,
                )?)
            }
        })
    }

    /// Whether parameters depend on anchors (per-anchor Jacobian).
    pub fn has_jacobian(&self) -> bool {
        matches!(self, Codec::Scalar(s) if s.per_anchor())
    }
}

impl ResidualCodec for Codec {
    fn kind(&self) -> CodecKind {
        dispatch!(self, c => c.kind())
    }
    fn dim(&self) -> usize {
        dispatch!(self, c => c.dim())
    }
    fn encode(&self, points: &[f32], anchors: &[f32], assignment: &[u32], out: &mut [u8]) {
        dispatch!(self, c => c.encode(points, anchors, assignment, out))
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
    pub(crate) fn f32s(&mut self, count: usize) -> Result<Vec<f32>> {
        let len = count
            .checked_mul(4)
            .ok_or_else(|| self.corrupt("length overflow"))?;
        let b = self.take(len)?;
        Ok(b.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect())
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
    fn corrupt(&self, reason: &str) -> VlcError {
        VlcError::Corrupt {
            what: format!("{} parameters: {reason}", self.what),
            offset: self.pos as u64,
        }
    }
}

pub(crate) fn put_f32s(out: &mut Vec<u8>, values: &[f32]) {
    out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
}

#[inline]
pub(crate) fn read_f32(bytes: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}
