//! WGPU backend for VLC: the backend primitives as WGSL compute shaders (one `.wgsl` per op,
//! same stem as the CUDA `.cu`), on whatever GPU API the machine has (Vulkan, Metal, DX12).
//!
//! Where the adapter has f16 cooperative matrices (tensor cores), training's assignment runs
//! on them (`nearest_coop.wgsl`); elsewhere the FP32 kernels of `nearest.wgsl` run.
//!
//! Pipelines are created once per backend. Buffer sizes are checked against the adapter's
//! limits: assignment runs over chunks of points sized to fit the storage-buffer binding limit
//! (and the distance tile with them); accumulation needs the points in one binding and says so
//! when they do not fit. Buffers handed to [`Backend::pin`] stay on the device until the guard
//! drops, and so does the last one-per-point assignment, which accumulation then reads without
//! an upload: with a pinned training sample, an iteration moves only the anchors and the
//! assignment's ids and distances (for the host's statistics) over the bus.

mod search;

pub use search::WgpuIndex;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use vlc::backend::{
    check_accumulate_args, check_anchor_rows, check_nearest_args, check_single_nearest,
    check_threshold_args, check_update_args, fixed_point_exponent, kept_count, rows_of,
    trimmed_thresholds, AnchorSums, Backend, ListSplit, Nearest, PinGuard, SERIAL_MAX,
};
use vlc::{Result, VlcError};
use wgpu::util::DeviceExt;

fn err(reason: impl std::fmt::Display) -> VlcError {
    VlcError::Backend {
        backend: "wgpu".into(),
        reason: reason.to_string(),
    }
}

/// Picks per point that `select_radix` selects (four histogram passes, a gather and a rank in
/// workgroup memory) instead of `select_nearest` (one scan of the row per pick), as CUDA's
/// `nearest_radix_from_dots`: from 8 up to its buffers' `RADIX_MAX_PICKS` (256).
const RADIX_PICKS: std::ops::RangeInclusive<usize> = 8..=256;

/// Points and anchors per workgroup of the tiled `distances` kernel (a 128 x 128 tile).
const DISTANCE_TILE: usize = 128;

/// The largest distance tile (rows x anchors x 4 bytes) of a `nearest_anchors` call with
/// several picks; more rows are taken in chunks.
const MAX_TILE_BYTES: usize = 1 << 30;

struct Pipelines {
    distances: wgpu::ComputePipeline,
    select: wgpu::ComputePipeline,
    /// `select_radix`: the picks of [`RADIX_PICKS`] in a fixed number of passes.
    select_radix: wgpu::ComputePipeline,
    /// Fused single-nearest assignment, used when `per_point == 1`: `nearest_fused_wide`
    /// (128 points per workgroup) where the adapter has the workgroup memory for it, else
    /// `nearest_fused` (64).
    fused: wgpu::ComputePipeline,
    /// Points per workgroup of `fused`.
    fused_rows: usize,
    /// `max_abs`, `to_f16` and `nearest_coop`, where the adapter has f16 cooperative matrices
    /// (tensor cores) and subgroups of 32: used instead of `fused` for one neighbour per point.
    coop: Option<CoopPipelines>,
    accumulate: AccumulatePipelines,
    update: wgpu::ComputePipeline,
    /// `split_lists` of split.wgsl.
    split: wgpu::ComputePipeline,
}

/// Buffers of accumulate.wgsl's grouping passes (count, scan, scatter), taken from the
/// scratch pool by [`WgpuBackend::take_grouping`] and returned by
/// [`WgpuBackend::give_back_grouping`].
struct Grouping {
    /// Members per anchor. Layout: (num_anchors,).
    counts: wgpu::Buffer,
    /// Kept members per anchor. Layout: (num_anchors,).
    kept: wgpu::Buffer,
    /// Scratch for the scatter. Layout: (num_anchors,).
    cursor: wgpu::Buffer,
    /// Start of each anchor's range. Layout: (num_anchors + 1,).
    offsets: wgpu::Buffer,
    /// Kept point indices grouped by anchor. Layout: (num_points,).
    members: wgpu::Buffer,
}

/// The four passes of accumulate.wgsl and its threshold selection.
struct AccumulatePipelines {
    count: wgpu::ComputePipeline,
    scan: wgpu::ComputePipeline,
    scatter: wgpu::ComputePipeline,
    sum: wgpu::ComputePipeline,
    select: wgpu::ComputePipeline,
}

/// A buffer pinned with [`Backend::pin`].
struct Resident {
    /// Layout: (num_points, dim), row-major.
    buffer: wgpu::Buffer,
    /// The largest |value| (accumulation's fixed-point scale, the f16 copy's scale).
    max_abs: f32,
    /// The scaled f16 copy `to_f16` made on the first cooperative-matrix assignment of these
    /// points (the points cannot change while pinned), with the dim it was made for.
    /// Layout: (rows padded to 128, dim padded to 32), row-major.
    half: Mutex<Option<(usize, wgpu::Buffer)>>,
    /// Distance bounds for the cooperative-matrix assignment of these points.
    bounds: Mutex<Option<Bounds>>,
}

/// Distance bounds of pinned points (nearest_coop.wgsl): after one ranking of every point,
/// later calls rank only the points whose anchor may have changed.
struct Bounds {
    /// The shape they were set for: (num_points, num_anchors, dim).
    shape: (usize, usize, usize),
    /// Whether the buffers hold a complete ranking (set once its commands were submitted).
    ready: bool,
    /// Anchor of each point at its last ranking. Layout: (num_points,).
    assign: wgpu::Buffer,
    /// Lower bound on each point's distance to every other anchor. Layout: (num_points,).
    lower: wgpu::Buffer,
    /// The anchors of the last call. Layout: (num_anchors, dim), row-major.
    before: wgpu::Buffer,
    /// Points to rank again, and their count. Layout: (num_points,) and (1,).
    list: wgpu::Buffer,
    count: wgpu::Buffer,
    /// Indirect dispatch arguments (x, y, z) for ranking the listed points.
    dispatch: wgpu::Buffer,
}

/// The last one-per-point assignment that covered its points in one chunk: its ids and
/// distances stay on the device for [`Backend::accumulate_and_update`].
struct Assigned {
    /// Number of the result ([`Nearest::resident`]).
    generation: u64,
    num_points: usize,
    num_anchors: usize,
    /// Layout: (num_points,).
    ids: wgpu::Buffer,
    /// Layout: (num_points,).
    dists: wgpu::Buffer,
}

struct CoopPipelines {
    nearest: wgpu::ComputePipeline,
    max_abs: wgpu::ComputePipeline,
    to_f16: wgpu::ComputePipeline,
    /// Distance bounds of pinned points: the largest anchor move, then the check that keeps
    /// each point's anchor or lists the point for `nearest` to rank again.
    drift: wgpu::ComputePipeline,
    bound_check: wgpu::ComputePipeline,
    /// The indirect dispatch arguments for ranking the listed points.
    list_dispatch: wgpu::ComputePipeline,
    /// Whether pinned points keep distance bounds (`VLC_WGPU_BOUNDS=0` turns them off, for
    /// comparisons).
    bounds: bool,
}

/// The features the cooperative-matrix assignment needs, when the adapter has them all: 16 x
/// 16 x 16 cooperative matrices with f16 inputs and an f32 accumulator at subgroup scope,
/// subgroups of exactly 32 invocations, 36 KiB of workgroup memory and 16 storage buffers per
/// shader. `VLC_WGPU_COOP=0` turns it off.
fn coop_features(adapter: &wgpu::Adapter, limits: &wgpu::Limits) -> Option<wgpu::Features> {
    let needed = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
        | wgpu::Features::SHADER_F16
        | wgpu::Features::SUBGROUP;
    let info = adapter.get_info();
    let config = adapter.cooperative_matrix_properties().iter().any(|c| {
        (c.m_size, c.n_size, c.k_size) == (16, 16, 16)
            && c.ab_type == wgpu::CooperativeScalarType::F16
            && c.cr_type == wgpu::CooperativeScalarType::F32
    });
    let wanted = std::env::var("VLC_WGPU_COOP").map_or(true, |v| v != "0");
    (wanted
        && config
        && adapter.features().contains(needed)
        && info.subgroup_min_size == 32
        && info.subgroup_max_size == 32
        && limits.max_compute_workgroup_storage_size >= 36 * 1024
        && limits.max_storage_buffers_per_shader_stage >= 16
        && limits.max_compute_invocations_per_workgroup >= 256)
        .then_some(needed)
}

/// The source of the cooperative-matrix module: nearest.wgsl (its bindings) and
/// nearest_coop.wgsl, after the directives they need.
pub fn coop_source() -> String {
    format!(
        "enable f16;\nenable wgpu_cooperative_matrix;\n{}\n{}",
        include_str!("shaders/nearest.wgsl"),
        include_str!("shaders/nearest_coop.wgsl")
    )
}

/// The entry points of `shaders/search.wgsl`, run in this order for a batch of queries.
struct SearchPipelines {
    module: wgpu::ShaderModule,
    /// Every query's dot product with every anchor.
    dots: wgpu::ComputePipeline,
    /// Every query times the RaBitQ or `pcaq` rotation.
    rotate: wgpu::ComputePipeline,
    /// One workgroup per query: probe, scan, rescore, top k. By the shader's `POOL_SLOTS`
    /// (candidate pool slots in workgroup memory; 1: the pool in the storage buffer) and
    /// whether the automatic pool is on (`LIST_MIN_SLOTS` 1,024, else 1) and by the query
    /// weights in workgroup memory of a scalar primary code with global ranges
    /// (`WEIGHT_SLOTS`, its dim; 0: none, `WEIGHTED` off), each compiled on first use.
    search: Mutex<HashMap<(u32, bool, u32), wgpu::ComputePipeline>>,
}

/// Bytes of workgroup memory that search.wgsl declares besides its pool (the matrix products'
/// two 16 x 64 f32 tiles, the workgroup sum's 256 floats, 1,024 probed lists' smallest
/// estimates with the automatic pool, seven words of pool and staging state), all counted
/// although each entry point and pipeline uses only some.
const SEARCH_WORKGROUP_BYTES: usize = 2 * 1024 * 4 + 256 * 4 + 1024 * 4 + 28;
/// Bytes of workgroup memory per pool slot (key high and low words, aux).
const POOL_SLOT_BYTES: usize = 12;
/// The largest pool kept in workgroup memory: 1,024 slots. On an H100 a pool of 2,048 slots
/// (24 KiB, e.g. a rerank depth of 1,000) searched slower there than in the storage buffer
/// (fewer workgroups resident at once), while pools of 512 and 1,024 slots searched faster
/// (bench/results/h100/session37_wgpu_pool_2026-11-26.log).
pub(crate) const WORKGROUP_POOL_BYTES: usize = 12 * 1024;

/// The WGPU implementation of [`Backend`].
pub struct WgpuBackend {
    device: wgpu::Device,
    queue: wgpu::Queue,
    pipelines: Pipelines,
    adapter_name: String,
    limits: wgpu::Limits,
    /// The run-time checks every shader module is compiled with (see [`WgpuBackend::open`]).
    checks: wgpu::ShaderRuntimeChecks,
    /// Pinned buffers by (host address, length).
    resident: Mutex<HashMap<(usize, usize), Arc<Resident>>>,
    /// The last assignment's number (counting every one-per-point result) and the one the
    /// device still holds.
    assigned: Mutex<(u64, Option<Assigned>)>,
    /// Batched inverted-list search (`shaders/search.wgsl`), compiled when the first
    /// [`WgpuIndex`] is built (training never needs it).
    search: std::sync::OnceLock<SearchPipelines>,
    /// Device buffers reused across calls (f16 copies, assignment outputs, read-back staging,
    /// search batches' queries, results and scratch), by label; each only grows. A call takes
    /// a buffer out and puts it back, so concurrent calls never share one.
    scratch: Mutex<HashMap<&'static str, wgpu::Buffer>>,
}

impl WgpuBackend {
    /// Open the best available adapter, software renderers included (set `WGPU_ADAPTER_NAME`
    /// to pick one by name, e.g. `llvmpipe` for Mesa's software Vulkan driver).
    pub fn new() -> Result<Self> {
        Self::open(true)
    }

    /// Open a hardware adapter only (what `--backend auto` uses: a software renderer would be
    /// slower than the CPU backend).
    pub fn new_hardware() -> Result<Self> {
        Self::open(false)
    }

    fn open(allow_software: bool) -> Result<Self> {
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        // `WGPU_ADAPTER_NAME` picks an adapter by name; otherwise wgpu ranks them by
        // `WGPU_POWER_PREF`, whose default here is high performance: discrete GPUs, then
        // integrated, then software renderers last. (wgpu's own default takes the first
        // adapter the driver lists, and without Mesa's device-select layer, which the `vlc`
        // binary turns off, a software renderer can be listed before the GPU.)
        let adapter = pollster::block_on(async {
            match wgpu::util::initialize_adapter_from_env(&instance, None).await {
                Ok(adapter) => Ok(adapter),
                Err(_) => {
                    instance
                        .request_adapter(&wgpu::RequestAdapterOptions {
                            power_preference: wgpu::PowerPreference::from_env()
                                .unwrap_or(wgpu::PowerPreference::HighPerformance),
                            compatible_surface: None,
                            ..Default::default()
                        })
                        .await
                }
            }
        })
        .map_err(|e| {
            err(format!(
                "no GPU adapter found (is a Vulkan, Metal or DX12 driver installed?): {e}"
            ))
        })?;
        let info = adapter.get_info();
        if !allow_software && info.device_type == wgpu::DeviceType::Cpu {
            return Err(err(format!(
                "only a software adapter is present ({})",
                info.name
            )));
        }
        let limits = adapter.limits();
        let coop_needs = coop_features(&adapter, &limits);
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("vlc"),
            required_limits: limits.clone(),
            required_features: coop_needs.unwrap_or(wgpu::Features::empty()),
            // SAFETY: the experimental cooperative-matrix feature is requested only where the
            // adapter reports a matching configuration, and its one shader is checked against
            // the FP32 kernels by the conformance suite on such a device.
            experimental_features: if coop_needs.is_some() {
                unsafe { wgpu::ExperimentalFeatures::enabled() }
            } else {
                wgpu::ExperimentalFeatures::disabled()
            },
            ..Default::default()
        }))
        .map_err(|e| err(format!("cannot open {}: {e}", info.name)))?;
        // Shaders are compiled without wgpu's loop bounding (a counter added to every loop, which
        // keeps the driver from unrolling: the FP32 assignment kernel ran 1.4x slower with it on
        // the H100) and without integer-division guards; bounds checks stay on.
        // VLC_WGPU_CHECKED=1 restores every check.
        let checks = if std::env::var("VLC_WGPU_CHECKED").is_ok_and(|v| v == "1") {
            wgpu::ShaderRuntimeChecks::checked()
        } else {
            wgpu::ShaderRuntimeChecks {
                force_loop_bounding: false,
                int_div_checks: false,
                ..wgpu::ShaderRuntimeChecks::checked()
            }
        };
        let module = |name: &str, src: &str| {
            let desc = wgpu::ShaderModuleDescriptor {
                label: Some(name),
                source: wgpu::ShaderSource::Wgsl(src.into()),
            };
            // SAFETY: `create_shader_module_trusted` requires that the checks turned off are
            // not needed: every loop in VLC's shaders is bounded by a constant or by uniform
            // sizes the host checked (no infinite loop), and every integer division is by a
            // constant or by a size the host checked to be at least 1 (dim, rows per chunk).
            // Bounds checks on buffers and arrays stay on.
            unsafe { device.create_shader_module_trusted(desc, checks) }
        };
        let nearest = module("nearest", include_str!("shaders/nearest.wgsl"));
        let accumulate = module("accumulate", include_str!("shaders/accumulate.wgsl"));
        let update = module("update", include_str!("shaders/update.wgsl"));
        let split = module("split", include_str!("shaders/split.wgsl"));
        let pipeline = |m: &wgpu::ShaderModule, entry: &str| {
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: None,
                module: m,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            })
        };
        // The wide kernel stages 8 KiB and reduces through 16 KiB of workgroup memory.
        // VLC_WGPU_WIDE=0 picks the narrow one (for comparisons).
        let wide = limits.max_compute_workgroup_storage_size >= 24 * 1024
            && std::env::var("VLC_WGPU_WIDE").map_or(true, |v| v != "0");
        let (fused_entry, fused_rows) = if wide {
            ("nearest_fused_wide", 128)
        } else {
            ("nearest_fused", 64)
        };
        // The cooperative-matrix kernel is a module of its own (it needs the enable
        // directives); a driver that rejects it leaves the FP32 kernels in use.
        let coop = coop_needs.and_then(|_| {
            let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
            let m = module("nearest_coop", &coop_source());
            let made = CoopPipelines {
                nearest: pipeline(&m, "nearest_coop"),
                max_abs: pipeline(&m, "max_abs"),
                to_f16: pipeline(&m, "to_f16"),
                drift: pipeline(&m, "anchor_drift"),
                bound_check: pipeline(&m, "bound_check"),
                list_dispatch: pipeline(&m, "list_dispatch"),
                bounds: std::env::var("VLC_WGPU_BOUNDS").map_or(true, |v| v != "0"),
            };
            pollster::block_on(scope.pop()).is_none().then_some(made)
        });
        let pipelines = Pipelines {
            distances: pipeline(&nearest, "distances"),
            select: pipeline(&nearest, "select_nearest"),
            select_radix: pipeline(&nearest, "select_radix"),
            fused: pipeline(&nearest, fused_entry),
            fused_rows,
            coop,
            accumulate: AccumulatePipelines {
                count: pipeline(&accumulate, "count_members"),
                scan: pipeline(&accumulate, "exclusive_scan"),
                scatter: pipeline(&accumulate, "scatter_kept"),
                select: pipeline(&accumulate, "select_thresholds"),
                sum: pipeline(&accumulate, "sum_kept_fixed"),
            },
            update: pipeline(&update, "update_anchors"),
            split: pipeline(&split, "split_lists"),
        };
        let has_coop = pipelines.coop.is_some();
        Ok(WgpuBackend {
            device,
            queue,
            pipelines,
            adapter_name: format!(
                "{} ({:?}{})",
                info.name,
                info.backend,
                if has_coop {
                    ", f16 cooperative matrices"
                } else {
                    ""
                }
            ),
            limits,
            checks,
            resident: Mutex::new(HashMap::new()),
            assigned: Mutex::new((0, None)),
            search: std::sync::OnceLock::new(),
            scratch: Mutex::new(HashMap::new()),
        })
    }

    pub fn adapter_name(&self) -> &str {
        &self.adapter_name
    }

    /// Bytes of workgroup memory the adapter grants a compute workgroup
    /// (`max_compute_workgroup_storage_size`), which decides where a search keeps its
    /// candidate pool and its query weights ([`WgpuIndex::pool_in_workgroup_memory`],
    /// [`WgpuIndex::weighted`]).
    pub fn workgroup_memory(&self) -> usize {
        self.limits.max_compute_workgroup_storage_size as usize
    }

    fn max_binding(&self) -> u64 {
        self.limits
            .max_storage_buffer_binding_size
            .min(self.limits.max_buffer_size)
    }

    fn storage<T: bytemuck::Pod>(&self, label: &str, data: &[T]) -> Result<wgpu::Buffer> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        self.check_binding(label, bytes.len() as u64)?;
        // Zero-length bindings are not allowed: pad to one element.
        let padded;
        let contents = if bytes.is_empty() {
            padded = [0u8; 4];
            &padded[..]
        } else {
            bytes
        };
        Ok(self
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            }))
    }

    /// Like [`Self::storage`], for large inputs (the pinned training sample), and also
    /// returns the largest |value|. The data goes through a ring of three 64 MiB staging
    /// buffers (kept in the scratch pool): several threads fill one (each also takes the
    /// maximum of the part it copies) while the device copies the previous ones.
    /// `VLC_WGPU_UPLOAD=mapped` instead fills one staging buffer as large as the data, which
    /// wgpu allocates for each upload.
    fn upload_parallel(&self, label: &str, data: &[f32]) -> Result<(wgpu::Buffer, f32)> {
        const SERIAL_BYTES: usize = 64 << 20;
        const RING: [&str; 3] = ["upload 0", "upload 1", "upload 2"];
        let bytes: &[u8] = bytemuck::cast_slice(data);
        if bytes.len() < SERIAL_BYTES {
            return Ok((self.storage(label, data)?, max_abs(data)));
        }
        self.check_binding(label, bytes.len() as u64)?;
        let mapped = std::env::var("VLC_WGPU_UPLOAD").is_ok_and(|v| v == "mapped");
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.len() as u64,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: mapped,
        });
        if mapped {
            let most = fill_parallel(buffer.slice(..).get_mapped_range_mut().map_err(err)?, bytes);
            buffer.unmap();
            return Ok((buffer, most));
        }
        let mut ring: Vec<wgpu::Buffer> = Vec::new();
        let mut most = 0f32;
        for (i, src) in bytes.chunks(SERIAL_BYTES).enumerate() {
            let slot = i % RING.len();
            if ring.len() == slot {
                let staging = self
                    .pooled(RING[slot], SERIAL_BYTES as u64)
                    .unwrap_or_else(|| {
                        self.device.create_buffer(&wgpu::BufferDescriptor {
                            label: Some(RING[slot]),
                            size: SERIAL_BYTES as u64,
                            usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                            mapped_at_creation: false,
                        })
                    });
                ring.push(staging);
            }
            let staging = &ring[slot];
            // Waits for this buffer's previous copy (submitted RING.len() chunks ago).
            let range = staging.slice(..src.len() as u64);
            range.map_async(wgpu::MapMode::Write, |_| {});
            self.device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(err)?;
            most = most.max(fill_parallel(
                range.get_mapped_range_mut().map_err(err)?,
                src,
            ));
            staging.unmap();
            let mut encoder = self.device.create_command_encoder(&Default::default());
            let offset = (i * SERIAL_BYTES) as u64;
            encoder.copy_buffer_to_buffer(staging, 0, &buffer, offset, src.len() as u64);
            self.queue.submit([encoder.finish()]);
        }
        for (slot, staging) in ring.into_iter().enumerate() {
            self.give_back(RING[slot], staging);
        }
        Ok((buffer, most))
    }

    /// A typed error when `bytes` exceed one storage binding of this adapter.
    fn check_binding(&self, label: &str, bytes: u64) -> Result<()> {
        if bytes > self.max_binding() {
            return Err(err(format!(
                "{label}: {bytes} bytes exceed this adapter's storage buffer limit of {} bytes",
                self.max_binding()
            )));
        }
        Ok(())
    }

    fn output(&self, label: &str, bytes: u64) -> Result<wgpu::Buffer> {
        self.check_binding(label, bytes)?;
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.max(4),
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        }))
    }

    /// A storage buffer of at least `bytes` from the scratch pool (its contents are whatever
    /// the last user left); give it back with [`Self::give_back`].
    fn take_scratch(&self, label: &'static str, bytes: u64) -> Result<wgpu::Buffer> {
        self.pooled(label, bytes)
            .map_or_else(|| self.output(label, bytes), Ok)
    }

    /// The pool's buffer under `label` if it holds at least `bytes` (a smaller one is dropped).
    fn pooled(&self, label: &'static str, bytes: u64) -> Option<wgpu::Buffer> {
        let cached = self.scratch.lock().unwrap().remove(label);
        cached.filter(|b| b.size() >= bytes)
    }

    fn give_back(&self, label: &'static str, buffer: wgpu::Buffer) {
        self.scratch.lock().unwrap().insert(label, buffer);
    }

    /// A uniform buffer of `words` (a multiple of 4 words, as WGSL sizes uniform structs).
    fn uniform(&self, words: &[u32]) -> wgpu::Buffer {
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("params"),
                contents: bytemuck::cast_slice(words),
                usage: wgpu::BufferUsages::UNIFORM,
            })
    }

    /// Run `f` with GPU validation and out-of-memory errors turned into typed errors (wgpu's
    /// default would panic).
    fn scoped<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let result = f();
        let v = pollster::block_on(validation.pop());
        let o = pollster::block_on(oom.pop());
        if let Some(e) = o {
            return Err(err(format!("out of GPU memory: {e}")));
        }
        if let Some(e) = v {
            return Err(err(format!("validation error: {e}")));
        }
        result
    }

    /// A bind group for `pipeline` from (binding number, buffer) pairs.
    fn bind(
        &self,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[(u32, &wgpu::Buffer)],
    ) -> wgpu::BindGroup {
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: *i,
                resource: b.as_entire_binding(),
            })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
    }

    fn dispatch(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        pipeline: &wgpu::ComputePipeline,
        group: &wgpu::BindGroup,
        x: u32,
        y: u32,
    ) {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: None,
            timestamp_writes: None,
        });
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, group, &[]);
        pass.dispatch_workgroups(x.max(1), y.max(1), 1);
    }

    /// Copy `sources` (buffer, length in `T`s) back to the host after submitting `encoder`,
    /// through mappable staging buffers kept in the scratch pool.
    fn read_back<T: bytemuck::Pod>(
        &self,
        mut encoder: wgpu::CommandEncoder,
        sources: &[(&wgpu::Buffer, usize)],
    ) -> Result<Vec<Vec<T>>> {
        const LABELS: [&str; 4] = ["staging 0", "staging 1", "staging 2", "staging 3"];
        let mut staging = Vec::with_capacity(sources.len());
        for (i, (src, len)) in sources.iter().enumerate() {
            let bytes = (*len * std::mem::size_of::<T>()).max(4) as u64;
            let label = LABELS[i.min(3)];
            let s = self.pooled(label, bytes).unwrap_or_else(|| {
                self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(label),
                    size: bytes,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            });
            encoder.copy_buffer_to_buffer(src, 0, &s, 0, bytes);
            staging.push((s, *len, bytes, label));
        }
        self.queue.submit([encoder.finish()]);
        for (s, _, bytes, _) in &staging {
            s.slice(..*bytes).map_async(wgpu::MapMode::Read, |_| {});
        }
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(err)?;
        let mut out = Vec::with_capacity(staging.len());
        for (s, len, bytes, label) in staging {
            let view = s.slice(..bytes).get_mapped_range().map_err(err)?;
            out.push(bytemuck::cast_slice::<u8, T>(&view)[..len].to_vec());
            drop(view);
            s.unmap();
            self.give_back(label, s);
        }
        Ok(out)
    }

    /// Whether a candidate pool of `cap` slots goes in workgroup memory: at most
    /// [`WORKGROUP_POOL_BYTES`], within the adapter's limit next to search.wgsl's other
    /// workgroup arrays and `weight_slots` query weights (`WEIGHT_SLOTS`; else the pool lives
    /// in the storage buffer).
    fn pool_fits_workgroup(&self, cap: usize, weight_slots: usize) -> bool {
        let bytes = POOL_SLOT_BYTES * cap;
        bytes <= WORKGROUP_POOL_BYTES && self.search_workgroup_fits(bytes, weight_slots)
    }

    /// Whether search.wgsl's workgroup arrays fit the adapter's workgroup memory with
    /// `pool_bytes` of pool and `weight_slots` query weights (at least one word each, as the
    /// shader declares them).
    fn search_workgroup_fits(&self, pool_bytes: usize, weight_slots: usize) -> bool {
        SEARCH_WORKGROUP_BYTES + pool_bytes.max(POOL_SLOT_BYTES) + 4 * weight_slots.max(1)
            <= self.workgroup_memory()
    }

    /// The `search_queries` pipeline with `pool_slots` slots of workgroup memory for the
    /// candidate pool (1: the pool in the storage buffer), with the automatic pool's per-list
    /// minima and staging in workgroup memory where `automatic_pool`, scoring a scalar primary
    /// code with global ranges by its `weight_slots` (its dim) weights in workgroup memory
    /// where that is not 0, compiled on first use; one that fails to compile is reported and
    /// not kept.
    fn search_pipeline(
        &self,
        pool_slots: u32,
        automatic_pool: bool,
        weight_slots: u32,
    ) -> Result<wgpu::ComputePipeline> {
        let pipelines = self.search_pipelines();
        let mut cache = pipelines.search.lock().unwrap();
        let key = (pool_slots, automatic_pool, weight_slots);
        if let Some(pipeline) = cache.get(&key) {
            return Ok(pipeline.clone());
        }
        let list_min_slots = if automatic_pool { 1024.0 } else { 1.0 };
        let pipeline = self
            .scoped(|| {
                Ok(self
                    .device
                    .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                        label: Some("search_queries"),
                        layout: None,
                        module: &pipelines.module,
                        entry_point: Some("search_queries"),
                        compilation_options: wgpu::PipelineCompilationOptions {
                            constants: &[
                                ("POOL_SLOTS", f64::from(pool_slots)),
                                ("LIST_MIN_SLOTS", list_min_slots),
                                ("WEIGHTED", f64::from(u8::from(weight_slots > 0))),
                                ("WEIGHT_SLOTS", f64::from(weight_slots.max(1))),
                            ],
                            ..Default::default()
                        },
                        cache: None,
                    }))
            })
            .map_err(|e| {
                err(format!(
                    "the search pipeline with a {pool_slots}-slot pool failed to compile: {e}"
                ))
            })?;
        cache.insert(key, pipeline.clone());
        Ok(pipeline)
    }

    /// The search pipelines, compiled on first use.
    fn search_pipelines(&self) -> &SearchPipelines {
        self.search.get_or_init(|| {
            let desc = wgpu::ShaderModuleDescriptor {
                label: Some("search"),
                source: wgpu::ShaderSource::Wgsl(include_str!("shaders/search.wgsl").into()),
            };
            // SAFETY: as for the training shaders (see `open`): search.wgsl's loops run to
            // constants or to sizes in its uniform parameters, which `WgpuIndex::search_batch`
            // checked, except the walk over the probed lists' prefix sums, which stops at the
            // list holding item t < total = the sums' last entry (the shader writes the sums
            // itself, non-decreasing); it divides by constants, by loop strides of at least 1
            // and by 4·padded_dim only where padded_dim > 0. Bounds checks stay on.
            let module = unsafe { self.device.create_shader_module_trusted(desc, self.checks) };
            let pipeline = |entry: &str| {
                self.device
                    .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                        label: Some(entry),
                        layout: None,
                        module: &module,
                        entry_point: Some(entry),
                        compilation_options: Default::default(),
                        cache: None,
                    })
            };
            SearchPipelines {
                dots: pipeline("query_dots"),
                rotate: pipeline("rotate_queries"),
                search: Mutex::new(HashMap::new()),
                module,
            }
        })
    }

    fn resident(&self, points: &[f32]) -> Option<Arc<Resident>> {
        self.resident
            .lock()
            .unwrap()
            .get(&(points.as_ptr() as usize, points.len()))
            .cloned()
    }
}

impl Backend for WgpuBackend {
    fn name(&self) -> &'static str {
        "wgpu"
    }

    /// On tensor cores (nearest_coop.wgsl) each f16 product is within 2^-10 (‖x‖² + ‖c‖²) of
    /// the exact one.
    /// Training's assignments of pinned points keep distance bounds on the device (unless
    /// turned off by the environment), so the training loop keeps none on the host.
    fn bounds_assignments(&self) -> bool {
        true
    }

    fn ranking_rounding(&self) -> f32 {
        if self.pipelines.coop.is_some() {
            1.0 / 1024.0
        } else {
            f32::EPSILON
        }
    }

    /// `select_radix`'s largest pick count (`RADIX_PICKS`, 256); more picks scan each row once
    /// per pick (`select_nearest`).
    fn fast_picks(&self) -> usize {
        *RADIX_PICKS.end()
    }

    fn pin<'a>(&'a self, points: &'a [f32]) -> Result<PinGuard<'a>> {
        if (points.len() * 4) as u64 > self.max_binding() {
            // Too large for one binding: calls will stream chunks instead.
            return Ok(PinGuard::none());
        }
        let key = (points.as_ptr() as usize, points.len());
        let (buffer, max_abs) = self.upload_parallel("pinned points", points)?;
        let resident = Arc::new(Resident {
            buffer,
            max_abs,
            half: Mutex::new(None),
            bounds: Mutex::new(None),
        });
        self.resident.lock().unwrap().insert(key, resident);
        Ok(PinGuard::new(move || {
            self.resident.lock().unwrap().remove(&key);
        }))
    }

    fn nearest_anchors(
        &self,
        points: &[f32],
        anchors: &[f32],
        dim: usize,
        per_point: usize,
    ) -> Result<Nearest> {
        let (num_points, num_anchors) = check_nearest_args(points, anchors, dim, per_point)?;
        self.scoped(|| self.nearest_inner(points, anchors, dim, per_point, num_points, num_anchors))
    }

    fn accumulate(
        &self,
        points: &[f32],
        dim: usize,
        assignment: &[u32],
        dists: &[f32],
        thresholds: &[f32],
    ) -> Result<AnchorSums> {
        check_accumulate_args(points, dim, assignment, dists, thresholds.len())?;
        self.scoped(|| {
            self.accumulate_inner(points, dim, (assignment, dists, None), thresholds, None)
        })
    }

    fn accumulate_and_update(
        &self,
        points: &[f32],
        anchors: &mut [f32],
        dim: usize,
        nearest: &Nearest,
        thresholds: &[f32],
        step: f32,
    ) -> Result<AnchorSums> {
        check_single_nearest(nearest)?;
        check_accumulate_args(points, dim, &nearest.ids, &nearest.dists, thresholds.len())?;
        check_anchor_rows(anchors, dim, thresholds.len())?;
        let assignment = (&nearest.ids[..], &nearest.dists[..], nearest.resident);
        self.scoped(|| {
            self.accumulate_inner(points, dim, assignment, thresholds, Some((anchors, step)))
        })
    }

    fn update(&self, anchors: &mut [f32], dim: usize, sums: &AnchorSums, step: f32) -> Result<()> {
        let num_anchors = check_update_args(anchors, dim, sums)?;
        self.scoped(|| self.update_inner(anchors, dim, sums, step, num_anchors))
    }

    fn split_lists(
        &self,
        points: &[f32],
        dim: usize,
        centers: &[f32],
        lists: &[&[u32]],
    ) -> Result<Vec<Option<ListSplit>>> {
        vlc::backend::split::check_split_args(points, dim, centers, lists)?;
        let total: usize = lists.iter().map(|l| l.len()).sum();
        // Only pinned points (the training sample) are cut on the device: uploading them for
        // this alone would cost more than the CPU's cut.
        match self.resident(points) {
            Some(r) if !lists.is_empty() && total < u32::MAX as usize => {
                self.scoped(|| self.split_inner(&r, dim, centers, lists, total))
            }
            _ => Ok(vlc::backend::split::split_checked_lists(
                points, dim, centers, lists,
            )),
        }
    }

    fn trimmed_thresholds(
        &self,
        nearest: &Nearest,
        num_anchors: usize,
        trim: f32,
    ) -> Result<Vec<f32>> {
        check_threshold_args(nearest, num_anchors, trim)?;
        let num_points = nearest.ids.len();
        let on_device =
            self.assigned.lock().unwrap().1.as_ref().is_some_and(|a| {
                Some(a.generation) == nearest.resident && a.num_points == num_points
            });
        // Small assignments are grouped faster on the host than a device round trip.
        if !on_device || num_points < SERIAL_MAX || num_points >= u32::MAX as usize {
            return Ok(trimmed_thresholds(
                &nearest.ids,
                &nearest.dists,
                num_anchors,
                trim,
            ));
        }
        self.scoped(|| self.thresholds_inner(nearest, num_anchors, trim))
    }
}

/// Buffers an encoded `nearest_coop` call uses; the f16 copies go back to the scratch pool
/// when it drops (after the submission that uses them: wgpu keeps a buffer alive for the
/// commands that use it, and later users' commands are queued after them).
struct CoopScratch<'a> {
    backend: &'a WgpuBackend,
    _keep: Vec<wgpu::Buffer>,
    /// Pooled f16 copies.
    points_h: Option<wgpu::Buffer>,
    anchors_h: Option<wgpu::Buffer>,
    /// A pinned buffer and the f16 copy of it this call makes, kept by [`Self::submitted`].
    made_half: Option<(Arc<Resident>, usize, wgpu::Buffer)>,
    /// A pinned buffer whose bounds this call sets.
    made_bounds: Option<Arc<Resident>>,
}

impl CoopScratch<'_> {
    /// Called once the call's commands were submitted: a new f16 copy of pinned points and
    /// their bounds are now valid for later calls.
    fn submitted(&mut self) {
        if let Some((resident, dim, half)) = self.made_half.take() {
            *resident.half.lock().unwrap() = Some((dim, half));
        }
        if let Some(resident) = self.made_bounds.take() {
            if let Some(b) = resident.bounds.lock().unwrap().as_mut() {
                b.ready = true;
            }
        }
    }
}

impl Drop for CoopScratch<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.points_h.take() {
            self.backend.give_back("points f16", b);
        }
        if let Some(b) = self.anchors_h.take() {
            self.backend.give_back("anchors f16", b);
        }
    }
}

/// One part of a mapped buffer, handed to one upload thread.
struct DisjointPart<'a>(wgpu::WriteOnly<'a, [u8]>);

// SAFETY: each part covers its own range of the mapped buffer (from `split_at`) and only the
// thread it is moved to writes it; wgpu's `Send` impl for `WriteOnly` covers sized types only.
unsafe impl Send for DisjointPart<'_> {}

impl DisjointPart<'_> {
    /// Copy `src` (whole f32 values) in and return its largest |value|: each block is
    /// scanned right after its copy, while it is in cache.
    fn fill_from(mut self, src: &[u8]) -> f32 {
        const BLOCK: usize = 256 << 10;
        let mut most = 0f32;
        let mut at = 0;
        for block in src.chunks(BLOCK) {
            self.0.slice(at..at + block.len()).copy_from_slice(block);
            at += block.len();
            most = most.max(max_abs(bytemuck::cast_slice(block)));
        }
        most
    }
}

/// Copy `src` (whole f32 values) into the mapped `view` with several threads (one thread's
/// copy into upload memory took about 0.3 s for 1.5 GB on the H100 machine); returns the
/// largest |value|.
fn fill_parallel(mut view: wgpu::BufferViewMut, src: &[u8]) -> f32 {
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get().min(16));
    let part = src.len().div_ceil(threads).next_multiple_of(4096);
    std::thread::scope(|scope| {
        let mut rest = view.slice(..);
        let mut workers = Vec::new();
        for src in src.chunks(part) {
            let (dst, tail) = rest.split_at(src.len());
            rest = tail;
            let dst = DisjointPart(dst);
            workers.push(scope.spawn(move || dst.fill_from(src)));
        }
        workers
            .into_iter()
            .map(|w| w.join().expect("upload thread"))
            .fold(0f32, f32::max)
    })
}

/// The largest |value| of `data` (0 when empty).
fn max_abs(data: &[f32]) -> f32 {
    data.iter().fold(0f32, |m, v| m.max(v.abs()))
}

/// The buffers of one `nearest_coop` call.
struct CoopCall<'a> {
    /// `[rows, num_anchors, dim, 1]`.
    params: &'a wgpu::Buffer,
    /// Layout: (rows, dim).
    points: &'a wgpu::Buffer,
    /// Set when `points` is a whole pinned buffer: its maximum is known, and its f16 copy is
    /// made once and kept.
    pinned: Option<&'a Arc<Resident>>,
    rows: usize,
    /// Layout: (num_anchors, dim).
    anchors: &'a wgpu::Buffer,
    num_anchors: usize,
    dim: usize,
    /// Layout: (num_anchors,).
    anchor_norms: &'a wgpu::Buffer,
    /// Layout: (rows,).
    out_ids: &'a wgpu::Buffer,
    /// Layout: (rows,).
    out_dists: &'a wgpu::Buffer,
}

impl WgpuBackend {
    /// Encode the cooperative-matrix assignment of `call.rows` points: the maxima of points and
    /// anchors, their scaled f16 copies, then `nearest_coop`. Returns the buffers the encoder
    /// uses (kept alive until it is submitted).
    fn encode_coop(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        coop: &CoopPipelines,
        call: CoopCall<'_>,
    ) -> Result<CoopScratch<'_>> {
        let half_row = call.dim.next_multiple_of(32) * 2;
        let padded_points = call.rows.next_multiple_of(128);
        let padded_anchors = call.num_anchors.next_multiple_of(128);
        // A pinned buffer's maximum is known (the host's is the same value as max_abs's), and
        // its f16 copy is made on the first call only.
        let known_max = call.pinned.map_or(0, |r| r.max_abs.to_bits());
        let maxima = self.storage("maxima", &[known_max, 0, 0])?;
        let half_bytes = (padded_points * half_row) as u64;
        let cached = call.pinned.and_then(|r| {
            let half = r.half.lock().unwrap();
            half.as_ref()
                .filter(|(dim, _)| *dim == call.dim)
                .map(|(_, h)| h.clone())
        });
        let convert_points = cached.is_none();
        let (points_h, pooled) = match (cached, call.pinned) {
            (Some(h), _) => (h, false),
            (None, Some(_)) => (self.output("pinned points f16", half_bytes)?, false),
            (None, None) => (self.take_scratch("points f16", half_bytes)?, true),
        };
        let anchors_h = self.take_scratch("anchors f16", (padded_anchors * half_row) as u64)?;
        let anchor_params = self.uniform(&[
            call.num_anchors as u32,
            call.num_anchors as u32,
            call.dim as u32,
            1,
        ]);
        let sides = [
            (
                call.params,
                call.points,
                call.rows,
                padded_points,
                &points_h,
            ),
            (
                &anchor_params,
                call.anchors,
                call.num_anchors,
                padded_anchors,
                &anchors_h,
            ),
        ];
        let mut keep = Vec::new();
        for (slot, (params, src, rows, padded, _)) in sides.into_iter().enumerate() {
            let cq = self.uniform(&[slot as u32, padded as u32, 0, 0]);
            if slot == 1 || call.pinned.is_none() {
                let g = self.bind(
                    &coop.max_abs,
                    &[(0, params), (1, src), (7, &maxima), (8, &cq)],
                );
                let groups = (rows * call.dim).div_ceil(256 * 16).clamp(1, 4096);
                self.dispatch(encoder, &coop.max_abs, &g, groups as u32, 1);
            }
            keep.push(cq);
        }
        for (slot, (params, src, _, padded, dst)) in sides.into_iter().enumerate() {
            if slot == 0 && !convert_points {
                continue;
            }
            let cq = &keep[slot];
            let g = self.bind(
                &coop.to_f16,
                &[(0, params), (1, src), (7, &maxima), (8, cq), (10, dst)],
            );
            let words = padded * half_row / 4;
            let groups = words.div_ceil(256 * 4).clamp(1, 65_535);
            self.dispatch(encoder, &coop.to_f16, &g, groups as u32, 1);
        }
        // Pinned points keep distance bounds: mode 1 ranks every point and sets them, mode 2
        // (once they are set, for the same number of anchors) first checks each point against
        // its bound and ranks only the listed ones. Other points: mode 0, no bounds.
        let (mode, bounds) = match call.pinned.filter(|_| coop.bounds) {
            Some(r) => {
                let mut guard = r.bounds.lock().unwrap();
                let shape = (call.rows, call.num_anchors, call.dim);
                let reuse = guard.as_ref().is_some_and(|b| b.ready && b.shape == shape);
                if guard.as_ref().is_none_or(|b| b.shape != shape) {
                    let per_point = (call.rows * 4) as u64;
                    *guard = Some(Bounds {
                        shape,
                        ready: false,
                        assign: self.output("assignment", per_point)?,
                        lower: self.output("lower bounds", per_point)?,
                        before: self
                            .output("anchors before", (call.num_anchors * call.dim * 4) as u64)?,
                        list: self.output("points to rank", per_point)?,
                        count: self.output("points to rank (count)", 4)?,
                        dispatch: self.device.create_buffer(&wgpu::BufferDescriptor {
                            label: Some("ranking dispatch"),
                            size: 12,
                            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::INDIRECT,
                            mapped_at_creation: false,
                        }),
                    });
                }
                let b = guard.as_mut().unwrap();
                // Set again by `CoopScratch::submitted` once these commands are submitted.
                b.ready = false;
                let buffers = [
                    &b.assign,
                    &b.lower,
                    &b.before,
                    &b.list,
                    &b.count,
                    &b.dispatch,
                ]
                .map(Clone::clone);
                (if reuse { 2u32 } else { 1 }, Some(buffers))
            }
            None => (0, None),
        };
        // Without bounds, small stand-ins (one each: a buffer bound both read-only and
        // writable in one pass is invalid).
        let stand_ins: Vec<wgpu::Buffer>;
        let [assign, lower, before, list, count, indirect] = match &bounds {
            Some(b) => b.each_ref(),
            None => {
                stand_ins = (0..6)
                    .map(|_| self.output("no bounds", 4))
                    .collect::<Result<_>>()?;
                std::array::from_fn(|i| &stand_ins[i])
            }
        };
        if mode == 2 {
            encoder.clear_buffer(count, 0, None);
            let g = self.bind(
                &coop.drift,
                &[
                    (0, call.params),
                    (2, call.anchors),
                    (7, &maxima),
                    (19, before),
                ],
            );
            let groups = call.num_anchors.div_ceil(8).clamp(1, 65_535);
            self.dispatch(encoder, &coop.drift, &g, groups as u32, 1);
            let g = self.bind(
                &coop.bound_check,
                &[
                    (0, call.params),
                    (1, call.points),
                    (2, call.anchors),
                    (4, call.out_ids),
                    (5, call.out_dists),
                    (7, &maxima),
                    (15, list),
                    (16, count),
                    (17, assign),
                    (18, lower),
                ],
            );
            let groups = call.rows.div_ceil(8).clamp(1, 65_535);
            self.dispatch(encoder, &coop.bound_check, &g, groups as u32, 1);
            let g = self.bind(&coop.list_dispatch, &[(16, count), (20, indirect)]);
            self.dispatch(encoder, &coop.list_dispatch, &g, 1, 1);
        }
        let cq = self.uniform(&[0, 0, mode, 0]);
        let g = self.bind(
            &coop.nearest,
            &[
                (0, call.params),
                (1, call.points),
                (2, call.anchors),
                (4, call.out_ids),
                (5, call.out_dists),
                (6, call.anchor_norms),
                (7, &maxima),
                (8, &cq),
                (11, &points_h),
                (12, &anchors_h),
                (13, list),
                (14, count),
                (17, assign),
                (18, lower),
            ],
        );
        if mode == 2 {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&coop.nearest);
            pass.set_bind_group(0, &g, &[]);
            pass.dispatch_workgroups_indirect(indirect, 0);
        } else {
            let groups = padded_points.div_ceil(128) as u32;
            self.dispatch(encoder, &coop.nearest, &g, groups, 1);
        }
        if mode != 0 {
            let bytes = (call.num_anchors * call.dim * 4) as u64;
            encoder.copy_buffer_to_buffer(call.anchors, 0, before, 0, bytes);
        }
        keep.extend([maxima, anchor_params, cq]);
        let made_half = call
            .pinned
            .filter(|_| convert_points)
            .map(|r| (Arc::clone(r), call.dim, points_h.clone()));
        if !pooled {
            keep.push(points_h.clone());
        }
        Ok(CoopScratch {
            backend: self,
            _keep: keep,
            points_h: pooled.then_some(points_h),
            anchors_h: Some(anchors_h),
            made_half,
            made_bounds: call.pinned.filter(|_| mode != 0).map(Arc::clone),
        })
    }

    /// One neighbour per point (training) runs the fused kernel (`nearest_fused_wide` or
    /// `nearest_fused`): no distance tile, one workgroup per 128 (64) points. Several per point (search) run the tiled distances and
    /// then the selection pass, through a distance tile of at most [`MAX_TILE_BYTES`] kept in
    /// the scratch pool. Points are streamed in chunks that fit one storage binding (the
    /// resident copy is used when one chunk covers them all).
    fn nearest_inner(
        &self,
        points: &[f32],
        anchors: &[f32],
        dim: usize,
        per_point: usize,
        num_points: usize,
        num_anchors: usize,
    ) -> Result<Nearest> {
        let coop = self.pipelines.coop.as_ref().filter(|_| per_point == 1);
        let fused_rows = if coop.is_some() {
            128
        } else {
            self.pipelines.fused_rows
        };
        let d_anchors = self.storage("anchors", anchors)?;
        let fused = per_point == 1;
        // Rows per chunk: the points (and for the tiled path the distance tile) must each fit
        // one binding, and the dispatch grid stays under 65,535 workgroups per dimension.
        let limit = self.max_binding() as usize;
        let chunk = if fused {
            // The f16 copy of a chunk (nearest_coop) must fit one binding too.
            let half_row = if coop.is_some() {
                2 * dim.next_multiple_of(32)
            } else {
                0
            };
            (limit / (4 * dim).max(half_row))
                .saturating_sub(128)
                .min(65_535 * fused_rows)
        } else {
            // select_radix runs one workgroup per row.
            let rows_per_group = if RADIX_PICKS.contains(&per_point) {
                1
            } else {
                16
            };
            // The distance tile stays in the scratch pool after the call: at most 1 GiB (as
            // CUDA's default tile), not the largest binding (4 GiB on some adapters).
            (limit / (4 * dim))
                .min(limit.min(MAX_TILE_BYTES) / (4 * num_anchors))
                .min(65_535 * rows_per_group)
        }
        .max(1);
        if !fused && num_anchors.div_ceil(DISTANCE_TILE) > 65_535 {
            return Err(err(format!(
                "{num_anchors} anchors exceed one dispatch (at most {})",
                65_535 * DISTANCE_TILE
            )));
        }
        let d_norms = if fused {
            let norms: Vec<f32> = anchors
                .chunks_exact(dim)
                .map(|c| c.iter().map(|v| v * v).sum())
                .collect();
            Some(self.storage("anchor norms", &norms)?)
        } else {
            None
        };
        let pinned = self.resident(points);
        let mut ids = Vec::with_capacity(num_points * per_point);
        let mut dists = Vec::with_capacity(num_points * per_point);
        let mut resident = None;
        let mut start = 0;
        while start < num_points {
            let rows = chunk.min(num_points - start);
            let single = start == 0 && rows == num_points;
            let own;
            let whole = pinned.as_ref().filter(|_| single);
            let d_points: &wgpu::Buffer = match whole {
                Some(r) => &r.buffer,
                _ => {
                    own = self.storage("points", &points[start * dim..(start + rows) * dim])?;
                    &own
                }
            };
            let out_ids = self.take_scratch("ids", (rows * per_point * 4) as u64)?;
            let out_dists = self.take_scratch("dists", (rows * per_point * 4) as u64)?;
            let params = self.uniform(&[
                rows as u32,
                num_anchors as u32,
                dim as u32,
                per_point as u32,
            ]);
            let mut encoder = self.device.create_command_encoder(&Default::default());
            let mut tile = None;
            let mut coop_scratch = None;
            match &d_norms {
                Some(d_norms) if coop.is_some() => {
                    coop_scratch = Some(self.encode_coop(
                        &mut encoder,
                        coop.unwrap(),
                        CoopCall {
                            params: &params,
                            points: d_points,
                            pinned: whole,
                            rows,
                            anchors: &d_anchors,
                            num_anchors,
                            dim,
                            anchor_norms: d_norms,
                            out_ids: &out_ids,
                            out_dists: &out_dists,
                        },
                    )?);
                }
                Some(d_norms) => {
                    let group = self.bind(
                        &self.pipelines.fused,
                        &[
                            (0, &params),
                            (1, d_points),
                            (2, &d_anchors),
                            (4, &out_ids),
                            (5, &out_dists),
                            (6, d_norms),
                        ],
                    );
                    self.dispatch(
                        &mut encoder,
                        &self.pipelines.fused,
                        &group,
                        rows.div_ceil(fused_rows) as u32,
                        1,
                    );
                }
                None => {
                    // Pooled: a new buffer would be allocated and cleared on each call.
                    let tile_buffer =
                        self.take_scratch("distance tile", (rows * num_anchors * 4) as u64)?;
                    let g1 = self.bind(
                        &self.pipelines.distances,
                        &[
                            (0, &params),
                            (1, d_points),
                            (2, &d_anchors),
                            (3, &tile_buffer),
                        ],
                    );
                    self.dispatch(
                        &mut encoder,
                        &self.pipelines.distances,
                        &g1,
                        num_anchors.div_ceil(DISTANCE_TILE) as u32,
                        rows.div_ceil(DISTANCE_TILE) as u32,
                    );
                    let (select, groups) = if RADIX_PICKS.contains(&per_point) {
                        (&self.pipelines.select_radix, rows)
                    } else {
                        (&self.pipelines.select, rows.div_ceil(64))
                    };
                    let g2 = self.bind(
                        select,
                        &[
                            (0, &params),
                            (3, &tile_buffer),
                            (4, &out_ids),
                            (5, &out_dists),
                        ],
                    );
                    self.dispatch(&mut encoder, select, &g2, groups as u32, 1);
                    tile = Some(tile_buffer);
                }
            }
            let mut got = self.read_back::<u32>(
                encoder,
                &[(&out_ids, rows * per_point), (&out_dists, rows * per_point)],
            )?;
            if let Some(mut c) = coop_scratch {
                c.submitted();
            }
            if let Some(t) = tile {
                self.give_back("distance tile", t);
            }
            dists.extend(got.pop().unwrap().into_iter().map(f32::from_bits));
            ids.extend(got.pop().unwrap());
            if per_point == 1 && single {
                resident = Some(self.keep_assignment(out_ids, out_dists, rows, num_anchors));
            } else {
                self.give_back("ids", out_ids);
                self.give_back("dists", out_dists);
            }
            start += rows;
        }
        Ok(Nearest {
            per_point,
            ids,
            dists,
            resident,
        })
    }

    /// Keep a one-per-point result on the device for accumulation (the previous one's
    /// buffers go back to the scratch pool); returns its number.
    fn keep_assignment(
        &self,
        ids: wgpu::Buffer,
        dists: wgpu::Buffer,
        num_points: usize,
        num_anchors: usize,
    ) -> u64 {
        let mut assigned = self.assigned.lock().unwrap();
        assigned.0 += 1;
        let generation = assigned.0;
        let previous = assigned.1.replace(Assigned {
            generation,
            num_points,
            num_anchors,
            ids,
            dists,
        });
        if let Some(old) = previous {
            self.give_back("ids", old.ids);
            self.give_back("dists", old.dists);
        }
        generation
    }

    /// Trimmed per-anchor accumulation on the device (accumulate.wgsl's four passes) for the
    /// assignment (ids, distances, resident number): the device's own copy when it still holds
    /// that result, else the host's (already checked). With `moving`, the anchors are moved
    /// there and read back (the sums stay on the device); without it, the sums are read back.
    fn accumulate_inner(
        &self,
        points: &[f32],
        dim: usize,
        assignment: (&[u32], &[f32], Option<u64>),
        thresholds: &[f32],
        moving: Option<(&mut [f32], f32)>,
    ) -> Result<AnchorSums> {
        let num_anchors = thresholds.len();
        let num_points = rows_of("points", points.len(), dim)?;
        if num_points >= u32::MAX as usize {
            return Err(err(format!(
                "{num_points} points: GPU accumulation takes fewer than 2^32"
            )));
        }
        let pinned = self.resident(points);
        let own_points;
        let (d_points, max_abs) = match &pinned {
            Some(r) => (&r.buffer, r.max_abs),
            None => {
                own_points = self.storage("points", points)?;
                (&own_points, max_abs(points))
            }
        };
        // 2^126 keeps the scale an f32 (it only binds for magnitudes below about 2^-80).
        let exponent = fixed_point_exponent(num_points, max_abs).min(126);
        let (ids, dists, number) = assignment;
        // Held until the passes are submitted, so that no assignment replaces these buffers.
        let on_device = self.assigned.lock().unwrap();
        let (d_ids, d_dists) = match &on_device.1 {
            Some(a)
                if Some(a.generation) == number
                    && a.num_points == num_points
                    && a.num_anchors == num_anchors =>
            {
                (a.ids.clone(), a.dists.clone())
            }
            _ => (self.storage("ids", ids)?, self.storage("dists", dists)?),
        };
        let d_thresholds = self.storage("thresholds", thresholds)?;
        let grouping = self.take_grouping(num_anchors, num_points)?;
        let step = moving.as_ref().map_or(0.0, |m| m.1);
        let d_anchors = match &moving {
            Some((anchors, _)) => self.storage("anchors", anchors)?,
            None => self.output("anchors", 4)?,
        };
        let sums = self.output(
            "sums",
            if moving.is_some() {
                4
            } else {
                (num_anchors * dim * 8) as u64
            },
        )?;
        let per_row = num_anchors.clamp(1, 65_535);
        let params = self.uniform(&[
            num_points as u32,
            num_anchors as u32,
            dim as u32,
            per_row as u32,
            exponent as u32,
            moving.is_some() as u32,
            moving.is_none() as u32,
            step.to_bits(),
        ]);
        let pipes = &self.pipelines.accumulate;
        let mut encoder = self.device.create_command_encoder(&Default::default());
        self.encode_grouping(
            &mut encoder,
            &params,
            (&d_ids, &d_dists, &d_thresholds),
            num_points,
            &grouping,
        );
        let g = self.bind(
            &pipes.sum,
            &[
                (0, &params),
                (1, d_points),
                (7, &grouping.offsets),
                (9, &grouping.members),
                (10, &d_anchors),
                (11, &sums),
            ],
        );
        self.dispatch(
            &mut encoder,
            &pipes.sum,
            &g,
            per_row as u32,
            num_anchors.div_ceil(per_row) as u32,
        );
        let mut sources = vec![
            (&grouping.counts, num_anchors),
            (&grouping.kept, num_anchors),
        ];
        match moving {
            Some(_) => sources.push((&d_anchors, num_anchors * dim)),
            None => sources.push((&sums, num_anchors * dim * 2)),
        }
        let mut got = self.read_back::<u32>(encoder, &sources)?;
        drop(on_device);
        self.give_back_grouping(grouping);
        let last = got.pop().unwrap();
        let kept = got.pop().unwrap();
        let members = got.pop().unwrap();
        let sums = match moving {
            Some((anchors, _)) => {
                anchors.copy_from_slice(bytemuck::cast_slice(&last));
                Vec::new()
            }
            None => {
                let unit = 2f64.powi(-exponent);
                last.chunks_exact(2)
                    .map(|w| ((w[0] as u64 | (w[1] as u64) << 32) as i64) as f64 * unit)
                    .collect()
            }
        };
        Ok(AnchorSums {
            sums,
            kept,
            members,
        })
    }

    /// The grouping buffers for `num_anchors` anchors and `num_points` points, from the
    /// scratch pool where it has them.
    fn take_grouping(&self, num_anchors: usize, num_points: usize) -> Result<Grouping> {
        let anchor_bytes = (num_anchors * 4) as u64;
        Ok(Grouping {
            counts: self.take_scratch("member counts", anchor_bytes)?,
            kept: self.take_scratch("kept", anchor_bytes)?,
            cursor: self.take_scratch("cursor", anchor_bytes)?,
            offsets: self.take_scratch("offsets", anchor_bytes + 4)?,
            members: self.take_scratch("members", (num_points * 4) as u64)?,
        })
    }

    /// Return [`Self::take_grouping`]'s buffers to the scratch pool.
    fn give_back_grouping(&self, g: Grouping) {
        self.give_back("member counts", g.counts);
        self.give_back("kept", g.kept);
        self.give_back("cursor", g.cursor);
        self.give_back("offsets", g.offsets);
        self.give_back("members", g.members);
    }

    /// Encode accumulate.wgsl's passes 1-3 (`params` as for `accumulate_inner`): the points of
    /// an assignment (`ids`, `dists`) whose distance is at most their anchor's threshold,
    /// grouped by anchor into `grouping` (counts and kept counts cleared first).
    fn encode_grouping(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        params: &wgpu::Buffer,
        (ids, dists, thresholds): (&wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer),
        num_points: usize,
        grouping: &Grouping,
    ) {
        let pipes = &self.pipelines.accumulate;
        encoder.clear_buffer(&grouping.counts, 0, None);
        encoder.clear_buffer(&grouping.kept, 0, None);
        let point_groups = num_points.div_ceil(256).clamp(1, 65_535) as u32;
        let g = self.bind(
            &pipes.count,
            &[
                (0, params),
                (2, ids),
                (3, dists),
                (4, thresholds),
                (5, &grouping.counts),
                (6, &grouping.kept),
            ],
        );
        self.dispatch(encoder, &pipes.count, &g, point_groups, 1);
        let g = self.bind(
            &pipes.scan,
            &[
                (0, params),
                (6, &grouping.kept),
                (7, &grouping.offsets),
                (8, &grouping.cursor),
            ],
        );
        self.dispatch(encoder, &pipes.scan, &g, 1, 1);
        let g = self.bind(
            &pipes.scatter,
            &[
                (0, params),
                (2, ids),
                (3, dists),
                (4, thresholds),
                (8, &grouping.cursor),
                (9, &grouping.members),
            ],
        );
        self.dispatch(encoder, &pipes.scatter, &g, point_groups, 1);
    }

    /// [`Backend::split_lists`] of the pinned points `resident` (arguments checked by the
    /// caller) with split.wgsl.
    fn split_inner(
        &self,
        resident: &Resident,
        dim: usize,
        centers: &[f32],
        lists: &[&[u32]],
        total: usize,
    ) -> Result<Vec<Option<ListSplit>>> {
        let num_lists = lists.len();
        let (offsets, flat) = vlc::backend::split::flatten_lists(lists);
        let d_members = self.storage("split members", &flat)?;
        let d_offsets = self.storage("split offsets", &offsets)?;
        let d_centers = self.storage("split centres", centers)?;
        let side = self.output("split sides", (total.max(1) * 4) as u64)?;
        let means = self.output("split means", (num_lists * 2 * dim * 4) as u64)?;
        let counts = self.output("split counts", (num_lists * 2 * 4) as u64)?;
        let per_row = num_lists.clamp(1, 65_535);
        let params = self.uniform(&[num_lists as u32, dim as u32, per_row as u32, 0]);
        let mut encoder = self.device.create_command_encoder(&Default::default());
        let pipe = &self.pipelines.split;
        let g = self.bind(
            pipe,
            &[
                (0, &params),
                (1, &resident.buffer),
                (2, &d_centers),
                (3, &d_offsets),
                (4, &d_members),
                (5, &side),
                (6, &means),
                (7, &counts),
            ],
        );
        self.dispatch(
            &mut encoder,
            pipe,
            &g,
            per_row as u32,
            num_lists.div_ceil(per_row) as u32,
        );
        let mut got = self.read_back::<u32>(
            encoder,
            &[
                (&side, total),
                (&means, num_lists * 2 * dim),
                (&counts, num_lists * 2),
            ],
        )?;
        let host_counts = got.pop().unwrap();
        let host_means: &[f32] = bytemuck::cast_slice(&got[1]);
        let host_side = &got[0];
        Ok(vlc::backend::split::assemble_splits(
            lists,
            &offsets,
            host_side,
            host_means,
            &host_counts,
            dim,
        ))
    }

    /// [`Backend::trimmed_thresholds`] on the device's copy of `nearest` (checked by the
    /// caller): every member grouped by anchor (accumulate.wgsl's passes 1-3 with +inf
    /// thresholds), the member counts read back to rank each anchor's threshold as the CPU
    /// does, then `select_thresholds`.
    fn thresholds_inner(
        &self,
        nearest: &Nearest,
        num_anchors: usize,
        trim: f32,
    ) -> Result<Vec<f32>> {
        let num_points = nearest.ids.len();
        // Held until the passes are submitted, so that no assignment replaces these buffers.
        let on_device = self.assigned.lock().unwrap();
        let Some(a) = on_device
            .1
            .as_ref()
            .filter(|a| Some(a.generation) == nearest.resident && a.num_points == num_points)
        else {
            return Err(err("the assignment left the device"));
        };
        let (d_ids, d_dists) = (a.ids.clone(), a.dists.clone());
        let d_all = self.storage("thresholds", &vec![f32::INFINITY; num_anchors])?;
        let anchor_bytes = (num_anchors * 4) as u64;
        let grouping = self.take_grouping(num_anchors, num_points)?;
        let per_row = num_anchors.clamp(1, 65_535);
        let params = self.uniform(&[
            num_points as u32,
            num_anchors as u32,
            0,
            per_row as u32,
            0,
            0,
            0,
            0,
        ]);
        let pipes = &self.pipelines.accumulate;
        let mut encoder = self.device.create_command_encoder(&Default::default());
        self.encode_grouping(
            &mut encoder,
            &params,
            (&d_ids, &d_dists, &d_all),
            num_points,
            &grouping,
        );
        let member_counts = self
            .read_back::<u32>(encoder, &[(&grouping.counts, num_anchors)])?
            .pop()
            .unwrap();
        let ranks: Vec<u32> = member_counts
            .iter()
            .map(|&m| {
                let keep = kept_count(m as usize, trim);
                if keep == m as usize || keep == 0 {
                    u32::MAX
                } else {
                    keep as u32 - 1
                }
            })
            .collect();
        let d_ranks = self.storage("ranks", &ranks)?;
        let d_out = self.output("thresholds", anchor_bytes)?;
        let mut encoder = self.device.create_command_encoder(&Default::default());
        let g = self.bind(
            &pipes.select,
            &[
                (0, &params),
                (3, &d_dists),
                (7, &grouping.offsets),
                (9, &grouping.members),
                (12, &d_ranks),
                (13, &d_out),
            ],
        );
        self.dispatch(
            &mut encoder,
            &pipes.select,
            &g,
            per_row as u32,
            num_anchors.div_ceil(per_row) as u32,
        );
        let selected = self
            .read_back::<f32>(encoder, &[(&d_out, num_anchors)])?
            .pop()
            .unwrap();
        drop(on_device);
        self.give_back_grouping(grouping);
        Ok(selected
            .into_iter()
            .zip(&ranks)
            .map(|(v, &r)| if r == u32::MAX { f32::INFINITY } else { v })
            .collect())
    }

    fn update_inner(
        &self,
        anchors: &mut [f32],
        dim: usize,
        sums: &AnchorSums,
        step: f32,
        num_anchors: usize,
    ) -> Result<()> {
        let means: Vec<f32> = sums
            .sums
            .iter()
            .enumerate()
            .map(|(i, &s)| (s * (1.0 / sums.kept[i / dim].max(1) as f64)) as f32)
            .collect();
        let d_anchors = self.storage("anchors", anchors)?;
        let (d_means, d_kept) = (
            self.storage("means", &means)?,
            self.storage("kept", &sums.kept)?,
        );
        let total = num_anchors * dim;
        let groups = total.div_ceil(64);
        let x = groups.min(65_535);
        let params = self.uniform(&[
            num_anchors as u32,
            dim as u32,
            step.to_bits(),
            (x * 64) as u32,
        ]);
        let mut encoder = self.device.create_command_encoder(&Default::default());
        let g = self.bind(
            &self.pipelines.update,
            &[(0, &params), (1, &d_anchors), (2, &d_means), (3, &d_kept)],
        );
        self.dispatch(
            &mut encoder,
            &self.pipelines.update,
            &g,
            x as u32,
            groups.div_ceil(x) as u32,
        );
        let got = self.read_back::<f32>(encoder, &[(&d_anchors, total)])?;
        anchors.copy_from_slice(&got[0]);
        Ok(())
    }
}
