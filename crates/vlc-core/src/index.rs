//! The index: anchors, inverted lists (ids and codes stored contiguously, grouped by anchor),
//! a primary codec and an optional finer refine tier.

use crate::anchor_store::{AnchorPrecision, StoredAnchors};
use crate::backend::{group_by_anchor, Backend};
use crate::codec::pca::PcaFit;
use crate::codec::{Codec, CodecKind, CodecParams, ResidualCodec};
use crate::error::{Result, VlcError};
use crate::fastscan::FastScan;
use crate::format::{file_size_for, Section};
use crate::ids::Ids;
use crate::train::{train_anchors_from, IterationStats, TrainParams, TrainReport};
use crate::vectors::{
    choose_centre, gather_rows, read_block_rows, PreparedRows, SliceSource, VectorSource,
};
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;
use std::time::Instant;

/// Distance the index ranks by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Squared Euclidean distance.
    L2 = 0,
    /// Cosine: vectors and queries are normalised to unit length on the way in, and distances
    /// are squared L2 between unit vectors (`2 − 2·cos`).
    Cosine = 1,
}

impl Metric {
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(Metric::L2),
            1 => Some(Metric::Cosine),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Metric::L2 => "l2",
            Metric::Cosine => "cosine",
        }
    }
}

impl std::str::FromStr for Metric {
    type Err = VlcError;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "l2" | "euclidean" => Ok(Metric::L2),
            "cosine" | "cos" => Ok(Metric::Cosine),
            _ => Err(VlcError::param(
                "metric",
                format!("unknown metric `{s}` (expected l2 or cosine)"),
            )),
        }
    }
}

/// Everything that decides how an index is built. `Default` gives the documented defaults:
/// L2, 8-bit codes, no refine tier, automatic anchor count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BuildParams {
    pub metric: Metric,
    /// Primary codec, scanned for every probed vector.
    pub codec: CodecKind,
    /// Optional finer codec stored beside the primary one, used to rerank the candidate pool.
    pub refine: Option<CodecKind>,
    pub train: TrainParams,
    pub codec_params: CodecParams,
    /// Rows used to fit codec parameters (default 65,536).
    pub codec_training_points: usize,
    /// How the anchors are stored (default int8 with a scale per anchor). Vectors are
    /// assigned and encoded against the stored values, so this costs no code accuracy.
    pub anchor_precision: AnchorPrecision,
    /// A footprint to fill, in bytes per vector of the whole file (ids, anchors, codec
    /// parameters and codes; the refine tier too, when there is one): `pcaq` at the largest
    /// rate (`codec_params.bits`) that fits, chosen after the anchors are trained, unless
    /// `pcaq_only` is false and the widest of `rabitq5`-`8` that fits decodes the training
    /// sample more closely (high budgets on small collections of high-dimensional vectors,
    /// where `pcaq`'s stored rotation costs rate). `None` (the default): `codec` at
    /// `codec_params.bits`.
    pub bytes_per_vector: Option<f64>,
    /// With `bytes_per_vector`: fill it with `pcaq` only, never `rabitq5`-`8` (default false).
    pub pcaq_only: bool,
}

impl Default for BuildParams {
    fn default() -> Self {
        BuildParams {
            metric: Metric::L2,
            codec: CodecKind::Sq8,
            refine: None,
            train: TrainParams::default(),
            codec_params: CodecParams::default(),
            codec_training_points: 65_536,
            anchor_precision: AnchorPrecision::default(),
            bytes_per_vector: None,
            pcaq_only: false,
        }
    }
}

impl BuildParams {
    /// Builder-style setters.
    pub fn with_codec(mut self, codec: CodecKind) -> Self {
        self.codec = codec;
        self
    }
    pub fn with_refine(mut self, refine: Option<CodecKind>) -> Self {
        self.refine = refine;
        self
    }
    pub fn with_metric(mut self, metric: Metric) -> Self {
        self.metric = metric;
        self
    }
    pub fn with_num_anchors(mut self, num_anchors: usize) -> Self {
        self.train.num_anchors = num_anchors;
        self
    }
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.train.seed = seed;
        self.codec_params.seed = seed ^ 0x5eed;
        self
    }
    /// Fill `bytes_per_vector` with a `pcaq` code, or a `rabitq5`-`8` code where that decodes
    /// more closely and `pcaq_only` is false (see [`BuildParams::bytes_per_vector`]).
    pub fn with_bytes_per_vector(mut self, bytes_per_vector: f64) -> Self {
        self.codec = CodecKind::PcaRaBitQ;
        self.bytes_per_vector = Some(bytes_per_vector);
        self
    }

    /// The defaults with a user's codec choices, as the `vlc build` command and the Python
    /// package take them: `codec`, a spec for [`crate::codec::parse_codec_spec`] (`sq8`,
    /// `rabitq1`, `pcaq1.5`, ...; default `sq8`, or `pcaq` with a byte budget); a footprint
    /// `bytes_per_vector` to fill (with `pcaq` without bits, or no codec, which may then keep
    /// `rabitq5`-`8` where they decode more closely); a `refine` tier (`none`, `sq4`, `sq8`,
    /// `f16` or `f32`). Fails, naming the parameter, on an unknown codec or refine tier, or a
    /// budget beside a codec other than `pcaq` (the build checks the budget itself).
    pub fn from_choices(
        codec: Option<&str>,
        bytes_per_vector: Option<f64>,
        refine: Option<&str>,
    ) -> Result<BuildParams> {
        let default_codec = if bytes_per_vector.is_some() {
            "pcaq"
        } else {
            "sq8"
        };
        let (kind, bits) = crate::codec::parse_codec_spec(codec.unwrap_or(default_codec))?;
        let refine = match refine {
            Some(text) => crate::codec::parse_refine(text)?,
            None => None,
        };
        let mut params = BuildParams::default().with_codec(kind).with_refine(refine);
        if let Some(bits) = bits {
            params.codec_params.bits = bits;
        }
        if let Some(budget) = bytes_per_vector {
            if kind != CodecKind::PcaRaBitQ || bits.is_some() {
                return Err(VlcError::param(
                    "bytes_per_vector",
                    format!(
                        "it chooses pcaq's rate: give the codec pcaq (without bits) or none, not `{}`",
                        codec.unwrap_or_default()
                    ),
                ));
            }
            params = params.with_bytes_per_vector(budget);
            // An explicit `pcaq` asks for pcaq; without it the budget may keep rabitq5-8.
            params.pcaq_only = codec.is_some();
        }
        Ok(params)
    }
}

/// The largest rate of `pcaq`, in bits per dimension, whose index of `n` vectors fits
/// `budget` bytes per vector by `file_size(bits)`: whole bytes of bit planes per code, from one
/// to `dim` (8 bits per dimension, the most it stores; a larger budget is then not filled),
/// found by bisection (the size grows with the rate).
fn budget_rate(dim: usize, n: usize, budget: f64, file_size: impl Fn(f32) -> u64) -> Result<f32> {
    let bits = |plane_bytes: usize| (plane_bytes * 8) as f32 / dim as f32;
    let fits = |plane_bytes: usize| file_size(bits(plane_bytes)) as f64 <= budget * n as f64;
    if !fits(1) {
        return Err(VlcError::param(
            "bytes_per_vector",
            format!(
                "{budget} bytes per vector is below the smallest pcaq index of these vectors \
                 ({:.1} bytes per vector: ids, anchors, factors and one byte of bits); give a \
                 larger budget, or use the anchor-only codec",
                file_size(bits(1)) as f64 / n as f64
            ),
        ));
    }
    // `lo` fits; `hi` is the first size known not to (or one past the largest rate).
    let (mut lo, mut hi) = (1usize, dim + 1);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(bits(lo))
}

/// Rows of the training sample that [`relative_reconstruction_error`] encodes.
const RECONSTRUCTION_ROWS: usize = 1024;

/// How closely `codec` decodes the residuals of (evenly spaced rows, at most
/// [`RECONSTRUCTION_ROWS`], of) `points` (m, dim) against their `anchors` (num_anchors, dim)
/// under `assignment` (m,): mean squared error over mean squared norm. A distance estimate's
/// error along a random query direction grows with it.
fn relative_reconstruction_error(
    codec: &Codec,
    points: &[f32],
    anchors: &[f32],
    assignment: &[u32],
) -> f64 {
    let dim = codec.dim();
    let m = assignment.len();
    let rows: Vec<usize> = (0..m)
        .step_by(m.div_ceil(RECONSTRUCTION_ROWS).max(1))
        .collect();
    let sample: Vec<f32> = rows
        .iter()
        .flat_map(|&i| points[i * dim..(i + 1) * dim].iter().copied())
        .collect();
    let sample_assignment: Vec<u32> = rows.iter().map(|&i| assignment[i]).collect();
    let cs = codec.code_size();
    let mut codes = vec![0u8; rows.len() * cs];
    let prepared = codec.prepare_anchors(anchors);
    codec.encode_prepared(&prepared, &sample, anchors, &sample_assignment, &mut codes);
    let (mut error, mut norm) = (0f64, 0f64);
    let mut decoded = vec![0f32; dim];
    for (r, (&a, code)) in sample_assignment
        .iter()
        .zip(codes.chunks_exact(cs))
        .enumerate()
    {
        codec.decode(code, a, &mut decoded);
        let anchor = &anchors[a as usize * dim..(a as usize + 1) * dim];
        for d in 0..dim {
            let residual = (sample[r * dim + d] - anchor[d]) as f64;
            error += (decoded[d] as f64 - residual).powi(2);
            norm += residual * residual;
        }
    }
    if norm > 0.0 {
        error / norm
    } else {
        0.0
    }
}

/// Bytes left in the metadata section for what is known only after the rate of a byte budget
/// is chosen: five f64 timings and the chosen rate (an f32), up to 24 characters each.
const META_TIMING_SLACK: usize = 6 * 24;

/// Progress events of a build, for bars and logs.
#[derive(Clone, Debug)]
pub enum BuildEvent {
    /// A new stage starts; `total` is its unit count when known.
    Stage { name: &'static str, total: usize },
    /// `done` units of the current stage are finished.
    Advance { done: usize },
    /// One anchor-training iteration finished.
    Iteration(IterationStats),
}

/// What a build did and how long it took.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BuildReport {
    pub params: Option<BuildParams>,
    pub train: TrainReport,
    /// Mean squared distance of all vectors to their anchor.
    pub final_energy: f64,
    pub train_seconds: f64,
    pub assign_seconds: f64,
    pub encode_seconds: f64,
    pub total_seconds: f64,
    /// The id the next added vector gets, recorded once vectors were removed (a removed
    /// largest id is not given again); `None` means one past the largest id held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_id: Option<u32>,
}

/// What [`Index::add_from`] did.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AddReport {
    /// Vectors added.
    pub added: usize,
    /// The id of the first one (the others follow in order).
    pub first_id: u32,
    /// Mean squared distance of the added vectors to their anchors.
    pub added_energy: f64,
    /// The index's energy before (the mean over its vectors); compare with `added_energy`.
    pub index_energy_before: f64,
    pub seconds: f64,
}

/// What [`Index::remove_ids`] did.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RemoveReport {
    /// Vectors removed.
    pub removed: usize,
    pub seconds: f64,
}

/// A searchable VLC index. Built with [`Index::build`], stored with [`Index::save`], reopened
/// with [`Index::load`] (copy into memory) or [`Index::view`] (zero-copy memory map).
pub struct Index {
    pub(crate) dim: usize,
    pub(crate) metric: Metric,
    /// Subtracted from every vector and query (after normalisation), when the data's mean is
    /// far from the origin (see [`Index::centre`]). Layout: (dim,).
    pub(crate) centre: Option<Vec<f32>>,
    pub(crate) num_vectors: usize,
    /// The decoded anchors. Layout: (num_anchors, dim), row-major.
    pub(crate) anchors: Section<f32>,
    /// The anchors as the file stores them (the source of `anchors`).
    pub(crate) stored_anchors: StoredAnchors,
    /// Squared norm of each anchor. Layout: (num_anchors,).
    pub(crate) anchor_norms: Vec<f32>,
    /// List `a` owns positions `list_offsets[a]..list_offsets[a+1]`. Layout: (num_anchors + 1,).
    pub(crate) list_offsets: Section<u64>,
    /// Caller ids in list order, bit-packed in indexes built or saved by format version 3.
    pub(crate) ids: Ids,
    pub(crate) codec: Codec,
    /// Primary codes in list order. Layout: (num_vectors, codec.code_size()), row-major.
    pub(crate) codes: Section<u8>,
    /// Optional refine codec and its codes. Layout: (num_vectors, refine.code_size()).
    pub(crate) refine: Option<(Codec, Section<u8>)>,
    /// Fast-scan copy of 1-bit primary codes (built in memory; not part of the file): when
    /// the index is opened, or at the first search of one just built or grown (see
    /// [`Index::prepare_search`]); `None` inside for codecs without a fast scan.
    pub(crate) fastscan: OnceLock<Option<FastScan>>,
    /// The anchors packed for the integer ranking kernels ([`crate::amx`]), taken at the first
    /// search that ranks on them (one query, or a batch: see
    /// [`crate::Backend::nearest_index_anchors`]) from [`crate::amx::packed_anchors`]; `None`
    /// inside when the anchors are not in 8- or 4-bit form (f16 or f32 storage).
    pub(crate) packed_anchors: OnceLock<Option<std::sync::Arc<crate::amx::PackedAnchors>>>,
    /// Each id's position in the lists, `u32::MAX` for an id the index does not hold: made at
    /// the second narrow [`crate::IdFilter`] of this index value ([`Index::id_filter`]), so
    /// that later ones look their ids up rather than read every id of the index. Layout: (one
    /// past the largest id held,).
    pub(crate) id_positions: OnceLock<Vec<u32>>,
    /// One past the largest id held (0 for none), found at the first filter
    /// ([`Index::id_filter`]).
    pub(crate) id_space: OnceLock<usize>,
    /// Narrow filters made for this index value so far.
    pub(crate) narrow_filters_made: std::sync::atomic::AtomicUsize,
    pub(crate) report: BuildReport,
    /// This value's number in the process, unique to it (an index added to or removed from is
    /// a new value): an [`crate::filter::IdFilter`] names the index it was made for.
    pub(crate) instance: u64,
}

/// The next [`Index::instance`].
static NEXT_INSTANCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("dim", &self.dim)
            .field("metric", &self.metric)
            .field("num_vectors", &self.num_vectors)
            .field("num_anchors", &self.num_anchors())
            .field("codec", &self.codec.kind())
            .field("refine", &self.refine.as_ref().map(|r| r.0.kind()))
            .finish()
    }
}

impl Index {
    /// Build an index over `data` (n, dim), row-major; vector `i` gets id `i`.
    ///
    /// ```
    /// use vlc::{BuildParams, CodecKind, CpuBackend, Index, SearchParams};
    /// // 2,000 random 16-d vectors.
    /// let dim = 16;
    /// let mut rng = vlc::Rng::new(1);
    /// let data: Vec<f32> = (0..2000 * dim).map(|_| rng.normal() as f32).collect();
    /// let params = BuildParams::default().with_codec(CodecKind::Sq8).with_num_anchors(32);
    /// let (index, _report) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {})?;
    /// let hits = index.search(&data[5 * dim..6 * dim], &SearchParams { k: 3, nprobe: 8, rerank: 0, probe_margin: None })?;
    /// assert_eq!(hits[0].id, 5);
    /// # Ok::<(), vlc::VlcError>(())
    /// ```
    pub fn build(
        data: &[f32],
        dim: usize,
        params: &BuildParams,
        backend: &dyn Backend,
        progress: &mut dyn FnMut(&BuildEvent),
    ) -> Result<(Index, BuildReport)> {
        // The rows are checked as `build_from` reads them, as a file's are.
        Index::build_from(&SliceSource::new(data, dim)?, params, backend, progress)
    }

    /// Build an index over the rows of `source` (row `i` gets id `i`), reading them a block at
    /// a time: the input is never held in memory as a whole. Memory peaks at the anchors'
    /// training sample (at most `max_points_per_anchor` rows per anchor), the codec's training
    /// sample (`codec_training_points` rows), one block of rows (about 64 MiB) and the codes.
    /// Rows are checked as they are read: a NaN or infinite value fails the build, naming its
    /// row and column. [`crate::io::VectorFile`] is the source for files.
    pub fn build_from(
        source: &dyn VectorSource,
        params: &BuildParams,
        backend: &dyn Backend,
        progress: &mut dyn FnMut(&BuildEvent),
    ) -> Result<(Index, BuildReport)> {
        let start = Instant::now();
        let dim = source.dim();
        if dim == 0 {
            return Err(VlcError::param("dim", "must be at least 1"));
        }
        let n = source.num_rows();
        if n == 0 {
            return Err(VlcError::EmptyInput {
                what: source.describe(),
            });
        }
        if n > u32::MAX as usize {
            return Err(VlcError::param(
                "input",
                format!("{n} vectors exceed the 2^32 - 1 ids an index holds"),
            ));
        }
        if params.codec_training_points == 0 {
            return Err(VlcError::param(
                "codec_training_points",
                "must be at least 1",
            ));
        }
        if let Some(budget) = params.bytes_per_vector {
            if !(budget.is_finite() && budget > 0.0) {
                return Err(VlcError::param(
                    "bytes_per_vector",
                    format!("must be a positive number of bytes, got {budget}"),
                ));
            }
            if params.codec != CodecKind::PcaRaBitQ {
                return Err(VlcError::param(
                    "bytes_per_vector",
                    format!(
                        "a byte budget sets pcaq's rate; {} has a fixed size (see its code size)",
                        params.codec
                    ),
                ));
            }
        }
        let normalize = params.metric == Metric::Cosine;
        let centre = choose_centre(&PreparedRows {
            inner: source,
            normalize,
            centre: None,
        })?;
        let rows = PreparedRows {
            inner: source,
            normalize,
            centre: centre.as_deref(),
        };

        progress(&BuildEvent::Stage {
            name: "train anchors",
            total: params.train.max_iterations,
        });
        let (anchors, train_report) =
            train_anchors_from(backend, &rows, &params.train, &mut |s| {
                progress(&BuildEvent::Iteration(s.clone()))
            })?;
        let num_anchors = anchors.len() / dim;
        // Anchors are rounded to their stored precision first; vectors are assigned and encoded
        // against the rounded anchors, so nothing is lost downstream.
        let stored_anchors = StoredAnchors::encode(&anchors, dim, params.anchor_precision);
        let anchors = stored_anchors.decode(dim);
        let train_seconds = start.elapsed().as_secs_f64();

        // Assign every vector, reading the rows in order a block at a time.
        let t_assign = Instant::now();
        let mut block = vec![0f32; read_block_rows(dim).min(n) * dim];
        let (assignment, energy_sum) = assign_rows(&rows, &anchors, backend, &mut block, progress)?;
        let assign_seconds = t_assign.elapsed().as_secs_f64();

        // Group by anchor: `order` lists the rows in list order; `position` is its inverse.
        let t_encode = Instant::now();
        let (offsets, order) = group_by_anchor(&assignment, num_anchors);
        // Row `i` gets id `i`: the ids in list order are `order`.
        let list_offsets: Vec<u64> = offsets.iter().map(|&o| o as u64).collect();
        let ids = Ids::for_lists(&order, &list_offsets);
        let mut position = vec![0u32; n];
        for (p, &i) in order.iter().enumerate() {
            position[i as usize] = p as u32;
        }

        // Codec training sample: evenly spaced rows.
        let stride = n.div_ceil(params.codec_training_points).max(1);
        let sample: Vec<usize> = (0..n).step_by(stride).collect();
        let sample_points = gather_rows(&rows, &sample)?;
        let sample_assignment: Vec<u32> = sample.iter().map(|&i| assignment[i]).collect();
        let codec_params = |salt: u64| {
            let mut cp = params.codec_params.clone();
            cp.seed ^= salt;
            cp
        };
        let train_codec = |kind: CodecKind, salt: u64| {
            Codec::train(
                kind,
                &codec_params(salt),
                &sample_points,
                &anchors,
                &sample_assignment,
                dim,
            )
        };
        let refine_codec = params.refine.map(|kind| train_codec(kind, 1)).transpose()?;
        // The parameters the index was built with, as its metadata records them: with a byte
        // budget, the rate chosen for it.
        let mut report_params = params.clone();
        let codec = match params.bytes_per_vector {
            None => train_codec(params.codec, 0)?,
            Some(budget) => {
                let fit = PcaFit::new(
                    dim,
                    codec_params(0).seed,
                    &sample_points,
                    &anchors,
                    &sample_assignment,
                )?;
                // Every section but the codes and codec parameters has its size already.
                let meta = serde_json::to_vec(&BuildReport {
                    params: Some(params.clone()),
                    train: train_report.clone(),
                    final_energy: energy_sum / n as f64,
                    ..BuildReport::default()
                })
                .map_or(0, |m| m.len())
                    + META_TIMING_SLACK;
                let ids = ids.section_bytes();
                let mut refine_sections = Vec::new();
                if let Some(r) = &refine_codec {
                    let mut refine_params = Vec::new();
                    r.write_params(&mut refine_params);
                    refine_sections = vec![refine_params.len(), n * r.code_size()];
                }
                // The sections `format::sections` writes (a new section there must be added
                // here too: the budget test would see the file pass its budget).
                // The file's size with a primary codec of these parameter and code sizes.
                let file_with = |params_len: usize, code_size: usize| {
                    // `CNTR` only with a centre.
                    let mut lengths: Vec<usize> = centre.iter().map(|c| c.len() * 4).collect();
                    lengths.extend([
                        stored_anchors.bytes.len(),
                        (num_anchors + 1) * 8,
                        ids,
                        params_len,
                        n * code_size,
                        meta,
                    ]);
                    lengths.extend(&refine_sections);
                    file_size_for(lengths.into_iter())
                };
                let file_size = |bits: f32| {
                    let (code_size, params_len) = fit.sizes(bits);
                    file_with(params_len, code_size)
                };
                let bits = budget_rate(dim, n, budget, file_size)?;
                report_params.codec_params.bits = bits;
                let pcaq =
                    Codec::Pca(fit.codec(bits, &sample_points, &anchors, &sample_assignment)?);
                // The high-rate codes without a stored rotation, widest first: the widest that
                // fits is kept over `pcaq` where it decodes the training sample more closely
                // (small collections of high-dimensional vectors, where the rotation's bytes
                // cost `pcaq` rate and the residuals have little variance to concentrate).
                let mut chosen = pcaq;
                let candidates = if params.pcaq_only {
                    &[][..]
                } else {
                    &[
                        CodecKind::RaBitQ8,
                        CodecKind::RaBitQ7,
                        CodecKind::RaBitQ6,
                        CodecKind::RaBitQ5,
                    ][..]
                };
                for &kind in candidates {
                    let bits = kind.rabitq_bits().expect("a RaBitQ kind");
                    // With its smallest factors (a byte each) first: no need to train a code
                    // that cannot fit.
                    let byte = crate::codec::FactorFormat::unfitted(8);
                    let least = crate::codec::rabitq::code_size(dim, bits, byte, byte);
                    if file_with(0, least) as f64 > budget * n as f64 {
                        continue;
                    }
                    let rabitq = train_codec(kind, 0)?;
                    let mut rabitq_params = Vec::new();
                    rabitq.write_params(&mut rabitq_params);
                    if file_with(rabitq_params.len(), rabitq.code_size()) as f64 > budget * n as f64
                    {
                        continue;
                    }
                    let error = |c: &Codec| {
                        relative_reconstruction_error(
                            c,
                            &sample_points,
                            &anchors,
                            &sample_assignment,
                        )
                    };
                    if error(&rabitq) < error(&chosen) {
                        report_params.codec = kind;
                        report_params.codec_params.bits = bits as f32;
                        chosen = rabitq;
                    }
                    break;
                }
                chosen
            }
        };

        // The codecs are trained: their sample's memory goes before the codes' comes.
        drop(sample_points);

        // Encode every tier in one more pass over the rows in order; each code goes to its
        // row's place in list order.
        let tiers: Vec<&Codec> = std::iter::once(&codec).chain(&refine_codec).collect();
        let mut codes: Vec<Vec<u8>> = tiers.iter().map(|c| vec![0u8; n * c.code_size()]).collect();
        encode_rows(
            &rows,
            &anchors,
            &assignment,
            &position,
            &tiers,
            &mut codes,
            &mut block,
            backend,
            progress,
        )?;
        drop(block);
        let (codes, refine) = primary_and_refine(codes, refine_codec);
        let encode_seconds = t_encode.elapsed().as_secs_f64();

        let report = BuildReport {
            params: Some(report_params),
            train: train_report,
            final_energy: energy_sum / n as f64,
            train_seconds,
            assign_seconds,
            encode_seconds,
            total_seconds: start.elapsed().as_secs_f64(),
            next_id: None,
        };
        let index = Index::from_parts(
            dim,
            params.metric,
            centre,
            n,
            stored_anchors,
            Section::Owned(list_offsets),
            ids,
            codec,
            Section::Owned(codes),
            refine,
            report.clone(),
            false,
        )
        .collapse_codes_into_huge_pages();
        Ok((index, report))
    }

    /// A copy of this index with the rows of `source` added: row `i` gets id
    /// [`next_id`](Self::next_id)` + i` (`len() + i` unless vectors were removed).
    ///
    /// The new rows are assigned to the index's anchors and encoded with its codecs, as trained
    /// at build time (nothing is retrained), and join the end of their anchors' lists; the
    /// vectors already stored keep their codes, ids and order. The index's energy becomes the
    /// mean over old and new vectors. The report gives the new rows' own energy: well above
    /// the index's, they sit farther from the anchors than what the anchors were trained on
    /// (the collection has drifted), and a rebuild would serve them better. `source` is read
    /// a block at a time; a NaN or infinite value, or for the cosine metric a zero vector,
    /// fails the call, naming its row.
    pub fn add_from(
        &self,
        source: &dyn VectorSource,
        backend: &dyn Backend,
        progress: &mut dyn FnMut(&BuildEvent),
    ) -> Result<(Index, AddReport)> {
        let start = Instant::now();
        let (dim, old_n, added) = (self.dim, self.num_vectors, source.num_rows());
        if source.dim() != dim {
            return Err(VlcError::DimensionMismatch {
                what: format!("{}: vectors to add to the index", source.describe()),
                expected: dim,
                actual: source.dim(),
            });
        }
        if added == 0 {
            return Err(VlcError::EmptyInput {
                what: source.describe(),
            });
        }
        let total = old_n + added;
        let first_id = self.next_id();
        if first_id as u64 + added as u64 > u32::MAX as u64 {
            return Err(VlcError::param(
                "input",
                format!("ids {first_id} and up for {added} vectors pass the largest id, 2^32 - 1"),
            ));
        }
        let rows = PreparedRows {
            inner: source,
            normalize: self.metric == Metric::Cosine,
            centre: self.centre.as_deref(),
        };
        let num_anchors = self.num_anchors();
        let mut block = vec![0f32; read_block_rows(dim).min(added) * dim];
        let (assignment, energy_sum) =
            assign_rows(&rows, &self.anchors, backend, &mut block, progress)?;

        // New list `a`: the old list, then the added rows assigned to `a`, in row order.
        let (added_offsets, added_order) = group_by_anchor(&assignment, num_anchors);
        let old_offsets = &self.list_offsets;
        let offsets: Vec<u64> = (0..=num_anchors)
            .map(|a| old_offsets[a] + added_offsets[a] as u64)
            .collect();
        let mut position = vec![0u32; added];
        for a in 0..num_anchors {
            let end_of_old = offsets[a] + (old_offsets[a + 1] - old_offsets[a]);
            for (k, &row) in added_order[added_offsets[a]..added_offsets[a + 1]]
                .iter()
                .enumerate()
            {
                position[row as usize] = (end_of_old + k as u64) as u32;
            }
        }
        let old_ids = self.ids.to_u32();
        let mut ids = vec![0u32; total];
        let tiers: Vec<&Codec> = std::iter::once(&self.codec)
            .chain(self.refine.as_ref().map(|r| &r.0))
            .collect();
        let old_codes: Vec<&[u8]> = std::iter::once(&self.codes[..])
            .chain(self.refine.as_ref().map(|r| &r.1[..]))
            .collect();
        let mut codes: Vec<Vec<u8>> = tiers
            .iter()
            .map(|c| vec![0u8; total * c.code_size()])
            .collect();
        for a in 0..num_anchors {
            let (from, to) = (old_offsets[a] as usize, old_offsets[a + 1] as usize);
            let at = offsets[a] as usize;
            ids[at..at + to - from].copy_from_slice(&old_ids[from..to]);
            for ((tier, old), new) in tiers.iter().zip(&old_codes).zip(codes.iter_mut()) {
                let cs = tier.code_size();
                new[at * cs..(at + to - from) * cs].copy_from_slice(&old[from * cs..to * cs]);
            }
        }
        for (row, &p) in position.iter().enumerate() {
            ids[p as usize] = first_id + row as u32;
        }
        encode_rows(
            &rows,
            &self.anchors,
            &assignment,
            &position,
            &tiers,
            &mut codes,
            &mut block,
            backend,
            progress,
        )?;
        drop(block);

        let mut report = self.report.clone();
        report.final_energy = (self.report.final_energy * old_n as f64 + energy_sum) / total as f64;
        let (codes, refine) =
            primary_and_refine(codes, self.refine.as_ref().map(|(c, _)| c.clone()));
        let stored_ids = Ids::for_lists(&ids, &offsets);
        let index = Index::from_parts(
            dim,
            self.metric,
            self.centre.clone(),
            total,
            self.stored_anchors.clone(),
            Section::Owned(offsets),
            stored_ids,
            self.codec.clone(),
            Section::Owned(codes),
            refine,
            report,
            false,
        )
        .collapse_codes_into_huge_pages();
        let add_report = AddReport {
            added,
            first_id,
            added_energy: energy_sum / added as f64,
            index_energy_before: self.report.final_energy,
            seconds: start.elapsed().as_secs_f64(),
        };
        Ok((index, add_report))
    }

    /// The id the next added vector gets: one past the largest id the index has held (its
    /// size, unless vectors were removed), so that no id is given twice.
    pub fn next_id(&self) -> u32 {
        let held = self.ids.max_id(&self.list_offsets).map_or(0, |m| m + 1);
        held.max(self.report.next_id.unwrap_or(0))
    }

    /// A copy of this index without the vectors of the given ids (repeats count once). The
    /// others keep their codes, ids and order; ids are not renumbered, and later additions
    /// continue after the largest id ever held ([`next_id`](Self::next_id)), so a removed id
    /// is never given again. Anchors
    /// and codecs stay as trained, and so does the index's energy (the scale of
    /// [`crate::SearchParams::probe_margin`]). Errors, leaving nothing changed, when an id is
    /// not in the index or when every vector would go.
    pub fn remove_ids(&self, ids: &[u32]) -> Result<(Index, RemoveReport)> {
        let start = Instant::now();
        let held = self.ids.to_u32();
        let mut doomed: Vec<u32> = ids.to_vec();
        doomed.sort_unstable();
        doomed.dedup();
        // Where each id sits, for the ids asked for.
        let mut sorted_held: Vec<u32> = held.to_vec();
        sorted_held.sort_unstable();
        if let Some(&missing) = doomed
            .iter()
            .find(|id| sorted_held.binary_search(id).is_err())
        {
            return Err(VlcError::param(
                "ids",
                format!(
                    "id {missing} is not in the index ({} of the {} ids asked for are absent)",
                    doomed
                        .iter()
                        .filter(|id| sorted_held.binary_search(id).is_err())
                        .count(),
                    doomed.len()
                ),
            ));
        }
        drop(sorted_held);
        let removed = doomed.len();
        let total = self.num_vectors - removed;
        if total == 0 {
            return Err(VlcError::param(
                "ids",
                "removing every vector would leave an empty index; build a new one instead",
            ));
        }
        let keep = |id: &u32| doomed.binary_search(id).is_err();
        let num_anchors = self.num_anchors();
        let mut offsets = Vec::with_capacity(num_anchors + 1);
        offsets.push(0u64);
        let mut kept_positions = Vec::with_capacity(total);
        for a in 0..num_anchors {
            let (from, to) = (
                self.list_offsets[a] as usize,
                self.list_offsets[a + 1] as usize,
            );
            kept_positions.extend((from..to).filter(|&p| keep(&held[p])));
            offsets.push(kept_positions.len() as u64);
        }
        let new_ids: Vec<u32> = kept_positions.iter().map(|&p| held[p]).collect();
        // The kept codes in their new order (none for a code size of 0: `out` is then empty).
        let gather = |codes: &[u8], cs: usize| -> Vec<u8> {
            let mut out = vec![0u8; total * cs];
            for (o, &p) in out.chunks_exact_mut(cs.max(1)).zip(&kept_positions) {
                o.copy_from_slice(&codes[p * cs..(p + 1) * cs]);
            }
            out
        };
        let codes = gather(&self.codes, self.codec.code_size());
        let refine = self.refine.as_ref().map(|(codec, codes)| {
            (
                codec.clone(),
                Section::Owned(gather(codes, codec.code_size())),
            )
        });
        let stored_ids = Ids::for_lists(&new_ids, &offsets);
        let index = Index::from_parts(
            self.dim,
            self.metric,
            self.centre.clone(),
            total,
            self.stored_anchors.clone(),
            Section::Owned(offsets),
            stored_ids,
            self.codec.clone(),
            Section::Owned(codes),
            refine,
            BuildReport {
                next_id: Some(self.next_id()),
                ..self.report.clone()
            },
            false,
        )
        .collapse_codes_into_huge_pages();
        let report = RemoveReport {
            removed,
            seconds: start.elapsed().as_secs_f64(),
        };
        Ok((index, report))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_parts(
        dim: usize,
        metric: Metric,
        centre: Option<Vec<f32>>,
        num_vectors: usize,
        stored_anchors: StoredAnchors,
        list_offsets: Section<u64>,
        ids: Ids,
        codec: Codec,
        codes: Section<u8>,
        refine: Option<(Codec, Section<u8>)>,
        report: BuildReport,
        prepare_search: bool,
    ) -> Index {
        let anchors = Section::Owned(stored_anchors.decode(dim));
        let anchor_norms = crate::linalg::row_norms_sq(&anchors, dim);
        let index = Index {
            dim,
            metric,
            centre,
            num_vectors,
            anchors,
            stored_anchors,
            anchor_norms,
            list_offsets,
            ids,
            codec,
            codes,
            refine,
            fastscan: OnceLock::new(),
            packed_anchors: OnceLock::new(),
            id_positions: OnceLock::new(),
            id_space: OnceLock::new(),
            narrow_filters_made: std::sync::atomic::AtomicUsize::new(0),
            report,
            instance: NEXT_INSTANCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        };
        if prepare_search {
            index.prepare_search();
        }
        index
    }

    /// Collapse the codes (and refinement codes) that a build, an add or a remove wrote in
    /// memory into huge pages, as search reads them at random places ([`crate::pages`]).
    /// Loaded sections are not collapsed: [`Index::load`] copies them into buffers marked for
    /// huge pages before filling them, and a mapped file is the kernel's to back.
    fn collapse_codes_into_huge_pages(self) -> Index {
        for codes in std::iter::once(&self.codes).chain(self.refine.as_ref().map(|r| &r.1)) {
            if let Section::Owned(codes) = codes {
                crate::pages::collapse_into_huge_pages(codes);
            }
        }
        self
    }

    /// Build what search keeps in memory beside the codes (the fast-scan layout of 1-bit
    /// codes) now rather than at the first search. [`Index::load`] and [`Index::view`] do it as
    /// they open; an index just built or grown does it at its first search, so that a build
    /// that only saves never spends the time and memory. Call it before timing searches.
    pub fn prepare_search(&self) {
        if self.fastscan.get().is_none() {
            // Built on rayon's threads outside the cell: no lock is held while they run.
            let layout = self.build_fastscan(true);
            let _ = self.fastscan.set(layout);
        }
    }

    /// The fast-scan layout, built on first use. The lazy build runs on the calling thread
    /// only: inside the cell's initialiser, a thread that waited for rayon work could pick up
    /// another search of this index, which would wait for the initialiser (a deadlock).
    pub(crate) fn fastscan(&self) -> Option<&FastScan> {
        self.fastscan
            .get_or_init(|| self.build_fastscan(false))
            .as_ref()
    }

    fn build_fastscan(&self, parallel: bool) -> Option<FastScan> {
        self.codec.fast_scan_bytes().map(|stage1| {
            FastScan::build(
                &self.list_offsets,
                &self.codes,
                stage1,
                self.codec.code_size(),
                self.codec.fast_scan_hints().as_deref(),
                parallel,
            )
        })
    }

    pub fn dim(&self) -> usize {
        self.dim
    }
    pub fn metric(&self) -> Metric {
        self.metric
    }
    /// The vector subtracted from every vector and query on the way in (after normalisation
    /// for the cosine metric), or `None`. A build sets one when the data's mean lies far from
    /// the origin next to the spread around it ([`crate::vectors::CENTRE_RATIO`]), where
    /// distances computed from norms would lose the digits that tell neighbours apart; L2
    /// distances do not change. Anchors ([`Index::anchors`]) and codes are in these translated
    /// coordinates. Layout: (dim,).
    pub fn centre(&self) -> Option<&[f32]> {
        self.centre.as_deref()
    }
    /// `queries` (n, dim), row-major, in the index's coordinates: normalised for the cosine
    /// metric, then the [`centre`](Self::centre) subtracted. Borrowed when neither applies.
    pub fn prepare_queries<'a>(&self, queries: &'a [f32]) -> std::borrow::Cow<'a, [f32]> {
        crate::vectors::prepare_rows(
            queries,
            self.dim,
            self.metric == Metric::Cosine,
            self.centre.as_deref(),
        )
    }
    pub fn len(&self) -> usize {
        self.num_vectors
    }
    pub fn is_empty(&self) -> bool {
        self.num_vectors == 0
    }
    pub fn num_anchors(&self) -> usize {
        self.anchor_norms.len()
    }
    /// The index's energy: the mean squared distance of its vectors to their anchors, as the
    /// build measured it (between unit vectors for the cosine metric). It sets the scale of
    /// [`crate::SearchParams::probe_margin`].
    pub fn energy(&self) -> f32 {
        let e = self.report.final_energy as f32;
        if e.is_finite() {
            e.max(0.0)
        } else {
            0.0
        }
    }
    pub fn codec(&self) -> CodecKind {
        self.codec.kind()
    }
    pub fn refine_codec(&self) -> Option<CodecKind> {
        self.refine.as_ref().map(|r| r.0.kind())
    }
    /// Bytes of one primary code (per-vector factors included).
    pub fn code_size(&self) -> usize {
        self.codec.code_size()
    }
    /// Bits of each principal axis of a `pcaq` primary code, widest first (0 = uncoded);
    /// `None` for other codecs. Layout: (dim,).
    pub fn pcaq_widths(&self) -> Option<&[u8]> {
        match &self.codec {
            crate::codec::Codec::Pca(p) => Some(p.dim_bits()),
            _ => None,
        }
    }
    /// The fast scan's first-stage bytes per code and the segments they are scanned in, each
    /// with a quantisation step of its own (see [`crate::fastscan`]); `None` for codecs
    /// without a fast scan.
    pub fn fast_scan_layout(&self) -> Option<(usize, usize)> {
        self.codec.fast_scan_bytes().map(|(pairs, _)| {
            let hints = self.codec.fast_scan_hints();
            let (_, segments) = crate::fastscan::segment_pairs(pairs, hints.as_deref());
            (pairs, segments.len() - 1)
        })
    }
    /// How the primary code's per-vector factors are stored: the first stage's and, for
    /// two-stage codes, the full code's; `None` for codecs without such factors.
    pub fn factor_formats(
        &self,
    ) -> Option<(
        crate::codec::FactorFormat,
        Option<crate::codec::FactorFormat>,
    )> {
        self.codec.factor_formats()
    }
    /// Bytes of one refine code, when the index has a refine tier.
    pub fn refine_code_size(&self) -> Option<usize> {
        self.refine.as_ref().map(|r| r.0.code_size())
    }
    /// The anchors, in the index's coordinates (the vectors' with the
    /// [`centre`](Self::centre) subtracted, when there is one). Layout: (num_anchors, dim),
    /// row-major.
    pub fn anchors(&self) -> &[f32] {
        &self.anchors
    }
    /// How the anchors are stored.
    pub fn anchor_precision(&self) -> AnchorPrecision {
        self.stored_anchors.precision
    }
    /// Number of vectors in each inverted list. Layout: (num_anchors,).
    pub fn list_sizes(&self) -> Vec<usize> {
        self.list_offsets
            .windows(2)
            .map(|w| (w[1] - w[0]) as usize)
            .collect()
    }
    /// How the ids are stored and the bits each takes in the file (see [`crate::ids`]), e.g.
    /// "Elias-Fano per list, 11.7 bits each".
    pub fn id_storage(&self) -> String {
        self.ids.describe()
    }
    /// How the index was built (parameters, training history, timings).
    pub fn build_report(&self) -> &BuildReport {
        &self.report
    }
    /// Bytes per vector of the id (see [`crate::ids`]), primary code and refine code. The
    /// file adds anchors, list offsets and codec parameters; see [`Index::file_size`].
    pub fn code_bytes_per_vector(&self) -> f64 {
        self.ids.bits_per_id() / 8.0
            + (self.codec.code_size() + self.refine.as_ref().map_or(0, |r| r.0.code_size())) as f64
    }
    /// The exact size in bytes of this index's file.
    pub fn file_size(&self) -> u64 {
        crate::format::layout(self).total
    }
}

/// The primary tier's codes and the refine tier with its codes, from the codes
/// [`encode_rows`] wrote for the tiers [primary, refine if any].
fn primary_and_refine(
    codes: Vec<Vec<u8>>,
    refine: Option<Codec>,
) -> (Vec<u8>, Option<(Codec, Section<u8>)>) {
    let mut codes = codes.into_iter();
    let primary = codes.next().unwrap_or_default();
    let refine = refine
        .zip(codes.next())
        .map(|(codec, codes)| (codec, Section::Owned(codes)));
    (primary, refine)
}

/// Assign every row of `rows` to its nearest of `anchors` (layout: (num_anchors, dim),
/// row-major), reading the rows in order through `block` (a multiple of `dim` floats).
/// Returns each row's anchor, layout (num_rows,), and the sum of their squared distances.
fn assign_rows(
    rows: &dyn VectorSource,
    anchors: &[f32],
    backend: &dyn Backend,
    block: &mut [f32],
    progress: &mut dyn FnMut(&BuildEvent),
) -> Result<(Vec<u32>, f64)> {
    let (n, dim) = (rows.num_rows(), rows.dim());
    let block_len = block.len() / dim;
    progress(&BuildEvent::Stage {
        name: "assign",
        total: n,
    });
    let mut assignment = Vec::with_capacity(n);
    let mut energy_sum = 0f64;
    for first in (0..n).step_by(block_len) {
        let rows_here = block_len.min(n - first);
        let points = &mut block[..rows_here * dim];
        rows.read_rows(first, points)?;
        let near = backend.nearest_anchors(points, anchors, dim, 1)?;
        energy_sum = near.dists.iter().fold(energy_sum, |e, &d| e + d as f64);
        assignment.extend_from_slice(&near.ids);
        progress(&BuildEvent::Advance {
            done: first + rows_here,
        });
    }
    Ok((assignment, energy_sum))
}

/// Encode every row of `rows` with each of `tiers`, reading the rows in order through
/// `block`: row `i`'s code of tier `t` goes to row `position[i]` of `codes[t]` (layout of each:
/// (positions, tier's code size), row-major). `assignment`: each row's anchor, layout (num_rows,).
/// `backend` runs the codecs' encode primitive where it offers one (the codes are the same).
#[allow(clippy::too_many_arguments)]
fn encode_rows(
    rows: &dyn VectorSource,
    anchors: &[f32],
    assignment: &[u32],
    position: &[u32],
    tiers: &[&Codec],
    codes: &mut [Vec<u8>],
    block: &mut [f32],
    backend: &dyn Backend,
    progress: &mut dyn FnMut(&BuildEvent),
) -> Result<()> {
    let (n, dim) = (rows.num_rows(), rows.dim());
    let block_len = block.len() / dim;
    progress(&BuildEvent::Stage {
        name: "encode",
        total: n,
    });
    if tiers.iter().all(|c| c.code_size() == 0) {
        return Ok(());
    }
    // What each tier derives from the anchors, once for all blocks.
    let prepared: Vec<_> = tiers.iter().map(|t| t.prepare_anchors(anchors)).collect();
    let mut staging = Vec::new();
    for first in (0..n).step_by(block_len) {
        let rows_here = block_len.min(n - first);
        let points = &mut block[..rows_here * dim];
        rows.read_rows(first, points)?;
        let assign = &assignment[first..first + rows_here];
        for ((tier, prepared), out) in tiers.iter().zip(&prepared).zip(codes.iter_mut()) {
            let cs = tier.code_size();
            if cs == 0 {
                continue;
            }
            staging.resize(rows_here * cs, 0);
            tier.encode_on(backend, prepared, points, anchors, assign, &mut staging)?;
            for (code, &p) in staging
                .chunks_exact(cs)
                .zip(&position[first..first + rows_here])
            {
                let p = p as usize;
                out[p * cs..(p + 1) * cs].copy_from_slice(code);
            }
        }
        progress(&BuildEvent::Advance {
            done: first + rows_here,
        });
    }
    Ok(())
}
