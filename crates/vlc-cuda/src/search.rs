//! Batched search on the GPU: a device copy of an [`Index`], searched by one kernel per block
//! of queries after two cuBLAS GEMMs (query · anchors for the anchor ranking, query · rotation
//! for the RaBitQ and `pcaq` tables), both in full FP32 so the probed lists match the CPU's.

use crate::{err, CudaBackend};
use cudarc::cublas::sys as cublas_sys;
use cudarc::cublas::{Gemm, GemmConfig};
use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg};
use std::sync::Mutex;
use vlc::device_view::{second_stage_group, DeviceStage, StageCodec};
use vlc::{Index, Metric, Result, SearchParams, SearchResults, VlcError};

/// Threads per query block: search.cu's `__launch_bounds__` is written for it.
const BLOCK: usize = 256;
/// Queries per kernel launch at most (the dot-product tile is also kept under 256 MiB).
const MAX_QUERIES_PER_LAUNCH: usize = 16_384;

const KIND_NONE: i32 = 0;
const KIND_ANCHOR_ONLY: i32 = 1;
const KIND_RABITQ: i32 = 2;
const KIND_SCALAR: i32 = 3;
const KIND_PCA: i32 = 4;
const KIND_FLOAT: i32 = 5;

/// Mirror of `struct SearchArgs` in `kernels/search.cu` (same field order, C layout).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct SearchArgs {
    dots: u64,
    query_norms: u64,
    anchor_norms: u64,
    list_offsets: u64,
    ids: u64,
    queries: u64,
    rotated: u64,
    codes1: u64,
    codes2: u64,
    lo1: u64,
    step1: u64,
    lo2: u64,
    step2: u64,
    pca_top: u64,
    pca_coarse: u64,
    pca_full: u64,
    pca_planes: u64,
    out_ids: u64,
    out_dists: u64,
    /// A filtered search's probed lists ([`vlc::device_view::DeviceFilter`]), else 0.
    probe_anchors: u64,
    probe_dists: u64,
    probe_offsets: u64,
    /// A filtered search's allowed vectors list by list ([`vlc::AllowedByList`]), else 0.
    allowed_starts: u64,
    allowed_positions: u64,
    /// Each list's share of allowed vectors ([`vlc::list_share`]), else 0.
    allowed_shares: u64,
    num_queries: i32,
    num_anchors: i32,
    dim: i32,
    padded_dim: i32,
    /// Probe slots of the shared layout: nprobe, or a filtered launch's most lists per query.
    nprobe: i32,
    pool_size: i32,
    k: i32,
    cap: i32,
    /// Pool slots of the kernel's steps 2 to 4 (the scan and the top k): a power of two, at
    /// least `pool_size` + [`BLOCK`]. (`cap`, step 1's, is larger where a filter's query ranks
    /// thousands of lists, and a scan's compactions sorted all of it.)
    cap_rescore: i32,
    /// Slots of the kernel's keys and aux arrays: `cap`, or more where the automatic pool's
    /// staging (two blocks' worth past `cap_rescore`) needs them.
    slots: i32,
    kind1: i32,
    bits1: i32,
    code_size1: i32,
    per_anchor1: i32,
    kind2: i32,
    bits2: i32,
    code_size2: i32,
    per_anchor2: i32,
    /// Adaptive probing: `probe_margin · energy`, or +∞ for a fixed nprobe.
    probe_margin: f32,
    /// `pcaq`: 2/√active.
    pca_scale: f32,
    /// Nibble tables in shared memory: 2 for `pcaq`, else 1.
    tables: i32,
    /// The automatic pool's margin ([`SearchParams::error_margin`]); 0 for a fixed pool.
    error_margin: f32,
    /// Lanes that score one second-stage code together
    /// ([`vlc::device_view::second_stage_group`]).
    group: i32,
    /// A filtered search that ranks its lists on the GPU ([`Launch::Ranked`]): the lists'
    /// worth to take (nprobe), and the lists that hold an allowed vector.
    nprobe_target: i32,
    lists_with_allowed: i32,
}

/// How a launch's queries find their lists.
enum Launch<'p> {
    /// The nprobe nearest anchors.
    Plain,
    /// A filter's lists ranked on the GPU ([`vlc::device_view::DeviceFilterLists`]).
    Ranked {
        lists_to_rank: usize,
        lists_with_allowed: usize,
    },
    /// A filter's lists ranked on the host ([`Index::device_filter`]).
    Probes(&'p vlc::device_view::DeviceFilter<'p>),
}

// SAFETY: plain-old-data with the C layout of the kernel's struct (u64 device pointers, then
// i32s and f32s, no padding between them), passed by value.
unsafe impl DeviceRepr for SearchArgs {}

/// One stage on the device.
struct Stage {
    kind: i32,
    bits: i32,
    code_size: usize,
    per_anchor: bool,
    /// Scalar ranges. Layout: (rows, dim), row-major.
    lo: Option<CudaSlice<f32>>,
    /// Layout: as `lo`.
    step: Option<CudaSlice<f32>>,
}

/// What the kernel reads of a `pcaq` primary code besides its rotation (see
/// `vlc::device_view::StageCodec::Pca`).
struct PcaTables {
    /// Weight of each dimension's top bit. Layout: (padded_dim,).
    top: CudaSlice<f32>,
    /// The first stage's grid-centre offsets. Layout: (padded_dim,).
    coarse: CudaSlice<f32>,
    /// The full code's grid-centre offsets. Layout: (padded_dim,).
    full: CudaSlice<f32>,
    /// First-stage plane count E, remaining plane count L, then the dimensions of each plane.
    /// Layout: (2 + E + L,).
    planes: CudaSlice<i32>,
    /// 2/√active.
    scale: f32,
}

/// Per-launch buffers, grown as needed.
#[derive(Default)]
struct Scratch {
    /// Layout: (queries, dim).
    queries: Option<CudaSlice<f32>>,
    /// Layout: (queries,).
    query_norms: Option<CudaSlice<f32>>,
    /// Layout: (queries, padded_dim).
    rotated: Option<CudaSlice<f32>>,
    /// Layout: (queries, num_anchors).
    dots: Option<CudaSlice<f32>>,
    /// Layout: (queries, k).
    out_ids: Option<CudaSlice<i64>>,
    /// Layout: (queries, k).
    out_dists: Option<CudaSlice<f32>>,
    /// A filtered launch's probed lists. Layout: (total probes,).
    probe_anchors: Option<CudaSlice<u32>>,
    /// Layout: as `probe_anchors`.
    probe_dists: Option<CudaSlice<f32>>,
    /// Layout: (queries + 1,).
    probe_offsets: Option<CudaSlice<u32>>,
    /// A filter's allowed vectors: list starts, shares, then positions. Layout:
    /// (num_anchors + 1 + num_anchors + allowed,).
    allowed: Option<CudaSlice<u32>>,
    /// [`vlc::IdFilter::serial`] of the filter that `allowed` holds (0: none), so that the
    /// searches of one filter upload it once.
    allowed_serial: u64,
}

/// An index copied to the GPU, searched in batches. Build it once with [`CudaIndex::new`]; the
/// CPU [`Index`] stays the canonical data.
pub struct CudaIndex<'b> {
    backend: &'b CudaBackend,
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
    /// Layout: (num_anchors, dim), row-major.
    anchors: CudaSlice<f32>,
    /// Layout: (num_anchors,).
    anchor_norms: CudaSlice<f32>,
    /// Layout: (num_anchors + 1,).
    list_offsets: CudaSlice<u64>,
    /// Layout: (num_vectors,).
    ids: CudaSlice<u32>,
    /// Primary codes. Layout: (num_vectors, `code_stride`), row-major, each row's code first.
    codes: CudaSlice<u8>,
    /// Bytes per row of `codes`: the primary code size, rounded up to 16 bytes for `sq8`
    /// ([`device_row_bytes`]).
    code_stride: usize,
    /// Refine codes, when the index has a refine tier. Layout: (num_vectors, its code_size).
    refine_codes: Option<CudaSlice<u8>>,
    /// RaBitQ or `pcaq` rotation. Layout: (dim, padded_dim), row-major.
    rotation: Option<CudaSlice<f32>>,
    /// `pcaq`'s weights and planes, when the primary code is `pcaq`.
    pca: Option<PcaTables>,
    padded_dim: usize,
    primary: Stage,
    second: Option<Stage>,
    scratch: Mutex<Scratch>,
}

impl CudaBackend {
    fn upload<T: DeviceRepr + cudarc::driver::ValidAsZeroBits + Default + Clone>(
        &self,
        host: &[T],
    ) -> Result<CudaSlice<T>> {
        let mut slot = None;
        self.put(&mut slot, host)?;
        Ok(slot.expect("put fills the slot"))
    }

    /// Copy `codes` (rows of `code_size` bytes) into rows of `stride` bytes, each row's code
    /// first and zeros after it, through a host buffer of [`UPLOAD_CHUNK_BYTES`] rather than a
    /// padded copy of the whole array.
    fn upload_rows(&self, codes: &[u8], code_size: usize, stride: usize) -> Result<CudaSlice<u8>> {
        if stride == code_size || codes.is_empty() {
            return self.upload(codes);
        }
        let mut device = self.alloc::<u8>(codes.len() / code_size * stride)?;
        let chunk_rows = (UPLOAD_CHUNK_BYTES / stride).max(1);
        pad_rows(codes, code_size, stride, chunk_rows, |offset, padded| {
            let range = offset..offset + padded.len();
            self.stream
                .memcpy_htod(padded, &mut device.slice_mut(range))
                .map_err(err)
        })?;
        Ok(device)
    }

    fn stage(&self, stage: &DeviceStage<'_>) -> Result<Stage> {
        Ok(match &stage.codec {
            StageCodec::AnchorOnly => Stage {
                kind: KIND_ANCHOR_ONLY,
                bits: 0,
                code_size: stage.code_size,
                per_anchor: false,
                lo: None,
                step: None,
            },
            StageCodec::RaBitQ { bits, .. } => Stage {
                kind: KIND_RABITQ,
                bits: *bits as i32,
                code_size: stage.code_size,
                per_anchor: false,
                lo: None,
                step: None,
            },
            // bits: 2 where the full code has a second stage, 1 where the first is the code.
            StageCodec::Pca { two_stage, .. } => Stage {
                kind: KIND_PCA,
                bits: 1 + *two_stage as i32,
                code_size: stage.code_size,
                per_anchor: false,
                lo: None,
                step: None,
            },
            StageCodec::Float { bits } => Stage {
                kind: KIND_FLOAT,
                bits: *bits as i32,
                code_size: stage.code_size,
                per_anchor: false,
                lo: None,
                step: None,
            },
            StageCodec::Scalar {
                bits,
                per_anchor,
                lo,
                step,
            } => Stage {
                kind: KIND_SCALAR,
                bits: *bits as i32,
                code_size: stage.code_size,
                per_anchor: *per_anchor,
                lo: Some(self.upload(lo)?),
                step: Some(self.upload(step)?),
            },
            StageCodec::Unsupported(kind) => {
                return Err(err(format!(
                    "GPU search does not support the {kind} codec yet; search this index on the CPU (--backend cpu)"
                )))
            }
        })
    }
}

/// Host buffer of [`CudaBackend::upload_rows`].
const UPLOAD_CHUNK_BYTES: usize = 4 << 20;

/// Bytes per row of the primary codes on the device: `sq8` rows rounded up to 16 bytes, which
/// the search kernel's scan reads 16 bytes a load (on an H200, session 74: one query per call
/// 1.13-1.32x as fast, batches 1.07-1.23x, for rows of 132 → 144 bytes at 128-d and 388 → 400
/// at 384-d); other codes as they are.
fn device_row_bytes(primary: &Stage) -> usize {
    if primary.kind == KIND_SCALAR && primary.bits == 8 {
        primary.code_size.next_multiple_of(16)
    } else {
        primary.code_size
    }
}

/// Rows of `code_size` bytes from `codes`, `chunk_rows` at a time, each row padded with zeros
/// to `stride` bytes: `sink` gets each chunk's padded bytes and their offset in the padded
/// array. Layout of the whole: (rows, stride), row-major.
fn pad_rows(
    codes: &[u8],
    code_size: usize,
    stride: usize,
    chunk_rows: usize,
    mut sink: impl FnMut(usize, &[u8]) -> Result<()>,
) -> Result<()> {
    let rows = codes.len() / code_size;
    let mut host = vec![0u8; chunk_rows.min(rows) * stride];
    for (chunk, first) in codes
        .chunks(chunk_rows * code_size)
        .zip((0..).step_by(chunk_rows))
    {
        let n = chunk.len() / code_size;
        for (to, from) in host
            .chunks_exact_mut(stride)
            .zip(chunk.chunks_exact(code_size))
        {
            to[..code_size].copy_from_slice(from);
        }
        sink(first * stride, &host[..n * stride])?;
    }
    Ok(())
}

/// Device address of a buffer. Event tracking is off for this context (one stream), so the
/// guard cudarc returns records nothing and can be dropped at once.
fn addr<T>(backend: &CudaBackend, s: &CudaSlice<T>) -> u64 {
    s.device_ptr(&backend.stream).0
}

impl<'b> CudaIndex<'b> {
    /// Copy `index` to the GPU of `backend`.
    pub fn new(backend: &'b CudaBackend, index: &Index) -> Result<Self> {
        let view = index.device_view();
        if view.num_vectors > u32::MAX as usize {
            return Err(err(format!(
                "GPU search handles up to {} vectors per index, this one has {}",
                u32::MAX,
                view.num_vectors
            )));
        }
        // Compile and load the kernel now, so that the first search is not slower.
        backend.search_kernel(false)?;
        let primary = backend.stage(&view.primary)?;
        let (rotation, padded_dim, pca) = match &view.primary.codec {
            StageCodec::RaBitQ {
                rotation,
                padded_dim,
                ..
            } => (Some(backend.upload(rotation)?), *padded_dim, None),
            StageCodec::Pca {
                scale,
                padded_dim,
                rotation,
                top,
                coarse_offset,
                full_offset,
                planes,
                ..
            } => {
                let planes: Vec<i32> = planes.iter().map(|&n| n as i32).collect();
                let tables = PcaTables {
                    top: backend.upload(top)?,
                    coarse: backend.upload(coarse_offset)?,
                    full: backend.upload(full_offset)?,
                    planes: backend.upload(&planes)?,
                    scale: *scale,
                };
                (Some(backend.upload(rotation)?), *padded_dim, Some(tables))
            }
            _ => (None, 0, None),
        };
        let (refine_codes, second) = match &view.refine {
            Some(r) => (Some(backend.upload(&r.codes)?), Some(backend.stage(r)?)),
            // Without a refine tier, the full code rescores what the first stage found (RaBitQ's
            // 1-bit part, `pcaq`'s first stage).
            None if view.has_second_stage => (
                None,
                Some(Stage {
                    lo: None,
                    step: None,
                    ..primary
                }),
            ),
            None => (None, None),
        };
        // The second stage reads the primary codes' rows where there is no refine tier.
        let code_stride = if second.is_some() && refine_codes.is_none() {
            primary.code_size
        } else {
            device_row_bytes(&primary)
        };
        Ok(CudaIndex {
            backend,
            dim: view.dim,
            metric: view.metric,
            centre: view.centre.map(<[f32]>::to_vec),
            num_vectors: view.num_vectors,
            num_anchors: view.anchor_norms.len(),
            has_second_stage: view.has_second_stage,
            energy: view.energy,
            instance: view.instance,
            anchors: backend.upload(view.anchors)?,
            anchor_norms: backend.upload(view.anchor_norms)?,
            list_offsets: backend.upload(view.list_offsets)?,
            ids: backend.upload(&view.ids)?,
            codes: backend.upload_rows(&view.primary.codes, view.primary.code_size, code_stride)?,
            code_stride,
            refine_codes,
            rotation,
            pca,
            padded_dim,
            primary,
            second,
            scratch: Mutex::new(Scratch::default()),
        })
    }

    /// Search a batch (num_queries, dim), as [`Index::search_batch`] does on the CPU.
    /// k above the vector count and nprobe above the anchor count are clamped, and the rows
    /// padded to the k asked for ([`SearchParams::resolve`]).
    pub fn search_batch(&self, queries: &[f32], params: &SearchParams) -> Result<SearchResults> {
        let resolved = params.resolve(self.num_vectors, self.num_anchors)?;
        self.search_resolved(queries, &resolved, None)?
            .widen(params.k)
    }

    /// [`Self::search_batch`] that returns only the vectors `filter` allows, as
    /// [`Index::search_batch_filtered`] does on the CPU: each query probes the lists the CPU
    /// would, ranked here among the lists that hold an allowed vector
    /// ([`vlc::device_view::DeviceFilterLists`]; the few queries whose first lists hold too
    /// little are ranked on the CPU, [`Index::device_filter`]), and the GPU scans the allowed
    /// vectors of those lists only. `index` is the index this copy was made from, and
    /// `filter` was made for it ([`Index::id_filter`]); either mismatch is an error.
    pub fn search_batch_filtered(
        &self,
        index: &Index,
        queries: &[f32],
        params: &SearchParams,
        filter: &vlc::IdFilter,
    ) -> Result<SearchResults> {
        let resolved = params.resolve(self.num_vectors, self.num_anchors)?;
        self.search_resolved(queries, &resolved, Some((index, filter)))?
            .widen(params.k)
    }

    /// Whether the primary code is scalar with global ranges (`sq8`, `sq4` without a
    /// Jacobian), searched by the kernel's `search_queries_weighted`: it scores the codes
    /// against the weights `q ∘ step` and `<q, lo>`, as the CPU's `prepare_query` does.
    fn weighted(&self) -> bool {
        self.primary.kind == KIND_SCALAR && !self.primary.per_anchor
    }

    /// Query rows of shared memory per block: 2 where the weighted kernel keeps the query past
    /// the weights (a scalar or float second stage reads it), else 1.
    fn query_rows(&self) -> usize {
        let second = self.second.as_ref().map_or(KIND_NONE, |st| st.kind);
        1 + (self.weighted() && (second == KIND_SCALAR || second == KIND_FLOAT)) as usize
    }

    /// Shared memory per query block (bytes) for `probe_slots` probed lists, of which the
    /// kernel selects `selected` (0 where a filtered search's lists come ranked), and the pool
    /// slots `(cap, cap_rescore, slots)`; an error where the device allows less.
    fn layout(
        &self,
        params: &SearchParams,
        probe_slots: usize,
        selected: usize,
    ) -> Result<(usize, usize, usize, usize)> {
        let (dim, nprobe) = (self.dim, params.nprobe);
        let pool_size = params.pool_size(self.has_second_stage);
        // Pool slots: the larger of the two selections plus one round of the block; steps 3
        // and 4 (the top k) need only the pool's.
        let cap = (pool_size.max(selected) + BLOCK).next_power_of_two();
        let cap_rescore = (pool_size + BLOCK).next_power_of_two();
        let tables = if self.pca.is_some() { 2 } else { 1 };
        let error_margin = params.error_margin(self.has_second_stage);
        // The automatic pool stages up to two rounds of candidates for rescoring (position and
        // probe in a key slot, distance in an aux slot) past the top k's slots: free where
        // nprobe sets the pool's slots, else added. (Adding 6 KiB where they were free cost
        // a quarter of the speed of the 384-d dev set's pcaq3 at nprobe 1024, a block less
        // per multiprocessor: docs/history.md, session 61.)
        let slots = if error_margin > 0.0 {
            cap.max(cap_rescore + 2 * BLOCK)
        } else {
            cap
        };
        // The tables start on a 16-byte boundary, 8 bytes on where probe_slots is even.
        let shared = slots * 12
            + probe_slots * 16
            + (probe_slots + 1) * 8
            + 8 * probe_slots.is_multiple_of(2) as usize
            + 16 * tables * self.padded_dim
            + 4 * dim * self.query_rows();
        let limit = self
            .backend
            .ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .map_err(err)? as usize;
        // The kernel's own shared variables take under 256 bytes.
        if shared + 256 > limit {
            let what = if probe_slots != nprobe {
                format!(
                    "with this filter, where a query of the batch ranks or probes {probe_slots} lists (a narrow filter takes many), and a pool of {pool_size}"
                )
            } else {
                format!("at nprobe {nprobe} and a pool of {pool_size}")
            };
            return Err(VlcError::param(
                "nprobe/rerank",
                format!(
                    "GPU search needs {shared} bytes of shared memory per query {what}; this device allows {limit} (lower nprobe or rerank, or search on the CPU)"
                ),
            ));
        }
        Ok((shared, cap, cap_rescore, slots))
    }

    /// [`Self::search_batch`] with parameters already resolved against this index; with
    /// `filtered`, [`Self::search_batch_filtered`].
    fn search_resolved(
        &self,
        queries: &[f32],
        params: &SearchParams,
        filtered: Option<(&Index, &vlc::IdFilter)>,
    ) -> Result<SearchResults> {
        vlc::vectors::validate_vectors_for_metric(queries, self.dim, "queries", self.metric)?;
        let b = self.backend;
        let (dim, k) = (self.dim, params.k);
        let nq = queries.len() / dim;
        // Compiled (once) before the backend's state is locked.
        b.search_kernel(false)?;

        let prepared = vlc::vectors::prepare_rows(
            queries,
            dim,
            self.metric == Metric::Cosine,
            self.centre.as_deref(),
        );
        let chunk = ((256usize << 20) / (self.num_anchors * 4)).clamp(1, MAX_QUERIES_PER_LAUNCH);
        // A filter's lists and allowed vectors, list starts, shares and positions, in one buffer.
        let lists = match filtered {
            Some((index, filter)) => {
                let lists = index.device_filter_lists(params, filter)?;
                if lists.instance != self.instance {
                    return Err(VlcError::param(
                        "index",
                        "this GPU index was copied from another index than the one given (or from this one before an add or a remove): copy it again",
                    ));
                }
                Some(lists)
            }
            None => None,
        };
        // Where a filter's lists to rank outgrow the shared memory (a narrow filter of an index
        // of many anchors), every query's lists are ranked on the host: they are cut to what
        // it probes, often far fewer. Unfiltered, the layout is checked before any work.
        let gpu_ranks = match &lists {
            Some(l) => self
                .layout(params, l.lists_to_rank, l.lists_to_rank)
                .is_ok(),
            None => {
                self.layout(params, params.nprobe, params.nprobe)?;
                false
            }
        };
        let mut ids = vec![-1i64; nq * k];
        let mut distances = vec![f32::INFINITY; nq * k];
        if lists.as_ref().is_some_and(|l| l.allowed_count == 0) {
            // Nothing allowed: every row is padding.
            return Ok(SearchResults { k, ids, distances });
        }
        let _gpu = b.state.lock().unwrap();
        let mut guard = self.scratch.lock().unwrap();
        let s = &mut *guard;
        b.set_fp32_math(true)?;
        let result = (|| -> Result<()> {
            // Device addresses of the list starts, of the shares and of the positions.
            let allowed = match (&lists, filtered) {
                (Some(l), Some((_, filter))) => {
                    if s.allowed_serial != filter.serial() || s.allowed.is_none() {
                        s.allowed_serial = 0;
                        let a = &l.allowed;
                        let words = [&a.starts[..], &a.shares[..], &a.positions[..]].concat();
                        b.put(&mut s.allowed, &words)?;
                        s.allowed_serial = filter.serial();
                    }
                    let at = addr(b, s.allowed.as_ref().expect("uploaded above"));
                    let shares = at + 4 * (self.num_anchors as u64 + 1);
                    (at, shares + 4 * self.num_anchors as u64, shares)
                }
                _ => (0, 0, 0),
            };
            for start in (0..nq).step_by(chunk) {
                let rows = chunk.min(nq - start);
                let block = &prepared[start * dim..(start + rows) * dim];
                let host_probes = match filtered {
                    Some((index, filter)) if !gpu_ranks => {
                        let raw = &queries[start * dim..(start + rows) * dim];
                        Some(index.device_filter(raw, params, filter)?)
                    }
                    _ => None,
                };
                let mode = match (&lists, &host_probes) {
                    (None, _) => Launch::Plain,
                    (Some(_), Some(probes)) => Launch::Probes(probes),
                    (Some(l), None) => Launch::Ranked {
                        lists_to_rank: l.lists_to_rank,
                        lists_with_allowed: l.lists_with_allowed,
                    },
                };
                let (got_ids, got_dists) = self.launch(s, block, params, &mode, allowed)?;
                ids[start * k..(start + rows) * k].copy_from_slice(&got_ids);
                distances[start * k..(start + rows) * k].copy_from_slice(&got_dists);
                let Some((index, filter)) = filtered else {
                    continue;
                };
                // The queries whose ranked lists held too little: their lists ranked on the
                // host, as the CPU's filtered search ranks every list holding an allowed
                // vector for them.
                let again: Vec<usize> = (0..rows).filter(|&r| ids[(start + r) * k] == -2).collect();
                if again.is_empty() {
                    continue;
                }
                let mut raw = Vec::with_capacity(again.len() * dim);
                let mut gathered = Vec::with_capacity(again.len() * dim);
                for &r in &again {
                    raw.extend_from_slice(&queries[(start + r) * dim..(start + r + 1) * dim]);
                    gathered.extend_from_slice(&block[r * dim..(r + 1) * dim]);
                }
                let probes = index.device_filter(&raw, params, filter)?;
                let (again_ids, again_dists) =
                    self.launch(s, &gathered, params, &Launch::Probes(&probes), allowed)?;
                for (j, &r) in again.iter().enumerate() {
                    let row = (start + r) * k;
                    ids[row..row + k].copy_from_slice(&again_ids[j * k..(j + 1) * k]);
                    distances[row..row + k].copy_from_slice(&again_dists[j * k..(j + 1) * k]);
                }
            }
            Ok(())
        })();
        b.set_fp32_math(false)?;
        result?;
        Ok(SearchResults { k, ids, distances })
    }

    /// One kernel launch over `block` (rows of prepared queries) with resolved `params`,
    /// finding each query's lists as `mode` says; `allowed` are the device addresses of a
    /// filter's list starts, positions and shares (0 without a filter). Returns the rows' ids and
    /// distances, (rows, k) each. Called with the backend's state locked and FP32 math set.
    fn launch(
        &self,
        s: &mut Scratch,
        block: &[f32],
        params: &SearchParams,
        mode: &Launch<'_>,
        (allowed_starts, allowed_positions, allowed_shares): (u64, u64, u64),
    ) -> Result<(Vec<i64>, Vec<f32>)> {
        let b = self.backend;
        let (dim, k) = (self.dim, params.k);
        let rows = block.len() / dim;
        let pool_size = params.pool_size(self.has_second_stage);
        let tables = if self.pca.is_some() { 2 } else { 1 };
        let error_margin = params.error_margin(self.has_second_stage);
        // Lists ranked on the host come cut to what they scan.
        let probe_margin = match (mode, params.probe_margin) {
            (Launch::Probes(_), _) | (_, None) => f32::INFINITY,
            (_, Some(m)) => m * self.energy,
        };
        let (probe_slots, selected) = match mode {
            Launch::Plain => (params.nprobe, params.nprobe),
            Launch::Ranked { lists_to_rank, .. } => (*lists_to_rank, *lists_to_rank),
            Launch::Probes(p) => (p.max_probes, 0),
        };
        let (shared, cap, cap_rescore, slots) = self.layout(params, probe_slots, selected)?;
        let kernel = b.search_kernel(self.weighted())?;
        kernel
            .set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                shared as i32,
            )
            .map_err(err)?;
        let (nprobe_target, lists_with_allowed) = match mode {
            Launch::Ranked {
                lists_with_allowed, ..
            } => (params.nprobe as i32, *lists_with_allowed as i32),
            _ => (0, 0),
        };
        let probes = match mode {
            Launch::Probes(p) => Some(*p),
            _ => None,
        };
        let q = b.put(&mut s.queries, block)?;
        let (ka, d_i32, r_i32) = (self.num_anchors as i32, dim as i32, rows as i32);
        let (dots, q_norms) = if probes.is_some() {
            (0, 0)
        } else {
            let q_norms = b.grow(&mut s.query_norms, rows)?;
            b.row_norms(&q.slice(0..rows * dim), rows, dim, q_norms)?;
            let dots = b.grow(&mut s.dots, rows * self.num_anchors)?;
            // SAFETY: column-major view: dotsᵀ (num_anchors × rows, ld num_anchors) =
            // anchorsᵀ (dim × num_anchors)ᵀ · qᵀ (dim × rows); the buffers hold
            // num_anchors·dim, rows·dim and rows·num_anchors floats.
            unsafe {
                b.blas.gemm(
                    GemmConfig {
                        transa: cublas_sys::cublasOperation_t::CUBLAS_OP_T,
                        transb: cublas_sys::cublasOperation_t::CUBLAS_OP_N,
                        m: ka,
                        n: r_i32,
                        k: d_i32,
                        alpha: 1.0f32,
                        lda: d_i32,
                        ldb: d_i32,
                        beta: 0.0f32,
                        ldc: ka,
                    },
                    &self.anchors,
                    &q.slice(0..rows * dim),
                    &mut dots.slice_mut(0..rows * self.num_anchors),
                )
            }
            .map_err(err)?;
            (addr(b, dots), addr(b, q_norms))
        };
        // A filtered launch's lists.
        let (probe_anchors, probe_dists, probe_offsets) = match &probes {
            None => (0, 0, 0),
            Some(p) => (
                addr(b, b.put(&mut s.probe_anchors, &p.probe_anchors)?),
                addr(b, b.put(&mut s.probe_dists, &p.probe_distances)?),
                addr(b, b.put(&mut s.probe_offsets, &p.probe_offsets)?),
            ),
        };
        let rotated = match &self.rotation {
            Some(m) => {
                let p = self.padded_dim as i32;
                let r = b.grow(&mut s.rotated, rows * self.padded_dim)?;
                // SAFETY: column-major view: rotatedᵀ (padded × rows, ld padded) =
                // Mᵀ (padded × dim, ld padded) · qᵀ (dim × rows, ld dim), M being the
                // row-major (dim × padded) rotation; sizes as stated.
                unsafe {
                    b.blas.gemm(
                        GemmConfig {
                            transa: cublas_sys::cublasOperation_t::CUBLAS_OP_N,
                            transb: cublas_sys::cublasOperation_t::CUBLAS_OP_N,
                            m: p,
                            n: r_i32,
                            k: d_i32,
                            alpha: 1.0f32,
                            lda: p,
                            ldb: d_i32,
                            beta: 0.0f32,
                            ldc: p,
                        },
                        m,
                        &q.slice(0..rows * dim),
                        &mut r.slice_mut(0..rows * self.padded_dim),
                    )
                }
                .map_err(err)?;
                addr(b, r)
            }
            None => 0,
        };
        let out_ids = b.grow(&mut s.out_ids, rows * k)?;
        let out_dists = b.grow(&mut s.out_dists, rows * k)?;
        let opt = |x: &Option<CudaSlice<f32>>| x.as_ref().map_or(0, |x| addr(b, x));
        let second = self.second.as_ref();
        let args = SearchArgs {
            dots,
            query_norms: q_norms,
            anchor_norms: addr(b, &self.anchor_norms),
            list_offsets: addr(b, &self.list_offsets),
            ids: addr(b, &self.ids),
            queries: addr(b, q),
            rotated,
            codes1: addr(b, &self.codes),
            codes2: match (&self.refine_codes, second) {
                (Some(r), _) => addr(b, r),
                (None, Some(_)) => addr(b, &self.codes),
                (None, None) => 0,
            },
            lo1: opt(&self.primary.lo),
            step1: opt(&self.primary.step),
            lo2: second.map_or(0, |st| opt(&st.lo)),
            step2: second.map_or(0, |st| opt(&st.step)),
            pca_top: self.pca.as_ref().map_or(0, |t| addr(b, &t.top)),
            pca_coarse: self.pca.as_ref().map_or(0, |t| addr(b, &t.coarse)),
            pca_full: self.pca.as_ref().map_or(0, |t| addr(b, &t.full)),
            pca_planes: self.pca.as_ref().map_or(0, |t| addr(b, &t.planes)),
            out_ids: addr(b, out_ids),
            out_dists: addr(b, out_dists),
            probe_anchors,
            probe_dists,
            probe_offsets,
            allowed_starts,
            allowed_positions,
            allowed_shares,
            num_queries: r_i32,
            num_anchors: ka,
            dim: d_i32,
            padded_dim: self.padded_dim as i32,
            nprobe: probe_slots as i32,
            pool_size: pool_size as i32,
            k: k as i32,
            cap: cap as i32,
            cap_rescore: cap_rescore as i32,
            slots: slots as i32,
            kind1: self.primary.kind,
            bits1: self.primary.bits,
            code_size1: self.code_stride as i32,
            per_anchor1: self.primary.per_anchor as i32,
            kind2: second.map_or(KIND_NONE, |st| st.kind),
            bits2: second.map_or(0, |st| st.bits),
            code_size2: second.map_or(0, |st| st.code_size as i32),
            per_anchor2: second.is_some_and(|st| st.per_anchor) as i32,
            probe_margin,
            pca_scale: self.pca.as_ref().map_or(0.0, |t| t.scale),
            tables,
            error_margin,
            group: second.map_or(1, |st| second_stage_group(st.code_size) as i32),
            nprobe_target,
            lists_with_allowed,
        };
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (BLOCK as u32, 1, 1),
            shared_mem_bytes: shared as u32,
        };
        // SAFETY: one block per query row; every pointer in `args` addresses a live
        // buffer of the size its comment in search.cu states (dots rows·num_anchors,
        // outputs rows·k, codes num_vectors·code_size, the primary codes' rows
        // code_stride bytes each; a filtered launch's probes as its offsets give, each
        // probed anchor below num_anchors, num_anchors + 1 list starts and the positions
        // they index, each below num_vectors) or is 0 where the kernel reads none, and the
        // shared memory size is the kernel's layout for (cap, probe slots, padded_dim, dim),
        // within the opt-in limit `layout` checked.
        unsafe { b.stream.launch_builder(&kernel).arg(&args).launch(cfg) }.map_err(err)?;
        let got_ids = b.get(out_ids, rows * k)?;
        let got_dists = b.get(out_dists, rows * k)?;
        Ok((got_ids, got_dists))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pad_rows` gives every row, in order, its code then zeros, for chunks that divide the
    /// rows, chunks that leave a remainder, one row a chunk and one chunk for all.
    #[test]
    fn pad_rows_pads_every_row_in_order() {
        let (code_size, stride, rows) = (5, 16, 11);
        let codes: Vec<u8> = (1..=(code_size * rows) as u8).collect();
        for chunk_rows in [1, 3, 4, 11, 64] {
            let mut padded = vec![0xaau8; rows * stride];
            let mut calls = 0;
            pad_rows(&codes, code_size, stride, chunk_rows, |offset, bytes| {
                assert_eq!(offset % stride, 0);
                assert!(bytes.len() <= chunk_rows * stride);
                padded[offset..offset + bytes.len()].copy_from_slice(bytes);
                calls += 1;
                Ok(())
            })
            .unwrap();
            assert_eq!(
                calls,
                rows.div_ceil(chunk_rows),
                "chunk of {chunk_rows} rows"
            );
            for (row, padded_row) in padded.chunks_exact(stride).enumerate() {
                let code = &codes[row * code_size..(row + 1) * code_size];
                assert_eq!(
                    &padded_row[..code_size],
                    code,
                    "row {row}, chunk {chunk_rows}"
                );
                assert!(padded_row[code_size..].iter().all(|&b| b == 0), "row {row}");
            }
        }
    }
}
