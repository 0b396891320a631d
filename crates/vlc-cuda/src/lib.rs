//! CUDA backend for VLC.
//!
//! * Built without a CUDA toolkit: cudarc loads `libcuda`, `libnvrtc` and `libcublas`
//!   dynamically at run time; [`CudaBackend::new`] returns a typed error when they or a device
//!   are missing, so callers fall back to the CPU.
//! * Kernels are embedded `.cu` sources (one per backend primitive, same stem as the WGSL
//!   ones), compiled by NVRTC on first use straight to CUBIN for the device's compute
//!   capability, cached on disk (keyed by source hash, architecture and NVRTC version) and
//!   loaded once per backend.
//! * Assignment runs as a cuBLAS GEMM (TF32 tensor cores by default, FP32 selectable) over row
//!   chunks, followed by a kernel that folds in the norms and takes the arg-min, so the full
//!   points × anchors matrix never exists; accumulation is per anchor over a CSR grouping
//!   (deterministic, double precision), as on the CPU.
//! * Points handed to [`Backend::pin`] stay on the GPU until the guard drops (the training
//!   loop pins its sample), so iterations move only anchors, assignments and sums.

mod module;

use cudarc::cublas::sys as cublas_sys;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use vlc::backend::{
    check_accumulate_args, check_nearest_args, check_update_args, group_by_anchor, AnchorSums,
    Backend, Nearest, PinGuard,
};
use vlc::{Result, VlcError};

pub use module::KernelCache;

/// Matrix-unit precision of the assignment GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmPrecision {
    /// Full FP32 (CUDA cores).
    Fp32,
    /// TF32 tensor cores (10-bit mantissa inputs, FP32 accumulation): several times faster.
    Tf32,
}

fn err(reason: impl std::fmt::Display) -> VlcError {
    VlcError::Backend {
        backend: "cuda".into(),
        reason: reason.to_string(),
    }
}

struct Kernels {
    row_norms: CudaFunction,
    nearest_from_dots: CudaFunction,
    accumulate_trimmed: CudaFunction,
    update_anchors: CudaFunction,
}

/// The CUDA implementation of [`Backend`].
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    kernels: Kernels,
    precision: GemmPrecision,
    device_name: String,
    /// Device copies of pinned host buffers, keyed by (address, length).
    resident: Mutex<HashMap<(usize, usize), Arc<CudaSlice<f32>>>>,
    /// Row norms of pinned buffers, keyed by (address, length, dim).
    resident_norms: Mutex<HashMap<(usize, usize, usize), Arc<CudaSlice<f32>>>>,
    /// The dot-product tile, kept between calls. Layout: (rows, num_anchors), row-major.
    tile: Mutex<Option<CudaSlice<f32>>>,
    /// Serialises GPU work: cuBLAS handles and the stream are not shared across threads.
    lock: Mutex<()>,
}

/// Whether the CUDA driver, NVRTC and cuBLAS libraries can be loaded on this machine.
pub fn libraries_present() -> bool {
    // SAFETY: these only try to open the shared libraries; nothing is called.
    unsafe {
        cudarc::driver::sys::is_culib_present()
            && cudarc::nvrtc::sys::is_culib_present()
            && cudarc::cublas::sys::is_culib_present()
    }
}

/// Whether a CUDA device is usable here: libraries present and at least one device.
pub fn device_available() -> bool {
    libraries_present() && CudaContext::device_count().map(|c| c > 0).unwrap_or(false)
}

impl CudaBackend {
    /// Open device `ordinal` with TF32 assignment GEMMs (`VLC_CUDA_PRECISION=fp32` selects
    /// full FP32).
    pub fn new(ordinal: usize) -> Result<Self> {
        let precision = match std::env::var("VLC_CUDA_PRECISION").ok().as_deref() {
            Some("fp32") => GemmPrecision::Fp32,
            Some("tf32") | None => GemmPrecision::Tf32,
            Some(other) => {
                return Err(err(format!(
                    "VLC_CUDA_PRECISION must be fp32 or tf32, not `{other}`"
                )))
            }
        };
        Self::with_precision(ordinal, precision)
    }

    pub fn with_precision(ordinal: usize, precision: GemmPrecision) -> Result<Self> {
        if !libraries_present() {
            return Err(err("the CUDA driver, NVRTC or cuBLAS library cannot be loaded (is an NVIDIA driver installed and are the CUDA libraries on LD_LIBRARY_PATH?)"));
        }
        let count = CudaContext::device_count().map_err(err)?;
        if ordinal as i32 >= count {
            return Err(err(format!("no CUDA device {ordinal} ({count} present)")));
        }
        let ctx = CudaContext::new(ordinal).map_err(err)?;
        let stream = ctx.default_stream();
        let blas = CudaBlas::new(stream.clone()).map_err(err)?;
        let mode = match precision {
            GemmPrecision::Fp32 => cublas_sys::cublasMath_t::CUBLAS_PEDANTIC_MATH,
            GemmPrecision::Tf32 => cublas_sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH,
        };
        // SAFETY: the handle is valid for the lifetime of `blas`.
        unsafe { cublas_sys::cublasSetMathMode(*blas.handle(), mode) }
            .result()
            .map_err(err)?;
        let cache = KernelCache::new(&ctx)?;
        let load = |stem: &str, src: &str, names: &[&str]| -> Result<Vec<CudaFunction>> {
            let module = cache.load(stem, src)?;
            names
                .iter()
                .map(|n| module.load_function(n).map_err(err))
                .collect()
        };
        let mut f = load(
            "nearest",
            include_str!("kernels/nearest.cu"),
            &["row_norms", "nearest_from_dots"],
        )?;
        let nearest_from_dots = f.pop().unwrap();
        let row_norms = f.pop().unwrap();
        let accumulate_trimmed = load(
            "accumulate",
            include_str!("kernels/accumulate.cu"),
            &["accumulate_trimmed"],
        )?
        .pop()
        .unwrap();
        let update_anchors = load(
            "update",
            include_str!("kernels/update.cu"),
            &["update_anchors"],
        )?
        .pop()
        .unwrap();
        let device_name = ctx.name().unwrap_or_else(|_| "CUDA device".into());
        Ok(CudaBackend {
            ctx,
            stream,
            blas,
            kernels: Kernels {
                row_norms,
                nearest_from_dots,
                accumulate_trimmed,
                update_anchors,
            },
            precision,
            device_name,
            resident: Mutex::new(HashMap::new()),
            resident_norms: Mutex::new(HashMap::new()),
            tile: Mutex::new(None),
            lock: Mutex::new(()),
        })
    }

    pub fn device_name(&self) -> &str {
        &self.device_name
    }
    pub fn precision(&self) -> GemmPrecision {
        self.precision
    }

    /// Free and total device memory in bytes.
    pub fn memory(&self) -> Result<(usize, usize)> {
        self.ctx.mem_get_info().map_err(err)
    }

    /// Wait for queued GPU work (for timing).
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().map_err(err)
    }

    fn alloc<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>> {
        let (free, _) = self.memory()?;
        let bytes = len.max(1) * std::mem::size_of::<T>();
        if bytes > free {
            return Err(err(format!(
                "out of GPU memory: need {bytes} bytes, {free} free"
            )));
        }
        self.stream.alloc_zeros::<T>(len.max(1)).map_err(err)
    }

    fn upload<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits + Copy>(
        &self,
        host: &[T],
    ) -> Result<CudaSlice<T>> {
        let mut d = self.alloc::<T>(host.len())?;
        if !host.is_empty() {
            self.stream.memcpy_htod(host, &mut d).map_err(err)?;
        }
        Ok(d)
    }

    fn download<T: cudarc::driver::DeviceRepr + Default + Clone>(
        &self,
        d: &CudaSlice<T>,
        len: usize,
    ) -> Result<Vec<T>> {
        let mut host = vec![T::default(); d.len()];
        self.stream.memcpy_dtoh(d, &mut host).map_err(err)?;
        host.truncate(len);
        Ok(host)
    }

    /// The device copy of `points`: the pinned one, or a fresh upload.
    fn points_on_device(&self, points: &[f32]) -> Result<Arc<CudaSlice<f32>>> {
        let key = (points.as_ptr() as usize, points.len());
        if let Some(d) = self.resident.lock().unwrap().get(&key) {
            return Ok(d.clone());
        }
        Ok(Arc::new(self.upload(points)?))
    }

    fn launch_warps(rows: usize) -> LaunchConfig {
        let threads = 256u32;
        let blocks = (rows * 32).div_ceil(threads as usize) as u32;
        LaunchConfig {
            grid_dim: (blocks.max(1), 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn pin<'a>(&'a self, points: &'a [f32]) -> Result<PinGuard<'a>> {
        let key = (points.as_ptr() as usize, points.len());
        let d = Arc::new(self.upload(points)?);
        self.resident.lock().unwrap().insert(key, d);
        Ok(PinGuard::new(move || {
            self.resident.lock().unwrap().remove(&key);
            self.resident_norms
                .lock()
                .unwrap()
                .retain(|k, _| (k.0, k.1) != key);
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
        let _g = self.lock.lock().unwrap();
        let d_points = self.points_on_device(points)?;
        let d_anchors = self.upload(anchors)?;
        let mut c_norms = self.alloc::<f32>(num_anchors)?;
        let (n_i32, k_i32, d_i32, m_i32) = (
            num_points as i32,
            num_anchors as i32,
            dim as i32,
            per_point as i32,
        );
        // SAFETY: row_norms reads num_anchors rows of dim floats from d_anchors and writes
        // num_anchors floats; both buffers have exactly those sizes.
        unsafe {
            self.stream
                .launch_builder(&self.kernels.row_norms)
                .arg(&d_anchors)
                .arg(&k_i32)
                .arg(&d_i32)
                .arg(&mut c_norms)
                .launch(Self::launch_warps(num_anchors))
        }
        .map_err(err)?;
        let norm_key = (points.as_ptr() as usize, points.len(), dim);
        let cached_norms = self.resident_norms.lock().unwrap().get(&norm_key).cloned();
        let x_norms = match cached_norms {
            Some(n) => n,
            None => {
                let mut x_norms = self.alloc::<f32>(num_points)?;
                // SAFETY: row_norms reads num_points rows of dim floats and writes num_points floats.
                unsafe {
                    self.stream
                        .launch_builder(&self.kernels.row_norms)
                        .arg(d_points.as_ref())
                        .arg(&n_i32)
                        .arg(&d_i32)
                        .arg(&mut x_norms)
                        .launch(Self::launch_warps(num_points))
                }
                .map_err(err)?;
                let x_norms = Arc::new(x_norms);
                if self
                    .resident
                    .lock()
                    .unwrap()
                    .contains_key(&(norm_key.0, norm_key.1))
                {
                    self.resident_norms
                        .lock()
                        .unwrap()
                        .insert(norm_key, x_norms.clone());
                }
                x_norms
            }
        };
        let mut ids = self.alloc::<u32>(num_points * per_point)?;
        let mut dists = self.alloc::<f32>(num_points * per_point)?;
        // Row chunks so that the dot-product tile stays within 1 GiB and a quarter of free memory.
        let (free, _) = self.memory()?;
        let budget = (free / 4).min(1 << 30);
        let chunk = (budget / (num_anchors * 4)).clamp(1, num_points.max(1));
        let mut tile_slot = self.tile.lock().unwrap();
        if tile_slot
            .as_ref()
            .is_none_or(|t| t.len() < chunk * num_anchors)
        {
            *tile_slot = None;
            *tile_slot = Some(self.alloc::<f32>(chunk * num_anchors)?);
        }
        let tile = tile_slot.as_mut().unwrap();
        let mut start = 0;
        while start < num_points {
            let rows = chunk.min(num_points - start);
            let x = d_points.slice(start * dim..(start + rows) * dim);
            let cfg = GemmConfig {
                transa: cublas_sys::cublasOperation_t::CUBLAS_OP_T,
                transb: cublas_sys::cublasOperation_t::CUBLAS_OP_N,
                m: k_i32,
                n: rows as i32,
                k: d_i32,
                alpha: 1.0f32,
                lda: d_i32,
                ldb: d_i32,
                beta: 0.0f32,
                ldc: k_i32,
            };
            // SAFETY: column-major view: tileᵀ (k × rows, ld k) = anchorsᵀᵀ (k × d) · xᵀ (d × rows);
            // anchors hold k·d floats, x rows·d, tile at least rows·k.
            unsafe { self.blas.gemm(cfg, &d_anchors, &x, tile) }.map_err(err)?;
            let xn = x_norms.slice(start..start + rows);
            let mut out_ids = ids.slice_mut(start * per_point..(start + rows) * per_point);
            let mut out_d = dists.slice_mut(start * per_point..(start + rows) * per_point);
            let r_i32 = rows as i32;
            // SAFETY: nearest_from_dots reads rows·k dots, rows norms, k norms and writes
            // rows·per_point ids and distances; every slice has exactly that length.
            unsafe {
                self.stream
                    .launch_builder(&self.kernels.nearest_from_dots)
                    .arg(&*tile)
                    .arg(&xn)
                    .arg(&c_norms)
                    .arg(&r_i32)
                    .arg(&k_i32)
                    .arg(&m_i32)
                    .arg(&mut out_ids)
                    .arg(&mut out_d)
                    .launch(Self::launch_warps(rows))
            }
            .map_err(err)?;
            start += rows;
        }
        let ids = self.download(&ids, num_points * per_point)?;
        let dists = self.download(&dists, num_points * per_point)?;
        Ok(Nearest {
            per_point,
            ids,
            dists,
        })
    }

    fn accumulate(
        &self,
        points: &[f32],
        dim: usize,
        assignment: &[u32],
        dists: &[f32],
        thresholds: &[f32],
    ) -> Result<AnchorSums> {
        let num_anchors = thresholds.len();
        check_accumulate_args(points, dim, assignment, dists, num_anchors)?;
        let (offsets, members) = group_by_anchor(assignment, num_anchors);
        let offsets: Vec<u64> = offsets.iter().map(|&o| o as u64).collect();
        let _g = self.lock.lock().unwrap();
        let d_points = self.points_on_device(points)?;
        let (d_off, d_mem, d_dist, d_thr) = (
            self.upload(&offsets)?,
            self.upload(&members)?,
            self.upload(dists)?,
            self.upload(thresholds)?,
        );
        let mut sums = self.alloc::<f64>(num_anchors * dim)?;
        let mut kept = self.alloc::<u32>(num_anchors)?;
        let d_i32 = dim as i32;
        let cfg = LaunchConfig {
            grid_dim: (num_anchors as u32, 1, 1),
            block_dim: (dim.clamp(32, 256) as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: one block per anchor; members/offsets form a valid CSR over num_points points
        // (built above), and sums/kept hold num_anchors·dim and num_anchors entries.
        unsafe {
            self.stream
                .launch_builder(&self.kernels.accumulate_trimmed)
                .arg(d_points.as_ref())
                .arg(&d_i32)
                .arg(&d_off)
                .arg(&d_mem)
                .arg(&d_dist)
                .arg(&d_thr)
                .arg(&mut sums)
                .arg(&mut kept)
                .launch(cfg)
        }
        .map_err(err)?;
        let members_count = offsets.windows(2).map(|w| (w[1] - w[0]) as u32).collect();
        Ok(AnchorSums {
            sums: self.download(&sums, num_anchors * dim)?,
            kept: self.download(&kept, num_anchors)?,
            members: members_count,
        })
    }

    fn update(&self, anchors: &mut [f32], dim: usize, sums: &AnchorSums, step: f32) -> Result<()> {
        let num_anchors = check_update_args(anchors, dim, sums)?;
        let _g = self.lock.lock().unwrap();
        let mut d_anchors = self.upload(anchors)?;
        let (d_sums, d_kept) = (self.upload(&sums.sums)?, self.upload(&sums.kept)?);
        let total = num_anchors * dim;
        let (k_i32, d_i32) = (num_anchors as i32, dim as i32);
        let cfg = LaunchConfig {
            grid_dim: (total.div_ceil(256) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: one thread per anchor element; all buffers hold num_anchors·dim (or
        // num_anchors) entries.
        unsafe {
            self.stream
                .launch_builder(&self.kernels.update_anchors)
                .arg(&mut d_anchors)
                .arg(&d_sums)
                .arg(&d_kept)
                .arg(&k_i32)
                .arg(&d_i32)
                .arg(&step)
                .launch(cfg)
        }
        .map_err(err)?;
        let host = self.download(&d_anchors, total)?;
        anchors.copy_from_slice(&host);
        Ok(())
    }
}
