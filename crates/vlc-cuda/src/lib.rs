//! CUDA backend for VLC.
//!
//! * Built without a CUDA toolkit: cudarc loads `libcuda`, `libnvrtc` and `libcublas`
//!   dynamically at run time; [`CudaBackend::new`] returns a typed error when they or a device
//!   are missing, so callers fall back to the CPU.
//! * Kernels are embedded `.cu` sources (one per backend primitive, same stem as the WGSL
//!   ones), compiled by NVRTC on first use straight to CUBIN for the device's compute
//!   capability, cached on disk (keyed by source hash, architecture and NVRTC version) and
//!   loaded once per backend.
//! * Assignment runs as a cuBLAS GEMM (TF32 tensor cores by default; FP16 inputs with FP32
//!   accumulation, or full FP32, selectable) over row chunks, followed by a kernel that folds in
//!   the norms and takes the arg-min, so the full points × anchors matrix never exists;
//!   accumulation is per anchor over a CSR grouping (deterministic, double precision), as on
//!   the CPU.
//! * Device buffers are kept between calls and only grow; all work runs on one stream, so
//!   cudarc's per-buffer event tracking is switched off.
//! * Points handed to [`Backend::pin`] stay on the GPU until the guard drops (the training
//!   loop pins its sample), so iterations move only anchors, assignments and sums.

mod module;
mod search;

use cudarc::cublas::sys as cublas_sys;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, CudaView, DevicePtr, DevicePtrMut,
    LaunchConfig, PushKernelArg,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use vlc::backend::{
    check_accumulate_args, check_nearest_args, check_update_args, group_by_anchor, AnchorSums,
    Backend, Nearest, PinGuard,
};
use vlc::{Result, VlcError};

pub use module::KernelCache;
pub use search::CudaIndex;

/// Matrix-unit precision of the assignment GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmPrecision {
    /// Full FP32 (CUDA cores).
    Fp32,
    /// TF32 tensor cores (10-bit mantissa inputs, FP32 accumulation): several times faster.
    Tf32,
    /// FP16 inputs (the same 10-bit mantissa as TF32, half the bytes) with FP32 accumulation
    /// on the tensor cores. Buffers with a value beyond the FP16 range (|x| > 65504) use TF32.
    Fp16,
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
    to_half: CudaFunction,
    accumulate_trimmed: CudaFunction,
    update_anchors: CudaFunction,
}

/// A host buffer kept on the device by [`Backend::pin`], with what is derived from it on first
/// use.
struct Resident {
    /// Layout: (rows, dim), row-major.
    data: CudaSlice<f32>,
    /// Squared row norms for one dim. Layout: (rows,).
    norms: Option<(usize, CudaSlice<f32>)>,
    /// FP16 copy (None inside when a value is beyond the FP16 range). Layout: as `data`.
    half: Option<Option<CudaSlice<u16>>>,
}

/// Device buffers reused across calls; each only grows.
#[derive(Default)]
struct Scratch {
    /// Unpinned points. Layout: (rows, dim).
    points: Option<CudaSlice<f32>>,
    /// Layout: (rows,).
    point_norms: Option<CudaSlice<f32>>,
    /// Layout: (rows, dim), FP16 bits.
    points_half: Option<CudaSlice<u16>>,
    /// Layout: (num_anchors, dim).
    anchors: Option<CudaSlice<f32>>,
    /// Layout: (num_anchors, dim), FP16 bits.
    anchors_half: Option<CudaSlice<u16>>,
    /// Layout: (num_anchors,).
    anchor_norms: Option<CudaSlice<f32>>,
    /// The dot-product tile. Layout: (rows of one chunk, num_anchors), row-major.
    tile: Option<CudaSlice<f32>>,
    /// Layout: (num_points, per_point).
    ids: Option<CudaSlice<u32>>,
    /// Layout: (num_points, per_point).
    dists: Option<CudaSlice<f32>>,
    /// CSR offsets. Layout: (num_anchors + 1,).
    offsets: Option<CudaSlice<u64>>,
    /// CSR members. Layout: (num_points,).
    members: Option<CudaSlice<u32>>,
    /// Layout: (num_points,).
    point_dists: Option<CudaSlice<f32>>,
    /// Layout: (num_anchors,).
    thresholds: Option<CudaSlice<f32>>,
    /// Layout: (num_anchors, dim), f64.
    sums: Option<CudaSlice<f64>>,
    /// Layout: (num_anchors,).
    kept: Option<CudaSlice<u32>>,
    /// One flag: a value beyond the FP16 range was seen.
    overflow: Option<CudaSlice<i32>>,
}

#[derive(Default)]
struct State {
    /// Pinned host buffers, keyed by (address, length).
    resident: HashMap<(usize, usize), Resident>,
    scratch: Scratch,
}

/// The CUDA implementation of [`Backend`].
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    kernels: Kernels,
    precision: GemmPrecision,
    device_name: String,
    cache: KernelCache,
    /// The search kernel, compiled on first use (training never needs it).
    search: OnceLock<CudaFunction>,
    /// Everything on the device. The lock also serialises GPU work: the cuBLAS handle and the
    /// stream are not shared across threads.
    state: Mutex<State>,
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

/// Allocations above this size first check free device memory, for a typed out-of-memory
/// error instead of a driver failure.
const CHECKED_ALLOCATION: usize = 64 << 20;

impl CudaBackend {
    /// Open device `ordinal` with TF32 assignment GEMMs (`VLC_CUDA_PRECISION=fp32|tf32|fp16`
    /// selects another).
    pub fn new(ordinal: usize) -> Result<Self> {
        let precision = match std::env::var("VLC_CUDA_PRECISION").ok().as_deref() {
            Some("fp32") => GemmPrecision::Fp32,
            Some("tf32") | None => GemmPrecision::Tf32,
            Some("fp16") => GemmPrecision::Fp16,
            Some(other) => {
                return Err(err(format!(
                    "VLC_CUDA_PRECISION must be fp32, tf32 or fp16, not `{other}`"
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
        // SAFETY: every buffer of this backend is used on its one stream only, so no
        // cross-stream synchronisation is needed; this saves an event per buffer use.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.default_stream();
        let blas = CudaBlas::new(stream.clone()).map_err(err)?;
        let mode = match precision {
            GemmPrecision::Fp32 => cublas_sys::cublasMath_t::CUBLAS_PEDANTIC_MATH,
            GemmPrecision::Tf32 | GemmPrecision::Fp16 => {
                cublas_sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
            }
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
            &["row_norms", "nearest_from_dots", "to_half"],
        )?;
        let to_half = f.pop().unwrap();
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
                to_half,
                accumulate_trimmed,
                update_anchors,
            },
            precision,
            device_name,
            cache,
            search: OnceLock::new(),
            state: Mutex::new(State::default()),
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

    /// The batched search kernel, compiled and loaded on first use.
    fn search_kernel(&self) -> Result<CudaFunction> {
        if let Some(f) = self.search.get() {
            return Ok(f.clone());
        }
        let f = self
            .cache
            .load("search", include_str!("kernels/search.cu"))?
            .load_function("search_queries")
            .map_err(err)?;
        Ok(self.search.get_or_init(|| f).clone())
    }

    /// Switch this handle's GEMMs to full FP32 (search) or back to the training precision.
    fn set_fp32_math(&self, fp32: bool) -> Result<()> {
        let mode = if fp32 || self.precision == GemmPrecision::Fp32 {
            cublas_sys::cublasMath_t::CUBLAS_PEDANTIC_MATH
        } else {
            cublas_sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
        };
        // SAFETY: the handle is valid for the lifetime of `self.blas`.
        unsafe { cublas_sys::cublasSetMathMode(*self.blas.handle(), mode) }
            .result()
            .map_err(err)
    }

    /// Wait for queued GPU work (for timing).
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().map_err(err)
    }

    fn alloc<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>> {
        let bytes = len.max(1) * std::mem::size_of::<T>();
        if bytes > CHECKED_ALLOCATION {
            let (free, _) = self.memory()?;
            if bytes > free {
                return Err(err(format!(
                    "out of GPU memory: need {bytes} bytes, {free} free"
                )));
            }
        }
        self.stream.alloc_zeros::<T>(len.max(1)).map_err(err)
    }

    /// `slot`'s buffer, reallocated first when it holds fewer than `len` elements.
    fn grow<'s, T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        slot: &'s mut Option<CudaSlice<T>>,
        len: usize,
    ) -> Result<&'s mut CudaSlice<T>> {
        if slot.as_ref().is_none_or(|b| b.len() < len.max(1)) {
            *slot = None;
            *slot = Some(self.alloc::<T>(len)?);
        }
        Ok(slot.as_mut().unwrap())
    }

    /// Copy `host` into the start of `slot` (grown as needed).
    fn put<'s, T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        slot: &'s mut Option<CudaSlice<T>>,
        host: &[T],
    ) -> Result<&'s mut CudaSlice<T>> {
        let d = self.grow(slot, host.len())?;
        if !host.is_empty() {
            self.stream
                .memcpy_htod(host, &mut d.slice_mut(0..host.len()))
                .map_err(err)?;
        }
        Ok(d)
    }

    /// The first `len` elements of `d`.
    fn get<T: cudarc::driver::DeviceRepr + Default + Clone>(
        &self,
        d: &CudaSlice<T>,
        len: usize,
    ) -> Result<Vec<T>> {
        let mut host = vec![T::default(); len];
        if len > 0 {
            self.stream
                .memcpy_dtoh(&d.slice(0..len), &mut host)
                .map_err(err)?;
        }
        Ok(host)
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

    /// Squared norms of `rows` rows of `dim` floats into `out`.
    fn row_norms(
        &self,
        x: &CudaView<f32>,
        rows: usize,
        dim: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let (r, d) = (rows as i32, dim as i32);
        // SAFETY: row_norms reads rows·dim floats of x and writes rows floats of out; x holds
        // exactly rows·dim and out at least rows (callers size it).
        unsafe {
            self.stream
                .launch_builder(&self.kernels.row_norms)
                .arg(x)
                .arg(&r)
                .arg(&d)
                .arg(out)
                .launch(Self::launch_warps(rows))
        }
        .map_err(err)?;
        Ok(())
    }

    /// Convert `x` to FP16 bits in `out`; returns false when a value is beyond the FP16 range
    /// (reads back one flag, so it waits for the conversion).
    fn to_half(
        &self,
        x: &CudaView<f32>,
        out: &mut CudaSlice<u16>,
        flag: &mut Option<CudaSlice<i32>>,
    ) -> Result<bool> {
        let n = x.len() as u64;
        let flag = self.put(flag, &[0i32])?;
        let blocks = (x.len().div_ceil(256)).clamp(1, 65536) as u32;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: to_half reads n floats of x and writes n u16 of out (grown by the caller to
        // at least n) and one flag.
        unsafe {
            self.stream
                .launch_builder(&self.kernels.to_half)
                .arg(x)
                .arg(&n)
                .arg(&mut *out)
                .arg(&mut *flag)
                .launch(cfg)
        }
        .map_err(err)?;
        Ok(self.get(flag, 1)?[0] == 0)
    }
}

impl CudaBackend {
    /// Trimmed per-anchor sums into `scratch.sums` / `scratch.kept` (left on the device).
    /// Returns the member count per anchor.
    fn accumulate_on_device(
        &self,
        state: &mut State,
        points: &[f32],
        dim: usize,
        assignment: &[u32],
        dists: &[f32],
        thresholds: &[f32],
    ) -> Result<Vec<u32>> {
        let num_anchors = thresholds.len();
        check_accumulate_args(points, dim, assignment, dists, num_anchors)?;
        let (offsets, members) = group_by_anchor(assignment, num_anchors);
        let offsets: Vec<u64> = offsets.iter().map(|&o| o as u64).collect();
        let State { resident, scratch } = state;
        let key = (points.as_ptr() as usize, points.len());
        let x: &CudaSlice<f32> = match resident.get(&key) {
            Some(r) => &r.data,
            None => self.put(&mut scratch.points, points)?,
        };
        let d_off = self.put(&mut scratch.offsets, &offsets)?;
        let d_mem = self.put(&mut scratch.members, &members)?;
        let d_dist = self.put(&mut scratch.point_dists, dists)?;
        let d_thr = self.put(&mut scratch.thresholds, thresholds)?;
        let sums = self.grow(&mut scratch.sums, num_anchors * dim)?;
        let kept = self.grow(&mut scratch.kept, num_anchors)?;
        let d_i32 = dim as i32;
        let cfg = LaunchConfig {
            grid_dim: (num_anchors as u32, 1, 1),
            block_dim: (dim.clamp(32, 256) as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: one block per anchor; members/offsets form a valid CSR over num_points points
        // (built above), and sums/kept hold at least num_anchors·dim and num_anchors entries.
        unsafe {
            self.stream
                .launch_builder(&self.kernels.accumulate_trimmed)
                .arg(x)
                .arg(&d_i32)
                .arg(&*d_off)
                .arg(&*d_mem)
                .arg(&*d_dist)
                .arg(&*d_thr)
                .arg(&mut *sums)
                .arg(&mut *kept)
                .launch(cfg)
        }
        .map_err(err)?;
        Ok(offsets.windows(2).map(|w| (w[1] - w[0]) as u32).collect())
    }

    /// `scratch.anchors += step · (scratch.sums / scratch.kept − scratch.anchors)` on the
    /// device, for anchors with kept > 0.
    fn update_on_device(
        &self,
        scratch: &mut Scratch,
        num_anchors: usize,
        dim: usize,
        step: f32,
    ) -> Result<()> {
        let total = num_anchors * dim;
        let (k_i32, d_i32) = (num_anchors as i32, dim as i32);
        let cfg = LaunchConfig {
            grid_dim: (total.div_ceil(256).max(1) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let (Some(anchors), Some(sums), Some(kept)) = (
            scratch.anchors.as_mut(),
            scratch.sums.as_ref(),
            scratch.kept.as_ref(),
        ) else {
            return Err(err("update before the anchors and sums are on the device"));
        };
        // SAFETY: one thread per anchor element; the callers filled anchors (num_anchors·dim),
        // sums (num_anchors·dim) and kept (num_anchors) before this launch.
        unsafe {
            self.stream
                .launch_builder(&self.kernels.update_anchors)
                .arg(anchors)
                .arg(sums)
                .arg(kept)
                .arg(&k_i32)
                .arg(&d_i32)
                .arg(&step)
                .launch(cfg)
        }
        .map_err(err)?;
        Ok(())
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn pin<'a>(&'a self, points: &'a [f32]) -> Result<PinGuard<'a>> {
        let key = (points.as_ptr() as usize, points.len());
        let mut data = self.alloc::<f32>(points.len())?;
        if !points.is_empty() {
            self.stream.memcpy_htod(points, &mut data).map_err(err)?;
        }
        self.state.lock().unwrap().resident.insert(
            key,
            Resident {
                data,
                norms: None,
                half: None,
            },
        );
        Ok(PinGuard::new(move || {
            self.state.lock().unwrap().resident.remove(&key);
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
        let mut guard = self.state.lock().unwrap();
        let State { resident, scratch } = &mut *guard;
        let Scratch {
            points: s_points,
            point_norms: s_norms,
            points_half: s_half,
            anchors: s_anchors,
            anchors_half: s_anchors_half,
            anchor_norms: s_anchor_norms,
            tile: s_tile,
            ids: s_ids,
            dists: s_dists,
            overflow: s_overflow,
            ..
        } = scratch;
        let half = self.precision == GemmPrecision::Fp16;

        // The points, their norms and (FP16) their half copy: resident ones keep theirs.
        let key = (points.as_ptr() as usize, points.len());
        let (x, x_norms, x_half): (&CudaSlice<f32>, &CudaSlice<f32>, Option<&CudaSlice<u16>>) =
            match resident.get_mut(&key) {
                Some(r) => {
                    if r.norms.as_ref().is_none_or(|(d, _)| *d != dim) {
                        let mut n = self.alloc::<f32>(num_points)?;
                        self.row_norms(&r.data.slice(..), num_points, dim, &mut n)?;
                        r.norms = Some((dim, n));
                    }
                    if half && r.half.is_none() {
                        let mut h = self.alloc::<u16>(points.len())?;
                        let fits = self.to_half(&r.data.slice(..), &mut h, s_overflow)?;
                        r.half = Some(fits.then_some(h));
                    }
                    let r = &*r;
                    (
                        &r.data,
                        &r.norms.as_ref().unwrap().1,
                        r.half.as_ref().and_then(|h| h.as_ref()),
                    )
                }
                None => {
                    let d = self.put(s_points, points)?;
                    let n = self.grow(s_norms, num_points)?;
                    self.row_norms(&d.slice(0..points.len()), num_points, dim, n)?;
                    let h = if half {
                        let h = self.grow(s_half, points.len())?;
                        self.to_half(&d.slice(0..points.len()), h, s_overflow)?
                            .then_some(&*h)
                    } else {
                        None
                    };
                    (&*d, &*n, h)
                }
            };
        let c = self.put(s_anchors, anchors)?;
        let c_norms = self.grow(s_anchor_norms, num_anchors)?;
        self.row_norms(&c.slice(0..anchors.len()), num_anchors, dim, c_norms)?;
        let c_half = match x_half {
            Some(_) => {
                let h = self.grow(s_anchors_half, anchors.len())?;
                self.to_half(&c.slice(0..anchors.len()), h, s_overflow)?
                    .then_some(&*h)
            }
            None => None,
        };
        // FP16 only when both sides fit; otherwise the handle's TF32 (or FP32) GEMM.
        let halves = x_half.zip(c_half);

        let (k_i32, d_i32, m_i32) = (num_anchors as i32, dim as i32, per_point as i32);
        let ids = self.grow(s_ids, num_points * per_point)?;
        let dists = self.grow(s_dists, num_points * per_point)?;
        // Row chunks so that the dot-product tile stays within 1 GiB and a quarter of free memory.
        let budget = if num_points * num_anchors * 4 > (1 << 28) {
            (self.memory()?.0 / 4).min(1 << 30)
        } else {
            1 << 28
        };
        let chunk = (budget / (num_anchors * 4)).clamp(1, num_points.max(1));
        let tile = self.grow(s_tile, chunk * num_anchors)?;
        let mut start = 0;
        while start < num_points {
            let rows = chunk.min(num_points - start);
            match halves {
                Some((xh, ch)) => {
                    let (alpha, beta) = (1.0f32, 0.0f32);
                    let (a_ptr, _ra) = ch.device_ptr(&self.stream);
                    let (b_ptr, _rb) = xh.device_ptr(&self.stream);
                    let (c_ptr, _rc) = tile.device_ptr_mut(&self.stream);
                    let b_ptr = b_ptr + (start * dim * 2) as u64;
                    // SAFETY: column-major view as in the FP32 branch, with FP16 inputs: A is
                    // (dim × k, ld dim), B (dim × rows, ld dim) from row `start`, C (k × rows,
                    // ld k) FP32; every buffer holds at least those elements.
                    unsafe {
                        cublas_sys::cublasGemmEx(
                            *self.blas.handle(),
                            cublas_sys::cublasOperation_t::CUBLAS_OP_T,
                            cublas_sys::cublasOperation_t::CUBLAS_OP_N,
                            k_i32,
                            rows as i32,
                            d_i32,
                            &alpha as *const f32 as *const _,
                            a_ptr as *const _,
                            cublas_sys::cudaDataType::CUDA_R_16F,
                            d_i32,
                            b_ptr as *const _,
                            cublas_sys::cudaDataType::CUDA_R_16F,
                            d_i32,
                            &beta as *const f32 as *const _,
                            c_ptr as *mut _,
                            cublas_sys::cudaDataType::CUDA_R_32F,
                            k_i32,
                            cublas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                            cublas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT_TENSOR_OP,
                        )
                    }
                    .result()
                    .map_err(err)?;
                }
                None => {
                    let xs = x.slice(start * dim..(start + rows) * dim);
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
                    // SAFETY: column-major view: tileᵀ (k × rows, ld k) = anchorsᵀᵀ (k × d) ·
                    // xᵀ (d × rows); anchors hold k·d floats, xs rows·d, tile at least rows·k.
                    unsafe {
                        self.blas
                            .gemm(cfg, &c.slice(0..anchors.len()), &xs, &mut *tile)
                    }
                    .map_err(err)?;
                }
            }
            let xn = x_norms.slice(start..start + rows);
            let mut out_ids = ids.slice_mut(start * per_point..(start + rows) * per_point);
            let mut out_d = dists.slice_mut(start * per_point..(start + rows) * per_point);
            let r_i32 = rows as i32;
            // SAFETY: nearest_from_dots reads rows·k dots, rows norms, k norms and writes
            // rows·per_point ids and distances; every slice has at least that length.
            unsafe {
                self.stream
                    .launch_builder(&self.kernels.nearest_from_dots)
                    .arg(&*tile)
                    .arg(&xn)
                    .arg(&*c_norms)
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
        Ok(Nearest {
            per_point,
            ids: self.get(ids, num_points * per_point)?,
            dists: self.get(dists, num_points * per_point)?,
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
        let mut guard = self.state.lock().unwrap();
        let members =
            self.accumulate_on_device(&mut guard, points, dim, assignment, dists, thresholds)?;
        let scratch = &guard.scratch;
        Ok(AnchorSums {
            sums: self.get(scratch.sums.as_ref().unwrap(), num_anchors * dim)?,
            kept: self.get(scratch.kept.as_ref().unwrap(), num_anchors)?,
            members,
        })
    }

    fn accumulate_and_update(
        &self,
        points: &[f32],
        anchors: &mut [f32],
        dim: usize,
        nearest: (&[u32], &[f32]),
        thresholds: &[f32],
        step: f32,
    ) -> Result<AnchorSums> {
        let num_anchors = thresholds.len();
        vlc::backend::rows_of("anchors", anchors.len(), dim)?;
        if anchors.len() != num_anchors * dim {
            return Err(VlcError::DimensionMismatch {
                what: "anchors (rows) vs thresholds".into(),
                expected: num_anchors,
                actual: anchors.len() / dim,
            });
        }
        let mut guard = self.state.lock().unwrap();
        let members =
            self.accumulate_on_device(&mut guard, points, dim, nearest.0, nearest.1, thresholds)?;
        let scratch = &mut guard.scratch;
        // The sums stay on the device: upload the anchors, move them, read them back.
        self.put(&mut scratch.anchors, anchors)?;
        self.update_on_device(scratch, num_anchors, dim, step)?;
        let moved = self.get(scratch.anchors.as_ref().unwrap(), num_anchors * dim)?;
        anchors.copy_from_slice(&moved);
        Ok(AnchorSums {
            sums: Vec::new(),
            kept: self.get(scratch.kept.as_ref().unwrap(), num_anchors)?,
            members,
        })
    }

    fn update(&self, anchors: &mut [f32], dim: usize, sums: &AnchorSums, step: f32) -> Result<()> {
        let num_anchors = check_update_args(anchors, dim, sums)?;
        let mut guard = self.state.lock().unwrap();
        let scratch = &mut guard.scratch;
        self.put(&mut scratch.anchors, anchors)?;
        self.put(&mut scratch.sums, &sums.sums)?;
        self.put(&mut scratch.kept, &sums.kept)?;
        self.update_on_device(scratch, num_anchors, dim, step)?;
        let host = self.get(scratch.anchors.as_ref().unwrap(), num_anchors * dim)?;
        anchors.copy_from_slice(&host);
        Ok(())
    }
}
