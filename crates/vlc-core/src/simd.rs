//! Instruction-set detection (once) and the small SIMD kernels of the scan paths.
//!
//! Every kernel has a scalar reference that is always compiled; the SIMD variants are tested
//! for parity with it over odd tail sizes.

use std::sync::LazyLock;

/// What the running CPU supports, as far as VLC's kernels care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimdLevel {
    Scalar,
    /// x86-64 with AVX2, FMA and F16C (every AVX2 CPU in practice has all three).
    Avx2,
    /// 64-bit ARM with Advanced SIMD (NEON): every aarch64 CPU, Jetson boards included.
    Neon,
}

static LEVEL: LazyLock<SimdLevel> = LazyLock::new(detect);

fn detect() -> SimdLevel {
    if std::env::var_os("VLC_FORCE_SCALAR").is_some() {
        return SimdLevel::Scalar;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
        {
            return SimdLevel::Avx2;
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("neon") {
            return SimdLevel::Neon;
        }
    }
    SimdLevel::Scalar
}

/// The level detected at first use (set `VLC_FORCE_SCALAR=1` to force the scalar paths).
pub fn level() -> SimdLevel {
    *LEVEL
}

static AVX512: LazyLock<bool> = LazyLock::new(|| {
    #[cfg(target_arch = "x86_64")]
    {
        level() == SimdLevel::Avx2
            && std::env::var_os("VLC_NO_AVX512").is_none()
            && is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
});

/// Whether the AVX-512 variants run (the AVX2 level plus AVX-512F, detected once; set
/// `VLC_NO_AVX512=1` to keep the AVX2 ones). Only kernels that gain from it have one: those
/// built on 16-lane masks, the query rotation, and the fast scan (which also needs AVX-512BW;
/// `fastscan`).
pub fn has_avx512() -> bool {
    *AVX512
}

/// The CPU kernels this process uses, for logs and benchmark records: `scalar`, `neon`, or
/// `avx2` followed by `avx512` and `amx-int8`, `avx512-vnni` or `avx-vnni` (the anchor-ranking
/// kernel) where those are detected and enabled, or `avx2-int8` where the AVX2 integer kernel
/// ranks one query and a batch ranks in two passes (AVX2 without VNNI).
pub fn kernels() -> String {
    let mut parts = vec![match level() {
        SimdLevel::Scalar => "scalar",
        SimdLevel::Avx2 => "avx2",
        SimdLevel::Neon => "neon",
    }];
    if has_avx512() {
        parts.push("avx512");
    }
    match crate::amx::kernel() {
        Some(crate::amx::Kernel::Amx) => parts.push("amx-int8"),
        Some(crate::amx::Kernel::Vnni) => parts.push("avx512-vnni"),
        Some(crate::amx::Kernel::AvxVnni) => parts.push("avx-vnni"),
        Some(crate::amx::Kernel::Avx2) | None => {
            if crate::amx::few_rows_kernel() == Some(crate::amx::Kernel::Avx2) {
                parts.push("avx2-int8");
            }
        }
    }
    parts.join("+")
}

/// Σ `weights[i] · codes[i]` (codes as unsigned integers).
#[inline]
pub fn dot_u8(weights: &[f32], codes: &[u8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if level() == SimdLevel::Avx2 {
        // SAFETY: AVX2 and FMA were detected at run time.
        return unsafe { dot_u8_avx2(weights, codes) };
    }
    #[cfg(target_arch = "aarch64")]
    if level() == SimdLevel::Neon {
        // SAFETY: NEON was detected at run time.
        return unsafe { dot_u8_neon(weights, codes) };
    }
    dot_u8_scalar(weights, codes)
}

/// Scalar reference of [`dot_u8`].
pub fn dot_u8_scalar(weights: &[f32], codes: &[u8]) -> f32 {
    let n = weights.len().min(codes.len());
    dot_scalar(&weights[..n], |i| codes[i] as f32)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_u8_avx2(weights: &[f32], codes: &[u8]) -> f32 {
    use std::arch::x86_64::*;
    let n = weights.len().min(codes.len());
    // SAFETY: `dot16_avx2` asks only for i + 16 <= n, so both 8-byte code loads are in bounds.
    let mut s = unsafe {
        dot16_avx2(&weights[..n], |i| {
            (
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                    codes.as_ptr().add(i) as *const __m128i
                ))),
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                    codes.as_ptr().add(i + 8) as *const __m128i,
                ))),
            )
        })
    };
    for i in n / 16 * 16..n {
        s += weights[i] * codes[i] as f32;
    }
    s
}

/// Σ `weights[i] · level_i` over 4-bit levels packed two to a byte, dimension `2j` in the low
/// nibble of `codes[j]` and `2j + 1` in its high nibble (`sq4`'s layout); `codes` holds at least
/// `weights.len().div_ceil(2)` bytes.
#[inline]
pub fn dot_u4(weights: &[f32], codes: &[u8]) -> f32 {
    assert!(
        codes.len() >= weights.len().div_ceil(2),
        "a byte per two weights"
    );
    #[cfg(target_arch = "x86_64")]
    if level() == SimdLevel::Avx2 {
        // SAFETY: AVX2 and FMA were detected at run time; the length was checked above.
        return unsafe { dot_u4_avx2(weights, codes) };
    }
    #[cfg(target_arch = "aarch64")]
    if level() == SimdLevel::Neon {
        // SAFETY: NEON was detected at run time; the length was checked above.
        return unsafe { dot_u4_neon(weights, codes) };
    }
    dot_u4_scalar(weights, codes)
}

/// Scalar reference of [`dot_u4`].
pub fn dot_u4_scalar(weights: &[f32], codes: &[u8]) -> f32 {
    dot_scalar(weights, |i| ((codes[i / 2] >> ((i & 1) * 4)) & 0x0f) as f32)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_u4_avx2(weights: &[f32], codes: &[u8]) -> f32 {
    use std::arch::x86_64::*;
    let n = weights.len();
    let chunks = n / 16;
    // SAFETY: `dot16_avx2` asks only for i + 16 <= n, so the 8 code bytes at i / 2 end at
    // i / 2 + 8 <= n / 2 <= codes.len() (checked by the caller).
    let simd = unsafe {
        let nibble = _mm_set1_epi8(0x0f);
        dot16_avx2(weights, |i| {
            let bytes = _mm_loadl_epi64(codes.as_ptr().add(i / 2) as *const __m128i);
            let low = _mm_and_si128(bytes, nibble);
            let high = _mm_and_si128(_mm_srli_epi16::<4>(bytes), nibble);
            // Levels in dimension order: low and high nibbles of each byte, interleaved.
            let levels = _mm_unpacklo_epi8(low, high);
            (
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(levels)),
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(levels, levels))),
            )
        })
    };
    simd + dot_u4_tail(weights, codes, chunks * 16)
}

/// Σ over dimensions `from..` of [`dot_u4`] (`from` even), in the scalar reference's order.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn dot_u4_tail(weights: &[f32], codes: &[u8], from: usize) -> f32 {
    dot_u4_scalar(&weights[from..], &codes[from / 2..])
}

/// Σ `weights[i] · h[i]`, `h` being IEEE half floats stored little-endian in `halves`
/// (two bytes each); `halves` holds at least `2 · weights.len()` bytes.
#[inline]
pub fn dot_f16(weights: &[f32], halves: &[u8]) -> f32 {
    assert!(halves.len() >= weights.len() * 2, "two bytes per weight");
    #[cfg(target_arch = "x86_64")]
    if level() == SimdLevel::Avx2 {
        // SAFETY: AVX2, FMA and F16C were detected at run time; the length was checked above.
        return unsafe { dot_f16_avx2(weights, halves) };
    }
    #[cfg(target_arch = "aarch64")]
    if level() == SimdLevel::Neon {
        // SAFETY: NEON was detected at run time; the length was checked above.
        return unsafe { dot_f16_neon(weights, halves) };
    }
    dot_f16_scalar(weights, halves)
}

/// Scalar reference of [`dot_f16`].
pub fn dot_f16_scalar(weights: &[f32], halves: &[u8]) -> f32 {
    dot_scalar(weights, |i| {
        half::f16::from_le_bytes([halves[2 * i], halves[2 * i + 1]]).to_f32()
    })
}

/// Σ weights[i] · value_at(i) in eight lanes, as the SIMD kernels sum (the scalar references
/// of the dot products over stored values).
#[inline(always)]
fn dot_scalar(weights: &[f32], value_at: impl Fn(usize) -> f32) -> f32 {
    let mut acc = [0.0f32; 8];
    let chunks = weights.len() / 8;
    for c in 0..chunks {
        for l in 0..8 {
            acc[l] += weights[c * 8 + l] * value_at(c * 8 + l);
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (i, w) in weights.iter().enumerate().skip(chunks * 8) {
        s += w * value_at(i);
    }
    s
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f16_avx2(weights: &[f32], halves: &[u8]) -> f32 {
    use std::arch::x86_64::*;
    let chunks = weights.len() / 16;
    // SAFETY: `dot16_avx2` asks only for i + 16 <= weights.len(), and halves holds
    // 2 · weights.len() bytes, so both 16-byte loads at 2i and 2i + 16 are in bounds.
    let simd = unsafe {
        dot16_avx2(weights, |i| {
            (
                _mm256_cvtph_ps(_mm_loadu_si128(halves.as_ptr().add(2 * i) as *const __m128i)),
                _mm256_cvtph_ps(_mm_loadu_si128(
                    halves.as_ptr().add(2 * i + 16) as *const __m128i
                )),
            )
        })
    };
    simd + dot_f16_scalar(&weights[chunks * 16..], &halves[chunks * 32..])
}

/// The sum of the 8 lanes of `v`, added in lane order (the AVX2 kernels all reduce this way).
///
/// # Safety
/// AVX must be available.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn sum_lanes_avx2(v: std::arch::x86_64::__m256) -> f32 {
    let mut lanes = [0f32; 8];
    // SAFETY: the caller guarantees AVX; `lanes` holds exactly 8 floats.
    unsafe { std::arch::x86_64::_mm256_storeu_ps(lanes.as_mut_ptr(), v) };
    lanes.iter().sum()
}

/// Σ weights[i] · v[i] over the first 16·⌊n/16⌋ weights, `load(i)` giving values i..i + 8 and
/// i + 8..i + 16 as two vectors; the caller adds the tail. Inlined into AVX2 kernels. Two
/// chunks of 16 go into four accumulators per step, so that four chains of additions run side
/// by side (an FMA's result waits about four cycles before the next may use it).
///
/// # Safety
/// AVX2 and FMA must be available, and `load(i)` must be safe to call for every multiple of
/// 16 with i + 16 <= weights.len().
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn dot16_avx2(
    weights: &[f32],
    load: impl Fn(usize) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256),
) -> f32 {
    use std::arch::x86_64::*;
    let chunks = weights.len() / 16;
    let w = weights.as_ptr();
    // SAFETY (for every intrinsic below): the caller guarantees AVX2 and FMA; `load` and the
    // weight loads are called only for chunks c < chunks (i = 16c), whose weights end at
    // 16c + 16 <= 16 · chunks <= weights.len().
    unsafe {
        let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let (mut a2, mut a3) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for pair in 0..chunks / 2 {
            let i = pair * 32;
            let (v0, v1) = load(i);
            let (v2, v3) = load(i + 16);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w.add(i)), v0, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w.add(i + 8)), v1, a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w.add(i + 16)), v2, a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w.add(i + 24)), v3, a3);
        }
        if chunks % 2 == 1 {
            let i = (chunks - 1) * 16;
            let (v0, v1) = load(i);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w.add(i)), v0, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w.add(i + 8)), v1, a1);
        }
        sum_lanes_avx2(_mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3)))
    }
}

/// `out[r] = Σ_j matrix[r·cols + j] · x[j]` for every row `r` of `matrix`, layout (rows, cols)
/// row-major, with `x` (cols,) and `out` (rows,): one vector through a matrix, as a lone
/// query is rotated. The SIMD kernels take eight rows at a time, so that their sums run side
/// by side instead of each waiting on its own chain of additions.
pub fn matrix_vector(matrix: &[f32], cols: usize, x: &[f32], out: &mut [f32]) {
    check_matrix_vector(matrix, cols, x, out);
    #[cfg(target_arch = "x86_64")]
    if level() == SimdLevel::Avx2 {
        // SAFETY: AVX2 and FMA were detected at run time; the shapes were checked above.
        return unsafe { matrix_vector_avx2(matrix, cols, x, out) };
    }
    #[cfg(target_arch = "aarch64")]
    if level() == SimdLevel::Neon {
        // SAFETY: NEON was detected at run time; the shapes were checked above.
        return unsafe { matrix_vector_neon(matrix, cols, x, out) };
    }
    matrix_vector_scalar(matrix, cols, x, out)
}

/// Scalar reference of [`matrix_vector`]: one dot product per row.
pub fn matrix_vector_scalar(matrix: &[f32], cols: usize, x: &[f32], out: &mut [f32]) {
    check_matrix_vector(matrix, cols, x, out);
    for (r, o) in out.iter_mut().enumerate() {
        *o = crate::linalg::dot(&matrix[r * cols..(r + 1) * cols], x);
    }
}

/// [`matrix_vector`]'s shapes: `x` (cols,), `matrix` (out.len(), cols).
fn check_matrix_vector(matrix: &[f32], cols: usize, x: &[f32], out: &[f32]) {
    assert_eq!(x.len(), cols, "x holds one value per column");
    assert_eq!(
        matrix.len(),
        out.len() * cols,
        "the matrix holds out.len() rows of cols values"
    );
}

/// Rows side by side in [`matrix_vector`]'s SIMD kernels.
const MATRIX_VECTOR_ROWS: usize = 8;

/// [`matrix_vector`] on AVX2.
///
/// # Safety
/// AVX2 and FMA must be available; `x` holds `cols` values and `matrix` `out.len()` rows of
/// `cols`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn matrix_vector_avx2(matrix: &[f32], cols: usize, x: &[f32], out: &mut [f32]) {
    const R: usize = MATRIX_VECTOR_ROWS;
    let wide = out.len() / R * R;
    for r in (0..wide).step_by(R) {
        // SAFETY: the caller's guarantees, for rows r..r + R, which exist.
        unsafe { rows_avx2::<R>(&matrix[r * cols..(r + R) * cols], x, &mut out[r..r + R]) };
    }
    for r in wide..out.len() {
        // SAFETY: as above, for row r.
        unsafe { rows_avx2::<1>(&matrix[r * cols..(r + 1) * cols], x, &mut out[r..r + 1]) };
    }
}

/// [`matrix_vector`] of `rows` (N, x.len()) into `out` (N,), one 8-lane accumulator per row;
/// the columns past the last multiple of 8 are added by [`crate::linalg::dot`].
///
/// # Safety
/// AVX2 and FMA must be available; `rows` holds N rows of `x.len()` values.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn rows_avx2<const N: usize>(rows: &[f32], x: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let cols = x.len();
    let chunks = cols / 8;
    // SAFETY: the caller guarantees AVX2, FMA and the rows; every 8-value load at column 8c
    // ends at 8c + 8 <= cols, inside its row and inside x.
    let sums = unsafe {
        let mut acc = [_mm256_setzero_ps(); N];
        for c in 0..chunks {
            let v = _mm256_loadu_ps(x.as_ptr().add(c * 8));
            for (r, a) in acc.iter_mut().enumerate() {
                let m = _mm256_loadu_ps(rows.as_ptr().add(r * cols + c * 8));
                *a = _mm256_fmadd_ps(m, v, *a);
            }
        }
        acc.map(|a| sum_lanes_avx2(a))
    };
    for (r, (o, s)) in out.iter_mut().zip(sums).enumerate() {
        *o = s + crate::linalg::dot(
            &rows[r * cols + chunks * 8..(r + 1) * cols],
            &x[chunks * 8..],
        );
    }
}

/// Σ `weights[i] · v[i]`, `v` being f32 values stored little-endian in `bytes` (four bytes
/// each, any alignment); `bytes` holds at least `4 · weights.len()` bytes.
#[inline]
pub fn dot_f32_bytes(weights: &[f32], bytes: &[u8]) -> f32 {
    assert!(bytes.len() >= weights.len() * 4, "four bytes per weight");
    #[cfg(target_arch = "x86_64")]
    if level() == SimdLevel::Avx2 {
        // SAFETY: AVX2 and FMA were detected at run time; the length was checked above.
        return unsafe { dot_f32_bytes_avx2(weights, bytes) };
    }
    #[cfg(target_arch = "aarch64")]
    if level() == SimdLevel::Neon {
        // SAFETY: NEON was detected at run time; the length was checked above.
        return unsafe { dot_f32_bytes_neon(weights, bytes) };
    }
    dot_f32_bytes_scalar(weights, bytes)
}

/// Scalar reference of [`dot_f32_bytes`].
pub fn dot_f32_bytes_scalar(weights: &[f32], bytes: &[u8]) -> f32 {
    dot_scalar(weights, |i| {
        f32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap())
    })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_f32_bytes_avx2(weights: &[f32], bytes: &[u8]) -> f32 {
    use std::arch::x86_64::*;
    let chunks = weights.len() / 16;
    // SAFETY: `dot16_avx2` asks only for i + 16 <= weights.len(), and bytes holds
    // 4 · weights.len() bytes, so the unaligned 8-float loads at byte offsets 4i and 4i + 32
    // are in bounds.
    let simd = unsafe {
        dot16_avx2(weights, |i| {
            (
                _mm256_loadu_ps(bytes.as_ptr().add(4 * i) as *const f32),
                _mm256_loadu_ps(bytes.as_ptr().add(4 * i + 32) as *const f32),
            )
        })
    };
    simd + dot_f32_bytes_scalar(&weights[chunks * 16..], &bytes[chunks * 64..])
}

/// `Σ weights[i]` over the set bits `i` of the bit plane `bits` (bit `i` is bit `i % 8` of
/// byte `i / 8`); `weights` holds at least `8 · bits.len()` values.
#[inline]
pub fn bit_sum(weights: &[f32], bits: &[u8]) -> f32 {
    assert!(weights.len() >= bits.len() * 8, "one weight per bit");
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: AVX-512F was detected at run time; the length was checked above.
        return unsafe { bit_sum_avx512(weights, bits) };
    }
    #[cfg(target_arch = "x86_64")]
    if level() == SimdLevel::Avx2 {
        // SAFETY: AVX2 was detected at run time; the length was checked above.
        return unsafe { bit_sum_avx2(weights, bits) };
    }
    #[cfg(target_arch = "aarch64")]
    if level() == SimdLevel::Neon {
        // SAFETY: NEON was detected at run time; the length was checked above.
        return unsafe { bit_sum_neon(weights, bits) };
    }
    bit_sum_scalar(weights, bits)
}

/// Scalar reference of [`bit_sum`].
pub fn bit_sum_scalar(weights: &[f32], bits: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    for (byte, w) in bits.iter().zip(weights.chunks_exact(8)) {
        for l in 0..8 {
            if byte >> l & 1 == 1 {
                acc[l] += w[l];
            }
        }
    }
    acc.iter().sum()
}

/// Lane masks of the bits of a byte: entry `b`, lane `l` is all ones where bit `l` of `b` is
/// set. Layout: (256, 8) i32, each entry one 32-byte row.
#[cfg(target_arch = "x86_64")]
#[repr(C, align(32))]
struct ByteMasks([[i32; 8]; 256]);

#[cfg(target_arch = "x86_64")]
static BYTE_MASKS: ByteMasks = {
    let mut masks = [[0i32; 8]; 256];
    let mut b = 0;
    while b < 256 {
        let mut l = 0;
        while l < 8 {
            masks[b][l] = if b >> l & 1 == 1 { -1 } else { 0 };
            l += 1;
        }
        b += 1;
    }
    ByteMasks(masks)
};

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn bit_sum_avx2(weights: &[f32], bits: &[u8]) -> f32 {
    // SAFETY: AVX2 is enabled here; the caller's length guarantee is plane_sum_avx2's.
    unsafe { sum_lanes_avx2(plane_sum_avx2(weights, bits)) }
}

/// Lane sums of the weights over the set bits of `bits`: each byte's lane mask comes from
/// [`BYTE_MASKS`] (one load instead of a broadcast, an and and a compare), bytes `j` added
/// into accumulator `j % 4`.
///
/// # Safety
/// AVX2 must be available, and `weights.len() >= 8 · bits.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn plane_sum_avx2(weights: &[f32], bits: &[u8]) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let (mut a0, mut a1, mut a2, mut a3) = (
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
    );
    // SAFETY (both loads): a mask row is 8 i32 of BYTE_MASKS; the caller guarantees
    // weights.len() >= 8 · bits.len() >= 8·j + 8 for every byte j.
    let term = |j: usize| unsafe {
        let mask = _mm256_load_ps(BYTE_MASKS.0[bits[j] as usize].as_ptr() as *const f32);
        _mm256_and_ps(_mm256_loadu_ps(weights.as_ptr().add(8 * j)), mask)
    };
    let quads = bits.len() / 4;
    for q in 0..quads {
        let j = 4 * q;
        a0 = _mm256_add_ps(a0, term(j));
        a1 = _mm256_add_ps(a1, term(j + 1));
        a2 = _mm256_add_ps(a2, term(j + 2));
        a3 = _mm256_add_ps(a3, term(j + 3));
    }
    let tail = 4 * quads;
    if tail < bits.len() {
        a0 = _mm256_add_ps(a0, term(tail));
    }
    if tail + 1 < bits.len() {
        a1 = _mm256_add_ps(a1, term(tail + 1));
    }
    if tail + 2 < bits.len() {
        a2 = _mm256_add_ps(a2, term(tail + 2));
    }
    _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))
}

/// [`bit_sum`] with AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn bit_sum_avx512(weights: &[f32], bits: &[u8]) -> f32 {
    use std::arch::x86_64::*;
    // SAFETY: AVX-512F is enabled here; the caller's length guarantee is plane_sum_avx512's.
    _mm512_reduce_add_ps(unsafe { plane_sum_avx512(weights, bits) })
}

/// Lane sums of the weights over the set bits of `bits`: every two bytes of the plane are the
/// mask of one masked add of 16 weights, an odd last byte that of a masked load of 8.
///
/// # Safety
/// AVX-512F must be available, and `weights.len() >= 8 · bits.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn plane_sum_avx512(weights: &[f32], bits: &[u8]) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let pairs = bits.len() / 2;
    // Four independent accumulators (named, so they stay in registers): a masked add has a
    // latency of about four cycles and two issue per cycle.
    let (mut a0, mut a1, mut a2, mut a3) = (
        _mm512_setzero_ps(),
        _mm512_setzero_ps(),
        _mm512_setzero_ps(),
        _mm512_setzero_ps(),
    );
    let mask = |p: usize| u16::from_le_bytes([bits[2 * p], bits[2 * p + 1]]);
    // SAFETY (both loads): the caller guarantees weights.len() >= 8 · bits.len() >= 16·p + 16
    // for every p < pairs.
    let load = |p: usize| unsafe { _mm512_loadu_ps(weights.as_ptr().add(16 * p)) };
    let quads = pairs / 4;
    for q in 0..quads {
        let p = 4 * q;
        a0 = _mm512_mask_add_ps(a0, mask(p), a0, load(p));
        a1 = _mm512_mask_add_ps(a1, mask(p + 1), a1, load(p + 1));
        a2 = _mm512_mask_add_ps(a2, mask(p + 2), a2, load(p + 2));
        a3 = _mm512_mask_add_ps(a3, mask(p + 3), a3, load(p + 3));
    }
    for p in 4 * quads..pairs {
        a0 = _mm512_mask_add_ps(a0, mask(p), a0, load(p));
    }
    if bits.len() % 2 == 1 {
        // SAFETY: lanes 0..8 of the load are weights 16·pairs .. 16·pairs + 8, within
        // 8 · bits.len(); the masked-out lanes 8..16 are not read.
        let w = unsafe { _mm512_maskz_loadu_ps(0x00FF, weights.as_ptr().add(16 * pairs)) };
        a1 = _mm512_mask_add_ps(a1, bits[2 * pairs] as u16, a1, w);
    }
    _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))
}

/// One term of [`weighted_bit_sums`]: `scale · Σ weights[i]` over the set bits `i` of `bits`
/// (`weights` holds at least `8 · bits.len()` values).
#[derive(Clone, Copy)]
pub struct BitTerm<'a> {
    pub weights: &'a [f32],
    pub bits: &'a [u8],
    pub scale: f32,
}

impl BitTerm<'_> {
    /// A term that adds nothing, to fill fixed-size arrays of terms.
    pub const EMPTY: BitTerm<'static> = BitTerm {
        weights: &[],
        bits: &[],
        scale: 0.0,
    };
}

/// `Σ_t scale_t · bit_sum(weights_t, bits_t)`: a multi-bit code's estimate over all its bit
/// planes in one call, with one horizontal reduction (per-plane [`bit_sum`] calls spent more
/// on reductions and tails than on the sums of short planes).
#[inline]
pub fn weighted_bit_sums(terms: &[BitTerm]) -> f32 {
    weighted_bit_sums_checked(terms, terms.len(), |_, _| true)
        .expect("no check runs, so nothing stops the sum")
}

/// [`weighted_bit_sums`] that may stop early: after each term `t` from `check_from` on, the
/// last excepted, it calls `go_on(t, partial)` with the sum of terms `0..=t`, and returns
/// `None` as soon as that gives false. The sum it returns is bit-identical to [`weighted_bit_sums`]' (same order of
/// additions; the checks only read the partial sums).
#[inline]
pub fn weighted_bit_sums_checked(
    terms: &[BitTerm],
    check_from: usize,
    go_on: impl FnMut(usize, f32) -> bool,
) -> Option<f32> {
    for t in terms {
        assert!(t.weights.len() >= t.bits.len() * 8, "one weight per bit");
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: AVX-512F was detected at run time; the lengths were checked above.
        return unsafe { weighted_bit_sums_avx512(terms, check_from, go_on) };
    }
    #[cfg(target_arch = "x86_64")]
    if level() == SimdLevel::Avx2 {
        // SAFETY: AVX2 and FMA were detected at run time; the lengths were checked above.
        return unsafe { weighted_bit_sums_avx2(terms, check_from, go_on) };
    }
    weighted_bit_sums_scalar_checked(terms, check_from, go_on)
}

/// Scalar reference of [`weighted_bit_sums`] (and the NEON level's path, through [`bit_sum`]).
pub fn weighted_bit_sums_scalar(terms: &[BitTerm]) -> f32 {
    weighted_bit_sums_scalar_checked(terms, terms.len(), |_, _| true)
        .expect("no check runs, so nothing stops the sum")
}

fn weighted_bit_sums_scalar_checked(
    terms: &[BitTerm],
    check_from: usize,
    mut go_on: impl FnMut(usize, f32) -> bool,
) -> Option<f32> {
    let mut total = 0f32;
    for (i, t) in terms.iter().enumerate() {
        total += t.scale * bit_sum(t.weights, t.bits);
        if i >= check_from && i + 1 < terms.len() && !go_on(i, total) {
            return None;
        }
    }
    Some(total)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn weighted_bit_sums_avx512(
    terms: &[BitTerm],
    check_from: usize,
    mut go_on: impl FnMut(usize, f32) -> bool,
) -> Option<f32> {
    use std::arch::x86_64::*;
    let mut total = _mm512_setzero_ps();
    for (i, t) in terms.iter().enumerate() {
        // SAFETY: AVX-512F is enabled here; the caller checked every term's lengths.
        let sum = unsafe { plane_sum_avx512(t.weights, t.bits) };
        total = _mm512_fmadd_ps(sum, _mm512_set1_ps(t.scale), total);
        if i >= check_from && i + 1 < terms.len() && !go_on(i, _mm512_reduce_add_ps(total)) {
            return None;
        }
    }
    Some(_mm512_reduce_add_ps(total))
}

/// [`weighted_bit_sums_checked`] on AVX2: the planes' lane sums scaled into one vector, reduced
/// once at the end (and at each check), as the AVX-512 variant does.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn weighted_bit_sums_avx2(
    terms: &[BitTerm],
    check_from: usize,
    mut go_on: impl FnMut(usize, f32) -> bool,
) -> Option<f32> {
    use std::arch::x86_64::*;
    let mut total = _mm256_setzero_ps();
    for (i, t) in terms.iter().enumerate() {
        // SAFETY: AVX2 is enabled here; the caller checked every term's lengths.
        let sum = unsafe { plane_sum_avx2(t.weights, t.bits) };
        total = _mm256_fmadd_ps(sum, _mm256_set1_ps(t.scale), total);
        // SAFETY: AVX2 is enabled here.
        if i >= check_from && i + 1 < terms.len() && !go_on(i, unsafe { sum_lanes_avx2(total) }) {
            return None;
        }
    }
    // SAFETY: AVX2 is enabled here.
    Some(unsafe { sum_lanes_avx2(total) })
}

/// Bit j of the result is set when `values[j] < limit`, for the first min(len, 32) values
/// (NaN never passes).
#[inline]
pub fn below_mask(values: &[f32], limit: f32) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if level() == SimdLevel::Avx2 && values.len() >= 32 {
        // SAFETY: AVX2 was detected at run time and values holds at least 32 floats.
        return unsafe { below_mask32_avx2(values, limit) };
    }
    #[cfg(target_arch = "aarch64")]
    if level() == SimdLevel::Neon && values.len() >= 32 {
        // SAFETY: NEON was detected at run time and values holds at least 32 floats.
        return unsafe { below_mask32_neon(values, limit) };
    }
    below_mask_scalar(values, limit)
}

/// Scalar reference of [`below_mask`].
pub fn below_mask_scalar(values: &[f32], limit: f32) -> u32 {
    values
        .iter()
        .take(32)
        .enumerate()
        .fold(0u32, |m, (j, &v)| m | ((v < limit) as u32) << j)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn below_mask32_avx2(values: &[f32], limit: f32) -> u32 {
    use std::arch::x86_64::*;
    let l = _mm256_set1_ps(limit);
    let mut mask = 0u32;
    for c in 0..4 {
        // SAFETY: the caller guarantees 32 values; c·8 + 8 <= 32.
        let v = unsafe { _mm256_loadu_ps(values.as_ptr().add(c * 8)) };
        let m = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(v, l)) as u32;
        mask |= m << (c * 8);
    }
    mask
}

// ---- NEON (aarch64) variants. NEON is part of every aarch64 target, so these compile on any
// 64-bit ARM build and run where `detect` finds it (always, in practice).

/// [`dot_u8`] with NEON: 16 codes per step, widened to f32 in four vectors of four.
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn dot_u8_neon(weights: &[f32], codes: &[u8]) -> f32 {
    use std::arch::aarch64::*;
    let n = weights.len().min(codes.len());
    // SAFETY: `dot16_neon` asks only for i + 16 <= n, so the 16-byte code load is in bounds.
    let simd = unsafe {
        dot16_neon(&weights[..n], |i| {
            let v = vld1q_u8(codes.as_ptr().add(i));
            let (lo, hi) = (vmovl_u8(vget_low_u8(v)), vmovl_high_u8(v));
            [
                vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo))),
                vcvtq_f32_u32(vmovl_high_u16(lo)),
                vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi))),
                vcvtq_f32_u32(vmovl_high_u16(hi)),
            ]
        })
    };
    let tail = n / 16 * 16;
    simd + dot_u8_scalar(&weights[tail..n], &codes[tail..n])
}

/// [`dot_u4`] with NEON: 8 code bytes per step, their nibbles interleaved into 16 levels in
/// dimension order and widened to f32 as [`dot_u8_neon`] widens its bytes.
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn dot_u4_neon(weights: &[f32], codes: &[u8]) -> f32 {
    use std::arch::aarch64::*;
    let chunks = weights.len() / 16;
    // SAFETY: `dot16_neon` asks only for i + 16 <= weights.len(), so the 8 code bytes at i / 2
    // end at i / 2 + 8 <= codes.len() (checked by the caller).
    let simd = unsafe {
        dot16_neon(weights, |i| {
            let bytes = vld1_u8(codes.as_ptr().add(i / 2));
            let (low, high) = (vand_u8(bytes, vdup_n_u8(0x0f)), vshr_n_u8::<4>(bytes));
            let (lo, hi) = (vmovl_u8(vzip1_u8(low, high)), vmovl_u8(vzip2_u8(low, high)));
            [
                vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo))),
                vcvtq_f32_u32(vmovl_high_u16(lo)),
                vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi))),
                vcvtq_f32_u32(vmovl_high_u16(hi)),
            ]
        })
    };
    simd + dot_u4_tail(weights, codes, chunks * 16)
}

/// [`dot_f16`] with NEON. Stable Rust has no f16 vector conversion on aarch64, so halves are
/// widened with integer operations, exactly: the magnitude bits shifted into an f32's place
/// and multiplied by 2^112 give every finite half (subnormals included) exactly; infinities
/// and NaNs get the all-ones exponent; the sign is copied.
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn dot_f16_neon(weights: &[f32], halves: &[u8]) -> f32 {
    use std::arch::aarch64::*;
    let scale = vdupq_n_f32(f32::from_bits(0x7780_0000)); // 2^112
    let widen = |h: uint32x4_t| -> float32x4_t {
        let magnitude = vshlq_n_u32::<13>(vandq_u32(h, vdupq_n_u32(0x7fff)));
        let finite = vmulq_f32(vreinterpretq_f32_u32(magnitude), scale);
        // Half exponent all ones (inf, NaN): the f32 exponent all ones, the mantissa kept.
        let special = vceqq_u32(vandq_u32(h, vdupq_n_u32(0x7c00)), vdupq_n_u32(0x7c00));
        let special_bits = vorrq_u32(magnitude, vdupq_n_u32(0x7f80_0000));
        let bits = vbslq_u32(special, special_bits, vreinterpretq_u32_f32(finite));
        let sign = vshlq_n_u32::<16>(vandq_u32(h, vdupq_n_u32(0x8000)));
        vreinterpretq_f32_u32(vorrq_u32(bits, sign))
    };
    let chunks = weights.len() / 16;
    // SAFETY: `dot16_neon` asks only for i + 16 <= weights.len(), and halves holds
    // 2 · weights.len() bytes, so both 16-byte loads at 2i and 2i + 16 are in bounds.
    let simd = unsafe {
        dot16_neon(weights, |i| {
            let a = vreinterpretq_u16_u8(vld1q_u8(halves.as_ptr().add(2 * i)));
            let b = vreinterpretq_u16_u8(vld1q_u8(halves.as_ptr().add(2 * i + 16)));
            [
                widen(vmovl_u16(vget_low_u16(a))),
                widen(vmovl_high_u16(a)),
                widen(vmovl_u16(vget_low_u16(b))),
                widen(vmovl_high_u16(b)),
            ]
        })
    };
    simd + dot_f16_scalar(&weights[chunks * 16..], &halves[chunks * 32..])
}

/// [`matrix_vector`] on NEON.
///
/// # Safety
/// `x` holds `cols` values and `matrix` `out.len()` rows of `cols`.
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn matrix_vector_neon(matrix: &[f32], cols: usize, x: &[f32], out: &mut [f32]) {
    const R: usize = MATRIX_VECTOR_ROWS;
    let wide = out.len() / R * R;
    for r in (0..wide).step_by(R) {
        // SAFETY: the caller's guarantees, for rows r..r + R, which exist.
        unsafe { rows_neon::<R>(&matrix[r * cols..(r + R) * cols], x, &mut out[r..r + R]) };
    }
    for r in wide..out.len() {
        // SAFETY: as above, for row r.
        unsafe { rows_neon::<1>(&matrix[r * cols..(r + 1) * cols], x, &mut out[r..r + 1]) };
    }
}

/// [`matrix_vector`] of `rows` (N, x.len()) into `out` (N,), one 4-lane accumulator per row;
/// the columns past the last multiple of 4 are added by [`crate::linalg::dot`].
///
/// # Safety
/// `rows` holds N rows of `x.len()` values.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
unsafe fn rows_neon<const N: usize>(rows: &[f32], x: &[f32], out: &mut [f32]) {
    use std::arch::aarch64::*;
    let cols = x.len();
    let chunks = cols / 4;
    // SAFETY: every 4-value load at column 4c ends at 4c + 4 <= cols, inside its row (the
    // caller guarantees N rows) and inside x.
    let sums = unsafe {
        let mut acc = [vdupq_n_f32(0.0); N];
        for c in 0..chunks {
            let v = vld1q_f32(x.as_ptr().add(c * 4));
            for (r, a) in acc.iter_mut().enumerate() {
                *a = vfmaq_f32(*a, vld1q_f32(rows.as_ptr().add(r * cols + c * 4)), v);
            }
        }
        acc.map(|a| vaddvq_f32(a))
    };
    for (r, (o, s)) in out.iter_mut().zip(sums).enumerate() {
        *o = s + crate::linalg::dot(
            &rows[r * cols + chunks * 4..(r + 1) * cols],
            &x[chunks * 4..],
        );
    }
}

/// [`dot_f32_bytes`] with NEON (byte loads, so any alignment of `bytes` is fine).
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn dot_f32_bytes_neon(weights: &[f32], bytes: &[u8]) -> f32 {
    use std::arch::aarch64::*;
    let chunks = weights.len() / 16;
    // SAFETY: `dot16_neon` asks only for i + 16 <= weights.len(), and bytes holds
    // 4 · weights.len() bytes, so the four 16-byte loads from byte 4i end at 4i + 64.
    let simd = unsafe {
        dot16_neon(weights, |i| {
            let at = |k: usize| vreinterpretq_f32_u8(vld1q_u8(bytes.as_ptr().add(4 * i + 16 * k)));
            [at(0), at(1), at(2), at(3)]
        })
    };
    simd + dot_f32_bytes_scalar(&weights[chunks * 16..], &bytes[chunks * 64..])
}

/// Σ weights[i] · v[i] over the first 16·⌊n/16⌋ weights, `load(i)` giving values i..i + 16 as
/// four vectors; the caller adds the tail. Inlined into the NEON kernels.
///
/// # Safety
/// `load(i)` must be safe to call for every multiple of 16 with i + 16 <= weights.len().
#[cfg(target_arch = "aarch64")]
#[inline(always)]
unsafe fn dot16_neon(
    weights: &[f32],
    load: impl Fn(usize) -> [std::arch::aarch64::float32x4_t; 4],
) -> f32 {
    use std::arch::aarch64::*;
    let chunks = weights.len() / 16;
    // SAFETY (for every load below): the weight loads at i + 4k end at i + 16 <= weights.len().
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 4];
        for c in 0..chunks {
            let i = c * 16;
            let v = load(i);
            for k in 0..4 {
                let w = vld1q_f32(weights.as_ptr().add(i + 4 * k));
                acc[k] = vfmaq_f32(acc[k], w, v[k]);
            }
        }
        vaddvq_f32(vaddq_f32(
            vaddq_f32(acc[0], acc[1]),
            vaddq_f32(acc[2], acc[3]),
        ))
    }
}

/// [`bit_sum`] with NEON: each byte's bits select, by lane tests, which of its 8 weights are
/// added; even and odd bytes go to separate accumulators.
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn bit_sum_neon(weights: &[f32], bits: &[u8]) -> f32 {
    use std::arch::aarch64::*;
    // SAFETY: both arrays hold four u32.
    let (select_lo, select_hi) = unsafe {
        (
            vld1q_u32([1u32, 2, 4, 8].as_ptr()),
            vld1q_u32([16u32, 32, 64, 128].as_ptr()),
        )
    };
    let masked = |w: float32x4_t, byte: uint32x4_t, select: uint32x4_t| {
        vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(w), vtstq_u32(byte, select)))
    };
    let zero = vdupq_n_f32(0.0);
    let (mut a0, mut a1, mut a2, mut a3) = (zero, zero, zero, zero);
    for (j, &byte) in bits.iter().enumerate() {
        let b = vdupq_n_u32(byte as u32);
        // SAFETY: the caller checked weights.len() >= 8 · bits.len(), so j·8 + 8 is in bounds.
        let (w0, w1) = unsafe {
            (
                vld1q_f32(weights.as_ptr().add(j * 8)),
                vld1q_f32(weights.as_ptr().add(j * 8 + 4)),
            )
        };
        if j & 1 == 0 {
            a0 = vaddq_f32(a0, masked(w0, b, select_lo));
            a1 = vaddq_f32(a1, masked(w1, b, select_hi));
        } else {
            a2 = vaddq_f32(a2, masked(w0, b, select_lo));
            a3 = vaddq_f32(a3, masked(w1, b, select_hi));
        }
    }
    vaddvq_f32(vaddq_f32(vaddq_f32(a0, a2), vaddq_f32(a1, a3)))
}

#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn below_mask32_neon(values: &[f32], limit: f32) -> u32 {
    use std::arch::aarch64::*;
    let l = vdupq_n_f32(limit);
    // SAFETY: the array holds four u32.
    let select = unsafe { vld1q_u32([1u32, 2, 4, 8].as_ptr()) };
    let mut mask = 0u32;
    for c in 0..8 {
        // SAFETY: the caller guarantees 32 values; c·4 + 4 <= 32.
        let v = unsafe { vld1q_f32(values.as_ptr().add(c * 4)) };
        // Lanes below the limit (false for NaN) keep their bit; the sum packs the four bits.
        mask |= vaddvq_u32(vandq_u32(vcltq_f32(v, l), select)) << (c * 4);
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    fn dot_u8_simd_matches_scalar_for_every_tail() {
        let mut r = Rng::new(1);
        for n in 0..70 {
            let w: Vec<f32> = (0..n).map(|_| r.normal() as f32).collect();
            let c: Vec<u8> = (0..n).map(|_| r.below(256) as u8).collect();
            let (a, b) = (dot_u8(&w, &c), dot_u8_scalar(&w, &c));
            assert!((a - b).abs() <= 1e-3 * (1.0 + b.abs()), "n {n}: {a} vs {b}");
        }
    }

    #[test]
    fn dot_u4_simd_matches_scalar_for_every_tail() {
        // Odd and even lengths around the kernels' 16-level chunks; the high nibble of an odd
        // length's last byte holds junk, which neither may count.
        let mut r = Rng::new(2);
        for n in 0..75 {
            let w: Vec<f32> = (0..n).map(|_| r.normal() as f32).collect();
            let levels: Vec<u8> = (0..n).map(|_| r.below(16) as u8).collect();
            let mut codes: Vec<u8> = levels
                .chunks(2)
                .map(|p| p[0] | (p.get(1).copied().unwrap_or(0x0f) << 4))
                .collect();
            codes.push(0xff); // a byte past the code, which neither may count either
            let exact: f64 = w
                .iter()
                .zip(&levels)
                .map(|(w, l)| *w as f64 * *l as f64)
                .sum();
            let size: f64 = w
                .iter()
                .zip(&levels)
                .map(|(w, l)| (*w * *l as f32).abs() as f64)
                .sum();
            let (a, b) = (dot_u4(&w, &codes), dot_u4_scalar(&w, &codes));
            let bound = 1e-6 * (1.0 + size);
            assert!(
                (a as f64 - exact).abs() <= bound,
                "n {n}: simd {a} vs {exact}"
            );
            assert!(
                (b as f64 - exact).abs() <= bound,
                "n {n}: scalar {b} vs {exact}"
            );
        }
    }

    #[test]
    fn matrix_vector_matches_scalar_for_every_shape() {
        // Row counts around the kernels' groups of 8 and column counts around their 8- and
        // 4-lane chunks; each row of the result checked against an f64 sum, with a bound
        // scaled by the sum of |m · x| (f32 rounding, not cancellation, is what may differ).
        let mut r = Rng::new(5);
        for rows in [0usize, 1, 3, 7, 8, 9, 16, 17, 23] {
            for cols in [0usize, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100] {
                let matrix: Vec<f32> = (0..rows * cols).map(|_| r.normal() as f32).collect();
                let x: Vec<f32> = (0..cols).map(|_| r.normal() as f32).collect();
                let (mut simd, mut scalar) = (vec![f32::NAN; rows], vec![f32::NAN; rows]);
                matrix_vector(&matrix, cols, &x, &mut simd);
                matrix_vector_scalar(&matrix, cols, &x, &mut scalar);
                for (i, (a, b)) in simd.iter().zip(&scalar).enumerate() {
                    let row = &matrix[i * cols..(i + 1) * cols];
                    let exact: f64 = row.iter().zip(&x).map(|(m, v)| *m as f64 * *v as f64).sum();
                    let size: f64 = row
                        .iter()
                        .zip(&x)
                        .map(|(m, v)| (*m * *v).abs() as f64)
                        .sum();
                    let bound = 1e-6 * (1.0 + size);
                    let where_ = format!("{rows} x {cols}, row {i}");
                    assert!(
                        (*a as f64 - exact).abs() <= bound,
                        "{where_}: {a} vs {exact}"
                    );
                    assert!(
                        (*b as f64 - exact).abs() <= bound,
                        "{where_}: {b} vs {exact}"
                    );
                }
            }
        }
    }

    #[test]
    fn dot_f16_simd_matches_scalar_for_every_tail() {
        let mut r = Rng::new(3);
        for n in 0..70 {
            let w: Vec<f32> = (0..n).map(|_| r.normal() as f32).collect();
            let values: Vec<f32> = (0..n).map(|_| r.normal() as f32).collect();
            let halves: Vec<u8> = values
                .iter()
                .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
                .collect();
            let exact: f32 = w
                .iter()
                .zip(&values)
                .map(|(w, v)| w * half::f16::from_f32(*v).to_f32())
                .sum();
            let (a, b) = (dot_f16(&w, &halves), dot_f16_scalar(&w, &halves));
            assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "n={n}: {a} vs {b}");
            assert!(
                (b - exact).abs() <= 1e-4 * (1.0 + exact.abs()),
                "n={n}: {b} vs {exact}"
            );
        }
    }

    #[test]
    fn dot_f16_widens_every_half_exactly() {
        // One-hot weights pick out each half value in each lane of a 16-value chunk, so the
        // SIMD widening (integer operations on NEON, F16C on x86) is checked for all 65,536
        // bit patterns: zeros, subnormals, normals, infinities and NaNs.
        let mut w = [0f32; 16];
        let mut halves = [0u8; 32];
        for bits in 0..=u16::MAX {
            let lane = bits as usize % 16;
            w.fill(0.0);
            w[lane] = 1.0;
            halves.fill(0);
            halves[2 * lane..2 * lane + 2].copy_from_slice(&bits.to_le_bytes());
            let want = half::f16::from_bits(bits).to_f32();
            let got = dot_f16(&w, &halves);
            assert!(
                got == want || (got.is_nan() && want.is_nan()),
                "half {bits:#06x}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn the_detected_level_fits_the_architecture() {
        let forced = std::env::var_os("VLC_FORCE_SCALAR").is_some();
        #[cfg(target_arch = "aarch64")]
        assert_eq!(
            level() == SimdLevel::Neon,
            !forced,
            "every aarch64 CPU has NEON"
        );
        #[cfg(not(target_arch = "aarch64"))]
        assert_ne!(level(), SimdLevel::Neon);
        if forced {
            assert_eq!(level(), SimdLevel::Scalar);
        }
        assert!(kernels().starts_with(match level() {
            SimdLevel::Scalar => "scalar",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Neon => "neon",
        }));
    }

    #[test]
    fn dot_f32_bytes_simd_matches_scalar_for_every_tail_and_offset() {
        let mut r = Rng::new(4);
        for n in 0..70 {
            let w: Vec<f32> = (0..n).map(|_| r.normal() as f32).collect();
            let values: Vec<f32> = (0..n).map(|_| r.normal() as f32).collect();
            let exact: f64 = w.iter().zip(&values).map(|(w, v)| (w * v) as f64).sum();
            // Codes sit at any byte offset inside a list: test unaligned starts too.
            for offset in 0..4 {
                let mut bytes = vec![0xAAu8; offset];
                bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
                let bytes = &bytes[offset..];
                let (a, b) = (dot_f32_bytes(&w, bytes), dot_f32_bytes_scalar(&w, bytes));
                assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "n={n}: {a} vs {b}");
                assert!(
                    (b as f64 - exact).abs() <= 1e-5 * (1.0 + exact.abs()),
                    "n={n}: {b} vs {exact}"
                );
            }
        }
    }

    #[test]
    fn bit_sum_simd_matches_scalar_and_brute_force() {
        let mut r = Rng::new(2);
        for bytes in 0..37 {
            let w: Vec<f32> = (0..bytes * 8 + 3).map(|_| r.normal() as f32).collect();
            let plane: Vec<u8> = (0..bytes).map(|_| r.below(256) as u8).collect();
            let brute: f32 = (0..bytes * 8)
                .filter(|&i| plane[i / 8] >> (i % 8) & 1 == 1)
                .map(|i| w[i])
                .sum();
            let mut variants = vec![bit_sum(&w, &plane), bit_sum_scalar(&w, &plane)];
            #[cfg(target_arch = "x86_64")]
            if level() == SimdLevel::Avx2 {
                // SAFETY: AVX2 was detected; w holds 8 · bytes + 3 weights.
                variants.push(unsafe { bit_sum_avx2(&w, &plane) });
            }
            #[cfg(target_arch = "x86_64")]
            if has_avx512() {
                // SAFETY: AVX-512F was detected; w holds 8 · bytes + 3 weights.
                variants.push(unsafe { bit_sum_avx512(&w, &plane) });
            }
            #[cfg(target_arch = "aarch64")]
            if level() == SimdLevel::Neon {
                // SAFETY: NEON was detected; w holds 8 · bytes + 3 weights.
                variants.push(unsafe { bit_sum_neon(&w, &plane) });
            }
            for got in variants {
                assert!(
                    (got - brute).abs() <= 1e-4 * (1.0 + brute.abs()),
                    "{bytes} bytes: {got} vs {brute}"
                );
            }
        }
        assert_eq!(bit_sum(&[1.0; 16], &[0xFF, 0x01]), 9.0);
    }

    #[test]
    fn weighted_bit_sums_match_the_sum_of_bit_sums() {
        let mut r = Rng::new(4);
        for case in 0..60 {
            let count = case % 10;
            let planes: Vec<(Vec<f32>, Vec<u8>, f32)> = (0..count)
                .map(|_| {
                    let bytes = r.below(30);
                    let w: Vec<f32> = (0..bytes * 8 + r.below(9))
                        .map(|_| r.normal() as f32)
                        .collect();
                    let plane: Vec<u8> = (0..bytes).map(|_| r.below(256) as u8).collect();
                    (w, plane, (1u32 << r.below(8)) as f32 * r.normal() as f32)
                })
                .collect();
            let terms: Vec<BitTerm> = planes
                .iter()
                .map(|(w, b, s)| BitTerm {
                    weights: w,
                    bits: b,
                    scale: *s,
                })
                .collect();
            let brute: f64 = planes
                .iter()
                .map(|(w, b, s)| {
                    (0..b.len() * 8)
                        .filter(|&i| b[i / 8] >> (i % 8) & 1 == 1)
                        .map(|i| w[i] as f64)
                        .sum::<f64>()
                        * *s as f64
                })
                .sum();
            let scale: f64 = planes
                .iter()
                .map(|(w, _, s)| (s.abs() * w.iter().map(|v| v.abs()).sum::<f32>()) as f64)
                .sum();
            // Only x86-64 has variants of its own (AVX2, AVX-512); NEON's is `bit_sum`'s, above.
            #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
            let mut variants = vec![weighted_bit_sums(&terms), weighted_bit_sums_scalar(&terms)];
            #[cfg(target_arch = "x86_64")]
            if level() == SimdLevel::Avx2 {
                // SAFETY: AVX2 and FMA were detected; every term has 8 weights per plane byte.
                variants.push(
                    unsafe { weighted_bit_sums_avx2(&terms, terms.len(), |_, _| true) }
                        .expect("no check"),
                );
            }
            #[cfg(target_arch = "x86_64")]
            if has_avx512() {
                // SAFETY: AVX-512F was detected; every term has 8 weights per plane byte.
                variants.push(
                    unsafe { weighted_bit_sums_avx512(&terms, terms.len(), |_, _| true) }
                        .expect("no check"),
                );
            }
            for got in variants {
                assert!(
                    (got as f64 - brute).abs() <= 1e-5 * (1.0 + scale),
                    "case {case}: {got} vs {brute}"
                );
            }
            // The checked sum: each partial is the sum of the terms so far (bit for bit), the
            // full sum is unchanged, and a false check stops it.
            let mut seen = Vec::new();
            let all = weighted_bit_sums_checked(&terms, 1, |t, partial| {
                seen.push((t, partial));
                true
            });
            assert_eq!(
                all.map(f32::to_bits),
                Some(weighted_bit_sums(&terms).to_bits())
            );
            assert_eq!(
                seen.len(),
                (count as usize).saturating_sub(2),
                "case {case}"
            );
            for (t, partial) in seen {
                assert_eq!(
                    partial.to_bits(),
                    weighted_bit_sums(&terms[..=t]).to_bits(),
                    "case {case}, term {t}"
                );
            }
            // The scalar path (the NEON level's) keeps the same contract.
            let scalar = weighted_bit_sums_scalar_checked(&terms, 0, |t, partial| {
                partial.to_bits() == weighted_bit_sums_scalar(&terms[..=t]).to_bits()
            });
            assert_eq!(
                scalar.map(f32::to_bits),
                Some(weighted_bit_sums_scalar(&terms).to_bits()),
                "case {case}"
            );
            // So does the AVX2 one (machines without AVX-512).
            #[cfg(target_arch = "x86_64")]
            if level() == SimdLevel::Avx2 {
                let full = |terms: &[BitTerm]| {
                    // SAFETY: AVX2 and FMA were detected; 8 weights per plane byte.
                    unsafe { weighted_bit_sums_avx2(terms, terms.len(), |_, _| true) }
                        .expect("no check")
                        .to_bits()
                };
                // SAFETY: as above.
                let avx2 = unsafe {
                    weighted_bit_sums_avx2(&terms, 0, |t, partial| {
                        partial.to_bits() == full(&terms[..=t])
                    })
                };
                assert_eq!(avx2.map(f32::to_bits), Some(full(&terms)), "case {case}");
            }
            if count > 2 {
                let mut calls = 0;
                let stopped = weighted_bit_sums_checked(&terms, 0, |_, _| {
                    calls += 1;
                    calls < 2
                });
                assert_eq!((stopped, calls), (None, 2), "case {case}");
            }
        }
        let ones = [1.0f32; 24];
        let terms = [
            BitTerm {
                weights: &ones,
                bits: &[0xFF, 0x01, 0x80],
                scale: 2.0,
            },
            BitTerm::EMPTY,
            BitTerm {
                weights: &ones,
                bits: &[0x03],
                scale: -1.0,
            },
        ];
        assert_eq!(weighted_bit_sums(&terms), 2.0 * 10.0 - 2.0);
    }

    #[test]
    fn below_mask_simd_matches_scalar() {
        let mut r = Rng::new(3);
        for n in [0usize, 1, 7, 31, 32, 33, 64] {
            let mut v: Vec<f32> = (0..n).map(|_| r.normal() as f32).collect();
            if n > 3 {
                v[3] = f32::NAN;
                v[1] = 0.25;
            }
            for limit in [-1.0f32, 0.0, 0.25, 2.0, f32::INFINITY] {
                let expected = below_mask_scalar(&v, limit);
                assert_eq!(below_mask(&v, limit), expected, "n {n} limit {limit}");
                let brute = (0..n.min(32)).filter(|&j| v[j] < limit).count();
                assert_eq!(expected.count_ones() as usize, brute);
            }
        }
    }
}
