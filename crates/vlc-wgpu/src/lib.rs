//! WGPU backend for VLC: the backend primitives as WGSL compute shaders (one `.wgsl` per op,
//! same stem as the CUDA `.cu`), on whatever GPU API the machine has (Vulkan, Metal, DX12).
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
    accumulate: wgpu::ComputePipeline,
    update: wgpu::ComputePipeline,
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
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("vlc"),
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| err(format!("cannot open {}: {e}", info.name)))?;
        let module = |name: &str, src: &str| {
            device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(name),
                source: wgpu::ShaderSource::Wgsl(src.into()),
            })
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
        let pipelines = Pipelines {
            distances: pipeline(&nearest, "distances"),
            select: pipeline(&nearest, "select_nearest"),
            fused: pipeline(&nearest, fused_entry),
            fused_rows,
            accumulate: pipeline(&accumulate, "accumulate_trimmed"),
            update: pipeline(&update, "update_anchors"),
        };
        Ok(WgpuBackend {
            device,
            queue,
            pipelines,
            adapter_name: format!("{} ({:?})", info.name, info.backend),
            limits,
            resident: Mutex::new(HashMap::new()),
            search: std::sync::OnceLock::new(),
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
        if bytes.len() as u64 > self.max_binding() {
            return Err(err(format!(
                "{label}: {} bytes exceed this adapter's storage buffer limit of {} bytes",
                bytes.len(),
                self.max_binding()
            )));
        }
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

    fn output(&self, label: &str, bytes: u64) -> Result<wgpu::Buffer> {
        if bytes > self.max_binding() {
            return Err(err(format!(
                "{label}: {bytes} bytes exceed this adapter's storage buffer limit of {} bytes",
                self.max_binding()
            )));
        }
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.max(4),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        }))
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

    /// Copy `src` back to the host after submitting `encoder`.
    fn read_back<T: bytemuck::Pod>(
        &self,
        mut encoder: wgpu::CommandEncoder,
        sources: &[(&wgpu::Buffer, usize)],
    ) -> Result<Vec<Vec<T>>> {
        let staging: Vec<(wgpu::Buffer, usize)> = sources
            .iter()
            .map(|(src, len)| {
                let bytes = (*len * std::mem::size_of::<T>()).max(4) as u64;
                let s = self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("staging"),
                    size: bytes,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                encoder.copy_buffer_to_buffer(src, 0, &s, 0, bytes);
                (s, *len)
            })
            .collect();
        self.queue.submit([encoder.finish()]);
        for (s, _) in &staging {
            s.slice(..).map_async(wgpu::MapMode::Read, |_| {});
        }
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(err)?;
        staging
            .iter()
            .map(|(s, len)| {
                let view = s.slice(..).get_mapped_range().map_err(err)?;
                let out = bytemuck::cast_slice::<u8, T>(&view)[..*len].to_vec();
                drop(view);
                s.unmap();
                Ok(out)
            })
            .collect()
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
        let buffer = Arc::new(self.storage("pinned points", points)?);
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

impl WgpuBackend {
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
        let fused_rows = self.pipelines.fused_rows;
        let d_anchors = self.storage("anchors", anchors)?;
        let fused = per_point == 1;
        // Rows per chunk: the points (and for the tiled path the distance tile) must each fit
        // one binding, and the dispatch grid stays under 65,535 workgroups per dimension.
        let limit = self.max_binding() as usize;
        let chunk = if fused {
            (limit / (4 * dim)).min(65_535 * fused_rows)
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
            let out_ids = self.output("ids", (rows * per_point * 4) as u64)?;
            let out_dists = self.output("dists", (rows * per_point * 4) as u64)?;
            let params = self.uniform(&[
                rows as u32,
                num_anchors as u32,
                dim as u32,
                per_point as u32,
            ]);
            let mut encoder = self.device.create_command_encoder(&Default::default());
            let _tile;
            match &d_norms {
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
            let d: Vec<f32> = got.pop().unwrap().into_iter().map(f32::from_bits).collect();
            ids.extend(got.pop().unwrap());
            dists.extend(d);
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
