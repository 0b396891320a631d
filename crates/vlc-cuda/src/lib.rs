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
//!   the norms and takes the arg-min, so the full points × anchors matrix never exists.
//! * Accumulation groups the kept points by anchor on the device (count, scan, scatter) and
//!   sums each group in 64-bit fixed point: exact integer additions, so the result does not
//!   depend on the scatter's order (deterministic) and is far closer to the exact sum than
//!   f32. A one-per-point assignment that `nearest_anchors` just computed stays on the device
//!   for it ([`vlc::backend::Nearest::resident`]).
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
    LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use vlc::backend::{
    check_accumulate_args, check_code_levels_args, check_nearest_args, check_single_nearest,
    check_threshold_args, check_update_args, AnchorSums, Backend, ListSplit, Nearest, PinGuard,
};
use vlc::{Result, VlcError};

pub use module::{KernelCache, KernelSource};
pub use search::CudaIndex;

/// Matrix-unit precision of the assignment GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmPrecision {
    /// Full FP32 (CUDA cores).
    Fp32,
    /// TF32 tensor cores (10-bit mantissa inputs, FP32 accumulation): several times faster.
    Tf32,
    /// FP16 inputs (the same 10-bit mantissa as TF32, half the bytes) with FP32 accumulation
    /// on the tensor cores; training's large assignments also write their dot products as
    /// FP16. Buffers with a value beyond the FP16 range (|x| > 65504), and dot products that
    /// could overflow it, use TF32.
    Fp16,
    /// The default: TF32, except training's large assignments of pinned points (at least
    /// `BOUNDED_MIN_WORK` multiply-adds), which take FP16 operands and an FP16 tile as `Fp16`
    /// does (where the values fit): on the H100 that made the 1M x 384 training loop 15-20%
    /// faster, its energy 0.075% from the FP32 reference.
    Mixed,
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
    nearest_radix_from_dots: CudaFunction,
    nearest1_from_dots: CudaFunction,
    to_half: CudaFunction,
    anchor_drift: CudaFunction,
    mover_lower: CudaFunction,
    bound_check: CudaFunction,
    count_flags: CudaFunction,
    compact_flags: CudaFunction,
    gather_rows: CudaFunction,
    nearest2_scatter: CudaFunction,
    nearest_direct: CudaFunction,
    nearest2_scatter_half: CudaFunction,
    gather_rows_half: CudaFunction,
    count_members: CudaFunction,
    exclusive_scan: CudaFunction,
    scatter_kept: CudaFunction,
    sum_kept_fixed: CudaFunction,
    max_abs: CudaFunction,
    select_thresholds: CudaFunction,
    group_small: CudaFunction,
    update_anchors: CudaFunction,
    split_far: CudaFunction,
    split_side: CudaFunction,
    split_means: CudaFunction,
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
    /// Largest |value|, for the fixed-point scale of the sums.
    max_abs: Option<f32>,
    /// Largest squared row norm (for `norms`' dim): whether FP16 dot products fit.
    max_norm2: Option<f32>,
    /// Distance bounds of the last one-per-point assignment of these points.
    bounds: Option<Bounds>,
    /// Live [`PinGuard`]s of this buffer; the copy is freed when the last one drops.
    pins: usize,
}

/// What [`CudaBackend::nearest_bounded`] keeps between calls for one resident buffer.
struct Bounds {
    dim: usize,
    num_anchors: usize,
    /// The anchors of the last call. Layout: (num_anchors, dim), row-major.
    anchors: CudaSlice<f32>,
    /// Each point's anchor. Layout: (rows,).
    assign: CudaSlice<u32>,
    /// Lower bound (not squared) on each point's distance to every other anchor. Layout:
    /// (rows,).
    lower: CudaSlice<f32>,
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
    /// Start of each anchor's kept members in `members`. Layout: (num_anchors + 1,).
    offsets: Option<CudaSlice<u32>>,
    /// Next free slot of each anchor's range during the scatter. Layout: (num_anchors,).
    cursor: Option<CudaSlice<u32>>,
    /// Indices of the kept points, grouped by anchor. Layout: (num_points,).
    members: Option<CudaSlice<u32>>,
    /// The kept points that select_thresholds moved to the front of each anchor's range (of
    /// all its members, from `offsets`). Layout: (num_points,).
    kept_members: Option<CudaSlice<u32>>,
    /// Members per anchor (kept or not). Layout: (num_anchors,).
    member_counts: Option<CudaSlice<u32>>,
    /// One value: the largest |x| as float bits.
    max_abs: Option<CudaSlice<u32>>,
    /// Two values: the largest anchor move as float bits, and 0 (the move a bound check
    /// applies when `mover_lower` already lowered the bounds).
    max_drift: Option<CudaSlice<u32>>,
    /// Each anchor's move since the last bounded assignment. Layout: (num_anchors,).
    drifts: Option<CudaSlice<f32>>,
    /// The anchors that moved far (see [`pick_movers`]). Layout: (num_movers,).
    movers: Option<CudaSlice<u32>>,
    /// Their rows. Layout: (num_movers, dim), row-major.
    mover_rows: Option<CudaSlice<f32>>,
    /// Their squared norms. Layout: (num_movers,).
    mover_norms: Option<CudaSlice<f32>>,
    /// Dot products of one chunk of points with the movers. Layout: (chunk rows, num_movers),
    /// row-major.
    mover_tile: Option<CudaSlice<f32>>,
    /// 1 for points whose anchor must be searched again. Layout: (num_points,).
    flags: Option<CudaSlice<u32>>,
    /// Flagged points per block of 1024, then their exclusive scan. Layout: (blocks + 1,).
    block_counts: Option<CudaSlice<u32>>,
    block_offsets: Option<CudaSlice<u32>>,
    /// Indices of the flagged points, increasing. Layout: (num_points,).
    flagged: Option<CudaSlice<u32>>,
    /// Flagged rows gathered for one GEMM chunk. Layout: (chunk rows, dim).
    gathered: Option<CudaSlice<f32>>,
    /// The same rows from the FP16 copy. Layout: (chunk rows, dim).
    gathered_half: Option<CudaSlice<u16>>,
    /// FP16 dot products of one assignment chunk. Layout: (chunk rows, num_anchors).
    tile_half: Option<CudaSlice<u16>>,
    /// One value: the largest squared anchor norm as float bits.
    max_anchor_norm2: Option<CudaSlice<u32>>,
    /// Layout: (chunk rows,).
    gathered_norms: Option<CudaSlice<f32>>,
    /// Layout: (num_anchors,).
    thresholds: Option<CudaSlice<f32>>,
    /// What the first floats of `anchors` hold, as last uploaded or read back; empty when not
    /// known or when the anchors are too large to compare cheaply (see `put_anchors`).
    /// Layout: (num_anchors, dim), row-major.
    anchors_mirror: Vec<f32>,
    /// +inf, at least num_anchors of them: thresholds that keep every member.
    infinite: Option<CudaSlice<f32>>,
    /// Layout: (num_anchors, dim), f64.
    sums: Option<CudaSlice<f64>>,
    /// Layout: (num_anchors,).
    kept: Option<CudaSlice<u32>>,
    /// One flag: a value beyond the FP16 range was seen.
    overflow: Option<CudaSlice<i32>>,
    /// Lists to split, concatenated. Layout: (total members,).
    split_members: Option<CudaSlice<u32>>,
    /// Start of each list in `split_members`, then of each list's first chunk of
    /// `SPLIT_CHUNK` members. Layout: (2, num_lists + 1).
    split_offsets: Option<CudaSlice<u32>>,
    /// Each chunk's member farthest from its list's centre: squared distance and point index.
    /// Layout: (num_chunks,).
    split_best_dist: Option<CudaSlice<f32>>,
    split_best_index: Option<CudaSlice<u32>>,
    /// Each chunk's sums of its minus-side and plus-side rows. Layout: (num_chunks, 2, dim).
    split_partial: Option<CudaSlice<f64>>,
    /// Each chunk's minus and plus counts. Layout: (num_chunks, 2).
    split_partial_counts: Option<CudaSlice<u32>>,
    /// Layout: (num_lists, dim), row-major.
    split_centers: Option<CudaSlice<f32>>,
    /// 1 for members on the plus side. Layout: (total members,).
    split_side: Option<CudaSlice<u32>>,
    /// Layout: (num_lists, 2, dim): minus mean, plus mean.
    split_means: Option<CudaSlice<f32>>,
    /// Layout: (num_lists, 2): minus count, plus count.
    split_counts: Option<CudaSlice<u32>>,
}

/// Page-locked host memory that results are read back through: the driver copies into it at
/// full bus speed and asynchronously, so the read-backs of one call share one wait, where a
/// copy into ordinary (pageable) memory goes through a bounce buffer at a fraction of that
/// speed and waits each time. Plain (cached) host memory, not write-combined, because the CPU
/// reads it. Each only grows.
#[derive(Default)]
struct Staging {
    /// Layout: flat, at least the largest u32 read back so far.
    words: Option<PinnedHostSlice<u32>>,
    /// Layout: flat, at least the largest f32 read back so far.
    floats: Option<PinnedHostSlice<f32>>,
}

/// The encode primitive's buffers, kept between calls (a build makes one call per block).
#[derive(Default)]
struct LevelBuffers {
    /// Layout: (dim,).
    caps: Option<CudaSlice<f32>>,
    /// Layout: (chunk rows, dim), row-major.
    rows: Option<CudaSlice<f32>>,
    /// Layout: (chunk rows, dim), row-major.
    levels: Option<CudaSlice<u16>>,
    /// Layout: (chunk rows,).
    flags: Option<CudaSlice<u8>>,
    /// Page-locked copy of `levels` on the host. Layout: flat.
    staging: Option<PinnedHostSlice<u16>>,
}

#[derive(Default)]
struct State {
    /// Pinned host buffers, keyed by (address, length).
    resident: HashMap<(usize, usize), Resident>,
    scratch: Scratch,
    staging: Staging,
    encode: LevelBuffers,
    /// Numbers the results of `nearest_anchors`.
    generation: u64,
    /// (generation, num_points) of the one-per-point result that `scratch.ids` and
    /// `scratch.dists` still hold.
    nearest_on_device: Option<(u64, usize)>,
    /// (generation, thresholds) of the assignment whose trimmed thresholds were selected on the
    /// device, while `scratch.offsets`, `kept`, `member_counts` and `kept_members` still hold
    /// its grouping: an accumulation with these thresholds reuses it.
    selected: Option<(u64, Vec<f32>)>,
}

/// The CUDA implementation of [`Backend`].
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    kernels: Kernels,
    precision: GemmPrecision,
    device_name: String,
    /// Bytes of the assignment's dot-product tile per GEMM chunk: 1 GiB, or
    /// `VLC_CUDA_TILE_MB`.
    tile_bytes: usize,
    /// Whether one-per-point assignments of resident points use distance bounds
    /// (`VLC_CUDA_BOUNDS=0` turns them off).
    use_bounds: bool,
    /// Whether the encode primitive ([`Backend::code_levels`]) runs on the device
    /// (`VLC_CUDA_ENCODE=0` leaves it to the CPU; the codes are the same).
    encode_levels: bool,
    /// [`BOUNDED_MIN_WORK`], or `VLC_CUDA_SMALL_WORK`.
    small_work: usize,
    /// `VLC_CUDA_TRACE=1`: each bounded assignment prints its movers and how many points it
    /// ranked, on stderr (a diagnostic for tuning, off by default).
    trace: bool,
    cache: KernelCache,
    /// The search kernel's two entry functions, `search_queries` and
    /// `search_queries_weighted`, compiled on first use (training never needs them).
    search: OnceLock<[CudaFunction; 2]>,
    /// The encode kernel (`code_levels`), compiled and loaded on first use.
    levels: OnceLock<CudaFunction>,
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

/// Fewest rows in one assignment GEMM chunk (smaller GEMMs waste the GPU).
const MIN_TILE_ROWS: usize = 256;

/// FP16 assignment GEMMs need points with a value of at least this magnitude (smaller data
/// would lose precision to FP16's subnormals) ...
const HALF_MIN_ABS: f32 = 1.0 / 256.0;
/// ... and dot products bounded by this (FP16's range ends at 65504; a quarter of it leaves
/// room for the GEMM's rounding).
const HALF_MAX_DOT: f64 = 16384.0;

/// One GEMM chunk's dot-product tile. Layout: (rows, num_anchors), row-major.
enum Tile<'a> {
    F32(&'a mut CudaSlice<f32>),
    /// From FP16 operands.
    F16(&'a mut CudaSlice<u16>),
}

impl Tile<'_> {
    fn len(&self) -> usize {
        match self {
            Tile::F32(t) => t.len(),
            Tile::F16(t) => t.len(),
        }
    }
}

/// Assignments of pinned points with at most this many (point, anchor) pairs, to anchors of
/// at most `DIRECT_MAX_FLOATS` floats (48 KiB, the default shared-memory limit), are computed
/// from exact distances in one launch (`nearest_direct`): a seeding round's few anchors. A
/// cuBLAS GEMM call alone costs the host 16-21 us on the H100 (run T's iteration_probe);
/// 2^18 pairs keep the kernel's warp reductions to a few microseconds.
const DIRECT_MAX_PAIRS: usize = 1 << 18;
const DIRECT_MAX_FLOATS: usize = 12 << 10;

/// Assignments of at most this many points, to at most `GROUP_SMALL_ANCHORS` anchors, are
/// grouped by anchor in one launch of one block (`group_small`) instead of five launches:
/// on an H100 (iteration_probe) it was the faster at 10,000 points and the slower at 65,536.
const GROUP_SMALL_POINTS: usize = 1 << 14;
const GROUP_SMALL_ANCHORS: usize = 4096;

/// Anchors of at most this many floats (64 MiB) are mirrored on the host (see
/// `CudaBackend::put_anchors`).
const MIRRORED_ANCHORS: usize = 1 << 24;

/// Host copies and compares of more floats than this are spread over threads: on the H100
/// machine a compare of 6 MiB of anchors took 0.38 ms on one thread and 0.12 ms on 16, against
/// 0.48 ms for their upload (iteration_probe).
const PARALLEL_FLOATS: usize = 1 << 16;

/// A bounded assignment treats anchors apart as "movers" when their moves are at least this
/// many times the largest move of the rest (see [`pick_movers`]).
const MOVER_RATIO: f32 = 2.0;

/// The anchors that moved far, given each anchor's move (`drifts`, (num_anchors,)), and the
/// largest move of the others. A bounded assignment lowers every point's bound by the largest
/// move; after maintenance, whose merges and splits put a few anchors far from where they
/// were, that sends every point to the GEMM. Taking the movers apart (their distances from a
/// GEMM of every point against them alone) lowers the bounds by the others' largest move
/// instead. The movers are the `m` largest moves, `m` at most num_anchors / 4 (so their GEMM
/// costs at most a quarter of a full one), where the largest gap between consecutive sorted
/// moves is, and only when that gap is a factor of at least `MOVER_RATIO`; otherwise none,
/// and the largest move. Movers in increasing id order.
fn pick_movers(drifts: &[f32]) -> (Vec<u32>, f32) {
    let k = drifts.len();
    let mut order: Vec<u32> = (0..k as u32).collect();
    order.sort_unstable_by(|&a, &b| {
        drifts[b as usize]
            .total_cmp(&drifts[a as usize])
            .then(a.cmp(&b))
    });
    let sorted = |i: usize| drifts[order[i] as usize];
    let Some(&first) = order.first() else {
        return (Vec::new(), 0.0);
    };
    let (mut best, mut best_ratio) = (0, 1.0f32);
    for m in 1..=k / 4 {
        let ratio = sorted(m - 1) / sorted(m).max(f32::MIN_POSITIVE);
        if ratio > best_ratio {
            (best, best_ratio) = (m, ratio);
        }
    }
    if best == 0 || best_ratio < MOVER_RATIO {
        return (Vec::new(), drifts[first as usize]);
    }
    let mut movers = order[..best].to_vec();
    movers.sort_unstable();
    (movers, sorted(best))
}

/// Members per block of the device's list split (`SPLIT_CHUNK` in `kernels/split.cu`).
const SPLIT_CHUNK: usize = 256;

/// The bytes of `v`.
fn bytes_of(v: &[f32]) -> &[u8] {
    // SAFETY: any initialised f32 is 4 initialised bytes; the view covers exactly the slice
    // and borrows it.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

/// Whether `a` and `b` hold the same floats bit for bit (a byte compare: the float compare's
/// element loop took longer than the upload it saves).
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    if a.len() <= PARALLEL_FLOATS {
        return bytes_of(a) == bytes_of(b);
    }
    use rayon::prelude::*;
    bytes_of(a)
        .par_chunks(4 * PARALLEL_FLOATS)
        .zip(bytes_of(b).par_chunks(4 * PARALLEL_FLOATS))
        .all(|(x, y)| x == y)
}

/// `dst.copy_from_slice(src)`, over threads when large.
fn copy_large<T: Copy + Send + Sync>(dst: &mut [T], src: &[T]) {
    if src.len() <= PARALLEL_FLOATS {
        dst.copy_from_slice(src);
        return;
    }
    use rayon::prelude::*;
    dst.par_chunks_mut(PARALLEL_FLOATS)
        .zip(src.par_chunks(PARALLEL_FLOATS))
        .for_each(|(d, s)| d.copy_from_slice(s));
}

/// Record that the device's anchors now hold `anchors` (when they are small enough to mirror).
fn mirror_anchors(mirror: &mut Vec<f32>, anchors: &[f32]) {
    if anchors.len() > MIRRORED_ANCHORS {
        mirror.clear();
        return;
    }
    // Resized without clearing first: only the length changes hands, the copy writes it all.
    mirror.resize(anchors.len(), 0.0);
    copy_large(mirror, anchors);
}

/// After the stream has caught up with [`CudaBackend::stage_reads`]: consecutive ranges of `staging`
/// into `outs`, in the order they were staged.
fn unstage<T: Copy + Send + Sync + cudarc::driver::ValidAsZeroBits>(
    staging: &mut Option<PinnedHostSlice<T>>,
    outs: &mut [&mut [T]],
) -> Result<()> {
    let total: usize = outs.iter().map(|o| o.len()).sum();
    if total == 0 {
        return Ok(());
    }
    let Some(host) = staging.as_mut() else {
        return Err(err("nothing staged"));
    };
    let host = host.as_mut_slice().map_err(err)?;
    if host.len() < total {
        return Err(err("read-back longer than what was staged"));
    }
    let mut at = 0;
    for out in outs.iter_mut() {
        let len = out.len();
        copy_large(out, &host[at..at + len]);
        at += len;
    }
    Ok(())
}

/// The power of two that turns values of magnitude at most `max_abs` into 64-bit fixed point
/// with room for sums of `num_points` of them (see [`vlc::backend::fixed_point_exponent`]).
fn fixed_point_scale(num_points: usize, max_abs: f32) -> f64 {
    2f64.powi(vlc::backend::fixed_point_exponent(num_points, max_abs))
}

/// Allocations above this size first check free device memory, for a typed out-of-memory
/// error instead of a driver failure.
const CHECKED_ALLOCATION: usize = 64 << 20;

/// Device memory for one chunk of [`Backend::code_levels`] (its rows and their levels):
/// 256 MiB, about 116,000 rows of 384 dimensions.
const LEVELS_CHUNK_BYTES: usize = 256 << 20;

/// Assignments of fewer multiply-adds (points · anchors · dim) than this rank every point
/// instead of checking distance bounds first (and use no FP16 tile): on an H100 the whole
/// ranking of 10,000 x 128 against 256 anchors (3·10^8) takes a few microseconds, the bound
/// check's launches and read-back cost more than that. `VLC_CUDA_SMALL_WORK` sets another (0: none
/// is small, as the conformance run of the bounded and FP16 paths on small shapes needs;
/// seeding-size shapes still take `nearest_direct`, which this limit does not gate).
const BOUNDED_MIN_WORK: usize = 1 << 31;

/// Picks per point that `nearest_radix_from_dots` selects (4 histogram passes, a gather and a
/// rank in shared memory) instead of `nearest_from_dots` (one scan of the row per pick): from 8,
/// where the scans start to cost more, up to its buffers' `RADIX_MAX_PICKS` (256).
const RADIX_PICKS: std::ops::RangeInclusive<usize> = 8..=256;

impl CudaBackend {
    /// Open device `ordinal` with the mixed TF32 / FP16 assignment GEMMs
    /// (`VLC_CUDA_PRECISION=fp32|tf32|fp16|mixed` selects another).
    pub fn new(ordinal: usize) -> Result<Self> {
        let precision = match std::env::var("VLC_CUDA_PRECISION").ok().as_deref() {
            Some("fp32") => GemmPrecision::Fp32,
            Some("tf32") => GemmPrecision::Tf32,
            Some("fp16") => GemmPrecision::Fp16,
            Some("mixed") | None => GemmPrecision::Mixed,
            Some(other) => {
                return Err(err(format!(
                    "VLC_CUDA_PRECISION must be fp32, tf32, fp16 or mixed, not `{other}`"
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
            GemmPrecision::Tf32 | GemmPrecision::Fp16 | GemmPrecision::Mixed => {
                cublas_sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
            }
        };
        // SAFETY: the handle is valid for the lifetime of `blas`.
        unsafe { cublas_sys::cublasSetMathMode(*blas.handle(), mode) }
            .result()
            .map_err(err)?;
        let cache = KernelCache::new(&ctx)?;
        let load = |kernel: &KernelSource, names: &[&str]| -> Result<Vec<CudaFunction>> {
            let module = cache.load(kernel)?;
            names
                .iter()
                .map(|n| module.load_function(n).map_err(err))
                .collect()
        };
        let mut f = load(
            &module::NEAREST,
            &[
                "row_norms",
                "nearest_from_dots",
                "nearest_radix_from_dots",
                "nearest1_from_dots",
                "to_half",
                "anchor_drift",
                "bound_check",
                "count_flags",
                "compact_flags",
                "gather_rows",
                "nearest2_scatter",
                "nearest_direct",
                "nearest2_scatter_half",
                "gather_rows_half",
                "mover_lower",
            ],
        )?;
        let mover_lower = f.pop().unwrap();
        let gather_rows_half = f.pop().unwrap();
        let nearest2_scatter_half = f.pop().unwrap();
        let nearest_direct = f.pop().unwrap();
        let nearest2_scatter = f.pop().unwrap();
        let gather_rows = f.pop().unwrap();
        let compact_flags = f.pop().unwrap();
        let count_flags = f.pop().unwrap();
        let bound_check = f.pop().unwrap();
        let anchor_drift = f.pop().unwrap();
        let to_half = f.pop().unwrap();
        let nearest1_from_dots = f.pop().unwrap();
        let nearest_radix_from_dots = f.pop().unwrap();
        let nearest_from_dots = f.pop().unwrap();
        let row_norms = f.pop().unwrap();
        let mut f = load(
            &module::ACCUMULATE,
            &[
                "count_members",
                "exclusive_scan",
                "scatter_kept",
                "sum_kept_fixed",
                "max_abs",
                "select_thresholds",
                "group_small",
            ],
        )?;
        let group_small = f.pop().unwrap();
        let select_thresholds = f.pop().unwrap();
        let max_abs = f.pop().unwrap();
        let sum_kept_fixed = f.pop().unwrap();
        let scatter_kept = f.pop().unwrap();
        let exclusive_scan = f.pop().unwrap();
        let count_members = f.pop().unwrap();
        let update_anchors = load(&module::UPDATE, &["update_anchors"])?.pop().unwrap();
        let mut f = load(&module::SPLIT, &["split_far", "split_side", "split_means"])?;
        let split_means = f.pop().unwrap();
        let split_side = f.pop().unwrap();
        let split_far = f.pop().unwrap();
        let device_name = ctx.name().unwrap_or_else(|_| "CUDA device".into());
        let tile_bytes = match std::env::var("VLC_CUDA_TILE_MB").ok() {
            Some(v) => match v.parse::<usize>() {
                Ok(mb) if mb > 0 => mb << 20,
                _ => {
                    return Err(err(format!(
                        "VLC_CUDA_TILE_MB must be a positive number of MiB, not `{v}`"
                    )))
                }
            },
            // 1 GiB: on the H100, tiles sized to the L2 cache (50 MB) made assignment slower
            // (0.46 s against 0.36 s for 20 iterations of 1M x 4,096): more, smaller GEMMs.
            None => 1 << 30,
        };
        let use_bounds = match std::env::var("VLC_CUDA_BOUNDS").ok().as_deref() {
            None | Some("1") => true,
            Some("0") => false,
            Some(other) => {
                return Err(err(format!(
                    "VLC_CUDA_BOUNDS must be 0 or 1, not `{other}`"
                )))
            }
        };
        let encode_levels = match std::env::var("VLC_CUDA_ENCODE").ok().as_deref() {
            None | Some("1") => true,
            Some("0") => false,
            Some(other) => {
                return Err(err(format!(
                    "VLC_CUDA_ENCODE must be 0 or 1, not `{other}`"
                )))
            }
        };
        let trace = std::env::var("VLC_CUDA_TRACE").is_ok_and(|v| v == "1");
        let small_work = match std::env::var("VLC_CUDA_SMALL_WORK").ok() {
            None => BOUNDED_MIN_WORK,
            Some(v) => v.parse::<usize>().map_err(|_| {
                err(format!(
                    "VLC_CUDA_SMALL_WORK must be a number of multiply-adds, not `{v}`"
                ))
            })?,
        };
        Ok(CudaBackend {
            ctx,
            stream,
            blas,
            kernels: Kernels {
                row_norms,
                nearest_from_dots,
                nearest_radix_from_dots,
                nearest1_from_dots,
                to_half,
                anchor_drift,
                mover_lower,
                bound_check,
                count_flags,
                compact_flags,
                gather_rows,
                nearest2_scatter,
                nearest_direct,
                nearest2_scatter_half,
                gather_rows_half,
                count_members,
                exclusive_scan,
                scatter_kept,
                sum_kept_fixed,
                max_abs,
                select_thresholds,
                group_small,
                update_anchors,
                split_far,
                split_side,
                split_means,
            },
            precision,
            device_name,
            tile_bytes,
            use_bounds,
            encode_levels,
            small_work,
            trace,
            cache,
            search: OnceLock::new(),
            levels: OnceLock::new(),
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

    /// The batched search kernel, compiled and loaded on first use: with `weighted`, its entry
    /// function for a scalar primary code with global ranges (`search_queries_weighted`).
    fn search_kernel(&self, weighted: bool) -> Result<CudaFunction> {
        if let Some(f) = self.search.get() {
            return Ok(f[weighted as usize].clone());
        }
        let module = self.cache.load(&module::SEARCH)?;
        let f = [
            module.load_function("search_queries").map_err(err)?,
            module
                .load_function("search_queries_weighted")
                .map_err(err)?,
        ];
        Ok(self.search.get_or_init(|| f)[weighted as usize].clone())
    }

    /// The encode kernel, compiled on first use without fused multiply-adds: it repeats the
    /// CPU reference's roundings one by one.
    fn levels_kernel(&self) -> Result<CudaFunction> {
        if let Some(f) = self.levels.get() {
            return Ok(f.clone());
        }
        let f = self
            .cache
            .load(&module::CODE_LEVELS)?
            .load_function("code_levels")
            .map_err(err)?;
        Ok(self.levels.get_or_init(|| f).clone())
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

    /// [`Self::put`] for anchors, skipped when `mirror` shows that `slot` already holds them:
    /// a training iteration uploads the same anchors twice (assignment, then update), and a
    /// upload costs more than comparing (anchors of at most `MIRRORED_ANCHORS` floats).
    fn put_anchors<'s>(
        &self,
        slot: &'s mut Option<CudaSlice<f32>>,
        mirror: &mut Vec<f32>,
        anchors: &[f32],
    ) -> Result<&'s mut CudaSlice<f32>> {
        if slot.is_some() && !anchors.is_empty() && same_bits(mirror, anchors) {
            return Ok(slot.as_mut().unwrap());
        }
        mirror.clear();
        let d = self.put(slot, anchors)?;
        mirror_anchors(mirror, anchors);
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

    /// The first `out.len()` elements of `d` into `out`, through the page-locked `staging`
    /// buffer (grown as needed).
    fn get_into<
        T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits + Copy + Send + Sync,
    >(
        &self,
        staging: &mut Option<PinnedHostSlice<T>>,
        d: &CudaSlice<T>,
        out: &mut [T],
    ) -> Result<()> {
        self.stage_reads(staging, &[(d, out.len())])?;
        self.stream.synchronize().map_err(err)?;
        unstage(staging, &mut [out])
    }

    /// Queue copies of the first `len` elements of each device buffer of `parts` into
    /// consecutive ranges of the page-locked `staging` buffer (grown as needed). The copies are
    /// asynchronous (the driver knows the memory is page-locked): synchronise the stream before
    /// [`unstage`], so that several read-backs share one wait.
    fn stage_reads<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits + Copy>(
        &self,
        staging: &mut Option<PinnedHostSlice<T>>,
        parts: &[(&CudaSlice<T>, usize)],
    ) -> Result<()> {
        let total: usize = parts.iter().map(|(_, len)| len).sum();
        if parts.iter().any(|(d, len)| d.len() < *len) {
            return Err(err("read-back longer than its device buffer"));
        }
        if staging.as_ref().is_none_or(|s| s.len() < total.max(1)) {
            *staging = None;
            // SAFETY: the memory is uninitialised until the copies fill the first `total`
            // elements, and only those are read (by unstage, after the copies).
            *staging = Some(
                unsafe { self.ctx.alloc_pinned_with_flags::<T>(total.max(1), 0) }.map_err(err)?,
            );
        }
        // Each copy goes to a plain sub-slice (a copy takes its destination's length).
        let host = staging.as_mut().unwrap().as_mut_slice().map_err(err)?;
        let mut at = 0;
        for &(d, len) in parts {
            if len > 0 {
                self.stream
                    .memcpy_dtoh(&d.slice(0..len), &mut host[at..at + len])
                    .map_err(err)?;
            }
            at += len;
        }
        Ok(())
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
    /// Read back the ids and distances that `scratch.ids` / `scratch.dists` hold, numbering
    /// the result (one per point: it stays on the device for accumulation).
    fn finish_nearest(
        &self,
        state: &mut State,
        num_points: usize,
        per_point: usize,
    ) -> Result<Nearest> {
        let (Some(ids), Some(dists)) = (state.scratch.ids.as_ref(), state.scratch.dists.as_ref())
        else {
            return Err(err("no assignment on the device"));
        };
        let len = num_points * per_point;
        let (mut host_ids, mut host_dists) = (vec![0u32; len], vec![0f32; len]);
        // Both copies queued, one wait.
        self.stage_reads(&mut state.staging.words, &[(ids, len)])?;
        self.stage_reads(&mut state.staging.floats, &[(dists, len)])?;
        self.stream.synchronize().map_err(err)?;
        unstage(&mut state.staging.words, &mut [&mut host_ids])?;
        unstage(&mut state.staging.floats, &mut [&mut host_dists])?;
        let (ids, dists) = (host_ids, host_dists);
        state.generation += 1;
        let generation = state.generation;
        state.nearest_on_device = (per_point == 1).then_some((generation, num_points));
        Ok(Nearest {
            per_point,
            ids,
            dists,
            resident: state.nearest_on_device.map(|(g, _)| g),
        })
    }

    /// Rows per assignment GEMM chunk: a dot-product tile of at most `tile_bytes`, at least
    /// `MIN_TILE_ROWS` rows for efficient GEMMs, never more than a quarter of free memory.
    fn chunk_rows(&self, num_points: usize, num_anchors: usize) -> Result<usize> {
        let mut chunk = (self.tile_bytes / (num_anchors * 4))
            .max(MIN_TILE_ROWS)
            .min(num_points.max(1));
        // Free memory is asked for only when the tile is large (the query costs a round trip).
        if chunk * num_anchors * 4 > CHECKED_ALLOCATION {
            chunk = chunk.min(self.memory()?.0 / 4 / (num_anchors * 4));
        }
        Ok(chunk.clamp(1, num_points.max(1)))
    }

    /// `tile` (rows, num_anchors), row-major, = `x` (rows, dim) · `c` (num_anchors, dim)ᵀ with
    /// the handle's FP32 or TF32 math.
    fn gemm_dots(
        &self,
        c: &CudaView<f32>,
        num_anchors: usize,
        x: &CudaView<f32>,
        rows: usize,
        dim: usize,
        tile: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let cfg = GemmConfig {
            transa: cublas_sys::cublasOperation_t::CUBLAS_OP_T,
            transb: cublas_sys::cublasOperation_t::CUBLAS_OP_N,
            m: num_anchors as i32,
            n: rows as i32,
            k: dim as i32,
            alpha: 1.0f32,
            lda: dim as i32,
            ldb: dim as i32,
            beta: 0.0f32,
            ldc: num_anchors as i32,
        };
        // SAFETY: column-major view: tileᵀ (k × rows, ld k) = cᵀᵀ (k × d) · xᵀ (d × rows); the
        // callers pass c with k·d floats, x with rows·d and a tile of at least rows·k.
        unsafe { self.blas.gemm(cfg, c, x, tile) }.map_err(err)
    }

    /// The rows `idx` (point indices, each below the rows of `x`) of `x` (.., dim) and their
    /// norms into the first rows of `out` and `out_norms`, by `kernel` (gather_rows for FP32
    /// rows, gather_rows_half for FP16 ones).
    fn gather_rows<T: cudarc::driver::DeviceRepr>(
        &self,
        (kernel, x, out): (&CudaFunction, &CudaSlice<T>, &mut CudaSlice<T>),
        (x_norms, out_norms): (&CudaSlice<f32>, &mut CudaSlice<f32>),
        idx: &CudaView<u32>,
        dim: usize,
    ) -> Result<()> {
        let rows = idx.len();
        if out.len() < rows * dim || out_norms.len() < rows || x.len() != x_norms.len() * dim {
            return Err(err("gather_rows: buffer shapes do not match"));
        }
        let (r_i32, d_i32) = (rows as i32, dim as i32);
        // SAFETY: one warp per row: idx holds `rows` point indices, below the rows of x (the
        // callers' flags come from those rows); out holds at least rows·dim values and
        // out_norms rows (checked above).
        unsafe {
            self.stream
                .launch_builder(kernel)
                .arg(x)
                .arg(x_norms)
                .arg(idx)
                .arg(&r_i32)
                .arg(&d_i32)
                .arg(out)
                .arg(out_norms)
                .launch(Self::launch_warps(rows))
        }
        .map_err(err)?;
        Ok(())
    }

    /// [`Self::gemm_dots`] with FP16 operands and an FP16 tile: `tile` (rows, num_anchors) =
    /// rows `start..start + rows` of `x_half` (.., dim) · `c_half` (num_anchors, dim)ᵀ,
    /// accumulated in FP32.
    #[allow(clippy::too_many_arguments)]
    fn gemm_dots_half(
        &self,
        c_half: &CudaSlice<u16>,
        num_anchors: usize,
        x_half: &CudaSlice<u16>,
        start: usize,
        rows: usize,
        dim: usize,
        tile: &mut Tile,
    ) -> Result<()> {
        let Tile::F16(tile) = tile else {
            return Err(err("an FP16 GEMM needs an FP16 tile"));
        };
        let operands = (c_half, x_half, start, dim);
        self.gemm_half(
            operands,
            num_anchors,
            rows,
            *tile,
            cublas_sys::cudaDataType::CUDA_R_16F,
        )
    }

    /// `tile` (rows, num_anchors), row-major, of type `tile_type` (FP32 or FP16, matching
    /// `T`) = rows `start..start + rows` of `x_half` (.., dim) · `c_half` (num_anchors, dim)ᵀ,
    /// FP16 operands, FP32 accumulation on the tensor cores.
    fn gemm_half<T: cudarc::driver::DeviceRepr>(
        &self,
        (c_half, x_half, start, dim): (&CudaSlice<u16>, &CudaSlice<u16>, usize, usize),
        num_anchors: usize,
        rows: usize,
        tile: &mut CudaSlice<T>,
        tile_type: cublas_sys::cudaDataType,
    ) -> Result<()> {
        if c_half.len() < num_anchors * dim
            || x_half.len() < (start + rows) * dim
            || tile.len() < rows * num_anchors
        {
            return Err(err("FP16 GEMM: buffer shapes do not match"));
        }
        let (alpha, beta) = (1.0f32, 0.0f32);
        let (a_ptr, _ra) = c_half.device_ptr(&self.stream);
        let (b_ptr, _rb) = x_half.device_ptr(&self.stream);
        let (c_ptr, _rc) = tile.device_ptr_mut(&self.stream);
        let b_ptr = b_ptr + (start * dim * 2) as u64;
        // SAFETY: column-major view as in gemm_dots, FP16 inputs (FP32 accumulation): A is
        // (dim × k, ld dim), B (dim × rows, ld dim) from row `start`, C (k × rows, ld k) of
        // tile_type, whose element size is T's (the callers pair them); the lengths are checked
        // above.
        unsafe {
            cublas_sys::cublasGemmEx(
                *self.blas.handle(),
                cublas_sys::cublasOperation_t::CUBLAS_OP_T,
                cublas_sys::cublasOperation_t::CUBLAS_OP_N,
                num_anchors as i32,
                rows as i32,
                dim as i32,
                &alpha as *const f32 as *const _,
                a_ptr as *const _,
                cublas_sys::cudaDataType::CUDA_R_16F,
                dim as i32,
                b_ptr as *const _,
                cublas_sys::cudaDataType::CUDA_R_16F,
                dim as i32,
                &beta as *const f32 as *const _,
                c_ptr as *mut _,
                tile_type,
                num_anchors as i32,
                cublas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT_TENSOR_OP,
            )
        }
        .result()
        .map_err(err)
    }

    /// One-per-point assignment of the resident buffer `key` into `scratch.ids` /
    /// `scratch.dists`, using the distance bounds kept from the previous call when the anchors
    /// have the same shape: only points whose bound no longer proves their anchor are ranked
    /// again. Returns how many points were ranked by GEMM.
    fn nearest_bounded(
        &self,
        state: &mut State,
        key: (usize, usize),
        anchors: &[f32],
        num_points: usize,
        num_anchors: usize,
        dim: usize,
    ) -> Result<usize> {
        let State {
            resident,
            scratch,
            staging,
            ..
        } = state;
        let r = resident
            .get_mut(&key)
            .ok_or_else(|| err("bounded assignment of points that are not resident"))?;
        if r.norms.as_ref().is_none_or(|(d, _)| *d != dim) {
            let mut n = self.alloc::<f32>(num_points)?;
            self.row_norms(&r.data.slice(..), num_points, dim, &mut n)?;
            r.norms = Some((dim, n));
            r.max_norm2 = None;
        }
        let c = self.put_anchors(&mut scratch.anchors, &mut scratch.anchors_mirror, anchors)?;
        let ids = self.grow(&mut scratch.ids, num_points)?;
        let dists = self.grow(&mut scratch.dists, num_points)?;
        if num_points * num_anchors <= DIRECT_MAX_PAIRS && anchors.len() <= DIRECT_MAX_FLOATS {
            // A few anchors (a seeding round): exact distances in one launch. The bounds are
            // not kept: the next call ranks everything again.
            if let Some(b) = r.bounds.as_mut() {
                b.num_anchors = 0;
            }
            let (n_i32, k_i32, d_i32) = (num_points as i32, num_anchors as i32, dim as i32);
            let cfg = LaunchConfig {
                grid_dim: (num_points.div_ceil(16).min(1024) as u32, 1, 1),
                block_dim: (512, 1, 1),
                shared_mem_bytes: (anchors.len() * 4) as u32,
            };
            // SAFETY: blocks of 512 threads (16 warps) stage the k·d floats of c (at most
            // DIRECT_MAX_FLOATS, 48 KiB of dynamic shared memory) and stride over the
            // num_points rows of x (num_points·dim floats); each point's warp writes its id
            // and distance (ids and dists hold num_points).
            unsafe {
                self.stream
                    .launch_builder(&self.kernels.nearest_direct)
                    .arg(&r.data)
                    .arg(&*c)
                    .arg(&n_i32)
                    .arg(&k_i32)
                    .arg(&d_i32)
                    .arg(&mut *ids)
                    .arg(&mut *dists)
                    .launch(cfg)
            }
            .map_err(err)?;
            return Ok(num_points);
        }
        let c_norms = self.grow(&mut scratch.anchor_norms, num_anchors)?;
        self.row_norms(&c.slice(0..anchors.len()), num_anchors, dim, c_norms)?;
        let c = c.slice(0..anchors.len());
        // Checking the bounds costs a handful of launches and one read-back whatever the size;
        // below BOUNDED_MIN_WORK multiply-adds, ranking every point costs less than that.
        let small = num_points * num_anchors * dim < self.small_work;
        // FP16 GEMMs (`Fp16`, or the default `Mixed`), for large assignments whose
        // values and dot products fit FP16's range: FP16 copies of the points and anchors and
        // an FP16 tile, half the bytes that the GEMM writes and the arg-min reads.
        let half =
            matches!(self.precision, GemmPrecision::Fp16 | GemmPrecision::Mixed) && !small && {
                if r.half.is_none() {
                    // The FP16 copy is half the points' size again: where the device has no
                    // room for it (twice its size free, so that later buffers still fit), the
                    // assignment stays on TF32 instead of failing.
                    let room = self.memory()?.0 >= 4 * r.data.len();
                    let copy = if room {
                        self.alloc::<u16>(r.data.len())
                    } else {
                        Err(err("no room for an FP16 copy"))
                    };
                    r.half = Some(match copy {
                        Ok(mut h) => {
                            let x = r.data.slice(..);
                            let fits = self.to_half(&x, &mut h, &mut scratch.overflow)?;
                            fits.then_some(h)
                        }
                        Err(_) => None,
                    });
                }
                if r.max_abs.is_none() {
                    r.max_abs = Some(self.max_abs(&r.data.slice(..), &mut scratch.max_abs)?);
                }
                if r.max_norm2.is_none() {
                    let norms = &r.norms.as_ref().unwrap().1;
                    r.max_norm2 = Some(self.max_abs(&norms.slice(..), &mut scratch.max_abs)?);
                }
                let c_half = self.grow(&mut scratch.anchors_half, anchors.len())?;
                let c_fits = self.to_half(&c, c_half, &mut scratch.overflow)?;
                let c_norm2 = self.max_abs(
                    &c_norms.slice(0..num_anchors),
                    &mut scratch.max_anchor_norm2,
                )?;
                // |x·c| <= ||x|| ||c||.
                let largest_dot = (r.max_norm2.unwrap() as f64 * c_norm2 as f64).sqrt();
                matches!(r.half, Some(Some(_)))
                    && c_fits
                    && r.max_abs.unwrap() >= HALF_MIN_ABS
                    && largest_dot <= HALF_MAX_DOT
            };
        let chunk = self.chunk_rows(num_points, num_anchors)?;
        let mut tile = if half {
            Tile::F16(self.grow(&mut scratch.tile_half, chunk * num_anchors)?)
        } else {
            Tile::F32(self.grow(&mut scratch.tile, chunk * num_anchors)?)
        };
        let c_half = scratch.anchors_half.as_ref().filter(|_| half);
        let (k_i32, d_i32, n_i32) = (num_anchors as i32, dim as i32, num_points as i32);
        let valid = r
            .bounds
            .as_ref()
            .is_some_and(|b| b.dim == dim && b.num_anchors == num_anchors);
        if !valid {
            // A new shape (each seeding round has its own anchor count): the buffers are
            // kept when they are large enough, since allocations wait for the device.
            let fits = r
                .bounds
                .as_ref()
                .is_some_and(|b| b.anchors.len() >= anchors.len());
            if !fits {
                r.bounds = None;
                r.bounds = Some(Bounds {
                    dim,
                    num_anchors,
                    anchors: self.alloc::<f32>(anchors.len())?,
                    assign: self.alloc::<u32>(num_points)?,
                    lower: self.alloc::<f32>(num_points)?,
                });
            }
            let b = r.bounds.as_mut().unwrap();
            (b.dim, b.num_anchors) = (dim, num_anchors);
        }
        let x = &r.data;
        let x_norms = &r.norms.as_ref().unwrap().1;
        let x_half = r.half.as_ref().and_then(|h| h.as_ref()).filter(|_| half);
        let b = r.bounds.as_mut().unwrap();
        let mut full = !valid || small;
        let mut ranked = 0;
        if !full {
            // Zeroed on the stream (a host upload would wait for it).
            let drift = self.grow(&mut scratch.max_drift, 2)?;
            self.stream.memset_zeros(&mut *drift).map_err(err)?;
            let drifts = self.grow(&mut scratch.drifts, num_anchors)?;
            // SAFETY: one warp per anchor over k·d floats of both anchor buffers; writes one
            // move per anchor (drifts holds num_anchors) and the first word of drift.
            unsafe {
                self.stream
                    .launch_builder(&self.kernels.anchor_drift)
                    .arg(&c)
                    .arg(&b.anchors)
                    .arg(&k_i32)
                    .arg(&d_i32)
                    .arg(&mut *drift)
                    .arg(&mut *drifts)
                    .launch(Self::launch_warps(num_anchors))
            }
            .map_err(err)?;
            // The moves, read back (one wait), pick the anchors that moved far.
            let mut host_drifts = vec![0f32; num_anchors];
            self.stage_reads(&mut staging.floats, &[(&*drifts, num_anchors)])?;
            self.stream.synchronize().map_err(err)?;
            unstage(&mut staging.floats, &mut [&mut host_drifts])?;
            let (movers, stable_drift) = pick_movers(&host_drifts);
            if !movers.is_empty() {
                let m = movers.len();
                let d_movers = self.put(&mut scratch.movers, &movers)?;
                let rows_of_movers = self.grow(&mut scratch.mover_rows, m * dim)?;
                let mover_norms = self.grow(&mut scratch.mover_norms, m)?;
                let m_i32 = m as i32;
                // SAFETY: gather_rows, one warp per mover: the m ids in d_movers are anchor ids
                // (< num_anchors, from pick_movers) of c (num_anchors·dim floats) and c_norms
                // (num_anchors); writes m·dim floats and m norms, the sizes grown above.
                unsafe {
                    self.stream
                        .launch_builder(&self.kernels.gather_rows)
                        .arg(&c)
                        .arg(&*c_norms)
                        .arg(&*d_movers)
                        .arg(&m_i32)
                        .arg(&d_i32)
                        .arg(&mut *rows_of_movers)
                        .arg(&mut *mover_norms)
                        .launch(Self::launch_warps(m))
                }
                .map_err(err)?;
                let mover_chunk = self.chunk_rows(num_points, m)?;
                let mover_tile = self.grow(&mut scratch.mover_tile, mover_chunk * m)?;
                let mover_rows = rows_of_movers.slice(0..m * dim);
                for start in (0..num_points).step_by(mover_chunk) {
                    let rows = mover_chunk.min(num_points - start);
                    let xs = x.slice(start * dim..(start + rows) * dim);
                    self.gemm_dots(&mover_rows, m, &xs, rows, dim, mover_tile)?;
                    let (r_i32, base) = (rows as i32, start as u32);
                    // SAFETY: one warp per row of the tile (rows·m dots); reads point
                    // base + row's norm and anchor (x_norms and b.assign hold num_points), the
                    // m mover ids and norms; writes that point's lower bound (num_points).
                    unsafe {
                        self.stream
                            .launch_builder(&self.kernels.mover_lower)
                            .arg(&*mover_tile)
                            .arg(x_norms)
                            .arg(&*mover_norms)
                            .arg(&*d_movers)
                            .arg(&r_i32)
                            .arg(&m_i32)
                            .arg(&base)
                            .arg(&b.assign)
                            .arg(&stable_drift)
                            .arg(&mut b.lower)
                            .launch(Self::launch_warps(rows))
                    }
                    .map_err(err)?;
                }
            }
            // With movers the bounds are lowered already: the check lowers them by 0 more.
            let drift = drift.slice(if movers.is_empty() { 0..1 } else { 1..2 });
            let flags = self.grow(&mut scratch.flags, num_points)?;
            // SAFETY: one warp per point: reads its row of x (num_points·dim), its norm, its
            // anchor (assign < k) row and norm; writes its lower bound, flag, id and distance.
            unsafe {
                self.stream
                    .launch_builder(&self.kernels.bound_check)
                    .arg(x)
                    .arg(x_norms)
                    .arg(&c)
                    .arg(&*c_norms)
                    .arg(&n_i32)
                    .arg(&d_i32)
                    .arg(&drift)
                    .arg(&b.assign)
                    .arg(&mut b.lower)
                    .arg(&mut *ids)
                    .arg(&mut *dists)
                    .arg(&mut *flags)
                    .launch(Self::launch_warps(num_points))
            }
            .map_err(err)?;
            let blocks = num_points.div_ceil(1024);
            let block_counts = self.grow(&mut scratch.block_counts, blocks)?;
            let block_offsets = self.grow(&mut scratch.block_offsets, blocks + 1)?;
            let flagged = self.grow(&mut scratch.flagged, num_points)?;
            let per_block = LaunchConfig {
                grid_dim: (blocks as u32, 1, 1),
                block_dim: (1024, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: blocks of 1024 threads over num_points flags; block_counts holds
            // `blocks` entries, flagged num_points.
            unsafe {
                self.stream
                    .launch_builder(&self.kernels.count_flags)
                    .arg(&*flags)
                    .arg(&n_i32)
                    .arg(&mut *block_counts)
                    .launch(per_block)
                    .map_err(err)?;
            }
            self.exclusive_scan(block_counts, blocks, block_offsets)?;
            // SAFETY: as above; block_offsets now holds the scan of block_counts.
            unsafe {
                self.stream
                    .launch_builder(&self.kernels.compact_flags)
                    .arg(&*flags)
                    .arg(&n_i32)
                    .arg(&*block_offsets)
                    .arg(&mut *flagged)
                    .launch(per_block)
                    .map_err(err)?;
            }
            let mut total = [0u32];
            self.stream
                .memcpy_dtoh(&block_offsets.slice(blocks..blocks + 1), &mut total)
                .map_err(err)?;
            let count = total[0] as usize;
            // Most points flagged (after maintenance, or in seeding): rank them all in place
            // rather than gather them.
            full = count * 2 > num_points;
            if self.trace {
                eprintln!(
                    "vlc-cuda bounded assignment: {num_points} points, {num_anchors} anchors, \
                     {} movers, largest move {:.4}, bound lowered by {stable_drift:.4}, \
                     {count} flagged{}",
                    movers.len(),
                    host_drifts.iter().fold(0f32, |m, &d| m.max(d)),
                    if full { ", all ranked" } else { "" }
                );
            }
            let count = if full { 0 } else { count };
            ranked = count;
            let room = chunk.min(count.max(1));
            let gathered_norms = self.grow(&mut scratch.gathered_norms, room)?;
            for start in (0..count).step_by(chunk) {
                let rows = chunk.min(count - start);
                let idx = flagged.slice(start..start + rows);
                match (x_half, c_half) {
                    (Some(xh), Some(ch)) => {
                        let gathered = self.grow(&mut scratch.gathered_half, room * dim)?;
                        let rows_of = (&self.kernels.gather_rows_half, xh, &mut *gathered);
                        self.gather_rows(rows_of, (x_norms, &mut *gathered_norms), &idx, dim)?;
                        self.gemm_dots_half(ch, num_anchors, gathered, 0, rows, dim, &mut tile)?;
                    }
                    _ => {
                        let gathered = self.grow(&mut scratch.gathered, room * dim)?;
                        let rows_of = (&self.kernels.gather_rows, x, &mut *gathered);
                        self.gather_rows(rows_of, (x_norms, &mut *gathered_norms), &idx, dim)?;
                        let Tile::F32(t) = &mut tile else {
                            return Err(err("an FP16 tile without FP16 operands"));
                        };
                        self.gemm_dots(
                            &c,
                            num_anchors,
                            &gathered.slice(0..rows * dim),
                            rows,
                            dim,
                            t,
                        )?;
                    }
                }
                let norms = gathered_norms.slice(0..rows);
                self.scatter_nearest2(
                    &tile,
                    &norms,
                    (x, &c, dim),
                    c_norms,
                    num_anchors,
                    Some(&idx),
                    0,
                    ids,
                    dists,
                    b,
                )?;
            }
        }
        if full {
            for start in (0..num_points).step_by(chunk) {
                let rows = chunk.min(num_points - start);
                match (x_half, c_half) {
                    (Some(xh), Some(ch)) => {
                        self.gemm_dots_half(ch, num_anchors, xh, start, rows, dim, &mut tile)?
                    }
                    _ => {
                        let Tile::F32(t) = &mut tile else {
                            return Err(err("an FP16 tile without FP16 operands"));
                        };
                        let xs = x.slice(start * dim..(start + rows) * dim);
                        self.gemm_dots(&c, num_anchors, &xs, rows, dim, t)?;
                    }
                }
                let norms = x_norms.slice(start..start + rows);
                self.scatter_nearest2(
                    &tile,
                    &norms,
                    (x, &c, dim),
                    c_norms,
                    num_anchors,
                    None,
                    start,
                    ids,
                    dists,
                    b,
                )?;
            }
            ranked = num_points;
        }
        if small {
            // Never checked at this size: the next call ranks everything again too.
            b.num_anchors = 0;
        } else {
            self.stream
                .memcpy_dtod(&c, &mut b.anchors.slice_mut(0..anchors.len()))
                .map_err(err)?;
        }
        Ok(ranked)
    }

    /// Trimmed per-anchor sums into `scratch.sums` and kept counts into `scratch.kept` (left on
    /// the device); with `step`, also `scratch.anchors += step · (sum / kept − anchor)` for
    /// anchors with kept members (the caller uploads the anchors first). The assignment is
    /// `host` (ids, dists), or with None the one-per-point result that `scratch.ids` /
    /// `scratch.dists` hold. The member count per anchor is left in `scratch.member_counts`.
    fn accumulate_on_device(
        &self,
        state: &mut State,
        points: &[f32],
        dim: usize,
        host: Option<(&[u32], &[f32])>,
        thresholds: &[f32],
        step: Option<f32>,
    ) -> Result<()> {
        let num_anchors = thresholds.len();
        let num_points = match host {
            Some((ids, dists)) => check_accumulate_args(points, dim, ids, dists, num_anchors)?,
            None => vlc::backend::rows_of("points", points.len(), dim)?,
        };
        if num_points >= u32::MAX as usize {
            return Err(err(format!(
                "{num_points} points: GPU accumulation takes fewer than 2^32"
            )));
        }
        let State {
            resident,
            scratch,
            nearest_on_device,
            selected,
            ..
        } = state;
        // The grouping that trimmed_thresholds left, when it was made for this assignment and
        // these thresholds.
        let reuse = host.is_none()
            && selected.as_ref().is_some_and(|(generation, thr)| {
                nearest_on_device.is_some_and(|(g, _)| g == *generation) && thr == thresholds
            });
        if !reuse {
            // The grouping below replaces it.
            *selected = None;
        }
        if let Some((ids, dists)) = host {
            // These uploads replace what a previous nearest_anchors left on the device.
            *nearest_on_device = None;
            self.put(&mut scratch.ids, ids)?;
            self.put(&mut scratch.dists, dists)?;
        }
        let key = (points.as_ptr() as usize, points.len());
        let (x, max_abs): (&CudaSlice<f32>, f32) = match resident.get_mut(&key) {
            Some(r) => {
                if r.max_abs.is_none() {
                    r.max_abs = Some(self.max_abs(&r.data.slice(..), &mut scratch.max_abs)?);
                }
                (&r.data, r.max_abs.unwrap())
            }
            None => {
                let d = self.put(&mut scratch.points, points)?;
                let m = self.max_abs(&d.slice(0..points.len()), &mut scratch.max_abs)?;
                (&*d, m)
            }
        };
        let scale = fixed_point_scale(num_points, max_abs);
        let (Some(ids), Some(dists)) = (scratch.ids.as_ref(), scratch.dists.as_ref()) else {
            return Err(err("accumulation before an assignment is on the device"));
        };
        if !reuse {
            let d_thr = self.put(&mut scratch.thresholds, thresholds)?;
            self.group_kept(
                (ids, dists, &*d_thr),
                num_points,
                num_anchors,
                &mut scratch.member_counts,
                &mut scratch.kept,
                &mut scratch.offsets,
                &mut scratch.cursor,
                &mut scratch.members,
            )?;
        }
        let members = if reuse {
            scratch.kept_members.as_ref()
        } else {
            scratch.members.as_ref()
        };
        let (Some(offsets), Some(kept), Some(members)) =
            (scratch.offsets.as_ref(), scratch.kept.as_ref(), members)
        else {
            return Err(err("grouping buffers missing"));
        };
        let sums = self.grow(&mut scratch.sums, num_anchors * dim)?;
        if step.is_some()
            || scratch
                .anchors
                .as_ref()
                .is_none_or(|b| b.len() < num_anchors * dim)
        {
            // The launch below moves them, or the grow below replaces the buffer.
            scratch.anchors_mirror.clear();
        }
        let anchors = self.grow(&mut scratch.anchors, num_anchors * dim)?;
        let d_i32 = dim as i32;
        let update = step.is_some() as i32;
        let step = step.unwrap_or(0.0);
        let per_anchor = LaunchConfig {
            grid_dim: (num_anchors as u32, 1, 1),
            block_dim: (dim.next_multiple_of(32).min(512) as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: one block per anchor; each anchor's range offsets[a]..offsets[a] + kept[a] of
        // members (within its group of at most num_points) indexes point rows < num_points of
        // x (num_points·dim floats); sums and anchors hold num_anchors·dim values.
        unsafe {
            self.stream
                .launch_builder(&self.kernels.sum_kept_fixed)
                .arg(x)
                .arg(&d_i32)
                .arg(offsets)
                .arg(kept)
                .arg(members)
                .arg(&scale)
                .arg(&mut *sums)
                .arg(&mut *anchors)
                .arg(&update)
                .arg(&step)
                .launch(per_anchor)
        }
        .map_err(err)?;
        Ok(())
    }

    /// The kept and member counts per anchor that an accumulation left on the device, and
    /// with `anchors` the moved anchors too, read back with one wait.
    fn read_counts(
        &self,
        state: &mut State,
        num_anchors: usize,
        anchors: Option<&mut [f32]>,
    ) -> Result<(Vec<u32>, Vec<u32>)> {
        let State {
            scratch, staging, ..
        } = state;
        let (Some(kept), Some(counts)) = (scratch.kept.as_ref(), scratch.member_counts.as_ref())
        else {
            return Err(err("no accumulation on the device"));
        };
        self.stage_reads(
            &mut staging.words,
            &[(kept, num_anchors), (counts, num_anchors)],
        )?;
        if let Some(a) = &anchors {
            let Some(d) = scratch.anchors.as_ref() else {
                return Err(err("no anchors on the device"));
            };
            self.stage_reads(&mut staging.floats, &[(d, a.len())])?;
        }
        self.stream.synchronize().map_err(err)?;
        let (mut host_kept, mut host_counts) = (vec![0u32; num_anchors], vec![0u32; num_anchors]);
        unstage(&mut staging.words, &mut [&mut host_kept, &mut host_counts])?;
        if let Some(a) = anchors {
            unstage(&mut staging.floats, &mut [&mut *a])?;
            mirror_anchors(&mut scratch.anchors_mirror, a);
        }
        Ok((host_kept, host_counts))
    }

    /// Nearest anchor and runner-up of each row of `tile` (rows = `norms.len()`, num_anchors
    /// dot products each) into `ids`, `dists` and the bounds. Tile row i is point `idx[i]`, or
    /// `base + i` without an index.
    #[allow(clippy::too_many_arguments)]
    fn scatter_nearest2(
        &self,
        tile: &Tile,
        norms: &CudaView<f32>,
        (x, c, dim): (&CudaSlice<f32>, &CudaView<f32>, usize),
        c_norms: &CudaSlice<f32>,
        num_anchors: usize,
        idx: Option<&CudaView<u32>>,
        base: usize,
        ids: &mut CudaSlice<u32>,
        dists: &mut CudaSlice<f32>,
        bounds: &mut Bounds,
    ) -> Result<()> {
        let rows = norms.len();
        let points = bounds.assign.len();
        let in_range = match idx {
            Some(i) => i.len() == rows,
            None => base + rows <= points,
        };
        if !in_range
            || tile.len() < rows * num_anchors
            || c_norms.len() < num_anchors
            || x.len() < points * dim
            || c.len() < num_anchors * dim
        {
            return Err(err("nearest2_scatter: buffer shapes do not match"));
        }
        let (r_i32, k_i32, d_i32, base) =
            (rows as i32, num_anchors as i32, dim as i32, base as u32);
        let mut launch = match tile {
            Tile::F32(t) => {
                let mut l = self.stream.launch_builder(&self.kernels.nearest2_scatter);
                l.arg(&**t);
                l
            }
            Tile::F16(t) => {
                let mut l = self
                    .stream
                    .launch_builder(&self.kernels.nearest2_scatter_half);
                l.arg(&**t);
                l
            }
        };
        launch.arg(norms).arg(c_norms).arg(&r_i32).arg(&k_i32);
        let null = 0u64;
        match idx {
            Some(i) => launch.arg(i),
            None => launch.arg(&null),
        };
        launch
            .arg(&base)
            .arg(x)
            .arg(c)
            .arg(&d_i32)
            .arg(ids)
            .arg(dists)
            .arg(&mut bounds.assign)
            .arg(&mut bounds.lower);
        // SAFETY: reads rows·k dots, rows norms, k anchor norms, and for near-ties the rows of
        // x (num_points·dim) and c (k·dim) of a point and its two nearest anchors (checked
        // above); writes ids, dists, assign and lower (one per point) of the points idx[i]
        // (indices of the flagged points, < num_points) or base..base + rows (checked above).
        unsafe { launch.launch(Self::launch_warps(rows)) }.map_err(err)?;
        Ok(())
    }

    /// Group the points of an assignment (`ids`, `dists`: num_points each, ids < num_anchors)
    /// whose distance is at most their anchor's threshold (`thresholds`: num_anchors) by
    /// anchor: member counts (all points) into `counts`, kept counts into `kept`, the start of
    /// each anchor's range into `offsets` (num_anchors + 1) and the kept points' indices into
    /// `members`, grouped (their order within a range depends on timing). `cursor` is scratch.
    #[allow(clippy::too_many_arguments)]
    fn group_kept(
        &self,
        (ids, dists, thresholds): (&CudaSlice<u32>, &CudaSlice<f32>, &CudaSlice<f32>),
        num_points: usize,
        num_anchors: usize,
        counts: &mut Option<CudaSlice<u32>>,
        kept: &mut Option<CudaSlice<u32>>,
        offsets: &mut Option<CudaSlice<u32>>,
        cursor: &mut Option<CudaSlice<u32>>,
        members: &mut Option<CudaSlice<u32>>,
    ) -> Result<()> {
        if ids.len() < num_points || dists.len() < num_points || thresholds.len() < num_anchors {
            return Err(err("grouping: buffer shapes do not match"));
        }
        let counts = self.grow(counts, num_anchors)?;
        let kept = self.grow(kept, num_anchors)?;
        if num_points <= GROUP_SMALL_POINTS && num_anchors <= GROUP_SMALL_ANCHORS {
            let offsets = self.grow(offsets, num_anchors + 1)?;
            let members = self.grow(members, num_points)?;
            let (n_u32, k_i32) = (num_points as u32, num_anchors as i32);
            let one_block = LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (1024, 1, 1),
                shared_mem_bytes: (2 * num_anchors * 4) as u32,
            };
            // SAFETY: one block of 1024 threads (a power of two) with 2·num_anchors u32 of
            // dynamic shared memory (at most 32 KiB: GROUP_SMALL_ANCHORS); reads ids, dists
            // (num_points, ids < num_anchors as the callers checked) and thresholds
            // (num_anchors); writes counts, kept (num_anchors), offsets (num_anchors + 1) and
            // one slot of members (num_points) per kept point.
            unsafe {
                self.stream
                    .launch_builder(&self.kernels.group_small)
                    .arg(ids)
                    .arg(dists)
                    .arg(thresholds)
                    .arg(&n_u32)
                    .arg(&k_i32)
                    .arg(&mut *counts)
                    .arg(&mut *kept)
                    .arg(&mut *offsets)
                    .arg(&mut *members)
                    .launch(one_block)
            }
            .map_err(err)?;
            return Ok(());
        }
        self.stream.memset_zeros(&mut *counts).map_err(err)?;
        self.stream.memset_zeros(&mut *kept).map_err(err)?;
        let offsets = self.grow(offsets, num_anchors + 1)?;
        let cursor = self.grow(cursor, num_anchors)?;
        let members = self.grow(members, num_points)?;
        let n_u32 = num_points as u32;
        let per_point = LaunchConfig {
            grid_dim: (num_points.div_ceil(256).clamp(1, 65536) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: ids, dists hold num_points entries (checked above; the callers checked the
        // ids < num_anchors); thresholds, counts, kept hold num_anchors.
        unsafe {
            self.stream
                .launch_builder(&self.kernels.count_members)
                .arg(ids)
                .arg(dists)
                .arg(thresholds)
                .arg(&n_u32)
                .arg(&mut *counts)
                .arg(&mut *kept)
                .launch(per_point)
        }
        .map_err(err)?;
        self.exclusive_scan(kept, num_anchors, offsets)?;
        self.stream
            .memcpy_dtod(&offsets.slice(0..num_anchors), &mut *cursor)
            .map_err(err)?;
        // SAFETY: every kept point takes one slot of its anchor's range, and the ranges
        // (offsets from the kept counts of the same ids, dists and thresholds) partition
        // 0..total kept <= num_points, the size of members.
        unsafe {
            self.stream
                .launch_builder(&self.kernels.scatter_kept)
                .arg(ids)
                .arg(dists)
                .arg(thresholds)
                .arg(&n_u32)
                .arg(&mut *cursor)
                .arg(&mut *members)
                .launch(per_point)
        }
        .map_err(err)?;
        Ok(())
    }

    /// `offsets[i]` = sum of `counts[..i]` for i in 0..=n (one block).
    fn exclusive_scan(
        &self,
        counts: &CudaSlice<u32>,
        n: usize,
        offsets: &mut CudaSlice<u32>,
    ) -> Result<()> {
        if counts.len() < n || offsets.len() <= n {
            return Err(err("exclusive scan buffers too small"));
        }
        let n_i32 = n as i32;
        let one_block = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1024, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: one block of 1024 threads (the kernel's shared array size) reads n counts
        // and writes n + 1 offsets; both lengths are checked above.
        unsafe {
            self.stream
                .launch_builder(&self.kernels.exclusive_scan)
                .arg(counts)
                .arg(&n_i32)
                .arg(offsets)
                .launch(one_block)
        }
        .map_err(err)?;
        Ok(())
    }

    /// Largest |value| of `x` (reads back one value).
    fn max_abs(&self, x: &CudaView<f32>, out: &mut Option<CudaSlice<u32>>) -> Result<f32> {
        let n = x.len() as u64;
        let out = self.put(out, &[0u32])?;
        let cfg = LaunchConfig {
            grid_dim: (x.len().div_ceil(256).clamp(1, 4096) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: max_abs reads n floats of x and updates one u32.
        unsafe {
            self.stream
                .launch_builder(&self.kernels.max_abs)
                .arg(x)
                .arg(&n)
                .arg(&mut *out)
                .launch(cfg)
        }
        .map_err(err)?;
        Ok(f32::from_bits(self.get(out, 1)?[0]))
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
        // The launch below moves them.
        scratch.anchors_mirror.clear();
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

    /// TF32 and FP16 products keep 11 significant bits: within 2^-10 (‖x‖² + ‖c‖²).
    /// Training's assignments of pinned points keep distance bounds on the device (unless
    /// turned off by the environment), so the training loop keeps none on the host.
    fn bounds_assignments(&self) -> bool {
        true
    }

    fn ranking_rounding(&self) -> f32 {
        match self.precision {
            GemmPrecision::Fp32 => f32::EPSILON,
            GemmPrecision::Tf32 | GemmPrecision::Fp16 | GemmPrecision::Mixed => 1.0 / 1024.0,
        }
    }

    /// The radix selection's largest pick count (`RADIX_PICKS`, 256); more picks scan each row
    /// once per pick (`nearest_from_dots`).
    fn fast_picks(&self) -> usize {
        *RADIX_PICKS.end()
    }

    fn pin<'a>(&'a self, points: &'a [f32]) -> Result<PinGuard<'a>> {
        let key = (points.as_ptr() as usize, points.len());
        let release = move || {
            let mut state = self.state.lock().unwrap();
            if let Some(r) = state.resident.get_mut(&key) {
                r.pins -= 1;
                if r.pins == 0 {
                    state.resident.remove(&key);
                }
            }
        };
        let mut state = self.state.lock().unwrap();
        // The same buffer pinned again (seeding on the whole sample): one copy, counted.
        if let Some(r) = state.resident.get_mut(&key) {
            r.pins += 1;
            return Ok(PinGuard::new(release));
        }
        let mut data = self.alloc::<f32>(points.len())?;
        // Part of a buffer already on the device (the seeding sample is the start of the
        // training sample): copied there, at device speed, instead of uploaded again.
        let within = state.resident.iter().find_map(|(&(addr, len), r)| {
            let start = key.0.checked_sub(addr)? / 4;
            ((key.0 - addr).is_multiple_of(4) && start + key.1 <= len).then_some((r, start))
        });
        match within {
            Some((r, start)) if !points.is_empty() => self
                .stream
                .memcpy_dtod(&r.data.slice(start..start + key.1), &mut data)
                .map_err(err)?,
            _ if !points.is_empty() => self.stream.memcpy_htod(points, &mut data).map_err(err)?,
            _ => {}
        }
        state.resident.insert(
            key,
            Resident {
                data,
                norms: None,
                half: None,
                max_norm2: None,
                max_abs: None,
                bounds: None,
                pins: 1,
            },
        );
        Ok(PinGuard::new(release))
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
        let key = (points.as_ptr() as usize, points.len());
        if per_point == 1 && self.use_bounds && guard.resident.contains_key(&key) {
            self.nearest_bounded(&mut guard, key, anchors, num_points, num_anchors, dim)?;
            return self.finish_nearest(&mut guard, num_points, per_point);
        }
        let State {
            resident, scratch, ..
        } = &mut *guard;
        let Scratch {
            points: s_points,
            point_norms: s_norms,
            points_half: s_half,
            anchors: s_anchors,
            anchors_mirror: s_mirror,
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
        let c = self.put_anchors(s_anchors, s_mirror, anchors)?;
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

        let (k_i32, m_i32) = (num_anchors as i32, per_point as i32);
        let ids = self.grow(s_ids, num_points * per_point)?;
        let dists = self.grow(s_dists, num_points * per_point)?;
        let chunk = self.chunk_rows(num_points, num_anchors)?;
        let tile = self.grow(s_tile, chunk * num_anchors)?;
        let mut start = 0;
        while start < num_points {
            let rows = chunk.min(num_points - start);
            match halves {
                Some((xh, ch)) => self.gemm_half(
                    (ch, xh, start, dim),
                    num_anchors,
                    rows,
                    tile,
                    cublas_sys::cudaDataType::CUDA_R_32F,
                )?,
                None => {
                    let xs = x.slice(start * dim..(start + rows) * dim);
                    self.gemm_dots(
                        &c.slice(0..anchors.len()),
                        num_anchors,
                        &xs,
                        rows,
                        dim,
                        tile,
                    )?;
                }
            }
            let xn = x_norms.slice(start..start + rows);
            let mut out_ids = ids.slice_mut(start * per_point..(start + rows) * per_point);
            let mut out_d = dists.slice_mut(start * per_point..(start + rows) * per_point);
            let r_i32 = rows as i32;
            let mut launch = if per_point == 1 {
                self.stream.launch_builder(&self.kernels.nearest1_from_dots)
            } else if RADIX_PICKS.contains(&per_point) {
                self.stream
                    .launch_builder(&self.kernels.nearest_radix_from_dots)
            } else {
                self.stream.launch_builder(&self.kernels.nearest_from_dots)
            };
            launch
                .arg(&*tile)
                .arg(&xn)
                .arg(&*c_norms)
                .arg(&r_i32)
                .arg(&k_i32);
            if per_point != 1 {
                launch.arg(&m_i32);
            }
            launch.arg(&mut out_ids).arg(&mut out_d);
            // SAFETY: nearest_from_dots and nearest_radix_from_dots (nearest1_from_dots:
            // per_point = 1, no per_point argument) read rows·k dots, rows norms, k norms and
            // write rows·per_point ids and distances; every slice has at least that length. The
            // radix kernel's shared buffers hold RADIX_PICKS' largest per_point for each of the
            // 8 warps of launch_warps' blocks.
            unsafe { launch.launch(Self::launch_warps(rows)) }.map_err(err)?;
            start += rows;
        }
        self.finish_nearest(&mut guard, num_points, per_point)
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
        self.accumulate_on_device(
            &mut guard,
            points,
            dim,
            Some((assignment, dists)),
            thresholds,
            None,
        )?;
        let sums = self.get(guard.scratch.sums.as_ref().unwrap(), num_anchors * dim)?;
        let (kept, members) = self.read_counts(&mut guard, num_anchors, None)?;
        Ok(AnchorSums {
            sums,
            kept,
            members,
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
        let num_anchors = thresholds.len();
        check_single_nearest(nearest)?;
        vlc::backend::check_anchor_rows(anchors, dim, num_anchors)?;
        let mut guard = self.state.lock().unwrap();
        // The device's own copy of the assignment when it still holds exactly this result.
        let on_device = nearest.resident.is_some()
            && guard.nearest_on_device == nearest.resident.map(|g| (g, nearest.ids.len()));
        let host = (!on_device).then_some((&nearest.ids[..], &nearest.dists[..]));
        if on_device && nearest.ids.len() * dim != points.len() {
            return Err(VlcError::DimensionMismatch {
                what: "assignment length vs points".into(),
                expected: points.len() / dim.max(1),
                actual: nearest.ids.len(),
            });
        }
        // The sums stay on the device: upload the anchors, move them, read them back.
        let scratch = &mut guard.scratch;
        self.put_anchors(&mut scratch.anchors, &mut scratch.anchors_mirror, anchors)?;
        self.accumulate_on_device(&mut guard, points, dim, host, thresholds, Some(step))?;
        let (kept, members) = self.read_counts(&mut guard, num_anchors, Some(anchors))?;
        Ok(AnchorSums {
            sums: Vec::new(),
            kept,
            members,
        })
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
        let key = (points.as_ptr() as usize, points.len());
        let mut guard = self.state.lock().unwrap();
        // Only pinned points (the training sample) are cut on the device: uploading them for
        // this alone would cost more than the CPU's cut.
        if !guard.resident.contains_key(&key)
            || lists.is_empty()
            || total >= u32::MAX as usize
            || (dim + SPLIT_CHUNK) * 4 > 48 << 10
        {
            drop(guard);
            return Ok(vlc::backend::split::split_checked_lists(
                points, dim, centers, lists,
            ));
        }
        let num_lists = lists.len();
        let (offsets, flat) = vlc::backend::split::flatten_lists(lists);
        // Chunks of SPLIT_CHUNK members, one block each: list l owns chunks
        // chunk_offsets[l] .. chunk_offsets[l + 1].
        let mut both = offsets.clone();
        let mut chunks = 0u32;
        both.push(0);
        for l in lists {
            chunks += l.len().div_ceil(SPLIT_CHUNK) as u32;
            both.push(chunks);
        }
        let num_chunks = chunks as usize;
        let State {
            resident,
            scratch,
            staging,
            ..
        } = &mut *guard;
        let x = &resident[&key].data;
        let d_members = self.put(&mut scratch.split_members, &flat)?;
        let d_both = self.put(&mut scratch.split_offsets, &both)?;
        let d_offsets = d_both.slice(0..num_lists + 1);
        let d_chunk_offsets = d_both.slice(num_lists + 1..2 * (num_lists + 1));
        let d_centers = self.put(&mut scratch.split_centers, centers)?;
        let side = self.grow(&mut scratch.split_side, total)?;
        let means = self.grow(&mut scratch.split_means, num_lists * 2 * dim)?;
        let counts = self.grow(&mut scratch.split_counts, num_lists * 2)?;
        let best_dist = self.grow(&mut scratch.split_best_dist, num_chunks)?;
        let best_index = self.grow(&mut scratch.split_best_index, num_chunks)?;
        let partial = self.grow(&mut scratch.split_partial, num_chunks * 2 * dim)?;
        let partial_counts = self.grow(&mut scratch.split_partial_counts, num_chunks * 2)?;
        let (d_i32, lists_i32) = (dim as i32, num_lists as i32);
        let per_chunk = |shared: usize| LaunchConfig {
            grid_dim: (num_chunks.max(1) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: shared as u32,
        };
        if num_chunks > 0 {
            // Both chunk kernels start with the same arguments.
            let (centers_arg, members_arg) = (&*d_centers, &*d_members);
            let (offsets_arg, chunks_arg) = (&d_offsets, &d_chunk_offsets);
            let (dim_arg, lists_arg) = (&d_i32, &lists_i32);
            let chunk_kernel = |kernel| {
                let mut launch = self.stream.launch_builder(kernel);
                launch
                    .arg(x)
                    .arg(dim_arg)
                    .arg(centers_arg)
                    .arg(offsets_arg)
                    .arg(chunks_arg)
                    .arg(lists_arg)
                    .arg(members_arg);
                launch
            };
            // SAFETY: one block of 256 threads per chunk: reads both offset tables
            // (num_lists + 1 each), the chunk's members (indices < num_points, checked by
            // check_split_args), their rows of x (num_points·dim) and the list's centre
            // (num_lists·dim); writes one distance and one index per chunk (num_chunks).
            unsafe {
                chunk_kernel(&self.kernels.split_far)
                    .arg(&mut *best_dist)
                    .arg(&mut *best_index)
                    .launch(per_chunk(0))
            }
            .map_err(err)?;
            // SAFETY: as above, plus the list's chunk results (num_chunks); dim floats and
            // SPLIT_CHUNK words of dynamic shared memory (at most 48 KiB, checked above);
            // writes one side per member of the chunk (total), 2·dim sums and 2 counts per
            // chunk (num_chunks).
            unsafe {
                chunk_kernel(&self.kernels.split_side)
                    .arg(&*best_dist)
                    .arg(&*best_index)
                    .arg(&mut *side)
                    .arg(&mut *partial)
                    .arg(&mut *partial_counts)
                    .launch(per_chunk(dim * 4 + SPLIT_CHUNK * 4))
            }
            .map_err(err)?;
        }
        let per_list = LaunchConfig {
            grid_dim: (num_lists as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: one block per list: reads both offset tables and its chunks' sums and counts
        // (num_chunks·2·dim and num_chunks·2); writes its 2·dim means and 2 counts.
        unsafe {
            self.stream
                .launch_builder(&self.kernels.split_means)
                .arg(&d_i32)
                .arg(&d_offsets)
                .arg(&d_chunk_offsets)
                .arg(&*partial)
                .arg(&*partial_counts)
                .arg(&mut *means)
                .arg(&mut *counts)
                .launch(per_list)
        }
        .map_err(err)?;
        let mut host_side = vec![0u32; total];
        let mut host_means = vec![0f32; num_lists * 2 * dim];
        let mut host_counts = vec![0u32; num_lists * 2];
        // All three queued, one wait.
        self.stage_reads(
            &mut staging.words,
            &[(side, total), (counts, num_lists * 2)],
        )?;
        self.stage_reads(&mut staging.floats, &[(means, host_means.len())])?;
        self.stream.synchronize().map_err(err)?;
        unstage(&mut staging.words, &mut [&mut host_side, &mut host_counts])?;
        unstage(&mut staging.floats, &mut [&mut host_means])?;
        Ok(vlc::backend::split::assemble_splits(
            lists,
            &offsets,
            &host_side,
            &host_means,
            &host_counts,
            dim,
        ))
    }

    fn trimmed_thresholds(
        &self,
        nearest: &Nearest,
        num_anchors: usize,
        trim: f32,
    ) -> Result<Vec<f32>> {
        check_threshold_args(nearest, num_anchors, trim)?;
        let num_points = nearest.ids.len();
        let mut guard = self.state.lock().unwrap();
        let on_device = nearest.resident.is_some()
            && guard.nearest_on_device == nearest.resident.map(|g| (g, num_points));
        if !on_device || num_points >= u32::MAX as usize {
            drop(guard);
            return Ok(vlc::backend::trimmed_thresholds(
                &nearest.ids,
                &nearest.dists,
                num_anchors,
                trim,
            ));
        }
        let generation = nearest.resident.unwrap_or_default();
        let State {
            scratch, selected, ..
        } = &mut *guard;
        // The grouping below replaces the one a previous selection left.
        *selected = None;
        let (Some(ids), Some(dists)) = (scratch.ids.as_ref(), scratch.dists.as_ref()) else {
            return Err(err("no assignment on the device"));
        };
        // Every member grouped by anchor: the accumulation's count, scan and scatter with
        // every threshold +inf.
        if scratch
            .infinite
            .as_ref()
            .is_none_or(|b| b.len() < num_anchors)
        {
            self.put(&mut scratch.infinite, &vec![f32::INFINITY; num_anchors])?;
        }
        let all = scratch.infinite.as_ref().unwrap();
        self.group_kept(
            (ids, dists, all),
            num_points,
            num_anchors,
            &mut scratch.member_counts,
            &mut scratch.kept,
            &mut scratch.offsets,
            &mut scratch.cursor,
            &mut scratch.members,
        )?;
        let d_thr = self.grow(&mut scratch.thresholds, num_anchors)?;
        let kept_members = self.grow(&mut scratch.kept_members, num_points)?;
        let (Some(offsets), Some(members), Some(kept)) = (
            scratch.offsets.as_ref(),
            scratch.members.as_ref(),
            scratch.kept.as_mut(),
        ) else {
            return Err(err("grouping buffers missing"));
        };
        let per_anchor = LaunchConfig {
            grid_dim: (num_anchors as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: one block of 256 threads (a power of two, as the kernel needs) per anchor:
        // reads offsets (num_anchors + 1), the members in its range (< num_points) and their
        // distances; writes one threshold and one kept count per anchor into d_thr and kept
        // (num_anchors each) and the kept members within its own range of kept_members
        // (num_points).
        unsafe {
            self.stream
                .launch_builder(&self.kernels.select_thresholds)
                .arg(dists)
                .arg(offsets)
                .arg(members)
                .arg(&trim)
                .arg(&mut *d_thr)
                .arg(kept)
                .arg(&mut *kept_members)
                .launch(per_anchor)
        }
        .map_err(err)?;
        let thresholds = self.get(d_thr, num_anchors)?;
        *selected = Some((generation, thresholds.clone()));
        Ok(thresholds)
    }

    fn offers_code_levels(&self) -> bool {
        self.encode_levels
    }

    /// Eight threads per row on the device, the rows in chunks of about
    /// 256 MiB of device memory; the rows the kernel flags (a search deeper than its stack, a
    /// leaf of many equal magnitudes) are computed by the CPU reference.
    fn code_levels(&self, vectors: &[f32], caps: &[u32], out: &mut [u16]) -> Result<bool> {
        let rows = check_code_levels_args(vectors, caps, out)?;
        if !self.encode_levels {
            return Ok(false);
        }
        let dim = caps.len();
        if rows == 0 {
            return Ok(true);
        }
        // A codec calls this from a thread of its own, which may not have the context yet.
        self.ctx.bind_to_thread().map_err(err)?;
        let levels_fn = self.levels_kernel()?;
        let capf: Vec<f32> = caps.iter().map(|&c| c as f32).collect();
        // A chunk's rows and levels; its threads (8 per row) fit the launch's u32 grid.
        let per_row = dim * (4 + 2) + 1;
        let chunk = (LEVELS_CHUNK_BYTES / per_row).clamp(1, 1 << 28).min(rows);
        let mut guard = self.state.lock().unwrap();
        let LevelBuffers {
            caps: d_caps,
            rows: d_rows,
            levels: d_levels,
            flags: d_flags,
            staging,
        } = &mut guard.encode;
        let d_caps = &*self.put(d_caps, &capf)?;
        let d_rows = self.grow(d_rows, chunk * dim)?;
        let d_levels = self.grow(d_levels, chunk * dim)?;
        let d_flags = self.grow(d_flags, chunk)?;
        let mut flagged = Vec::new();
        for first in (0..rows).step_by(chunk) {
            let n = chunk.min(rows - first);
            let t_chunk = std::time::Instant::now();
            self.stream
                .memcpy_htod(
                    &vectors[first * dim..(first + n) * dim],
                    &mut d_rows.slice_mut(0..n * dim),
                )
                .map_err(err)?;
            let (n32, dim32) = (n as u32, dim as u32);
            let threads = 128usize;
            let config = LaunchConfig {
                grid_dim: ((n * 8).div_ceil(threads) as u32, 1, 1),
                block_dim: (threads as u32, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: eight threads per row (< n, checked in the kernel; 128 threads a block, a
            // multiple of 8): each group reads its row of d_rows (n, dim) and d_caps (dim,),
            // writes its row of d_levels (n, dim) and its flag in d_flags (n,); every buffer
            // holds at least that (chunk ≥ n rows).
            unsafe {
                self.stream
                    .launch_builder(&levels_fn)
                    .arg(&*d_rows)
                    .arg(d_caps)
                    .arg(&n32)
                    .arg(&dim32)
                    .arg(&mut *d_levels)
                    .arg(&mut *d_flags)
                    .launch(config)
            }
            .map_err(err)?;
            let t_kernel = if self.trace {
                self.stream.synchronize().map_err(err)?;
                t_chunk.elapsed().as_secs_f64() * 1e3
            } else {
                0.0
            };
            self.get_into(staging, d_levels, &mut out[first * dim..(first + n) * dim])?;
            let flags = self.get(d_flags, n)?;
            flagged.extend((0..n).filter(|&r| flags[r] != 0).map(|r| first + r));
            if self.trace {
                eprintln!(
                    "code_levels: {n} rows in {:.1} ms ({t_kernel:.1} ms to the kernel's end), {} flagged",
                    t_chunk.elapsed().as_secs_f64() * 1e3,
                    flags.iter().filter(|&&f| f != 0).count()
                );
            }
        }
        drop(guard);
        for r in flagged {
            vlc::codec::levels::code_levels(
                &vectors[r * dim..(r + 1) * dim],
                caps,
                &mut out[r * dim..(r + 1) * dim],
            );
        }
        Ok(true)
    }

    fn update(&self, anchors: &mut [f32], dim: usize, sums: &AnchorSums, step: f32) -> Result<()> {
        let num_anchors = check_update_args(anchors, dim, sums)?;
        let mut guard = self.state.lock().unwrap();
        let State {
            scratch,
            staging,
            selected,
            ..
        } = &mut *guard;
        // The kept counts below replace those of a selection's grouping.
        *selected = None;
        self.put_anchors(&mut scratch.anchors, &mut scratch.anchors_mirror, anchors)?;
        self.put(&mut scratch.sums, &sums.sums)?;
        self.put(&mut scratch.kept, &sums.kept)?;
        self.update_on_device(scratch, num_anchors, dim, step)?;
        self.get_into(
            &mut staging.floats,
            scratch.anchors.as_ref().unwrap(),
            anchors,
        )?;
        mirror_anchors(&mut scratch.anchors_mirror, anchors);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn movers_are_the_few_anchors_that_moved_far() {
        // 64 anchors moving about 0.1, three teleported (as a merge or split does).
        let mut drifts: Vec<f32> = (0..64).map(|i| 0.1 + 0.001 * i as f32).collect();
        drifts[5] = 7.0;
        drifts[40] = 3.0;
        drifts[17] = 5.0;
        let (movers, stable) = pick_movers(&drifts);
        assert_eq!(movers, vec![5, 17, 40]);
        // The largest move of the rest: anchor 63's.
        assert_eq!(stable, drifts[63]);
    }

    #[test]
    fn smooth_moves_have_no_movers() {
        let drifts: Vec<f32> = (0..256).map(|i| 1.0 + (i % 7) as f32 * 0.1).collect();
        let (movers, stable) = pick_movers(&drifts);
        assert!(movers.is_empty());
        assert_eq!(stable, 1.6);
    }

    #[test]
    fn too_many_movers_are_none() {
        // A third of the anchors moved far: more than a quarter, so the bound takes the
        // largest move.
        let drifts: Vec<f32> = (0..64)
            .map(|i| if i % 3 == 0 { 9.0 } else { 0.1 })
            .collect();
        let (movers, stable) = pick_movers(&drifts);
        assert!(movers.is_empty());
        assert_eq!(stable, 9.0);
        assert_eq!(pick_movers(&[]), (Vec::new(), 0.0));
        assert_eq!(pick_movers(&[0.5, 4.0]), (Vec::new(), 4.0));
    }

    #[test]
    fn host_compare_and_copy_agree_across_the_parallel_threshold() {
        for len in [
            0,
            1,
            7,
            PARALLEL_FLOATS,
            PARALLEL_FLOATS + 1,
            3 * PARALLEL_FLOATS + 5,
        ] {
            let a: Vec<f32> = (0..len).map(|i| i as f32 * 0.5).collect();
            let mut b = vec![0f32; len];
            copy_large(&mut b, &a);
            assert!(same_bits(&a, &b));
            if len > 0 {
                b[len - 1] = -1.0;
                assert!(!same_bits(&a, &b));
            }
            assert!(!same_bits(&a, &b[..len.saturating_sub(1)]) || len == 0);
        }
        // -0.0 and 0.0 compare equal as floats but not as bits: an upload must not be skipped.
        assert!(!same_bits(&[0.0], &[-0.0]));
    }
}
