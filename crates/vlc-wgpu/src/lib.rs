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
//! drops.

mod search;

pub use search::WgpuIndex;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use vlc::backend::{
    check_accumulate_args, check_nearest_args, check_update_args, group_by_anchor, AnchorSums,
    Backend, Nearest, PinGuard,
};
use vlc::{Result, VlcError};
use wgpu::util::DeviceExt;

fn err(reason: impl std::fmt::Display) -> VlcError {
    VlcError::Backend {
        backend: "wgpu".into(),
        reason: reason.to_string(),
    }
}

struct Pipelines {
    distances: wgpu::ComputePipeline,
    select: wgpu::ComputePipeline,
    /// Fused single-nearest assignment, used when `per_point == 1`: `nearest_fused_wide`
    /// (128 points per workgroup) where the adapter has the workgroup memory for it, else
    /// `nearest_fused` (64).
    fused: wgpu::ComputePipeline,
    /// Points per workgroup of `fused`.
    fused_rows: usize,
    /// `max_abs`, `to_f16` and `nearest_coop`, where the adapter has f16 cooperative matrices
    /// (tensor cores) and subgroups of 32: used instead of `fused` for one neighbour per point.
    coop: Option<CoopPipelines>,
    accumulate: wgpu::ComputePipeline,
    update: wgpu::ComputePipeline,
}

struct CoopPipelines {
    nearest: wgpu::ComputePipeline,
    max_abs: wgpu::ComputePipeline,
    to_f16: wgpu::ComputePipeline,
}

/// The features the cooperative-matrix assignment needs, when the adapter has them all: 16 x
/// 16 x 16 cooperative matrices with f16 inputs and an f32 accumulator at subgroup scope,
/// subgroups of exactly 32 invocations and 36 KiB of workgroup memory. `VLC_WGPU_COOP=0` turns
/// it off.
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

/// The WGPU implementation of [`Backend`].
pub struct WgpuBackend {
    device: wgpu::Device,
    queue: wgpu::Queue,
    pipelines: Pipelines,
    adapter_name: String,
    limits: wgpu::Limits,
    resident: Mutex<HashMap<(usize, usize), Arc<wgpu::Buffer>>>,
    /// Batched inverted-list search (`search_queries`), compiled when the first [`WgpuIndex`]
    /// is built (training never needs it).
    search: std::sync::OnceLock<wgpu::ComputePipeline>,
    /// Device buffers reused across calls (f16 copies, assignment outputs, read-back staging),
    /// by label; each only grows. A call takes a buffer out and puts it back, so concurrent
    /// calls never share one.
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
        let adapter = pollster::block_on(wgpu::util::initialize_adapter_from_env_or_default(
            &instance, None,
        ))
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
            };
            pollster::block_on(scope.pop()).is_none().then_some(made)
        });
        let pipelines = Pipelines {
            distances: pipeline(&nearest, "distances"),
            select: pipeline(&nearest, "select_nearest"),
            fused: pipeline(&nearest, fused_entry),
            fused_rows,
            coop,
            accumulate: pipeline(&accumulate, "accumulate_trimmed"),
            update: pipeline(&update, "update_anchors"),
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
            resident: Mutex::new(HashMap::new()),
            search: std::sync::OnceLock::new(),
            scratch: Mutex::new(HashMap::new()),
        })
    }

    pub fn adapter_name(&self) -> &str {
        &self.adapter_name
    }

    fn max_binding(&self) -> u64 {
        (self.limits.max_storage_buffer_binding_size as u64).min(self.limits.max_buffer_size)
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

    /// Like [`Self::storage`], for large inputs (the pinned training sample): the buffer is
    /// created mapped and filled by several threads (one thread's copy into the upload memory
    /// took about 0.3 s for 1.5 GB on the H100 machine).
    fn upload_parallel(&self, label: &str, data: &[f32]) -> Result<wgpu::Buffer> {
        const SERIAL_BYTES: usize = 64 << 20;
        let bytes: &[u8] = bytemuck::cast_slice(data);
        if bytes.len() < SERIAL_BYTES {
            return self.storage(label, data);
        }
        self.check_binding(label, bytes.len() as u64)?;
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.len() as u64,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: true,
        });
        {
            let mut view = buffer.slice(..).get_mapped_range_mut().map_err(err)?;
            let threads = std::thread::available_parallelism().map_or(4, |n| n.get().min(16));
            let part = bytes.len().div_ceil(threads).next_multiple_of(4096);
            std::thread::scope(|scope| {
                let mut rest = view.slice(..);
                for src in bytes.chunks(part) {
                    let (dst, tail) = rest.split_at(src.len());
                    rest = tail;
                    let dst = DisjointPart(dst);
                    scope.spawn(move || dst.fill_from(src));
                }
            });
        }
        buffer.unmap();
        Ok(buffer)
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
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
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

    /// The search pipeline, compiled on first use.
    fn search_pipeline(&self) -> &wgpu::ComputePipeline {
        self.search.get_or_init(|| {
            let module = self
                .device
                .create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some("search"),
                    source: wgpu::ShaderSource::Wgsl(include_str!("shaders/search.wgsl").into()),
                });
            self.device
                .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some("search_queries"),
                    layout: None,
                    module: &module,
                    entry_point: Some("search_queries"),
                    compilation_options: Default::default(),
                    cache: None,
                })
        })
    }

    fn resident(&self, points: &[f32]) -> Option<Arc<wgpu::Buffer>> {
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

    fn pin<'a>(&'a self, points: &'a [f32]) -> Result<PinGuard<'a>> {
        if (points.len() * 4) as u64 > self.max_binding() {
            // Too large for one binding: calls will stream chunks instead.
            return Ok(PinGuard::none());
        }
        let key = (points.as_ptr() as usize, points.len());
        let buffer = Arc::new(self.upload_parallel("pinned points", points)?);
        self.resident.lock().unwrap().insert(key, buffer);
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
        self.scoped(|| self.accumulate_inner(points, dim, assignment, dists, thresholds))
    }

    fn update(&self, anchors: &mut [f32], dim: usize, sums: &AnchorSums, step: f32) -> Result<()> {
        let num_anchors = check_update_args(anchors, dim, sums)?;
        self.scoped(|| self.update_inner(anchors, dim, sums, step, num_anchors))
    }
}

/// Buffers an encoded `nearest_coop` call uses; the f16 copies go back to the scratch pool
/// when it drops (after the submission that uses them: wgpu keeps a buffer alive for the
/// commands that use it, and later users' commands are queued after them).
struct CoopScratch<'a> {
    backend: &'a WgpuBackend,
    _keep: Vec<wgpu::Buffer>,
    points_h: Option<wgpu::Buffer>,
    anchors_h: Option<wgpu::Buffer>,
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
    fn fill_from(mut self, src: &[u8]) {
        self.0.copy_from_slice(src);
    }
}

/// The buffers of one `nearest_coop` call.
struct CoopCall<'a> {
    /// `[rows, num_anchors, dim, 1]`.
    params: &'a wgpu::Buffer,
    /// Layout: (rows, dim).
    points: &'a wgpu::Buffer,
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
        let maxima = self.storage("maxima", &[0u32, 0])?;
        let points_h = self.take_scratch("points f16", (padded_points * half_row) as u64)?;
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
            let g = self.bind(
                &coop.max_abs,
                &[(0, params), (1, src), (7, &maxima), (8, &cq)],
            );
            let groups = (rows * call.dim).div_ceil(256 * 16).clamp(1, 4096);
            self.dispatch(encoder, &coop.max_abs, &g, groups as u32, 1);
            keep.push(cq);
        }
        for (slot, (params, src, _, padded, dst)) in sides.into_iter().enumerate() {
            let cq = &keep[slot];
            let g = self.bind(
                &coop.to_f16,
                &[(0, params), (1, src), (7, &maxima), (8, cq), (10, dst)],
            );
            let words = padded * half_row / 4;
            let groups = words.div_ceil(256 * 4).clamp(1, 65_535);
            self.dispatch(encoder, &coop.to_f16, &g, groups as u32, 1);
        }
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
                (11, &points_h),
                (12, &anchors_h),
            ],
        );
        self.dispatch(
            encoder,
            &coop.nearest,
            &g,
            padded_points.div_ceil(128) as u32,
            1,
        );
        keep.extend([maxima, anchor_params]);
        Ok(CoopScratch {
            backend: self,
            _keep: keep,
            points_h: Some(points_h),
            anchors_h: Some(anchors_h),
        })
    }

    /// One neighbour per point (training) runs the fused kernel (`nearest_fused_wide` or
    /// `nearest_fused`): no distance tile, one workgroup per 128 (64) points. Several per point (search) run the tiled distances and
    /// then the selection pass. Points are streamed in chunks that fit one storage binding (the
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
            (limit / (4 * dim))
                .min(limit / (4 * num_anchors))
                .min(65_535 * 16)
        }
        .max(1);
        if !fused && num_anchors.div_ceil(16) > 65_535 {
            return Err(err(format!(
                "{num_anchors} anchors exceed one dispatch (at most {})",
                65_535 * 16
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
        let mut start = 0;
        while start < num_points {
            let rows = chunk.min(num_points - start);
            let own;
            let d_points: &wgpu::Buffer = match (&pinned, start == 0 && rows == num_points) {
                (Some(b), true) => b,
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
            let _tile;
            let _scratch;
            match &d_norms {
                Some(d_norms) if coop.is_some() => {
                    _scratch = self.encode_coop(
                        &mut encoder,
                        coop.unwrap(),
                        CoopCall {
                            params: &params,
                            points: d_points,
                            rows,
                            anchors: &d_anchors,
                            num_anchors,
                            dim,
                            anchor_norms: d_norms,
                            out_ids: &out_ids,
                            out_dists: &out_dists,
                        },
                    )?;
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
                    let tile = self.output("distance tile", (rows * num_anchors * 4) as u64)?;
                    let g1 = self.bind(
                        &self.pipelines.distances,
                        &[(0, &params), (1, d_points), (2, &d_anchors), (3, &tile)],
                    );
                    self.dispatch(
                        &mut encoder,
                        &self.pipelines.distances,
                        &g1,
                        num_anchors.div_ceil(16) as u32,
                        rows.div_ceil(16) as u32,
                    );
                    let g2 = self.bind(
                        &self.pipelines.select,
                        &[(0, &params), (3, &tile), (4, &out_ids), (5, &out_dists)],
                    );
                    self.dispatch(
                        &mut encoder,
                        &self.pipelines.select,
                        &g2,
                        rows.div_ceil(64) as u32,
                        1,
                    );
                    _tile = tile;
                }
            }
            let mut got = self.read_back::<u32>(
                encoder,
                &[(&out_ids, rows * per_point), (&out_dists, rows * per_point)],
            )?;
            dists.extend(got.pop().unwrap().into_iter().map(f32::from_bits));
            ids.extend(got.pop().unwrap());
            self.give_back("ids", out_ids);
            self.give_back("dists", out_dists);
            start += rows;
        }
        Ok(Nearest {
            per_point,
            ids,
            dists,
            resident: None,
        })
    }

    fn accumulate_inner(
        &self,
        points: &[f32],
        dim: usize,
        assignment: &[u32],
        dists: &[f32],
        thresholds: &[f32],
    ) -> Result<AnchorSums> {
        let num_anchors = thresholds.len();
        let (offsets, members) = group_by_anchor(assignment, num_anchors);
        let offsets: Vec<u32> = offsets.iter().map(|&o| o as u32).collect();
        let pinned = self.resident(points);
        let own;
        let d_points = match &pinned {
            Some(b) => b.as_ref(),
            None => {
                own = self.storage("points", points)?;
                &own
            }
        };
        let (d_off, d_mem, d_dist, d_thr) = (
            self.storage("offsets", &offsets)?,
            self.storage("members", &members)?,
            self.storage("dists", dists)?,
            self.storage("thresholds", thresholds)?,
        );
        let sums = self.output("sums", (num_anchors * dim * 4) as u64)?;
        let comps = self.output("compensations", (num_anchors * dim * 4) as u64)?;
        let kept = self.output("kept", (num_anchors * 4) as u64)?;
        let per_row = num_anchors.min(65_535);
        let params = self.uniform(&[num_anchors as u32, dim as u32, per_row as u32, 0]);
        let mut encoder = self.device.create_command_encoder(&Default::default());
        let g = self.bind(
            &self.pipelines.accumulate,
            &[
                (0, &params),
                (1, d_points),
                (2, &d_off),
                (3, &d_mem),
                (4, &d_dist),
                (5, &d_thr),
                (6, &sums),
                (7, &comps),
                (8, &kept),
            ],
        );
        self.dispatch(
            &mut encoder,
            &self.pipelines.accumulate,
            &g,
            per_row as u32,
            num_anchors.div_ceil(per_row) as u32,
        );
        let mut got = self.read_back::<u32>(
            encoder,
            &[
                (&sums, num_anchors * dim),
                (&comps, num_anchors * dim),
                (&kept, num_anchors),
            ],
        )?;
        let kept = got.pop().unwrap();
        let comps = got.pop().unwrap();
        let sums = got.pop().unwrap();
        let sums = sums
            .iter()
            .zip(&comps)
            .map(|(&s, &c)| f32::from_bits(s) as f64 - f32::from_bits(c) as f64)
            .collect();
        let members = offsets.windows(2).map(|w| w[1] - w[0]).collect();
        Ok(AnchorSums {
            sums,
            kept,
            members,
        })
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
