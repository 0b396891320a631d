//! Batched search on WGPU: a device copy of an [`Index`], searched by one workgroup per query
//! (`search_queries` in `shaders/search.wgsl`, a port of the CUDA search kernel), after two
//! tiled matrix products over the batch in the same shader file (query · anchors for the anchor
//! ranking, query · rotation for the RaBitQ and `pcaq` tables), all in f32.

use crate::{err, WgpuBackend};
use vlc::device_view::{second_stage_group, DeviceStage, StageCodec};
use vlc::{Index, Metric, Result, SearchParams, SearchResults, VlcError};

/// Invocations per workgroup (`WG` in search.wgsl).
const WG: usize = 256;
/// Queries and columns per workgroup of the matrix products (`TILE` in search.wgsl).
const TILE: usize = 64;
/// Queries per dispatch at most (the grid's x dimension is capped at 65,535 workgroups; a
/// smaller batch keeps the per-query scratch small).
const MAX_QUERIES_PER_DISPATCH: usize = 4_096;

const KIND_NONE: u32 = 0;
const KIND_ANCHOR_ONLY: u32 = 1;
const KIND_RABITQ: u32 = 2;
const KIND_SCALAR: u32 = 3;
const KIND_PCA: u32 = 4;
const KIND_FLOAT: u32 = 5;

/// `filtered` in search.wgsl's parameters.
const FILTER_NONE: u32 = 0;
const FILTER_PROBES: u32 = 1;
const FILTER_RANKED: u32 = 2;
/// The distance word of a row whose lists the shader left to the host (`RANK_ON_HOST` in
/// search.wgsl).
const RANK_ON_HOST: u32 = u32::MAX;

// The shader adds shares in units of 2^-16 (`nprobe_target << 16`).
const _: () = assert!(vlc::SHARE_ONE == 1 << 16);

/// How a dispatch's queries find their lists.
#[derive(Clone, Copy)]
enum Launch<'p> {
    /// The nprobe nearest anchors.
    Plain,
    /// A filter's lists ranked on the GPU ([`vlc::device_view::DeviceFilterLists`]).
    Ranked(&'p vlc::device_view::DeviceFilterLists<'p>),
    /// A filter's lists ranked on the host ([`Index::device_filter`]), for at most
    /// [`MAX_QUERIES_PER_DISPATCH`] queries.
    Probes(&'p vlc::device_view::DeviceFilter<'p>),
}

/// How the shader scores one stage: (kind, bits, code_size, per_anchor, lo offset, step
/// offset), the offsets in floats into the index's `floats` buffer.
#[derive(Clone, Copy, Debug, Default)]
struct Stage {
    kind: u32,
    bits: u32,
    code_size: u32,
    per_anchor: u32,
    off_lo: u32,
    off_step: u32,
}

/// An index copied to a WGPU device, searched in batches. Build it once with
/// [`WgpuIndex::new`]; the CPU [`Index`] stays the canonical data.
pub struct WgpuIndex<'b> {
    backend: &'b WgpuBackend,
    dim: usize,
    metric: Metric,
    /// Subtracted from every query after normalisation ([`Index::centre`]). Layout: (dim,).
    centre: Option<Vec<f32>>,
    num_vectors: usize,
    num_anchors: usize,
    has_second_stage: bool,
    /// The index's energy, the scale of `SearchParams::probe_margin`.
    energy: f32,
    /// [`vlc::device_view::DeviceView::instance`] of the index copied.
    instance: u64,
    padded_dim: usize,
    /// Layout: (num_anchors, dim), row-major.
    anchors: wgpu::Buffer,
    /// Anchor norms (num_anchors,), then the RaBitQ or `pcaq` rotation (dim, padded_dim)
    /// row-major, `pcaq`'s weights and planes (see `off_pca`), then each scalar stage's lo and
    /// step ((rows, dim) each), at the offsets the shader's parameters give.
    floats: wgpu::Buffer,
    /// List offsets (num_anchors + 1,), then the caller ids in list order (num_vectors,).
    lists: wgpu::Buffer,
    /// Primary codes, bytes. Layout: (num_vectors, primary code_size).
    codes: wgpu::Buffer,
    /// Second-stage codes when they differ from the primary ones (a refine tier). Layout:
    /// (num_vectors, its code_size).
    refine_codes: Option<wgpu::Buffer>,
    primary: Stage,
    second: Option<Stage>,
    off_rotation: u32,
    /// `pcaq`: offset in `floats` of its top-bit weights, first-stage and full-code grid-centre
    /// offsets ((padded_dim,) each), plane counts E and L and each plane's dimensions (E + L),
    /// all as f32 (0 without `pcaq`); and 2/√active.
    off_pca: u32,
    pca_scale: f32,
    /// The filter last searched with: its [`vlc::IdFilter::serial`] and its allowed vectors
    /// (list starts, shares, positions: `allowed` in search.wgsl), so that the searches of one
    /// filter upload it once.
    filter: std::sync::Mutex<Option<(u64, wgpu::Buffer)>>,
}

/// Narrow a size or offset to the shader's u32 words, or say what is too large.
fn word(value: usize, what: &str) -> Result<u32> {
    u32::try_from(value).map_err(|_| {
        err(format!(
            "{what} ({value}) exceeds the 32-bit range of WGPU search"
        ))
    })
}

impl<'b> WgpuIndex<'b> {
    /// Copy `index` to the device of `backend`.
    pub fn new(backend: &'b WgpuBackend, index: &Index) -> Result<Self> {
        let view = index.device_view();
        if view.num_vectors >= u32::MAX as usize {
            return Err(err(format!(
                "WGPU search handles up to {} vectors per index, this one has {}",
                u32::MAX - 1,
                view.num_vectors
            )));
        }
        let num_anchors = view.anchor_norms.len();
        let mut floats: Vec<f32> = view.anchor_norms.to_vec();
        let (off_rotation, padded_dim) = match &view.primary.codec {
            StageCodec::RaBitQ {
                rotation,
                padded_dim,
                ..
            }
            | StageCodec::Pca {
                rotation,
                padded_dim,
                ..
            } => {
                let at = floats.len();
                floats.extend_from_slice(rotation);
                (word(at, "rotation offset")?, *padded_dim)
            }
            _ => (0, 0),
        };
        let (off_pca, pca_scale) = match &view.primary.codec {
            StageCodec::Pca {
                scale,
                top,
                coarse_offset,
                full_offset,
                planes,
                ..
            } => {
                let at = word(floats.len(), "pcaq weights offset")?;
                floats.extend_from_slice(top);
                floats.extend_from_slice(coarse_offset);
                floats.extend_from_slice(full_offset);
                floats.extend(planes.iter().map(|&n| n as f32));
                (at, *scale)
            }
            _ => (0, 0.0),
        };
        let primary = stage(&view.primary, &mut floats)?;
        let (refine_codes, second) = match &view.refine {
            Some(r) => (
                Some(backend.storage("refine codes", &r.codes[..])?),
                Some(stage(r, &mut floats)?),
            ),
            // Without a refine tier, the full code rescores what the first stage found (RaBitQ's
            // 1-bit part, `pcaq`'s first stage).
            None if view.has_second_stage => (None, Some(primary)),
            None => (None, None),
        };
        let mut lists: Vec<u32> = Vec::with_capacity(num_anchors + 1 + view.num_vectors);
        lists.extend(view.list_offsets.iter().map(|&o| o as u32));
        lists.extend_from_slice(&view.ids);
        let index = WgpuIndex {
            backend,
            dim: view.dim,
            metric: view.metric,
            centre: view.centre.map(<[f32]>::to_vec),
            num_vectors: view.num_vectors,
            num_anchors,
            has_second_stage: view.has_second_stage,
            energy: view.energy,
            instance: view.instance,
            padded_dim,
            anchors: backend.storage("anchors", view.anchors)?,
            floats: backend.storage("search floats", &floats)?,
            lists: backend.storage("lists", &lists)?,
            codes: backend.storage("codes", &view.primary.codes[..])?,
            refine_codes,
            primary,
            second,
            off_rotation,
            off_pca,
            pca_scale,
            filter: std::sync::Mutex::new(None),
        };
        // Compile the search pipelines now, so that the first search is not slower: the matrix
        // products and the scan with the default parameters' pool (a compile error is returned
        // here, not raised by wgpu's default handler).
        let usual_params = index.resolve_or_as_is(&SearchParams::default());
        let usual = index.pool_cap(&usual_params);
        backend.scoped(|| {
            backend.search_pipelines();
            backend.search_pipeline(
                if index.pool_in_workgroup(usual) {
                    usual as u32
                } else {
                    1
                },
                usual_params.error_margin(index.has_second_stage) > 0.0,
                index.weight_slots() as u32,
            )?;
            Ok(())
        })?;
        Ok(index)
    }

    /// `params` as a search of this index runs them (k and nprobe clamped); invalid ones as
    /// they are, since the search itself refuses them.
    fn resolve_or_as_is(&self, params: &SearchParams) -> SearchParams {
        params
            .resolve(self.num_vectors, self.num_anchors)
            .unwrap_or(*params)
    }

    /// Candidate pool slots of a search with resolved `params`: the larger of its two
    /// selections (the nprobe anchors, the pool) plus one round of the workgroup, to a power
    /// of two.
    fn pool_cap(&self, params: &SearchParams) -> usize {
        (params.pool_size(self.has_second_stage).max(params.nprobe) + WG).next_power_of_two()
    }

    /// Whether a search with `params` keeps its candidate pool in workgroup memory, as it does
    /// where the pool's slots ([`SearchParams::pool_size`] or nprobe, whichever is larger,
    /// plus 256, to a power of two; 12 bytes each) are at most 1,024 and fit the adapter's
    /// workgroup memory: with the default pool of 10·k, for k up to 76 and nprobe up to 768.
    /// Larger pools live in the storage buffer instead, with the same results.
    pub fn pool_in_workgroup_memory(&self, params: &SearchParams) -> bool {
        self.pool_in_workgroup(self.pool_cap(&self.resolve_or_as_is(params)))
    }

    /// Search a batch (num_queries, dim), as [`Index::search_batch`] does on the CPU.
    /// k above the vector count and nprobe above the anchor count are clamped, and the rows
    /// padded to the k asked for ([`SearchParams::resolve`]).
    pub fn search_batch(&self, queries: &[f32], params: &SearchParams) -> Result<SearchResults> {
        let resolved = params.resolve(self.num_vectors, self.num_anchors)?;
        self.search_resolved(queries, &resolved)?.widen(params.k)
    }

    /// [`Self::search_batch`] that returns only the vectors `filter` allows, as
    /// [`Index::search_batch_filtered`] does on the CPU: each query probes the lists the CPU
    /// would, ranked here among the lists that hold an allowed vector
    /// ([`vlc::device_view::DeviceFilterLists`]; the few queries whose first lists hold too
    /// little, and every query where the lists to rank outgrow the scratch the adapter
    /// binds, are ranked on the CPU, [`Index::device_filter`]), and the device scans the
    /// allowed vectors of those lists only. `index` is the index this copy was made from, and
    /// `filter` was made for it ([`Index::id_filter`]); either mismatch is an error.
    pub fn search_batch_filtered(
        &self,
        index: &Index,
        queries: &[f32],
        params: &SearchParams,
        filter: &vlc::IdFilter,
    ) -> Result<SearchResults> {
        let params = &params.resolve(self.num_vectors, self.num_anchors)?;
        vlc::vectors::validate_vectors_for_metric(queries, self.dim, "queries", self.metric)?;
        let lists = index.device_filter_lists(params, filter)?;
        if lists.instance != self.instance {
            return Err(VlcError::param(
                "index",
                "this WGPU index was copied from another index than the one given (or from this one before an add or a remove): copy it again",
            ));
        }
        let (dim, k) = (self.dim, params.k);
        let nq = queries.len() / dim;
        if lists.allowed_count == 0 {
            // Nothing allowed: every row is padding.
            return Ok(SearchResults {
                k,
                ids: vec![-1; nq * k],
                distances: vec![f32::INFINITY; nq * k],
            });
        }
        // The lists ranked here, where their slots fit the scratch the adapter binds (else
        // every query is ranked on the host: its lists are cut to what it probes, often far
        // fewer).
        let ranked = self.scratch_chunk(params, &Launch::Ranked(&lists)) > 0;
        // The filter's allowed vectors on the device, uploaded at its first search.
        let mut cached = self.filter.lock().unwrap_or_else(|e| e.into_inner());
        if cached
            .as_ref()
            .is_none_or(|(serial, _)| *serial != filter.serial())
        {
            *cached = None;
            let a = &lists.allowed;
            let words = [&a.starts[..], &a.shares[..], &a.positions[..]].concat();
            let buffer = self.backend.storage(
                "the filter's allowed vectors (4 bytes each and 8 per list)",
                &words,
            )?;
            *cached = Some((filter.serial(), buffer));
        }
        let allowed = &cached.as_ref().expect("uploaded above").1;
        let (mut results, on_host) = if ranked {
            let mut results =
                self.search_prepared(queries, params, &Launch::Ranked(&lists), allowed)?;
            // The queries whose ranked lists held too little (their rows marked -2).
            let on_host: Vec<usize> = (0..nq).filter(|&r| results.ids[r * k] == -2).collect();
            for &r in &on_host {
                results.ids[r * k..(r + 1) * k].fill(-1);
            }
            (results, on_host)
        } else {
            let results = SearchResults {
                k,
                ids: vec![-1; nq * k],
                distances: vec![f32::INFINITY; nq * k],
            };
            (results, (0..nq).collect())
        };
        // Those queries' lists ranked on the host, as the CPU's filtered search ranks every
        // list holding an allowed vector for them; a dispatch's worth at a time, since the
        // scratch per query grows with the most lists one of them probes.
        for rows in on_host.chunks(MAX_QUERIES_PER_DISPATCH) {
            let mut raw = Vec::with_capacity(rows.len() * dim);
            for &r in rows {
                raw.extend_from_slice(&queries[r * dim..(r + 1) * dim]);
            }
            let probes = index.device_filter(&raw, params, filter)?;
            if probes.max_probes == 0 {
                // Nothing allowed in reach: the rows stay padding.
                continue;
            }
            let found = self.search_prepared(&raw, params, &Launch::Probes(&probes), allowed)?;
            for (j, &r) in rows.iter().enumerate() {
                let (to, from) = (r * k..(r + 1) * k, j * k..(j + 1) * k);
                results.ids[to.clone()].copy_from_slice(&found.ids[from.clone()]);
                results.distances[to].copy_from_slice(&found.distances[from]);
            }
        }
        Ok(results)
    }

    /// [`Self::search_batch`] with parameters already resolved against this index.
    fn search_resolved(&self, queries: &[f32], params: &SearchParams) -> Result<SearchResults> {
        vlc::vectors::validate_vectors_for_metric(queries, self.dim, "queries", self.metric)?;
        self.search_prepared(queries, params, &Launch::Plain, &self.lists)
    }

    /// Probe slots per query of a dispatch (nprobe, the lists a filter's query ranks, or the
    /// most lists a query of the batch probes) and the candidate pool's slots.
    fn slots(&self, params: &SearchParams, launch: &Launch<'_>) -> (usize, usize) {
        match launch {
            Launch::Plain => (params.nprobe, self.pool_cap(params)),
            Launch::Probes(p) => (p.max_probes, self.pool_cap(params)),
            Launch::Ranked(l) => {
                let ranked = SearchParams {
                    nprobe: l.lists_to_rank,
                    ..*params
                };
                (l.lists_to_rank, self.pool_cap(&ranked))
            }
        }
    }

    /// Whether this index's searches score the primary code against per-query weights: where
    /// it is scalar with global ranges (`sq8`, `sq4` without a Jacobian), the pipelines whose
    /// `WEIGHTED` is set score it against the weights `q ∘ step` (in workgroup memory) and
    /// `<q, lo>`, as the CPU's `prepare_query` does, where the dim weights fit the adapter's
    /// workgroup memory beside the largest pool kept there (so that they never push a pool out
    /// to the storage buffer: on 32 KiB, up to 1,785 dimensions; on 48 KiB, 5,881). Other
    /// indexes, and those dims, score each level against the query and its ranges (the same
    /// results within f32 rounding).
    pub fn weighted(&self) -> bool {
        self.primary.kind == KIND_SCALAR
            && self.primary.per_anchor == 0
            && self
                .backend
                .search_workgroup_fits(crate::WORKGROUP_POOL_BYTES, self.dim)
    }

    /// Query weights in workgroup memory (`WEIGHT_SLOTS`; 0 where not [`Self::weighted`]).
    fn weight_slots(&self) -> usize {
        if self.weighted() {
            self.dim
        } else {
            0
        }
    }

    /// Whether a pool of `cap` slots goes in workgroup memory (`POOL_SLOTS = cap`) next to
    /// this index's query weights, else in the scratch buffer.
    fn pool_in_workgroup(&self, cap: usize) -> bool {
        self.backend.pool_fits_workgroup(cap, self.weight_slots())
    }

    /// Words of each query's slice of the scratch buffer (`slice_layout` in search.wgsl).
    fn stride(&self, params: &SearchParams, launch: &Launch<'_>) -> usize {
        let (nprobe, cap) = self.slots(params, launch);
        let pool_words = if self.pool_in_workgroup(cap) { 0 } else { cap };
        let tables = if self.primary.kind == KIND_PCA { 2 } else { 1 };
        3 * pool_words + 4 * nprobe + 1 + (1 + 4 * tables) * self.padded_dim + self.num_anchors
    }

    /// Queries per dispatch whose scratch, results and rows fit the adapter's bindings (0:
    /// not even one).
    fn scratch_chunk(&self, params: &SearchParams, launch: &Launch<'_>) -> usize {
        let limit = self.backend.max_binding() as usize;
        (limit / (4 * self.stride(params, launch)))
            .min(limit / (8 * params.k))
            .min(limit / (4 * self.dim))
            .min(MAX_QUERIES_PER_DISPATCH)
    }

    /// The search of `queries` with resolved `params`, finding each query's lists as `launch`
    /// says; a filtered launch's `allowed` holds the filter's allowed vectors (`allowed` in
    /// search.wgsl), else any buffer (unread). With [`Launch::Ranked`], a row whose lists the
    /// shader left to the host has -2 as its first id.
    fn search_prepared(
        &self,
        queries: &[f32],
        params: &SearchParams,
        launch: &Launch<'_>,
        allowed: &wgpu::Buffer,
    ) -> Result<SearchResults> {
        let b = self.backend;
        let (dim, k) = (self.dim, params.k);
        let (nprobe, cap) = self.slots(params, launch);
        let pool_size = params.pool_size(self.has_second_stage);
        let nq = queries.len() / dim;
        // The pool in workgroup memory (POOL_SLOTS = cap), else in the scratch buffer.
        let in_workgroup = self.pool_in_workgroup(cap);
        let pool_words = if in_workgroup { 0 } else { cap };
        let stride = self.stride(params, launch);
        let limit = b.max_binding() as usize;
        let chunk = self.scratch_chunk(params, launch);
        let probes = match launch {
            Launch::Probes(p) => Some(*p),
            _ => None,
        };
        if chunk == 0 {
            let what = match probes {
                Some(_) => format!("with this filter, where a query of the batch probes {nprobe} lists (a narrow filter takes many), and a pool of {pool_size}"),
                None => format!("at nprobe {nprobe} and a pool of {pool_size}"),
            };
            return Err(VlcError::param(
                "nprobe/rerank",
                format!(
                    "WGPU search needs {} bytes of scratch per query {what}; this adapter binds at most {limit} (lower nprobe or rerank, or search on the CPU)",
                    4 * stride
                ),
            ));
        }
        // Lists ranked on the host: their section of the queries buffer (see `queries` in
        // search.wgsl), the same for every dispatch, since `probes` covers one dispatch at
        // most: probe offsets, anchors and distances.
        let mut filter_words: Vec<u32> = Vec::new();
        if let Some(p) = probes {
            assert!(
                nq <= MAX_QUERIES_PER_DISPATCH,
                "one dispatch of filtered queries"
            );
            filter_words.extend_from_slice(&p.probe_offsets);
            filter_words.extend_from_slice(&p.probe_anchors);
            filter_words.extend(p.probe_distances.iter().map(|d| d.to_bits()));
        }
        let filter_start = chunk.min(nq) * dim;
        let off_probes = filter_start;
        if 4 * (filter_start + filter_words.len()) > limit {
            return Err(VlcError::param(
                "queries",
                format!(
                    "a filtered WGPU search of these {nq} queries needs {} bytes of queries and their probed lists; this adapter binds at most {limit} (search fewer queries at a time, or on the CPU or CUDA)",
                    4 * (filter_start + filter_words.len())
                ),
            ));
        }
        let prepared = vlc::vectors::prepare_rows(
            queries,
            dim,
            self.metric == Metric::Cosine,
            self.centre.as_deref(),
        );
        let mut ids = vec![-1i64; nq * k];
        let mut distances = vec![f32::INFINITY; nq * k];
        let second = self.second.unwrap_or_default();
        let codes2 = self.refine_codes.as_ref().unwrap_or(&self.codes);
        b.scoped(|| {
            let pipelines = b.search_pipelines();
            let search = b.search_pipeline(
                if in_workgroup { cap as u32 } else { 1 },
                params.error_margin(self.has_second_stage) > 0.0,
                self.weight_slots() as u32,
            )?;
            // Device buffers from the backend's pool, reused by every chunk and call: wgpu zeroes
            // a fresh allocation, work that grows with the scratch (which holds every query's
            // dot products with the anchors). The shaders write every word they read.
            let most = chunk.min(nq);
            let d_queries = b.take_scratch(
                "search queries",
                ((most * dim + filter_words.len()) * 4) as u64,
            )?;
            if !filter_words.is_empty() {
                b.queue.write_buffer(
                    &d_queries,
                    (filter_start * 4) as u64,
                    bytemuck::cast_slice(&filter_words),
                );
            }
            let out = b.take_scratch("search results", (most * k * 8) as u64)?;
            let scratch = b.take_scratch("search scratch", (most * stride * 4) as u64)?;
            for start in (0..nq).step_by(chunk) {
                let rows = chunk.min(nq - start);
                b.queue.write_buffer(
                    &d_queries,
                    0,
                    bytemuck::cast_slice(&prepared[start * dim..(start + rows) * dim]),
                );
                let words = [
                    rows as u32,
                    self.num_anchors as u32,
                    dim as u32,
                    self.padded_dim as u32,
                    nprobe as u32,
                    pool_size as u32,
                    k as u32,
                    cap as u32,
                    self.primary.kind,
                    self.primary.bits,
                    self.primary.code_size,
                    self.primary.per_anchor,
                    if self.second.is_some() {
                        second.kind
                    } else {
                        KIND_NONE
                    },
                    second.bits,
                    second.code_size,
                    second.per_anchor,
                    0,
                    self.off_rotation,
                    self.primary.off_lo,
                    self.primary.off_step,
                    second.off_lo,
                    second.off_step,
                    stride as u32,
                    (self.num_anchors + 1) as u32,
                    params.probe_margin.is_some() as u32,
                    params
                        .probe_margin
                        .map_or(0.0, |m| m * self.energy)
                        .to_bits(),
                    self.off_pca,
                    self.pca_scale.to_bits(),
                    pool_words as u32,
                    params.error_margin(self.has_second_stage).to_bits(),
                    second_stage_group(second.code_size as usize) as u32,
                    match launch {
                        Launch::Plain => FILTER_NONE,
                        Launch::Probes(_) => FILTER_PROBES,
                        Launch::Ranked(_) => FILTER_RANKED,
                    },
                    (off_probes + start) as u32,
                    probes.map_or(0, |p| off_probes + p.probe_offsets.len()) as u32,
                    probes.map_or(0, |p| p.probe_anchors.len()) as u32,
                    params.nprobe as u32,
                    match launch {
                        Launch::Ranked(l) => l.lists_with_allowed as u32,
                        _ => 0,
                    },
                ];
                let uniform = b.uniform(&words);
                let products = [
                    (0, &uniform),
                    (1, &self.anchors),
                    (2, &self.floats),
                    (4, &d_queries),
                    (8, &scratch),
                ];
                let group = b.bind(
                    &search,
                    &[
                        (0, &uniform),
                        (2, &self.floats),
                        (3, &self.lists),
                        (4, &d_queries),
                        (5, &self.codes),
                        (6, codes2),
                        (7, &out),
                        (8, &scratch),
                        (9, allowed),
                    ],
                );
                let tiles = |n: usize| n.div_ceil(TILE) as u32;
                let mut encoder = b.device.create_command_encoder(&Default::default());
                if probes.is_none() {
                    // Lists ranked on the host need no query · anchor products.
                    let dots = b.bind(&pipelines.dots, &products);
                    b.dispatch(
                        &mut encoder,
                        &pipelines.dots,
                        &dots,
                        tiles(self.num_anchors),
                        tiles(rows),
                    );
                }
                if self.padded_dim > 0 {
                    let rotate = b.bind(&pipelines.rotate, &products);
                    b.dispatch(
                        &mut encoder,
                        &pipelines.rotate,
                        &rotate,
                        tiles(self.padded_dim),
                        tiles(rows),
                    );
                }
                b.dispatch(&mut encoder, &search, &group, rows as u32, 1);
                let got = b.read_back::<u32>(encoder, &[(&out, rows * k * 2)])?;
                let (got_ids, got_dists) = got[0].split_at(rows * k);
                for (i, (&id, &dist)) in got_ids.iter().zip(got_dists).enumerate() {
                    if id != u32::MAX {
                        ids[start * k + i] = id as i64;
                        distances[start * k + i] = f32::from_bits(dist);
                    } else if dist == RANK_ON_HOST {
                        ids[start * k + i] = -2;
                    }
                }
            }
            b.give_back("search queries", d_queries);
            b.give_back("search results", out);
            b.give_back("search scratch", scratch);
            Ok(())
        })?;
        Ok(SearchResults { k, ids, distances })
    }
}

/// The shader's description of `stage`, appending a scalar stage's ranges to `floats`.
fn stage(stage: &DeviceStage<'_>, floats: &mut Vec<f32>) -> Result<Stage> {
    let code_size = word(stage.code_size, "code size")?;
    // Byte offsets of codes are u32 in the shader.
    word(stage.codes.len(), "code bytes")?;
    Ok(match &stage.codec {
        StageCodec::AnchorOnly => Stage {
            kind: KIND_ANCHOR_ONLY,
            code_size,
            ..Stage::default()
        },
        StageCodec::RaBitQ { bits, .. } => Stage {
            kind: KIND_RABITQ,
            bits: *bits,
            code_size,
            ..Stage::default()
        },
        // bits: 2 where the full code has a second stage, 1 where the first is the code.
        StageCodec::Pca { two_stage, .. } => Stage {
            kind: KIND_PCA,
            bits: 1 + *two_stage as u32,
            code_size,
            ..Stage::default()
        },
        StageCodec::Float { bits } => Stage {
            kind: KIND_FLOAT,
            bits: *bits,
            code_size,
            ..Stage::default()
        },
        StageCodec::Scalar {
            bits,
            per_anchor,
            lo,
            step,
        } => {
            let off_lo = word(floats.len(), "scalar range offset")?;
            floats.extend_from_slice(lo);
            let off_step = word(floats.len(), "scalar range offset")?;
            floats.extend_from_slice(step);
            Stage {
                kind: KIND_SCALAR,
                bits: *bits,
                code_size,
                per_anchor: *per_anchor as u32,
                off_lo,
                off_step,
            }
        }
        StageCodec::Unsupported(kind) => {
            return Err(err(format!(
                "WGPU search does not support the {kind} codec yet; search this index on the CPU (--backend cpu)"
            )))
        }
    })
}
