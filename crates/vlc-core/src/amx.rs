//! Integer anchor ranking against 8-bit (or 4-bit) anchors: on Intel AMX (Advanced Matrix
//! Extensions, Xeon "Sapphire Rapids" and later), or else on AVX-512 VNNI (Intel Ice Lake and
//! later, AMD Zen 4 and later), which computes the same integer sums 16 anchors at a time, or
//! else on AVX-VNNI (the same instruction on 256-bit registers: Intel's client CPUs from Alder
//! Lake, which have no AVX-512), 8 anchors at a time. A search of one query ranks on them
//! too, and on CPUs with AVX2 but no VNNI on an AVX2 kernel of the same sums
//! ([`few_rows_kernel`]): one query's ranking waits on reading the anchors, a quarter of f32's
//! bytes here. On those CPUs a batch ranks in two passes ([`two_pass_available`]): every
//! anchor on a coarser one-piece query ([`coarse_dots`]), then the anchors that its error
//! bound leaves near each query's cut-off on the same sums as the AVX2 kernel ([`dots_of`]),
//! which picks what ranking every anchor on that kernel would.
//!
//! An index stores its anchors as 8 bits by default: each anchor row is `scale · q` with
//! integers `q` in −127..=127 (−7..=7 for 4-bit anchors; see [`crate::anchor_store`]). Such rows are exact in int8, so
//! `x · c = scale · (x · q)` can run on AMX's int8 tile product (`TDPBSSD`) once the query is
//! in integers too. The query is split into two int8 pieces, `x ≈ s (X₁ + X₂ / 254)` with
//! `s = max |x| / 127`, which leaves an error of at most `max |x| / 64516` per value
//! ([`RANKING_ROUNDING`] bounds what that does to a ranking). Each piece is multiplied exactly
//! in int32; the two are combined in f32.
//!
//! Detected once ([`available`]): for AMX the CPU must report AMX-TILE and AMX-INT8, the OS must
//! enable the tile state, and Linux must grant it to the process
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM)`); for VNNI the CPU must report AVX-512F, BW and VNNI, for
//! AVX-VNNI AVX2 and AVX-VNNI. A small product is then checked against the exact result.
//! `VLC_NO_AMX=1` turns AMX off, `VLC_NO_VNNI=1` both VNNI kernels (`VLC_NO_AVX512=1` the
//! AVX-512 one), `VLC_NO_AVX2_INT8=1` the AVX2 one. All four give the same integer sums and
//! combine them with the same f32 operations, so their results are identical.
//! Anchors that are not in 8-bit or 4-bit form (f16 or f32 storage, training) keep the f32
//! GEMM.

use std::sync::{Arc, LazyLock, Mutex};

/// Bytes per tile row (64 int8 values along k) and rows per tile.
const TILE_K: usize = 64;
const TILE_ROWS: usize = 16;
/// Longest rows ranked on tiles: 127 · 127 · 131,072 < 2³¹, so no int32 sum overflows.
pub const MAX_DIM: usize = 131_072;
/// Weight of the second query piece: `X₂` counts 1/254 of a unit of `X₁`.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // read only by the x86-64 kernel
const LOW_WEIGHT: f32 = 254.0;

/// Relative rounding of the split query's products, in the terms of
/// [`crate::Backend::ranking_rounding`]: 2⁻¹², a margin over the 2⁻¹⁶ · max |x| per value of
/// the split summed over typical dimensions.
pub const RANKING_ROUNDING: f32 = 1.0 / 4096.0;

/// The integer kernel [`dots`] runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// AMX tiles (`TDPBSSD`), 16 queries by 32 anchors per step.
    Amx,
    /// AVX-512 VNNI (`VPDPBUSD`), 4 queries by 32 anchors per step.
    Vnni,
    /// AVX-VNNI (the same instruction on 256-bit registers, VEX-encoded: Intel Alder Lake and
    /// later client CPUs, which have no AVX-512), 3 queries by 16 anchors per step.
    AvxVnni,
    /// AVX2 without VNNI (AMD Zen 1 to 3, Intel Haswell to Comet Lake): the same sums in four
    /// instructions where VNNI takes one, so it ranks only fewer than 16 rows at a time (one
    /// query's search), where reading 8-bit anchors instead of f32 is what counts; batches
    /// rank in two passes there ([`two_pass_available`]). Never [`kernel`].
    Avx2,
}

static SUPPORTED: LazyLock<bool> = LazyLock::new(supported_here);
static VNNI_SUPPORTED: LazyLock<bool> = LazyLock::new(vnni_supported_here);
static AVX_VNNI_SUPPORTED: LazyLock<bool> = LazyLock::new(avx_vnni_supported_here);
static KERNEL: LazyLock<Option<Kernel>> = LazyLock::new(|| {
    if *SUPPORTED && self_check(Kernel::Amx) {
        Some(Kernel::Amx)
    } else if *VNNI_SUPPORTED && self_check(Kernel::Vnni) {
        Some(Kernel::Vnni)
    } else if *AVX_VNNI_SUPPORTED && self_check(Kernel::AvxVnni) {
        Some(Kernel::AvxVnni)
    } else {
        None
    }
});

static AVX2_SUPPORTED: LazyLock<bool> = LazyLock::new(avx2_supported_here);

/// The kernel of fewer than 16 rows ([`few_rows_kernel`]). Where AMX is the kernel, a tile
/// step multiplies 16 query rows whether or not they are there, so fewer rows (a search of one
/// query) go to a VNNI kernel when one passed its self-check too (the same bits). Where no
/// kernel is, the AVX2 one ranks them.
static FEW_ROWS_KERNEL: LazyLock<Option<Kernel>> = LazyLock::new(|| match *KERNEL {
    Some(Kernel::Amx) if *VNNI_SUPPORTED && self_check(Kernel::Vnni) => Some(Kernel::Vnni),
    Some(Kernel::Amx) if *AVX_VNNI_SUPPORTED && self_check(Kernel::AvxVnni) => {
        Some(Kernel::AvxVnni)
    }
    None if *AVX2_SUPPORTED && self_check(Kernel::Avx2) => Some(Kernel::Avx2),
    kernel => kernel,
});

/// The kernel [`dots`] runs fewer than 16 rows on, when one runs: [`kernel`], or a VNNI kernel
/// beside AMX, or the AVX2 kernel on AVX2 CPUs without VNNI (`VLC_NO_AVX2_INT8=1` turns that
/// one off).
pub fn few_rows_kernel() -> Option<Kernel> {
    *FEW_ROWS_KERNEL
}

/// Whether the CPU offers AVX2 (and `VLC_NO_AVX2_INT8` is not set), before the self-check.
pub fn avx2_supported() -> bool {
    *AVX2_SUPPORTED
}

#[cfg(target_arch = "x86_64")]
fn avx2_supported_here() -> bool {
    std::env::var_os("VLC_NO_AVX2_INT8").is_none()
        && crate::simd::level() == crate::simd::SimdLevel::Avx2
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_supported_here() -> bool {
    false
}

/// Whether [`dots`] runs for any number of rows (a batch's ranking on the CPU backend): AMX,
/// AVX-512 VNNI or AVX-VNNI is supported and its self-check passed
/// (detected once, in that order of preference; `VLC_NO_AMX=1` disables AMX, `VLC_NO_VNNI=1`
/// both VNNI kernels, and `VLC_NO_AVX512=1`, which turns off every AVX-512 kernel, the AVX-512
/// VNNI one).
pub fn available() -> bool {
    KERNEL.is_some()
}

/// The kernel [`dots`] runs on, when it runs.
pub fn kernel() -> Option<Kernel> {
    *KERNEL
}

/// Whether the CPU and OS offer AMX-TILE and AMX-INT8 to this process (and `VLC_NO_AMX` is not
/// set), before the self-check. Where this holds and the AMX kernel is not chosen, the kernel is
/// wrong on this machine (the tests fail on that).
pub fn supported() -> bool {
    *SUPPORTED
}

/// Whether the CPU offers AVX-512F, BW and VNNI (and `VLC_NO_VNNI` is not set), before the
/// self-check.
pub fn vnni_supported() -> bool {
    *VNNI_SUPPORTED
}

#[cfg(target_arch = "x86_64")]
fn vnni_supported_here() -> bool {
    std::env::var_os("VLC_NO_VNNI").is_none()
        && crate::simd::has_avx512()
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vnni")
}

#[cfg(not(target_arch = "x86_64"))]
fn vnni_supported_here() -> bool {
    false
}

/// Whether the CPU offers AVX2 and AVX-VNNI (and `VLC_NO_VNNI` is not set), before the
/// self-check.
pub fn avx_vnni_supported() -> bool {
    *AVX_VNNI_SUPPORTED
}

#[cfg(target_arch = "x86_64")]
fn avx_vnni_supported_here() -> bool {
    std::env::var_os("VLC_NO_VNNI").is_none()
        && crate::simd::level() == crate::simd::SimdLevel::Avx2
        && is_x86_feature_detected!("avxvnni")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx_vnni_supported_here() -> bool {
    false
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn supported_here() -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    if std::env::var_os("VLC_NO_AMX").is_some()
        || crate::simd::level() != crate::simd::SimdLevel::Avx2
    {
        return false;
    }
    // CPUID.1:ECX.OSXSAVE (bit 27); CPUID.(7,0):EDX AMX-TILE (bit 24) and AMX-INT8 (bit 25).
    if __cpuid(1).ecx >> 27 & 1 == 0 || __cpuid(0).eax < 7 {
        return false;
    }
    let edx = __cpuid_count(7, 0).edx;
    if edx >> 24 & 1 == 0 || edx >> 25 & 1 == 0 {
        return false;
    }
    let (xcr0_low, _high): (u32, u32);
    // SAFETY: OSXSAVE is set (checked above), so XGETBV exists; it only reads XCR0.
    unsafe {
        std::arch::asm!("xgetbv", in("ecx") 0, out("eax") xcr0_low, out("edx") _high,
            options(nomem, nostack, preserves_flags))
    };
    // XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA): the OS saves the tile state.
    if xcr0_low >> 17 & 3 != 3 {
        return false;
    }
    let granted: i64;
    // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18) asks the kernel
    // to let this process use the AMX tile data; it touches no user memory.
    unsafe {
        std::arch::asm!("syscall",
            inlateout("rax") 158i64 => granted,
            in("rdi") 0x1023i64,
            in("rsi") 18i64,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack))
    };
    granted == 0
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn supported_here() -> bool {
    false
}

/// No integer kernel runs off x86-64.
#[cfg(not(target_arch = "x86_64"))]
fn self_check(_: Kernel) -> bool {
    false
}

/// Run a small product through `kernel` and compare it with the f64 result.
#[cfg(target_arch = "x86_64")]
fn self_check(kernel: Kernel) -> bool {
    let (m, n, k) = (17, 35, 70);
    let a: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.37)
        .collect();
    // 8-bit rows: 0.01 times integers, each row reaching 127 (so its scale is 0.01).
    let b: Vec<f32> = (0..n * k)
        .map(|i| {
            let q = if i % k == 0 {
                127
            } else {
                (i * 5 % 255) as i32 - 127
            };
            0.01 * q as f32
        })
        .collect();
    let Some(packed) = PackedAnchors::new(&b, n, k) else {
        return false;
    };
    let mut out = Vec::new();
    // SAFETY: the caller checked the CPU (and for AMX the OS and the permission) for `kernel`.
    unsafe { dots_with(kernel, &a, m, &packed, &mut out) };
    (0..m).all(|i| {
        (0..n).all(|j| {
            let want: f64 = (0..k)
                .map(|t| a[i * k + t] as f64 * b[j * k + t] as f64)
                .sum();
            (out[i * packed.stride() + j] as f64 - want).abs() <= 1e-3 * (1.0 + want.abs())
        })
    })
}

/// Row `v` as `scale · q` with integers `q` in −127..=127 (written to `levels`), when `v` is
/// such a row to within 2⁻²⁰ of each value: what 8-bit and 4-bit anchors decode to.
fn integer_levels(v: &[f32], levels: &mut [i8]) -> Option<f32> {
    // The levels the anchor store would write for `v`; the row is in 8-bit form when they
    // give its values back.
    let (scale, q) = crate::anchor_store::quantize_row(v);
    if fill_levels(v, scale, q, levels) {
        return Some(scale);
    }
    // A 4-bit row: its largest value is 7 steps (or it would not have been clipped to them),
    // which 8-bit levels of `max / 127` do not reproduce.
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    let scale = max / 7.0;
    let inverse = if scale > 0.0 { 1.0 / scale } else { 0.0 };
    let q = v
        .iter()
        .map(|x| (x * inverse).round().clamp(-7.0, 7.0) as i8);
    fill_levels(v, scale, q, levels).then_some(scale)
}

/// Write `q` to `levels` when `scale · q` gives every value of `v` back to within 2⁻²⁰.
fn fill_levels(v: &[f32], scale: f32, q: impl Iterator<Item = i8>, levels: &mut [i8]) -> bool {
    for ((level, q), &x) in levels.iter_mut().zip(q).zip(v) {
        if (x - scale * q as f32).abs() > x.abs() * (1.0 / 1_048_576.0) {
            return false;
        }
        *level = q;
    }
    true
}

/// Anchors in 8-bit (or 4-bit) form laid out in AMX tiles for [`dots`].
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // tiles are read only on x86-64
pub struct PackedAnchors {
    rows: usize,
    /// Rows rounded up to 32 (two tiles of 16).
    padded_rows: usize,
    dim: usize,
    /// Tile steps along k: ⌈dim / 64⌉.
    steps: usize,
    /// Per-row scales. Layout: (padded_rows,), zero past `rows`.
    scales: Vec<f32>,
    /// Per-row sums of the levels, for the VNNI kernels' unsigned query bytes. Layout:
    /// (padded_rows,), zero past `rows`.
    level_sums: Vec<i32>,
    /// Layout: (padded_rows / 16, steps, 16, 64) int8. Tile (g, s), row r holds, for the 16
    /// rows j of group g in turn, the 4 levels 64·s + 4r .. 64·s + 4r + 4 of row j
    /// (zero-padded): the 4-way interleaved B layout of `TDPBSSD`.
    tiles: Vec<i8>,
    /// The levels again, one row after another, for measuring a few anchors of one query
    /// ([`dots_of`]); unpacked from `tiles` at the first such call, so machines that never
    /// rank in two passes do not hold them twice. Layout: (rows, steps · 64) int8, zero past
    /// each row's k values.
    row_levels: std::sync::OnceLock<Vec<i8>>,
    /// Per row, `scale · Σ |levels|`: how far its product can move per unit of error in each
    /// query value ([`coarse_dots`]). Layout: (rows,).
    level_norms1: Vec<f32>,
}

impl std::fmt::Debug for PackedAnchors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedAnchors")
            .field("rows", &self.rows)
            .field("dim", &self.dim)
            .finish_non_exhaustive()
    }
}

impl PackedAnchors {
    /// Pack `b` (n, k), row-major, when every row is in 8-bit or 4-bit form; `None` otherwise, and for
    /// k beyond [`MAX_DIM`] (where int32 sums of 127 x 127 products could overflow).
    pub fn new(b: &[f32], n: usize, k: usize) -> Option<PackedAnchors> {
        assert!(b.len() >= n * k);
        if k > MAX_DIM {
            return None;
        }
        let mut packed = Self::zeroed(n, k);
        let mut levels = vec![0i8; packed.steps * TILE_K];
        for j in 0..n {
            let scale = integer_levels(&b[j * k..(j + 1) * k], &mut levels[..k])?;
            packed.scales[j] = scale;
            packed.level_sums[j] = levels[..k].iter().map(|&l| l as i32).sum();
            let norm1: i64 = levels[..k].iter().map(|&l| (l as i64).abs()).sum();
            packed.level_norms1[j] = scale * norm1 as f32;
            for s in 0..packed.steps {
                for r in 0..TILE_ROWS {
                    let at = packed.tile_place(j, s, r);
                    packed.tiles[at..at + 4]
                        .copy_from_slice(&levels[s * TILE_K + 4 * r..s * TILE_K + 4 * r + 4]);
                }
            }
        }
        Some(packed)
    }

    /// The packing of the anchors `rows` of this one (each below [`PackedAnchors::rows`]), in
    /// that order: their levels and scales copied, so each anchor's products are the ones this
    /// packing gives, and the result is what [`PackedAnchors::new`] makes of those rows.
    pub fn select_rows(&self, rows: &[u32]) -> PackedAnchors {
        let mut packed = Self::zeroed(rows.len(), self.dim);
        for (j, &from) in rows.iter().enumerate() {
            let from = from as usize;
            assert!(from < self.rows, "row {from} of {} packed", self.rows);
            packed.scales[j] = self.scales[from];
            packed.level_sums[j] = self.level_sums[from];
            packed.level_norms1[j] = self.level_norms1[from];
            for s in 0..self.steps {
                for r in 0..TILE_ROWS {
                    let (to, at) = (packed.tile_place(j, s, r), self.tile_place(from, s, r));
                    packed.tiles[to..to + 4].copy_from_slice(&self.tiles[at..at + 4]);
                }
            }
        }
        packed
    }

    /// A packing of `n` rows of `k` values whose levels, scales and sums are all zero, to be
    /// filled row by row.
    fn zeroed(n: usize, k: usize) -> PackedAnchors {
        let steps = k.div_ceil(TILE_K);
        let padded_rows = n.div_ceil(2 * TILE_ROWS) * 2 * TILE_ROWS;
        PackedAnchors {
            rows: n,
            padded_rows,
            dim: k,
            steps,
            scales: vec![0f32; padded_rows],
            level_sums: vec![0i32; padded_rows],
            tiles: vec![0i8; padded_rows * steps * TILE_K],
            row_levels: std::sync::OnceLock::new(),
            level_norms1: vec![0f32; n],
        }
    }

    /// Where in `tiles` row `j`'s 4 levels `64·s + 4r .. 64·s + 4r + 4` lie (see the field).
    #[inline]
    fn tile_place(&self, j: usize, s: usize, r: usize) -> usize {
        let (g, col) = (j / TILE_ROWS, j % TILE_ROWS);
        ((g * self.steps + s) * TILE_ROWS + r) * TILE_K + 4 * col
    }

    /// Row stride of [`dots`]' output: the anchors rounded up to 32.
    pub fn stride(&self) -> usize {
        self.padded_rows
    }

    /// Number of anchors.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The `row_levels` field: the levels row by row, unpacked from the tiles at the first call.
    fn row_levels(&self) -> &[i8] {
        self.row_levels.get_or_init(|| {
            let row_len = self.steps * TILE_K;
            let mut rows = vec![0i8; self.rows * row_len];
            for (j, row) in rows.chunks_exact_mut(row_len).enumerate() {
                for s in 0..self.steps {
                    for r in 0..TILE_ROWS {
                        let (to, at) = (s * TILE_K + 4 * r, self.tile_place(j, s, r));
                        row[to..to + 4].copy_from_slice(&self.tiles[at..at + 4]);
                    }
                }
            }
            rows
        })
    }

    /// Per anchor, `scale · Σ |levels|` (its values' absolute sum, up to f32 rounding): the
    /// factor of [`coarse_dots`]' error bound. Layout: (rows,).
    pub fn level_norms1(&self) -> &[f32] {
        &self.level_norms1
    }
}

/// A 64-bit content hash: FNV-1a over 64-bit words in four independent lanes (so the
/// multiplications overlap), then the lanes folded together.
fn content_hash(values: &[f32]) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut lanes = [0xcbf2_9ce4_8422_2325u64; 4];
    let mut blocks = values.chunks_exact(8);
    for b in &mut blocks {
        for (l, lane) in lanes.iter_mut().enumerate() {
            let word = (b[2 * l].to_bits() as u64) << 32 | b[2 * l + 1].to_bits() as u64;
            *lane = (*lane ^ word).wrapping_mul(PRIME);
        }
    }
    let mut h = lanes[0];
    for &lane in &lanes[1..] {
        h = (h ^ lane).wrapping_mul(PRIME);
    }
    for &v in blocks.remainder() {
        h = (h ^ v.to_bits() as u64).wrapping_mul(PRIME);
    }
    h ^ values.len() as u64
}

/// The last anchors packed, keyed by shape and content: (n, k, hash, result).
type Cached = (usize, usize, u64, Option<Arc<PackedAnchors>>);
static CACHE: Mutex<Option<Cached>> = Mutex::new(None);

/// [`PackedAnchors::new`] for `anchors` (n, k), reusing the last result when the same anchors
/// come again (search passes an index's anchors on every batch; packing costs milliseconds,
/// the hash a small fraction of that).
pub fn packed_anchors(anchors: &[f32], n: usize, k: usize) -> Option<Arc<PackedAnchors>> {
    let hash = content_hash(&anchors[..n * k]);
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((cn, ck, ch, result)) = cache.as_ref() {
        if (*cn, *ck, *ch) == (n, k, hash) {
            return result.clone();
        }
    }
    let result = PackedAnchors::new(anchors, n, k).map(Arc::new);
    *cache = Some((n, k, hash, result.clone()));
    result
}

/// `out = a · bᵀ` for `a` (m, k) row-major (finite values) and packed 8-bit anchors `b`, on
/// [`kernel`] (fewer than 16 rows on [`few_rows_kernel`]);
/// `out` is resized to (m, `b.stride()`) on the VNNI and AVX2 kernels and (⌈m/16⌉·16,
/// `b.stride()`) on AMX's tiles, row-major, and entry (i, j) for i < m, j < `b.rows()` holds the product.
/// Panics when no integer kernel runs for m rows ([`available`], or [`few_rows_kernel`] for
/// fewer than 16).
pub fn dots(a: &[f32], m: usize, b: &PackedAnchors, out: &mut Vec<f32>) {
    let kernel = if m < TILE_ROWS {
        few_rows_kernel()
    } else {
        kernel()
    };
    let kernel = kernel.expect("no integer kernel (AMX, AVX-512 VNNI, AVX-VNNI, AVX2) runs here");
    assert!(a.len() >= m * b.dim);
    // SAFETY: the kernel was detected (for AMX, enabled by the OS and granted to this process).
    unsafe { dots_with(kernel, a, m, b, out) }
}

/// [`dots`] on a chosen kernel (tests compare the kernels that run here).
///
/// # Safety
/// The CPU must offer `kernel` (see [`supported`], [`vnni_supported`] and
/// [`avx_vnni_supported`]); `a` holds m rows.
unsafe fn dots_with(kernel: Kernel, a: &[f32], m: usize, b: &PackedAnchors, out: &mut Vec<f32>) {
    // SAFETY: passed on from the caller.
    unsafe {
        match kernel {
            Kernel::Amx => dots_unchecked(a, m, b, out),
            Kernel::Vnni => dots_vnni(a, m, b, out),
            Kernel::AvxVnni => dots_avx_vnni(a, m, b, out),
            Kernel::Avx2 => dots_avx2(a, m, b, out),
        }
    }
}

/// The buffers of a [`SplitQueries`]: `high`, `low` and `scales`.
#[cfg(target_arch = "x86_64")]
type SplitBuffers = (Vec<i8>, Vec<i8>, Vec<f32>);

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// The buffers of this thread's last [`SplitQueries`] of one tile of rows (at most
    /// [`TILE_ROWS`] queries), kept for its next: a search of one query at a time then splits
    /// each query without allocating.
    static SPLIT_BUFFERS: std::cell::Cell<Option<SplitBuffers>> =
        const { std::cell::Cell::new(None) };
}

/// The query rows of [`dots`] split for the integer kernels, `x ≈ s (high + low / 254)`.
#[cfg(target_arch = "x86_64")]
struct SplitQueries {
    /// Layout: (⌈m/16⌉·16, `row_len`) int8, zero past each row's k values and past row m.
    high: Vec<i8>,
    /// Layout: as `high`.
    low: Vec<i8>,
    /// Each row's `s`. Layout: (⌈m/16⌉·16,), zero past row m.
    scales: Vec<f32>,
    /// Bytes per row: the anchors' tile steps times 64.
    row_len: usize,
}

#[cfg(target_arch = "x86_64")]
impl SplitQueries {
    /// Split the m rows of `a` (m, k) with `split(row, high, low)`, which writes one row's
    /// pieces and returns its scale ([`split_query`] or [`split_query_scalar`]).
    fn new(
        a: &[f32],
        m: usize,
        b: &PackedAnchors,
        mut split: impl FnMut(&[f32], &mut [i8], &mut [i8]) -> f32,
    ) -> SplitQueries {
        let (k, row_len) = (b.dim, b.steps * TILE_K);
        let padded_m = m.div_ceil(TILE_ROWS) * TILE_ROWS;
        let (mut high, mut low, mut scales) = if padded_m == TILE_ROWS {
            SPLIT_BUFFERS
                .try_with(|kept| kept.take())
                .ok()
                .flatten()
                .unwrap_or_default()
        } else {
            Default::default()
        };
        for (buffer, len) in [
            (&mut high, padded_m * row_len),
            (&mut low, padded_m * row_len),
        ] {
            buffer.clear();
            buffer.resize(len, 0);
        }
        scales.clear();
        scales.resize(padded_m, 0.0);
        for i in 0..m {
            scales[i] = split(
                &a[i * k..(i + 1) * k],
                &mut high[i * row_len..(i + 1) * row_len],
                &mut low[i * row_len..(i + 1) * row_len],
            );
        }
        SplitQueries {
            high,
            low,
            scales,
            row_len,
        }
    }

    /// The pieces as unsigned bytes `x + 128`, what `VPDPBUSD` multiplies (x + 128 as a byte
    /// is x with its top bit flipped).
    fn into_unsigned(mut self) -> SplitQueries {
        for v in self.high.iter_mut().chain(self.low.iter_mut()) {
            *v ^= i8::MIN;
        }
        self
    }
}

#[cfg(target_arch = "x86_64")]
impl Drop for SplitQueries {
    /// Keeps one tile's buffers for the thread's next split ([`SPLIT_BUFFERS`]).
    fn drop(&mut self) {
        if self.scales.len() == TILE_ROWS {
            let buffers = (
                std::mem::take(&mut self.high),
                std::mem::take(&mut self.low),
                std::mem::take(&mut self.scales),
            );
            // Dropped while the thread is being torn down, the buffers are just freed.
            let _ = SPLIT_BUFFERS.try_with(|kept| kept.set(Some(buffers)));
        }
    }
}

/// Write 16 products of one query row: `(high + low / 254) · s · scale` per anchor, from the
/// int32 sums of the two query pieces, to `out` (16 values). The AMX and AVX-512 VNNI kernels
/// combine through this and the AVX-VNNI kernel with the same operations on 8 lanes, which is
/// what makes their results identical.
///
/// # Safety
/// AVX-512F must be available; `scales` and `out` hold at least 16 values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn combine(
    high: std::arch::x86_64::__m512i,
    low: std::arch::x86_64::__m512i,
    query_scale: f32,
    scales: *const f32,
    out: *mut f32,
) {
    use std::arch::x86_64::*;
    let sum = _mm512_add_ps(
        _mm512_cvtepi32_ps(high),
        _mm512_mul_ps(_mm512_cvtepi32_ps(low), _mm512_set1_ps(1.0 / LOW_WEIGHT)),
    );
    // SAFETY: the caller guarantees 16 values at `scales` and at `out`.
    unsafe {
        let scales = _mm512_loadu_ps(scales);
        _mm512_storeu_ps(
            out,
            _mm512_mul_ps(sum, _mm512_mul_ps(_mm512_set1_ps(query_scale), scales)),
        );
    }
}

/// Queries per step of the VNNI kernel: 4 queries x 2 pieces x 2 groups of 16 anchors are 16
/// accumulators, which with the two anchor rows and the broadcasts fit the 32 registers.
#[cfg(target_arch = "x86_64")]
const VNNI_QUERIES: usize = 4;

/// The VNNI kernel: the same integer sums as the tiles, 16 anchors per register. `VPDPBUSD`
/// multiplies unsigned by signed bytes, so the query pieces go in as `x + 128` (in 1..=255)
/// and `128 · Σ levels` of each anchor comes off the sum.
///
/// # Safety
/// AVX-512F, BW and VNNI must be available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn dots_vnni(a: &[f32], m: usize, b: &PackedAnchors, out: &mut Vec<f32>) {
    // SAFETY: AVX-512F/BW are enabled for this function; the rows hold k <= row_len values.
    let queries = SplitQueries::new(a, m, b, |x, h, l| unsafe { split_query(x, h, l) });
    let queries = queries.into_unsigned();
    // Only the m rows asked for, not the tiles' padding rows: a single query (a search one at
    // a time) costs one pass over the anchors, not sixteen.
    in_row_steps(
        m,
        VNNI_QUERIES,
        b,
        out,
        // SAFETY: the caller of this function guarantees AVX-512F, BW and VNNI; the rows
        // i0..i0 + 4 passed are below m.
        |i0, out| unsafe { vnni_block::<VNNI_QUERIES>(&queries, i0, b, out) },
        // SAFETY: as above, for the one row i0 < m.
        |i0, out| unsafe { vnni_block::<1>(&queries, i0, b, out) },
    );
}

/// Resize `out` to (m, `b.padded_rows`) and fill its rows: `step(i0, out)` for rows
/// `i0..i0 + rows_per_step` while that many are left, then `one(i0, out)` for each row left.
#[cfg(target_arch = "x86_64")]
fn in_row_steps(
    m: usize,
    rows_per_step: usize,
    b: &PackedAnchors,
    out: &mut Vec<f32>,
    mut step: impl FnMut(usize, &mut [f32]),
    mut one: impl FnMut(usize, &mut [f32]),
) {
    out.clear();
    out.resize(m * b.padded_rows, 0.0);
    let mut i0 = 0;
    while m - i0 >= rows_per_step {
        step(i0, out);
        i0 += rows_per_step;
    }
    for i in i0..m {
        one(i, out);
    }
}

/// Query rows `i0..i0 + Q` of [`dots_vnni`] against every anchor, written to `out`.
///
/// # Safety
/// AVX-512F, BW and VNNI must be available; rows `i0..i0 + Q` exist in `q` (as unsigned
/// bytes) and in `out`, which is (rows, `b.padded_rows`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn vnni_block<const Q: usize>(
    q: &SplitQueries,
    i0: usize,
    b: &PackedAnchors,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (steps, row_len, stride) = (b.steps, q.row_len, b.padded_rows);
    let tile_elems = TILE_ROWS * TILE_K;
    let groups = b.padded_rows / TILE_ROWS;
    let offset = _mm512_set1_epi32(128);
    for g in (0..groups).step_by(2) {
        // acc[j][2·piece + half]: query i0 + j, piece (high, low), anchors (g + half)·16..
        let mut acc = [[_mm512_setzero_si512(); 4]; Q];
        for s in 0..steps {
            for r in 0..TILE_ROWS {
                // SAFETY: groups g and g + 1 < groups and s < steps address a tile inside
                // `b.tiles`, and row r < 16 a 64-byte row of it; query rows i0 + j and bytes
                // s·64 + 4r + 4 <= row_len lie inside the pieces.
                unsafe {
                    let row = ((g * steps + s) * TILE_ROWS + r) * TILE_K;
                    let b0 = _mm512_loadu_si512(b.tiles.as_ptr().add(row) as *const _);
                    let b1 = _mm512_loadu_si512(
                        b.tiles.as_ptr().add(row + steps * tile_elems) as *const _
                    );
                    let at = s * TILE_K + 4 * r;
                    for (j, acc) in acc.iter_mut().enumerate() {
                        let base = (i0 + j) * row_len + at;
                        let h = _mm512_set1_epi32(
                            (q.high.as_ptr().add(base) as *const i32).read_unaligned(),
                        );
                        let l = _mm512_set1_epi32(
                            (q.low.as_ptr().add(base) as *const i32).read_unaligned(),
                        );
                        acc[0] = _mm512_dpbusd_epi32(acc[0], h, b0);
                        acc[1] = _mm512_dpbusd_epi32(acc[1], h, b1);
                        acc[2] = _mm512_dpbusd_epi32(acc[2], l, b0);
                        acc[3] = _mm512_dpbusd_epi32(acc[3], l, b1);
                    }
                }
            }
        }
        for (j, acc) in acc.iter().enumerate() {
            for half in 0..2 {
                let col = (g + half) * TILE_ROWS;
                // SAFETY: col + 16 <= padded_rows, the length of `scales` and `level_sums` and
                // the row stride of `out`, which holds row i0 + j.
                unsafe {
                    let sums = _mm512_mullo_epi32(
                        _mm512_loadu_si512(b.level_sums.as_ptr().add(col) as *const _),
                        offset,
                    );
                    combine(
                        _mm512_sub_epi32(acc[half], sums),
                        _mm512_sub_epi32(acc[2 + half], sums),
                        q.scales[i0 + j],
                        b.scales.as_ptr().add(col),
                        out.as_mut_ptr().add((i0 + j) * stride + col),
                    );
                }
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn dots_vnni(_: &[f32], _: usize, _: &PackedAnchors, _: &mut Vec<f32>) {
    unreachable!("AVX-512 VNNI exists only on x86-64")
}

/// Queries per step of the AVX-VNNI kernel: 3 queries x 2 pieces x 2 halves of 16 anchors are
/// 12 accumulators, which with the two anchor rows and two broadcasts fill the 16 registers.
/// (The last steps take the rows left one at a time.)
#[cfg(target_arch = "x86_64")]
const AVX_VNNI_QUERIES: usize = 3;

/// The AVX-VNNI kernel: [`dots_vnni`] on 256-bit registers, 8 anchors per register, with the
/// query split and the combination done with the same f32 operations in scalar and AVX2 code,
/// so its results are identical to the other two kernels'.
///
/// # Safety
/// AVX2 and AVX-VNNI must be available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avxvnni")]
unsafe fn dots_avx_vnni(a: &[f32], m: usize, b: &PackedAnchors, out: &mut Vec<f32>) {
    let pieces = SplitQueries::new(a, m, b, split_query_scalar).into_unsigned();
    // Only the m rows asked for, as in `dots_vnni`.
    in_row_steps(
        m,
        AVX_VNNI_QUERIES,
        b,
        out,
        // SAFETY: the caller of this function guarantees AVX2 and AVX-VNNI; the rows
        // i0..i0 + 3 passed are below m.
        |i0, out| unsafe { avx_vnni_block::<AVX_VNNI_QUERIES>(&pieces, i0, b, out) },
        // SAFETY: as above, for the one row i0 < m.
        |i0, out| unsafe { avx_vnni_block::<1>(&pieces, i0, b, out) },
    );
}

/// Query rows `i0..i0 + Q` of [`dots_avx_vnni`] against every anchor, written to `out`.
///
/// # Safety
/// AVX2 and AVX-VNNI must be available; rows `i0..i0 + Q` exist in `q` (as unsigned bytes) and
/// in `out`, which is (rows, `b.padded_rows`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avxvnni")]
#[inline]
unsafe fn avx_vnni_block<const Q: usize>(
    q: &SplitQueries,
    i0: usize,
    b: &PackedAnchors,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (steps, row_len, stride) = (b.steps, q.row_len, b.padded_rows);
    let offset = _mm256_set1_epi32(128);
    for g in 0..b.padded_rows / TILE_ROWS {
        // acc[j][2·piece + half]: query i0 + j, piece (high, low), anchors g·16 + 8·half..
        let mut acc = [[_mm256_setzero_si256(); 4]; Q];
        for s in 0..steps {
            for r in 0..TILE_ROWS {
                // SAFETY: group g and s < steps address a tile inside `b.tiles`, and row
                // r < 16 a 64-byte row of it (two 32-byte halves); query rows i0 + j and bytes
                // s·64 + 4r + 4 <= row_len lie inside the pieces.
                unsafe {
                    let row = ((g * steps + s) * TILE_ROWS + r) * TILE_K;
                    let b0 = _mm256_loadu_si256(b.tiles.as_ptr().add(row) as *const _);
                    let b1 = _mm256_loadu_si256(b.tiles.as_ptr().add(row + 32) as *const _);
                    let at = s * TILE_K + 4 * r;
                    for (j, acc) in acc.iter_mut().enumerate() {
                        let base = (i0 + j) * row_len + at;
                        let h = _mm256_set1_epi32(
                            (q.high.as_ptr().add(base) as *const i32).read_unaligned(),
                        );
                        acc[0] = _mm256_dpbusd_avx_epi32(acc[0], h, b0);
                        acc[1] = _mm256_dpbusd_avx_epi32(acc[1], h, b1);
                        let l = _mm256_set1_epi32(
                            (q.low.as_ptr().add(base) as *const i32).read_unaligned(),
                        );
                        acc[2] = _mm256_dpbusd_avx_epi32(acc[2], l, b0);
                        acc[3] = _mm256_dpbusd_avx_epi32(acc[3], l, b1);
                    }
                }
            }
        }
        for (j, acc) in acc.iter().enumerate() {
            for half in 0..2 {
                let col = g * TILE_ROWS + 8 * half;
                // SAFETY: col + 8 <= padded_rows, the length of `scales` and `level_sums` and
                // the row stride of `out`, which holds row i0 + j.
                unsafe {
                    let sums = _mm256_mullo_epi32(
                        _mm256_loadu_si256(b.level_sums.as_ptr().add(col) as *const _),
                        offset,
                    );
                    combine8(
                        _mm256_sub_epi32(acc[half], sums),
                        _mm256_sub_epi32(acc[2 + half], sums),
                        q.scales[i0 + j],
                        b.scales.as_ptr().add(col),
                        out.as_mut_ptr().add((i0 + j) * stride + col),
                    );
                }
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn dots_avx_vnni(_: &[f32], _: usize, _: &PackedAnchors, _: &mut Vec<f32>) {
    unreachable!("AVX-VNNI exists only on x86-64")
}

/// [`combine`]'s operations, in its order, on 8 lanes: `(high + low / 254) · s · scale` from
/// the int32 sums of the two query pieces, written to `out` (8 values).
///
/// # Safety
/// AVX2 must be available; `scales` and `out` hold at least 8 values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn combine8(
    high: std::arch::x86_64::__m256i,
    low: std::arch::x86_64::__m256i,
    query_scale: f32,
    scales: *const f32,
    out: *mut f32,
) {
    use std::arch::x86_64::*;
    let sum = _mm256_add_ps(
        _mm256_cvtepi32_ps(high),
        _mm256_mul_ps(_mm256_cvtepi32_ps(low), _mm256_set1_ps(1.0 / LOW_WEIGHT)),
    );
    // SAFETY: the caller guarantees 8 values at `scales` and at `out`.
    unsafe {
        let scales = _mm256_loadu_ps(scales);
        _mm256_storeu_ps(
            out,
            _mm256_mul_ps(sum, _mm256_mul_ps(_mm256_set1_ps(query_scale), scales)),
        );
    }
}

/// Queries per step of the AVX2 kernel, as [`AVX_VNNI_QUERIES`]: 3 queries x 2 pieces x 2
/// halves of 16 anchors are 12 accumulators.
#[cfg(target_arch = "x86_64")]
const AVX2_QUERIES: usize = 3;

/// The AVX2 kernel, for CPUs without VNNI: the same int32 sums with `VPMADDUBSW` and
/// `VPMADDWD`. `VPMADDUBSW` multiplies unsigned by signed bytes and adds pairs into saturating
/// int16, so the query pieces go in as their magnitudes (0..=127) and the anchors' levels take
/// the pieces' signs (`VPSIGNB`): each product is exact, and a pair sums to at most
/// 2 · 127 · 127 = 32,258, below int16's limit, so nothing saturates. Four instructions do what
/// `VPDPBUSD` does in one, which leaves a batch's ranking on all anchors slower than the f32
/// GEMM on such CPUs (batches rank in two passes instead: [`two_pass_available`]);
/// [`dots`] gives this kernel fewer than 16 rows only (a search of one query, which waits on
/// reading the anchors: a quarter of f32's bytes here).
///
/// # Safety
/// AVX2 must be available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dots_avx2(a: &[f32], m: usize, b: &PackedAnchors, out: &mut Vec<f32>) {
    let pieces = SplitQueries::new(a, m, b, split_query_scalar);
    in_row_steps(
        m,
        AVX2_QUERIES,
        b,
        out,
        // SAFETY: the caller of this function guarantees AVX2; the rows i0..i0 + 3 passed are
        // below m.
        |i0, out| unsafe { avx2_block::<AVX2_QUERIES>(&pieces, i0, b, out) },
        // SAFETY: as above, for the one row i0 < m.
        |i0, out| unsafe { avx2_block::<1>(&pieces, i0, b, out) },
    );
}

/// Query rows `i0..i0 + Q` of [`dots_avx2`] against every anchor, written to `out`.
///
/// # Safety
/// AVX2 must be available; rows `i0..i0 + Q` exist in `q` (signed pieces) and in `out`, which
/// is (rows, `b.padded_rows`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn avx2_block<const Q: usize>(
    q: &SplitQueries,
    i0: usize,
    b: &PackedAnchors,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (steps, row_len, stride) = (b.steps, q.row_len, b.padded_rows);
    let ones = _mm256_set1_epi16(1);
    // Four level-times-piece products of each anchor, summed exactly into its int32 lane.
    let dot4 = |acc: __m256i, piece: __m256i, magnitude: __m256i, levels: __m256i| {
        let pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(levels, piece));
        _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones))
    };
    for g in 0..b.padded_rows / TILE_ROWS {
        // acc[j][2·piece + half]: query i0 + j, piece (high, low), anchors g·16 + 8·half..
        let mut acc = [[_mm256_setzero_si256(); 4]; Q];
        for s in 0..steps {
            for r in 0..TILE_ROWS {
                // SAFETY: as in `avx_vnni_block`: group g and s < steps address a tile inside
                // `b.tiles`, row r < 16 a 64-byte row of it; query rows i0 + j and bytes
                // s·64 + 4r + 4 <= row_len lie inside the pieces.
                unsafe {
                    let row = ((g * steps + s) * TILE_ROWS + r) * TILE_K;
                    let b0 = _mm256_loadu_si256(b.tiles.as_ptr().add(row) as *const _);
                    let b1 = _mm256_loadu_si256(b.tiles.as_ptr().add(row + 32) as *const _);
                    let at = s * TILE_K + 4 * r;
                    for (j, acc) in acc.iter_mut().enumerate() {
                        let base = (i0 + j) * row_len + at;
                        let h = _mm256_set1_epi32(
                            (q.high.as_ptr().add(base) as *const i32).read_unaligned(),
                        );
                        let hm = _mm256_abs_epi8(h);
                        acc[0] = dot4(acc[0], h, hm, b0);
                        acc[1] = dot4(acc[1], h, hm, b1);
                        let l = _mm256_set1_epi32(
                            (q.low.as_ptr().add(base) as *const i32).read_unaligned(),
                        );
                        let lm = _mm256_abs_epi8(l);
                        acc[2] = dot4(acc[2], l, lm, b0);
                        acc[3] = dot4(acc[3], l, lm, b1);
                    }
                }
            }
        }
        for (j, acc) in acc.iter().enumerate() {
            for half in 0..2 {
                let col = g * TILE_ROWS + 8 * half;
                // SAFETY: col + 8 <= padded_rows, the length of `scales` and the row stride of
                // `out`, which holds row i0 + j.
                unsafe {
                    combine8(
                        acc[half],
                        acc[2 + half],
                        q.scales[i0 + j],
                        b.scales.as_ptr().add(col),
                        out.as_mut_ptr().add((i0 + j) * stride + col),
                    );
                }
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn dots_avx2(_: &[f32], _: usize, _: &PackedAnchors, _: &mut Vec<f32>) {
    unreachable!("AVX2 exists only on x86-64")
}

/// Whether a batch's ranking runs in two passes here ([`coarse_dots`], then [`dots_of`] for
/// the anchors near each query's cut-off): the AVX2 kernel is the one that runs
/// ([`few_rows_kernel`], on CPUs with AVX2 and no VNNI) and its self-check passed. Its result is
/// what [`dots`] on all anchors would rank. On an AMD EPYC Zen 3 the first pass of a 256 x
/// 1,024 x 384 block takes about 0.45 times the f32 GEMM's time, and `dots` itself on AVX2
/// about 1.75 times it; with the second pass, 200 real queries at nprobe 8 rank in 0.65-0.8
/// times the GEMM's time there, and in about the GEMM's time on a Sapphire Rapids Xeon run as
/// an AVX2-only CPU (docs/benchmarks.md, "Two passes on AVX2").
pub fn two_pass_available() -> bool {
    few_rows_kernel() == Some(Kernel::Avx2)
}

/// Queries per step of [`coarse_dots`]: 4 queries x 2 halves of 16 anchors are 8
/// accumulators.
#[cfg(target_arch = "x86_64")]
const COARSE_QUERIES: usize = 4;

/// Offset of [`coarse_query`]'s bytes: a level `X` in −64..=64 is stored as `X + 64`.
const COARSE_OFFSET: i32 = 64;

/// Error per query value of [`coarse_query`], over its scale: half a step, plus the f32
/// rounding of the quotient (at most 64 · 2⁻²³).
const COARSE_ROUNDING: f32 = 0.5 + 1.0 / 65536.0;

/// Error per query value of the split of [`dots`], over its scale `max |x| / 127`: half a step
/// of the low piece (1/508), plus f32 rounding (at most 127 · 2⁻²³ before the split).
const SPLIT_ROUNDING: f32 = 1.0 / 508.0 + 1.0 / 32768.0;

/// One query row `x` in one piece of 129 levels: `x ≈ s X` with `s = max |x| / 64` and
/// integers `X` in −64..=64, written to `bytes` as `X + 64` (0..=128; 64, a zero, past
/// `x.len()`); returns `s` (0 for a zero row). Each value is off by at most
/// `s · COARSE_ROUNDING`.
fn coarse_query(x: &[f32], bytes: &mut [u8]) -> f32 {
    bytes.fill(COARSE_OFFSET as u8);
    let max = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    if max == 0.0 {
        return 0.0;
    }
    let s = max / COARSE_OFFSET as f32;
    let inverse = 1.0 / s;
    let cap = COARSE_OFFSET as f32;
    // The levels plus 64 are in 0..=128 and exact in f32: adding 64 before the conversion
    // is the same as after.
    for (&v, byte) in x.iter().zip(bytes.iter_mut()) {
        *byte = (round_small((v * inverse).clamp(-cap, cap)) + cap) as u8;
    }
    s
}

/// Coarse products for the first pass of a batch's ranking where [`two_pass_available`]: each
/// query row in one piece of 129 levels (`x ≈ s X` with `s = max |x| / 64` and integers `X` in
/// −64..=64, where [`dots`] splits it into two pieces) multiplied exactly in int32, one
/// `VPMADDUBSW` and one `VPMADDWD` per 32 products.
/// `out` is resized to (m, `b.stride()`), row-major, as [`dots`]' output; `slack` to (m,),
/// such that entry (i, j), for j < `b.rows()`, is within `slack[i] · b.level_norms1()[j]` of
/// what [`dots`] gives for it, up to f32 rounding below 2⁻¹⁹ · ‖a_i‖ · ‖b_j‖.
///
/// Panics unless [`two_pass_available`].
pub fn coarse_dots(
    a: &[f32],
    m: usize,
    b: &PackedAnchors,
    out: &mut Vec<f32>,
    slack: &mut Vec<f32>,
) {
    assert!(
        two_pass_available(),
        "the two-pass ranking needs the AVX2 kernel"
    );
    assert!(a.len() >= m * b.dim);
    let (k, row_len) = (b.dim, b.steps * TILE_K);
    let mut bytes = vec![0u8; m * row_len];
    let mut scales = vec![0f32; m];
    slack.clear();
    for i in 0..m {
        let x = &a[i * k..(i + 1) * k];
        scales[i] = coarse_query(x, &mut bytes[i * row_len..(i + 1) * row_len]);
        // The split's scale is max / 127, the coarse one max / 64; the f32 products of the
        // bound itself round by far less than its last factor's margin.
        let max = scales[i] * COARSE_OFFSET as f32;
        slack.push(max * (COARSE_ROUNDING / 64.0 + SPLIT_ROUNDING / 127.0) * 1.001);
    }
    #[cfg(target_arch = "x86_64")]
    {
        let step = |i0: usize, out: &mut [f32]| {
            // SAFETY: two_pass_available() means AVX2 was detected; rows i0..i0 + 4 < m.
            unsafe { coarse_block::<COARSE_QUERIES>(&bytes, row_len, &scales, i0, b, out) }
        };
        let one = |i0: usize, out: &mut [f32]| {
            // SAFETY: as above, for the one row i0 < m.
            unsafe { coarse_block::<1>(&bytes, row_len, &scales, i0, b, out) }
        };
        in_row_steps(m, COARSE_QUERIES, b, out, step, one);
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (out, bytes, scales, row_len);
        unreachable!("AVX2 exists only on x86-64");
    }
}

/// Query rows `i0..i0 + Q` of [`coarse_dots`] against every anchor, written to `out`.
///
/// # Safety
/// AVX2 must be available; rows `i0..i0 + Q` exist in `q` ((m, row_len) bytes), in `scales`
/// and in `out`, which is (m, `b.padded_rows`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn coarse_block<const Q: usize>(
    q: &[u8],
    row_len: usize,
    scales: &[f32],
    i0: usize,
    b: &PackedAnchors,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (steps, stride) = (b.steps, b.padded_rows);
    let ones = _mm256_set1_epi16(1);
    debug_assert!(q.len() >= (i0 + Q) * row_len && scales.len() >= i0 + Q);
    for g in 0..b.padded_rows / TILE_ROWS {
        // acc[j][half]: query i0 + j against anchors g·16 + 8·half .. + 8.
        let mut acc = [[_mm256_setzero_si256(); 2]; Q];
        for s in 0..steps {
            for r in 0..TILE_ROWS {
                // SAFETY: group g and s < steps address a tile inside `b.tiles`, row r < 16 a
                // 64-byte row of it; query rows i0 + j < m and bytes s·64 + 4r + 4 <=
                // row_len lie inside `q`.
                unsafe {
                    let row = ((g * steps + s) * TILE_ROWS + r) * TILE_K;
                    let b0 = _mm256_loadu_si256(b.tiles.as_ptr().add(row) as *const _);
                    let b1 = _mm256_loadu_si256(b.tiles.as_ptr().add(row + 32) as *const _);
                    let at = s * TILE_K + 4 * r;
                    for (j, acc) in acc.iter_mut().enumerate() {
                        let x = _mm256_set1_epi32(
                            (q.as_ptr().add((i0 + j) * row_len + at) as *const i32)
                                .read_unaligned(),
                        );
                        // Unsigned bytes (at most 128) times levels (at most 127 in size): a
                        // pair sums to at most 32,512, inside int16, so nothing saturates.
                        acc[0] = _mm256_add_epi32(
                            acc[0],
                            _mm256_madd_epi16(_mm256_maddubs_epi16(x, b0), ones),
                        );
                        acc[1] = _mm256_add_epi32(
                            acc[1],
                            _mm256_madd_epi16(_mm256_maddubs_epi16(x, b1), ones),
                        );
                    }
                }
            }
        }
        for (j, acc) in acc.iter().enumerate() {
            for (half, &sum) in acc.iter().enumerate() {
                let col = g * TILE_ROWS + 8 * half;
                // SAFETY: col + 8 <= padded_rows, the length of `level_sums` and `scales` and
                // the row stride of `out`, which holds row i0 + j.
                unsafe {
                    // Σ (X + 64) · level − 64 · Σ level = Σ X · level, exact in int32.
                    let sums = _mm256_loadu_si256(b.level_sums.as_ptr().add(col) as *const _);
                    let exact = _mm256_sub_epi32(sum, _mm256_slli_epi32::<6>(sums));
                    let anchor_scales = _mm256_loadu_ps(b.scales.as_ptr().add(col));
                    _mm256_storeu_ps(
                        out.as_mut_ptr().add((i0 + j) * stride + col),
                        _mm256_mul_ps(
                            _mm256_cvtepi32_ps(exact),
                            _mm256_mul_ps(_mm256_set1_ps(scales[i0 + j]), anchor_scales),
                        ),
                    );
                }
            }
        }
    }
}

/// What [`dots`] gives for the query row `x` (finite values) against the anchors `which`,
/// bit for bit, measured one anchor at a time: the second pass of a batch's ranking where
/// [`two_pass_available`], for the anchors near a query's cut-off. `out` is resized to
/// `which.len()`; `pieces` is scratch, reused across rows.
pub fn dots_of(
    x: &[f32],
    b: &PackedAnchors,
    which: &[u32],
    pieces: &mut QueryPieces,
    out: &mut Vec<f32>,
) {
    assert_eq!(x.len(), b.dim);
    let row_len = b.steps * TILE_K;
    let QueryPieces { high, low } = pieces;
    for piece in [&mut *high, &mut *low] {
        piece.clear();
        piece.resize(row_len, 0);
    }
    let s = split_query_scalar(x, high, low);
    let row_levels = b.row_levels();
    out.clear();
    for &j in which {
        let j = j as usize;
        assert!(j < b.rows, "anchor {j} of {}", b.rows);
        let levels = &row_levels[j * row_len..(j + 1) * row_len];
        let (h, l) = piece_sums(high, low, levels);
        // [`combine`]'s operations, in its order.
        let sum = h as f32 + l as f32 * (1.0 / LOW_WEIGHT);
        out.push(sum * (s * b.scales[j]));
    }
}

/// One query row's first-pass selection in [`crate::CpuBackend`]'s two-pass ranking: from
/// its [`coarse_dots`] row `coarse` (num_anchors values), the anchors that can be among its
/// `per_point` nearest by the distances [`dots`] gives, written to `candidates` in id order.
///
/// With `xn = ‖x‖²`, `anchor_norms` (num_anchors,) the anchors' squared norms and `norms1`
/// their [`PackedAnchors::level_norms1`], anchor j's coarse distance `d = max(xn − 2·coarse_j +
/// cn_j, 0)` is within `e = twice_slack · norms1_j + rounding · (xn + cn_j)` of its exact one.
/// `t`, the `per_point`-th smallest `d + e`, is at least the exact `per_point`-th distance, so
/// the anchors with `d − e > t` are left out. `per_point` is at most ⌈num_anchors / 8⌉;
/// `scratch` is reused across rows.
#[allow(clippy::too_many_arguments)]
pub fn two_pass_candidates(
    coarse: &[f32],
    xn: f32,
    anchor_norms: &[f32],
    norms1: &[f32],
    (twice_slack, rounding): (f32, f32),
    per_point: usize,
    scratch: &mut CandidateScratch,
    candidates: &mut Vec<u32>,
) {
    let n = anchor_norms.len();
    let groups = n.div_ceil(8);
    assert!(coarse.len() >= n && norms1.len() >= n && (1..=groups).contains(&per_point));
    let CandidateScratch {
        lower,
        upper,
        group_min,
        near,
    } = scratch;
    for v in [&mut *lower, &mut *upper] {
        v.clear();
        v.resize(n, 0.0);
    }
    group_min.clear();
    group_min.resize(groups, f32::INFINITY);
    #[cfg(target_arch = "x86_64")]
    let start = if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected; the slices hold at least n values (asserted above) and
        // `group_min` one per group of 8.
        unsafe {
            bounds_avx2(
                coarse,
                xn,
                anchor_norms,
                norms1,
                (twice_slack, rounding),
                lower,
                upper,
                group_min,
            )
        }
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let start = 0;
    for j in start..n {
        let d = (xn - 2.0 * coarse[j] + anchor_norms[j]).max(0.0);
        let e = twice_slack * norms1[j] + rounding * (xn + anchor_norms[j]);
        (lower[j], upper[j]) = (d - e, d + e);
        group_min[j / 8] = group_min[j / 8].min(d + e);
    }
    // Each group's smallest upper bound is one of them, so at least per_point of them lie at
    // or below the per_point-th smallest group minimum: the per_point-th smallest of those
    // is the per_point-th smallest overall.
    let kth = |v: &mut [f32]| -> f32 { *v.select_nth_unstable_by(per_point - 1, f32::total_cmp).1 };
    let seed = kth(group_min);
    at_most(upper, seed, candidates);
    near.clear();
    near.extend(candidates.iter().map(|&j| upper[j as usize]));
    let cut = kth(near);
    at_most(lower, cut, candidates);
}

/// The positions of `values` at most `limit`, in order, written to `out`: on AVX2 where the
/// CPU has it (8 comparisons and a mask at a time), else one by one.
fn at_most(values: &[f32], limit: f32, out: &mut Vec<u32>) {
    out.clear();
    #[cfg(target_arch = "x86_64")]
    let start = if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected.
        unsafe { at_most_avx2(values, limit, out) }
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let start = 0;
    out.extend(
        (start..values.len())
            .filter(|&j| values[j] <= limit)
            .map(|j| j as u32),
    );
}

/// [`at_most`] over the whole groups of 8 values; returns how many values it covered.
///
/// # Safety
/// AVX2 must be available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn at_most_avx2(values: &[f32], limit: f32, out: &mut Vec<u32>) -> usize {
    use std::arch::x86_64::*;
    let n = values.len() / 8 * 8;
    let limit = _mm256_set1_ps(limit);
    for j in (0..n).step_by(8) {
        // SAFETY: j + 8 <= n <= values.len().
        let v = unsafe { _mm256_loadu_ps(values.as_ptr().add(j)) };
        let mut mask = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_LE_OQ>(v, limit)) as u32;
        while mask != 0 {
            out.push(j as u32 + mask.trailing_zeros());
            mask &= mask - 1;
        }
    }
    n
}

/// A query row's two 8-bit pieces in [`dots_of`], kept between rows so that their buffers
/// are allocated once.
#[derive(Default)]
pub struct QueryPieces {
    /// Layout: (the anchors' tile steps times 64,), zero past the row's values.
    high: Vec<i8>,
    /// Layout: as `high`.
    low: Vec<i8>,
}

/// Scratch of [`two_pass_candidates`], reused across query rows.
#[derive(Default)]
pub struct CandidateScratch {
    /// Layout: (num_anchors,).
    lower: Vec<f32>,
    /// Layout: (num_anchors,).
    upper: Vec<f32>,
    /// The smallest upper bound of each group of 8 anchors. Layout: (⌈num_anchors / 8⌉,).
    group_min: Vec<f32>,
    /// The upper bounds at or below the per_point-th smallest group minimum.
    near: Vec<f32>,
}

/// The whole groups of 8 anchors of [`two_pass_candidates`]' bounds on AVX2 (the same f32
/// operations, lane by lane): writes their lower and upper bounds and each group's smallest
/// upper bound, and returns how many anchors it covered.
///
/// # Safety
/// AVX2 must be available; `coarse`, `norms1`, `lower` and `upper` hold at least
/// `anchor_norms.len()` values, `group_min` one per group of 8.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn bounds_avx2(
    coarse: &[f32],
    xn: f32,
    anchor_norms: &[f32],
    norms1: &[f32],
    (twice_slack, rounding): (f32, f32),
    lower: &mut [f32],
    upper: &mut [f32],
    group_min: &mut [f32],
) -> usize {
    use std::arch::x86_64::*;
    let n = anchor_norms.len() / 8 * 8;
    let (xn_v, two, slack_v, rounding_v) = (
        _mm256_set1_ps(xn),
        _mm256_set1_ps(2.0),
        _mm256_set1_ps(twice_slack),
        _mm256_set1_ps(rounding),
    );
    for j in (0..n).step_by(8) {
        // SAFETY: j + 8 <= n, within every slice, and j / 8 within `group_min` (the caller's
        // guarantee).
        unsafe {
            let cn = _mm256_loadu_ps(anchor_norms.as_ptr().add(j));
            let dot = _mm256_loadu_ps(coarse.as_ptr().add(j));
            // max(xn − 2·dot + cn, 0), in that order.
            let d = _mm256_max_ps(
                _mm256_add_ps(_mm256_sub_ps(xn_v, _mm256_mul_ps(two, dot)), cn),
                _mm256_setzero_ps(),
            );
            let e = _mm256_add_ps(
                _mm256_mul_ps(slack_v, _mm256_loadu_ps(norms1.as_ptr().add(j))),
                _mm256_mul_ps(rounding_v, _mm256_add_ps(xn_v, cn)),
            );
            let u = _mm256_add_ps(d, e);
            _mm256_storeu_ps(lower.as_mut_ptr().add(j), _mm256_sub_ps(d, e));
            _mm256_storeu_ps(upper.as_mut_ptr().add(j), u);
            // The smallest of the 8 lanes.
            let m4 = _mm_min_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps::<1>(u));
            let m2 = _mm_min_ps(m4, _mm_movehl_ps(m4, m4));
            let m1 = _mm_min_ss(m2, _mm_shuffle_ps::<1>(m2, m2));
            *group_min.get_unchecked_mut(j / 8) = _mm_cvtss_f32(m1);
        }
    }
    n
}

/// `(Σ high · levels, Σ low · levels)`, exact in int32: on AVX2 where the CPU has it, else in
/// scalar code (the same sums).
fn piece_sums(high: &[i8], low: &[i8], levels: &[i8]) -> (i32, i32) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && levels.len().is_multiple_of(32) {
        // SAFETY: AVX2 was detected; the three rows have the same length, a multiple of 32.
        return unsafe { piece_sums_avx2(high, low, levels) };
    }
    piece_sums_scalar(high, low, levels)
}

/// [`piece_sums`] in scalar code, the reference.
fn piece_sums_scalar(high: &[i8], low: &[i8], levels: &[i8]) -> (i32, i32) {
    let dot = |p: &[i8]| -> i32 {
        p.iter()
            .zip(levels)
            .map(|(&a, &c)| a as i32 * c as i32)
            .sum()
    };
    (dot(high), dot(low))
}

/// [`piece_sums`] with `VPMADDUBSW` as in the AVX2 kernel: the pieces' magnitudes times the
/// levels given the pieces' signs, each pair at most 32,258, then `VPMADDWD`.
///
/// # Safety
/// AVX2 must be available; `high`, `low` and `levels` have the same length, a multiple of 32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn piece_sums_avx2(high: &[i8], low: &[i8], levels: &[i8]) -> (i32, i32) {
    use std::arch::x86_64::*;
    assert!(
        high.len() == levels.len() && low.len() == levels.len() && levels.len().is_multiple_of(32)
    );
    let ones = _mm256_set1_epi16(1);
    let (mut h_acc, mut l_acc) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    for c in (0..levels.len()).step_by(32) {
        // SAFETY: c + 32 <= the length of each row (asserted above).
        unsafe {
            let v = _mm256_loadu_si256(levels.as_ptr().add(c) as *const _);
            let h = _mm256_loadu_si256(high.as_ptr().add(c) as *const _);
            let l = _mm256_loadu_si256(low.as_ptr().add(c) as *const _);
            let hp = _mm256_maddubs_epi16(_mm256_abs_epi8(h), _mm256_sign_epi8(v, h));
            let lp = _mm256_maddubs_epi16(_mm256_abs_epi8(l), _mm256_sign_epi8(v, l));
            h_acc = _mm256_add_epi32(h_acc, _mm256_madd_epi16(hp, ones));
            l_acc = _mm256_add_epi32(l_acc, _mm256_madd_epi16(lp, ones));
        }
    }
    let total = |v: __m256i| -> i32 {
        let mut lanes = [0i32; 8];
        // SAFETY: `lanes` holds 8 int32 values, 32 bytes.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut _, v) };
        lanes.iter().sum()
    };
    (total(h_acc), total(l_acc))
}

/// `v.round_ties_even()` for `|v| <= 2²²`, without a call: adding and taking back 1.5 · 2²³
/// leaves no bits below the units, and f32 addition rounds to nearest, ties to even.
/// (`round_ties_even` is a call to `rintf` where the build targets CPUs without SSE4.1,
/// which took a fifth of a batch's two-pass ranking.)
#[inline]
fn round_small(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    debug_assert!(v.abs() <= 4_194_304.0);
    (v + MAGIC) - MAGIC
}

/// [`split_query`] in scalar code: the same f32 operations (the largest magnitude, its 127th,
/// the clamped quotient rounded to nearest even, the remainder times 254 rounded), so the
/// same bytes and scale.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // used by the x86-64 kernel
fn split_query_scalar(x: &[f32], high: &mut [i8], low: &mut [i8]) -> f32 {
    let max = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    if max == 0.0 {
        return 0.0;
    }
    let s = max / 127.0;
    let inverse = 1.0 / s;
    for ((&v, h), l) in x.iter().zip(high.iter_mut()).zip(low.iter_mut()) {
        let scaled = (v * inverse).clamp(-127.0, 127.0);
        let rounded = round_small(scaled);
        *h = rounded as i8;
        *l = round_small((scaled - rounded) * LOW_WEIGHT) as i8;
    }
    s
}

/// Split `x` into `high` and `low` int8 pieces (both zero past `x.len()`), `x ≈ s (high +
/// low / 254)` with `s = max |x| / 127`; returns `s` (0 for a zero row).
///
/// # Safety
/// AVX-512F and BW must be available; `high` and `low` hold at least `x.len()` bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn split_query(x: &[f32], high: &mut [i8], low: &mut [i8]) -> f32 {
    use std::arch::x86_64::*;
    assert!(high.len() >= x.len() && low.len() >= x.len());
    let chunks = x.len().div_ceil(16);
    let mask = |c: usize| -> __mmask16 {
        let left = x.len() - 16 * c;
        if left >= 16 {
            0xffff
        } else {
            (1u16 << left) - 1
        }
    };
    let mut max = _mm512_setzero_ps();
    for c in 0..chunks {
        // SAFETY: the mask covers only values inside x.
        let v = unsafe { _mm512_maskz_loadu_ps(mask(c), x.as_ptr().add(16 * c)) };
        max = _mm512_max_ps(max, _mm512_abs_ps(v));
    }
    let max = _mm512_reduce_max_ps(max);
    if max == 0.0 {
        return 0.0;
    }
    let s = max / 127.0;
    let (inverse, weight) = (_mm512_set1_ps(1.0 / s), _mm512_set1_ps(LOW_WEIGHT));
    let (lo_cap, hi_cap) = (_mm512_set1_ps(-127.0), _mm512_set1_ps(127.0));
    const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    for c in 0..chunks {
        let m = mask(c);
        // SAFETY: loads and stores are masked to the values inside x (and so inside high and
        // low, which are at least as long).
        unsafe {
            let v = _mm512_maskz_loadu_ps(m, x.as_ptr().add(16 * c));
            let scaled = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v, inverse), lo_cap), hi_cap);
            let h = _mm512_roundscale_ps::<NEAREST>(scaled);
            let l =
                _mm512_roundscale_ps::<NEAREST>(_mm512_mul_ps(_mm512_sub_ps(scaled, h), weight));
            _mm512_mask_cvtepi32_storeu_epi8(
                high.as_mut_ptr().add(16 * c) as *mut _,
                m,
                _mm512_cvtps_epi32(h),
            );
            _mm512_mask_cvtepi32_storeu_epi8(
                low.as_mut_ptr().add(16 * c) as *mut _,
                m,
                _mm512_cvtps_epi32(l),
            );
        }
    }
    s
}

/// # Safety
/// AMX-TILE and AMX-INT8 must be usable by this thread (see [`supported`]); every CPU with AMX
/// has AVX-512F and BW, which the query split and the combination vectorise with.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn dots_unchecked(a: &[f32], m: usize, b: &PackedAnchors, out: &mut Vec<f32>) {
    use std::arch::asm;
    use std::arch::x86_64::*;
    let steps = b.steps;
    let row_len = steps * TILE_K;
    // The query pieces X₁ (high) and X₂ (low), (padded_m, row_len) int8 each, and s per row.
    // SAFETY: AVX-512F/BW are enabled for this function; the rows hold k <= row_len values.
    let queries = SplitQueries::new(a, m, b, |x, h, l| unsafe { split_query(x, h, l) });
    let (high, low, query_scales) = (&queries.high, &queries.low, &queries.scales);
    let padded_m = query_scales.len();
    let stride = b.padded_rows;
    out.clear();
    out.resize(padded_m * stride, 0.0);
    // Palette 1, all eight tiles 16 rows of 64 bytes: tmm0-3 accumulate (high, low) x (anchor
    // tile 0, anchor tile 1) for 16 query rows and 32 anchors; tmm4-5 hold the query pieces,
    // tmm6-7 two anchor tiles.
    #[repr(C, align(64))]
    struct Config([u8; 64]);
    let mut config = Config([0; 64]);
    config.0[0] = 1;
    for t in 0..8 {
        config.0[16 + 2 * t] = 64;
        config.0[48 + t] = TILE_ROWS as u8;
    }
    let tile_elems = TILE_ROWS * TILE_K;
    let groups = b.padded_rows / TILE_ROWS;
    // Accumulators stored per block: (high·B0, low·B0, high·B1, low·B1), 16 x 16 int32 each.
    let mut acc = [0i32; 4 * TILE_ROWS * TILE_ROWS];
    // SAFETY (every asm block below): the configuration is loaded first and released last;
    // every tile load reads 16 rows of 64 bytes inside `high`/`low` (rows i0..i0 + 16 <=
    // padded_m, columns s·64..s·64 + 64 <= row_len) or inside `b.tiles` (groups g, g + 1 <
    // groups, step s < steps), and every store writes 16 rows of 64 bytes inside `acc`. The
    // vector loads and stores that combine `acc` stay inside `acc`, `b.scales` and `out`.
    unsafe {
        asm!("ldtilecfg [{}]", in(reg) config.0.as_ptr(), options(nostack));
        for i0 in (0..padded_m).step_by(TILE_ROWS) {
            for g in (0..groups).step_by(2) {
                asm!(
                    "tilezero tmm0",
                    "tilezero tmm1",
                    "tilezero tmm2",
                    "tilezero tmm3",
                    options(nostack, nomem)
                );
                for s in 0..steps {
                    let ah = high.as_ptr().add(i0 * row_len + s * TILE_K);
                    let al = low.as_ptr().add(i0 * row_len + s * TILE_K);
                    let b0 = b.tiles.as_ptr().add((g * steps + s) * tile_elems);
                    let b1 = b0.add(steps * tile_elems);
                    asm!(
                        "tileloadd tmm4, [{ah} + {sa} * 1]",
                        "tileloadd tmm6, [{b0} + {sb} * 1]",
                        "tdpbssd tmm0, tmm4, tmm6",
                        "tileloadd tmm5, [{al} + {sa} * 1]",
                        "tdpbssd tmm1, tmm5, tmm6",
                        "tileloadd tmm7, [{b1} + {sb} * 1]",
                        "tdpbssd tmm2, tmm4, tmm7",
                        "tdpbssd tmm3, tmm5, tmm7",
                        ah = in(reg) ah,
                        al = in(reg) al,
                        b0 = in(reg) b0,
                        b1 = in(reg) b1,
                        sa = in(reg) row_len,
                        sb = in(reg) TILE_K,
                        options(nostack, readonly)
                    );
                }
                let c = acc.as_mut_ptr();
                asm!(
                    "tilestored [{c0} + {sc} * 1], tmm0",
                    "tilestored [{c1} + {sc} * 1], tmm1",
                    "tilestored [{c2} + {sc} * 1], tmm2",
                    "tilestored [{c3} + {sc} * 1], tmm3",
                    c0 = in(reg) c,
                    c1 = in(reg) c.add(TILE_ROWS * TILE_ROWS),
                    c2 = in(reg) c.add(2 * TILE_ROWS * TILE_ROWS),
                    c3 = in(reg) c.add(3 * TILE_ROWS * TILE_ROWS),
                    sc = in(reg) TILE_ROWS * 4,
                    options(nostack)
                );
                let tile = TILE_ROWS * TILE_ROWS;
                for r in 0..TILE_ROWS {
                    for half in 0..2 {
                        // (In the unsafe block above: acc holds 4 tiles of 16 x 16, scales
                        // padded_rows values, out (padded_m, stride); (g + half)·16 + 16 <=
                        // stride.)
                        let col = (g + half) * TILE_ROWS;
                        combine(
                            _mm512_loadu_si512(
                                acc.as_ptr().add(2 * half * tile + r * TILE_ROWS) as *const _
                            ),
                            _mm512_loadu_si512(
                                acc.as_ptr().add((2 * half + 1) * tile + r * TILE_ROWS) as *const _,
                            ),
                            query_scales[i0 + r],
                            b.scales.as_ptr().add(col),
                            out.as_mut_ptr().add((i0 + r) * stride + col),
                        );
                    }
                }
            }
        }
        asm!("tilerelease", options(nostack, nomem));
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn dots_unchecked(_: &[f32], _: usize, _: &PackedAnchors, _: &mut Vec<f32>) {
    unreachable!("AMX exists only on x86-64")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    use crate::AnchorPrecision;

    fn stored_anchors(r: &mut Rng, n: usize, k: usize, precision: AnchorPrecision) -> Vec<f32> {
        let values: Vec<f32> = (0..n * k).map(|_| r.normal() as f32 * 0.1).collect();
        crate::anchor_store::StoredAnchors::encode(&values, k, precision).decode(k)
    }

    fn int8_anchors(r: &mut Rng, n: usize, k: usize) -> Vec<f32> {
        stored_anchors(r, n, k, AnchorPrecision::Int8)
    }

    #[test]
    fn only_eight_and_four_bit_rows_pack() {
        let mut r = Rng::new(5);
        let general: Vec<f32> = (0..10 * 33).map(|_| r.normal() as f32).collect();
        assert!(PackedAnchors::new(&general, 10, 33).is_none());
        let f16 = stored_anchors(&mut r, 10, 33, AnchorPrecision::F16);
        assert!(PackedAnchors::new(&f16, 10, 33).is_none());
        let int4 = stored_anchors(&mut r, 10, 33, AnchorPrecision::Int4);
        assert!(
            PackedAnchors::new(&int4, 10, 33).is_some(),
            "4-bit rows pack"
        );
        let int8 = int8_anchors(&mut r, 10, 33);
        let packed = PackedAnchors::new(&int8, 10, 33).expect("8-bit rows pack");
        assert_eq!((packed.rows(), packed.stride()), (10, 32));
        // The cache hands back the same packing for the same content, and notices a change.
        let first = packed_for_test(&int8);
        assert!(Arc::ptr_eq(&first, &packed_for_test(&int8)));
        let mut changed = int8.clone();
        changed[7] = 0.0;
        let other = packed_anchors(&changed, 10, 33);
        assert!(other.is_none() || !Arc::ptr_eq(&first, other.as_ref().unwrap()));
    }

    /// Rows selected from a packing are what packing those rows gives: levels in the same
    /// tile places, the same scales and sums, padding zero (8- and 4-bit rows, across tile
    /// groups and a dimension that ends inside a tile step, in and out of order).
    #[test]
    fn selected_rows_pack_as_those_rows_do() {
        let mut r = Rng::new(9);
        let (n, k) = (70, 150);
        for precision in [AnchorPrecision::Int8, AnchorPrecision::Int4] {
            let anchors = stored_anchors(&mut r, n, k, precision);
            let packed = PackedAnchors::new(&anchors, n, k).expect("integer rows pack");
            let ascending: Vec<u32> = (0..n as u32).filter(|j| j % 3 != 1).collect();
            for rows in [
                ascending,
                vec![69, 0, 33, 16, 5],
                vec![],
                (0..n as u32).collect(),
            ] {
                let gathered: Vec<f32> = rows
                    .iter()
                    .flat_map(|&j| {
                        anchors[j as usize * k..(j as usize + 1) * k]
                            .iter()
                            .copied()
                    })
                    .collect();
                let expected = PackedAnchors::new(&gathered, rows.len(), k).unwrap();
                let selected = packed.select_rows(&rows);
                let what = format!("{precision:?}, rows {rows:?}");
                assert_eq!(
                    (selected.rows, selected.padded_rows),
                    (expected.rows, expected.padded_rows),
                    "{what}"
                );
                assert_eq!(
                    (selected.dim, selected.steps),
                    (expected.dim, expected.steps),
                    "{what}"
                );
                assert_eq!(selected.scales, expected.scales, "{what}");
                assert_eq!(selected.level_sums, expected.level_sums, "{what}");
                assert_eq!(selected.level_norms1, expected.level_norms1, "{what}");
                assert_eq!(selected.tiles, expected.tiles, "{what}");
            }
        }
    }

    fn packed_for_test(v: &[f32]) -> Arc<PackedAnchors> {
        packed_anchors(v, 10, 33).expect("8-bit rows pack")
    }

    /// The kernels this machine offers, each after its self-check passed (a kernel offered but
    /// failing its self-check fails the test).
    fn kernels_here() -> Vec<Kernel> {
        let mut kernels = Vec::new();
        if supported() {
            assert!(
                self_check(Kernel::Amx),
                "AMX is supported here but its self-check failed"
            );
            kernels.push(Kernel::Amx);
        }
        if vnni_supported() {
            assert!(
                self_check(Kernel::Vnni),
                "AVX-512 VNNI is supported here but its self-check failed"
            );
            kernels.push(Kernel::Vnni);
        }
        if avx_vnni_supported() {
            assert!(
                self_check(Kernel::AvxVnni),
                "AVX-VNNI is supported here but its self-check failed"
            );
            kernels.push(Kernel::AvxVnni);
        }
        if avx2_supported() {
            assert!(
                self_check(Kernel::Avx2),
                "AVX2 is supported here but the AVX2 kernel's self-check failed"
            );
            kernels.push(Kernel::Avx2);
        }
        if kernels.is_empty() {
            eprintln!("SKIPPED: no integer kernel (AMX, AVX-512 VNNI, AVX-VNNI, AVX2) is available on this machine (or VLC_NO_AMX / VLC_NO_VNNI / VLC_NO_AVX2_INT8 is set)");
        }
        kernels
    }

    #[test]
    fn integer_dots_match_f64_over_odd_shapes() {
        for kernel in kernels_here() {
            check_against_f64(kernel);
        }
    }

    #[test]
    fn integer_kernels_give_identical_dots() {
        let kernels = kernels_here();
        if kernels.len() < 2 {
            eprintln!("SKIPPED: fewer than two integer kernels (AMX, AVX-512 VNNI, AVX-VNNI) are available on this machine");
            return;
        }
        let mut r = Rng::new(8);
        for (m, n, k) in [
            (1, 1, 1),
            (3, 17, 5),
            (19, 70, 65),
            (64, 300, 384),
            (5, 40, 1030),
        ] {
            let mut a: Vec<f32> = (0..m * k).map(|_| r.normal() as f32).collect();
            // A zero row, and a row whose largest value is 127 (so its split scale is 1) and
            // whose others lie halfway between integers: ties of the split's rounding.
            a[..k].fill(0.0);
            if m > 1 {
                for (t, v) in a[k..2 * k].iter_mut().enumerate() {
                    *v = if t == 0 {
                        127.0
                    } else {
                        (t % 251) as f32 - 125.5
                    };
                }
            }
            let b = int8_anchors(&mut r, n, k);
            let packed = PackedAnchors::new(&b, n, k).expect("8-bit rows pack");
            let results: Vec<Vec<f32>> = kernels
                .iter()
                .map(|&kernel| {
                    let mut out = Vec::new();
                    // SAFETY: every kernel in the list was detected above.
                    unsafe { dots_with(kernel, &a, m, &packed, &mut out) };
                    out
                })
                .collect();
            for (kernel, out) in kernels.iter().zip(&results).skip(1) {
                for i in 0..m {
                    let row = i * packed.stride();
                    assert_eq!(
                        results[0][row..row + n],
                        out[row..row + n],
                        "{:?} against {kernel:?}: ({m},{n},{k}) row {i}",
                        kernels[0]
                    );
                }
            }
        }
    }

    /// A query row's products do not depend on the rows beside it: alone (a search of one
    /// query), in the kernels' last partial step or in a full one, they are the same bits. The
    /// output holds at least m rows.
    #[test]
    fn a_row_gets_the_same_dots_alone_as_in_a_block() {
        let mut r = Rng::new(12);
        let (n, k) = (70, 100);
        let b = int8_anchors(&mut r, n, k);
        let packed = PackedAnchors::new(&b, n, k).expect("8-bit rows pack");
        for kernel in kernels_here() {
            for m in [1usize, 2, 3, 5, 7, 17] {
                let a: Vec<f32> = (0..m * k).map(|_| r.normal() as f32).collect();
                let mut block = Vec::new();
                // SAFETY: `kernel` was detected on this machine (kernels_here).
                unsafe { dots_with(kernel, &a, m, &packed, &mut block) };
                assert!(block.len() >= m * packed.stride(), "{kernel:?} m {m}");
                for i in 0..m {
                    let mut alone = Vec::new();
                    // SAFETY: as above.
                    unsafe { dots_with(kernel, &a[i * k..(i + 1) * k], 1, &packed, &mut alone) };
                    let row = i * packed.stride();
                    assert_eq!(
                        block[row..row + n],
                        alone[..n],
                        "{kernel:?}: row {i} of {m} against alone"
                    );
                }
            }
        }
    }

    #[test]
    fn scalar_split_gives_the_avx512_split_bytes() {
        #[cfg(target_arch = "x86_64")]
        {
            if !(crate::simd::has_avx512() && is_x86_feature_detected!("avx512bw")) {
                eprintln!("SKIPPED: no AVX-512F/BW here to compare the scalar split with");
                return;
            }
            let mut r = Rng::new(12);
            let mut rows: Vec<Vec<f32>> = vec![vec![0.0; 9], vec![-3.0], vec![1e-30, -2e-30]];
            for k in [1, 15, 16, 17, 100, 384, 1031] {
                rows.push((0..k).map(|_| r.normal() as f32).collect());
            }
            // Largest value 127 (split scale 1), the others halfway between integers.
            rows.push(
                (0..300)
                    .map(|t| {
                        if t == 0 {
                            127.0
                        } else {
                            (t % 251) as f32 - 125.5
                        }
                    })
                    .collect(),
            );
            for x in &rows {
                let (mut high, mut low) = (vec![0i8; x.len()], vec![0i8; x.len()]);
                let (mut high_s, mut low_s) = (vec![0i8; x.len()], vec![0i8; x.len()]);
                // SAFETY: AVX-512F and BW were detected above; the pieces hold x.len() bytes.
                let scale = unsafe { split_query(x, &mut high, &mut low) };
                let scale_s = split_query_scalar(x, &mut high_s, &mut low_s);
                assert_eq!(scale.to_bits(), scale_s.to_bits(), "{} values", x.len());
                assert_eq!(high, high_s, "{} values", x.len());
                assert_eq!(low, low_s, "{} values", x.len());
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        eprintln!("SKIPPED: the AVX-512 split exists only on x86-64");
    }

    #[test]
    fn round_small_rounds_half_to_even() {
        let mut r = Rng::new(31);
        let mut values: Vec<f32> = (-600..=600).map(|t| t as f32 * 0.25).collect();
        values.extend((0..20_000).map(|_| (r.normal() * 200.0) as f32));
        values.extend([
            -0.0,
            0.49999997,
            -0.49999997,
            4_194_303.5,
            -4_194_303.5,
            4_194_304.0,
            1e-30,
        ]);
        for v in values {
            assert_eq!(round_small(v), v.round_ties_even(), "{v}");
        }
    }

    /// `coarse_dots` stays within its stated bound of what `dots` gives, over odd shapes, 8-bit
    /// and 4-bit anchors, a zero row and rows of one large value; and it is coarse (so the
    /// check is not of two equal results).
    #[test]
    fn coarse_dots_stay_within_their_bound() {
        if !two_pass_available() {
            eprintln!("SKIPPED: the coarse pass runs only where AVX2 is the integer kernel (no VNNI or AMX here, or VLC_NO_AVX2_INT8 is set)");
            return;
        }
        let mut r = Rng::new(32);
        let mut coarser = 0usize;
        for (m, n, k, precision) in [
            (1, 1, 1, AnchorPrecision::Int8),
            (3, 17, 31, AnchorPrecision::Int8),
            (5, 33, 64, AnchorPrecision::Int8),
            (9, 70, 65, AnchorPrecision::Int4),
            (21, 300, 384, AnchorPrecision::Int8),
            (6, 40, 1030, AnchorPrecision::Int8),
        ] {
            let mut a: Vec<f32> = (0..m * k).map(|_| r.normal() as f32).collect();
            a[..k].fill(0.0);
            if m > 1 {
                a[k..2 * k].fill(1e-3);
                a[k] = 50.0;
            }
            let b = stored_anchors(&mut r, n, k, precision);
            let packed = PackedAnchors::new(&b, n, k).expect("8-bit and 4-bit rows pack");
            let (mut coarse, mut slack, mut exact) = (Vec::new(), Vec::new(), Vec::new());
            coarse_dots(&a, m, &packed, &mut coarse, &mut slack);
            // SAFETY: two_pass_available() means the AVX2 kernel passed its self-check here.
            unsafe { dots_with(Kernel::Avx2, &a, m, &packed, &mut exact) };
            assert_eq!(slack.len(), m);
            for i in 0..m {
                let an = crate::linalg::dot(&a[i * k..(i + 1) * k], &a[i * k..(i + 1) * k]).sqrt();
                for j in 0..n {
                    let bn =
                        crate::linalg::dot(&b[j * k..(j + 1) * k], &b[j * k..(j + 1) * k]).sqrt();
                    let at = i * packed.stride() + j;
                    let bound = slack[i] * packed.level_norms1()[j] + an * bn / 524_288.0;
                    let gap = (coarse[at] - exact[at]).abs();
                    assert!(
                        gap <= bound,
                        "({m},{n},{k}) [{i}][{j}]: {} vs {} (bound {bound})",
                        coarse[at],
                        exact[at]
                    );
                    coarser += (gap > 0.0) as usize;
                }
            }
        }
        assert!(
            coarser > 1000,
            "only {coarser} coarse products differ from the exact ones"
        );
    }

    /// `dots_of` gives the bits `dots` gives, on every kernel here, for any list of anchors.
    #[test]
    fn dots_of_gives_the_bits_of_dots() {
        let mut r = Rng::new(33);
        let mut pieces = QueryPieces::default();
        for (m, n, k, precision) in [
            (2, 5, 1, AnchorPrecision::Int8),
            (3, 70, 65, AnchorPrecision::Int4),
            (17, 130, 384, AnchorPrecision::Int8),
            (2, 20, 1030, AnchorPrecision::Int8),
        ] {
            let mut a: Vec<f32> = (0..m * k).map(|_| r.normal() as f32).collect();
            // A zero row first, and last where there are three: `pieces` then still holds
            // the row before it (and, across cases, rows of other widths).
            a[..k].fill(0.0);
            if m >= 3 {
                a[(m - 1) * k..].fill(0.0);
            }
            let b = stored_anchors(&mut r, n, k, precision);
            let packed = PackedAnchors::new(&b, n, k).expect("8-bit and 4-bit rows pack");
            // Every anchor, backwards, with one twice.
            let mut which: Vec<u32> = (0..n as u32).rev().collect();
            which.push(0);
            for kernel in kernels_here() {
                let mut all = Vec::new();
                // SAFETY: `kernel` was detected on this machine (kernels_here).
                unsafe { dots_with(kernel, &a, m, &packed, &mut all) };
                let mut some = Vec::new();
                for i in 0..m {
                    dots_of(
                        &a[i * k..(i + 1) * k],
                        &packed,
                        &which,
                        &mut pieces,
                        &mut some,
                    );
                    for (&j, got) in which.iter().zip(&some) {
                        let want = all[i * packed.stride() + j as usize];
                        assert_eq!(
                            got.to_bits(),
                            want.to_bits(),
                            "{kernel:?} ({m},{n},{k}) [{i}][{j}]"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn piece_sums_avx2_match_scalar() {
        #[cfg(target_arch = "x86_64")]
        {
            if !std::arch::is_x86_feature_detected!("avx2") {
                eprintln!("SKIPPED: no AVX2 here");
                return;
            }
            let mut r = Rng::new(34);
            for len in [32, 64, 96, 416, 1056] {
                let mut row = |extreme: bool| -> Vec<i8> {
                    (0..len)
                        .map(|_| {
                            let v = if extreme {
                                127
                            } else {
                                r.below(255) as i32 - 127
                            };
                            (if r.below(2) == 0 { v } else { -v }) as i8
                        })
                        .collect()
                };
                for extreme in [false, true] {
                    let (high, low, levels) = (row(extreme), row(false), row(extreme));
                    // SAFETY: AVX2 was detected; the rows have one length, a multiple of 32.
                    let avx2 = unsafe { piece_sums_avx2(&high, &low, &levels) };
                    assert_eq!(
                        avx2,
                        piece_sums_scalar(&high, &low, &levels),
                        "{len} {extreme}"
                    );
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        eprintln!("SKIPPED: the AVX2 sums exist only on x86-64");
    }

    fn check_against_f64(kernel: Kernel) {
        let mut r = Rng::new(6);
        for (m, n, k, precision) in [
            (1, 1, 1, AnchorPrecision::Int8),
            (5, 17, 31, AnchorPrecision::Int8),
            (16, 32, 64, AnchorPrecision::Int8),
            (33, 70, 65, AnchorPrecision::Int8),
            (100, 1027, 384, AnchorPrecision::Int8),
            (40, 40, 768, AnchorPrecision::Int8),
            (7, 33, 97, AnchorPrecision::Int4),
            (40, 300, 384, AnchorPrecision::Int4),
        ] {
            let mut a: Vec<f32> = (0..m * k).map(|_| r.normal() as f32).collect();
            a[..k].fill(0.0);
            let b = stored_anchors(&mut r, n, k, precision);
            let packed = PackedAnchors::new(&b, n, k).expect("8-bit and 4-bit rows pack");
            let mut out = Vec::new();
            // SAFETY: `kernel` was detected on this machine (kernels_here).
            unsafe { dots_with(kernel, &a, m, &packed, &mut out) };
            for i in 0..m {
                let max = a[i * k..(i + 1) * k]
                    .iter()
                    .fold(0f64, |x, v| x.max(v.abs() as f64));
                for j in 0..n {
                    let (mut want, mut bound) = (0f64, 0f64);
                    for t in 0..k {
                        want += a[i * k + t] as f64 * b[j * k + t] as f64;
                        bound += (b[j * k + t] as f64).abs();
                    }
                    // Per value the split leaves at most max |x| / 64516 (plus f32 rounding).
                    let bound = bound * max / 64516.0 * 1.01 + 1e-6 * want.abs() + 1e-9;
                    let got = out[i * packed.stride() + j] as f64;
                    assert!(
                        (got - want).abs() <= bound,
                        "{kernel:?} ({m},{n},{k}) [{i}][{j}]: {got} vs {want} (bound {bound})"
                    );
                }
            }
        }
    }
}
