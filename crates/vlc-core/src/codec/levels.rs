//! The magnitude levels of an extended RaBitQ code (`choose_levels`, and [`code_levels`] for
//! many rows), shared by `rabitq2`-`8` and `pcaq`.
//!
//! For a vector `v` and per-dimension caps `max_level(i)`, the code's magnitudes are
//! `x_i(t) = min(⌊t |v_i|⌋, max_level(i))` at a common scale `t`, and the best scale maximises
//! the cosine between `x + ½` and `|v|`:
//!
//! `value(t) = N(t)² / S(t)`, `N = Σ (x_i + ½)|v_i|`, `S = Σ (x_i + ½)²`.
//!
//! `value` changes only at the critical scales `k / |v_i|` where a level rises ("events"), so
//! the maximum is among the states after each event, taken in order of scale. A dimension of
//! 8 bits has 127 events, so a 1024-d vector has about 130,000; visiting all of them (extended
//! RaBitQ's sweep, kept in the tests as the reference) is what made high-rate codes slow to
//! build (about 92% of `pcaq7.5`'s encoding time at 1024-d). Here the scale axis is searched
//! by branch and bound instead, which finds the same maximum:
//! on an interval `(a, b]` of scales every state lies between the states at `a` and at `b`, and
//! each event in it adds `|v_i|` to `N` and `2k > 2a|v_i|` to `S`, which bounds `value` on the
//! whole interval (`bound`); an interval whose bound does not pass the best state seen so far
//! is skipped. Intervals are halved (the state at the middle is itself a candidate) until they
//! hold few events, which are then visited in order. Only the intervals near the best scale
//! survive, so a vector costs about a hundred passes over its dimensions (explicit AVX2 where
//! the CPU has it, with a scalar reference that gives bit-identical sums) instead of one heap
//! operation per event.
//!
//! Events at the same scale are visited in the reference sweep's order (by level, then by
//! falling `|v_i|`, then by dimension), and the first state with the largest value wins, so the
//! levels are the reference's, except where two states' values agree to the rounding of the
//! sums (this computes a state's sums afresh, the sweep adds them up event by event): then
//! either may be chosen, and the cosine is the same to about 1e-9 (the tests check both).

use crate::backend::Backend;
use crate::error::Result;

/// Intervals with at most this many events are visited event by event. Splitting further costs
/// a vectorised pass over the dimensions; a leaf costs two such passes (its ends' levels) and
/// a sort of its events. On 384-d codes 16 encodes 1.2-1.6x faster than 64 (`pcaq1`, `pcaq5`,
/// `rabitq4` in `cargo bench -p vlc-core --bench kernels -- encode`); 8 is slower than 16.
const LEAF_EVENTS: f64 = 16.0;

/// Scratch of [`choose_levels`], reused across vectors.
#[derive(Default)]
pub(crate) struct LevelScratch {
    /// `|v_i|`. Layout: (dim,).
    magnitude: Vec<f32>,
    /// `max_level(i)`, 0 where `v_i = 0`. Layout: (dim,).
    cap: Vec<f32>,
    /// The levels at a leaf interval's start and end. Layout: (dim,) each.
    low: Vec<u32>,
    high: Vec<u32>,
    /// A leaf interval's events, sorted by [`EventKey`].
    events: Vec<EventKey>,
    /// Intervals still to search.
    stack: Vec<Interval>,
    /// The chosen magnitude level of each dimension. Layout: (dim,).
    pub(crate) levels: Vec<u16>,
}

/// The order of events: scale (the `f32` bits of `k · (1/|v_i|)`, which order like the value
/// for positive scales), then level, then falling magnitude (complemented bits), then
/// dimension, packed into 32-bit fields from the most significant down so that the integer
/// order is this order (one comparison instead of four). All ones in the last three stand for
/// "every event at this scale".
type EventKey = u128;

/// The key of the event that raises dimension `dim` to level `level` at the scale whose `f32`
/// bits are `scale`, `tie` being the complemented bits of its magnitude.
fn event_key(scale: u32, level: u32, tie: u32, dim: u32) -> EventKey {
    (scale as u128) << 96 | (level as u128) << 64 | (tie as u128) << 32 | dim as u128
}

/// The level (`.0`) and dimension (`.1`) of an event.
fn event_parts(key: EventKey) -> (u32, u32) {
    ((key >> 64) as u32, key as u32)
}

/// An interval `(start, end]` of scales, with the sums at both ends.
#[derive(Clone, Copy)]
struct Interval {
    start: f32,
    end: f32,
    start_sums: Sums,
    end_sums: Sums,
}

/// `N`, `S` and the number of events of the state at a scale.
#[derive(Clone, Copy)]
struct Sums {
    numerator: f64,
    squares: f64,
    events: f64,
}

impl Sums {
    fn value(&self) -> f64 {
        self.numerator * self.numerator / self.squares
    }
}

/// The level of a dimension of magnitude `magnitude` and cap `cap` at scale `t`.
#[inline(always)]
fn level(t: f32, magnitude: f32, cap: f32) -> u32 {
    // `min` ignores a NaN (∞ · 0 at t = ∞), and zero dimensions have cap 0; the cap is an
    // integer, so truncating after it is the floor (and a truncation, unlike `floor`, needs
    // no SSE4.1 or libm call in the baseline x86-64 build).
    (t * magnitude).min(cap) as i32 as u32
}

/// The sums of the state at scale `t`. `base` is `½ Σ |v_i|`; `magnitude` and `cap` have one
/// entry per dimension.
fn sums_at(t: f32, magnitude: &[f32], cap: &[f32], base: f64) -> Sums {
    debug_assert_eq!(magnitude.len(), cap.len());
    #[cfg(target_arch = "x86_64")]
    if crate::simd::level() == crate::simd::SimdLevel::Avx2 {
        // SAFETY: AVX2 and FMA were detected at run time.
        return unsafe { sums_at_avx2(t, magnitude, cap, base) };
    }
    #[cfg(target_arch = "aarch64")]
    if crate::simd::level() == crate::simd::SimdLevel::Neon {
        // SAFETY: NEON was detected at run time.
        return unsafe { sums_at_neon(t, magnitude, cap, base) };
    }
    sums_at_scalar(t, magnitude, cap, base)
}

/// The level of every dimension at scale `t`, into `out` (dim,).
fn levels_at(t: f32, magnitude: &[f32], cap: &[f32], out: &mut [u32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::simd::level() == crate::simd::SimdLevel::Avx2 {
        // SAFETY: AVX2 was detected at run time.
        return unsafe { levels_at_avx2(t, magnitude, cap, out) };
    }
    #[cfg(target_arch = "aarch64")]
    if crate::simd::level() == crate::simd::SimdLevel::Neon {
        // SAFETY: NEON was detected at run time.
        return unsafe { levels_at_neon(t, magnitude, cap, out) };
    }
    levels_at_scalar(t, magnitude, cap, out)
}

/// Scalar reference of [`levels_at`].
fn levels_at_scalar(t: f32, magnitude: &[f32], cap: &[f32], out: &mut [u32]) {
    for ((o, &m), &c) in out.iter_mut().zip(magnitude).zip(cap) {
        *o = level(t, m, c);
    }
}

/// [`levels_at`] on eight lanes, with [`sums_at_avx2`]'s level.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn levels_at_avx2(t: f32, magnitude: &[f32], cap: &[f32], out: &mut [u32]) {
    use std::arch::x86_64::*;
    let len = out.len().min(magnitude.len()).min(cap.len());
    let split = len / 8 * 8;
    let scale = _mm256_set1_ps(t);
    for row in (0..split).step_by(8) {
        // SAFETY: `row + 8 <= split <= len` for all three slices.
        let m = _mm256_loadu_ps(magnitude.as_ptr().add(row));
        let c = _mm256_loadu_ps(cap.as_ptr().add(row));
        let x = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_mul_ps(scale, m), c));
        _mm256_storeu_si256(out.as_mut_ptr().add(row).cast(), x);
    }
    levels_at_scalar(
        t,
        &magnitude[split..len],
        &cap[split..len],
        &mut out[split..len],
    );
}

/// Scalar reference of [`sums_at`] (the baseline build's code): eight lanes, each summing
/// every eighth dimension in order, the tail into lane 0.
fn sums_at_scalar(t: f32, magnitude: &[f32], cap: &[f32], base: f64) -> Sums {
    const LANES: usize = 8;
    // Per lane: N in f64; S and the events as exact integers.
    let (mut n, mut s, mut e) = ([0f64; LANES], [0u64; LANES], [0u64; LANES]);
    let split = magnitude.len() / LANES * LANES;
    for (m, c) in magnitude[..split]
        .chunks_exact(LANES)
        .zip(cap[..split].chunks_exact(LANES))
    {
        for l in 0..LANES {
            let x = level(t, m[l], c[l]);
            n[l] += (x as f32 * m[l]) as f64;
            s[l] += (x * (x + 1)) as u64;
            e[l] += x as u64;
        }
    }
    for (&m, &c) in magnitude[split..].iter().zip(&cap[split..]) {
        let x = level(t, m, c);
        n[0] += (x as f32 * m) as f64;
        s[0] += (x * (x + 1)) as u64;
        e[0] += x as u64;
    }
    Sums {
        numerator: base + n.iter().sum::<f64>(),
        squares: 0.25 * magnitude.len() as f64 + s.iter().map(|&x| x as f64).sum::<f64>(),
        events: e.iter().map(|&x| x as f64).sum(),
    }
}

/// [`sums_at`] in AVX2 intrinsics: the scalar reference's operations on its eight lanes in the
/// same order (the level, its product with `|v_i|` rounded to f32, then added in f64 per lane;
/// the integer sums are exact in any order), so its sums are bit-identical to the reference's.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn sums_at_avx2(t: f32, magnitude: &[f32], cap: &[f32], base: f64) -> Sums {
    use std::arch::x86_64::*;
    const LANES: usize = 8;
    // Integer lanes of 32 bits hold a level below 2^12 (the widest cap is 2047) and `x(x+1)`
    // below 2^22, so 2^9 rows fit before they are widened into the 64-bit totals.
    const FLUSH: usize = 1 << 9;
    // The loads below read both slices up to `split`: it is cut from the shorter one.
    let split = magnitude.len().min(cap.len()) / LANES * LANES;
    let scale = _mm256_set1_ps(t);
    let (mut n_low, mut n_high) = (_mm256_setzero_pd(), _mm256_setzero_pd());
    let (mut s_total, mut e_total) = (0u64, 0u64);
    let mut row = 0;
    while row < split {
        let stop = (row + FLUSH * LANES).min(split);
        let (mut s_acc, mut e_acc) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        while row < stop {
            // SAFETY: `row + 8 <= split`, and `split` is at most either slice's length.
            let m = _mm256_loadu_ps(magnitude.as_ptr().add(row));
            let c = _mm256_loadu_ps(cap.as_ptr().add(row));
            // `min` returns its second operand (the cap) where the product is NaN (∞ · 0), as
            // `f32::min` does; the result lies in 0..=cap, so truncation cannot overflow.
            let x = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_mul_ps(scale, m), c));
            let product = _mm256_mul_ps(_mm256_cvtepi32_ps(x), m);
            n_low = _mm256_add_pd(n_low, _mm256_cvtps_pd(_mm256_castps256_ps128(product)));
            n_high = _mm256_add_pd(n_high, _mm256_cvtps_pd(_mm256_extractf128_ps(product, 1)));
            let next = _mm256_add_epi32(x, _mm256_set1_epi32(1));
            s_acc = _mm256_add_epi32(s_acc, _mm256_mullo_epi32(x, next));
            e_acc = _mm256_add_epi32(e_acc, x);
            row += LANES;
        }
        let (mut s_lanes, mut e_lanes) = ([0u32; LANES], [0u32; LANES]);
        // SAFETY: each array holds exactly one 256-bit vector.
        _mm256_storeu_si256(s_lanes.as_mut_ptr().cast(), s_acc);
        _mm256_storeu_si256(e_lanes.as_mut_ptr().cast(), e_acc);
        s_total += s_lanes.iter().map(|&x| x as u64).sum::<u64>();
        e_total += e_lanes.iter().map(|&x| x as u64).sum::<u64>();
    }
    let mut n = [0f64; LANES];
    // SAFETY: `n` holds exactly two 256-bit vectors of f64.
    _mm256_storeu_pd(n.as_mut_ptr(), n_low);
    _mm256_storeu_pd(n.as_mut_ptr().add(4), n_high);
    for (&m, &c) in magnitude[split..].iter().zip(&cap[split..]) {
        let x = level(t, m, c);
        n[0] += (x as f32 * m) as f64;
        s_total += (x * (x + 1)) as u64;
        e_total += x as u64;
    }
    Sums {
        numerator: base + n.iter().sum::<f64>(),
        squares: 0.25 * magnitude.len() as f64 + s_total as f64,
        events: e_total as f64,
    }
}

/// [`levels_at`] with NEON, four lanes at a time. `vminnmq_f32` returns the number where the
/// other operand is NaN, as `f32::min` does; the truncation is exact on `0..=cap`.
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn levels_at_neon(t: f32, magnitude: &[f32], cap: &[f32], out: &mut [u32]) {
    use std::arch::aarch64::*;
    let len = out.len().min(magnitude.len()).min(cap.len());
    let split = len / 4 * 4;
    let scale = vdupq_n_f32(t);
    for row in (0..split).step_by(4) {
        // SAFETY: `row + 4 <= split <= len` for all three slices.
        let m = vld1q_f32(magnitude.as_ptr().add(row));
        let c = vld1q_f32(cap.as_ptr().add(row));
        vst1q_u32(
            out.as_mut_ptr().add(row),
            vcvtq_u32_f32(vminnmq_f32(vmulq_f32(scale, m), c)),
        );
    }
    levels_at_scalar(
        t,
        &magnitude[split..len],
        &cap[split..len],
        &mut out[split..len],
    );
}

/// [`sums_at`] with NEON: the scalar reference's eight lanes as two `f32x4` halves, their f64
/// sums in four `f64x2` accumulators (lanes 0-1, 2-3, 4-5, 6-7), each lane adding its
/// dimensions in the reference's order, so the sums are bit-identical to the reference's.
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn sums_at_neon(t: f32, magnitude: &[f32], cap: &[f32], base: f64) -> Sums {
    use std::arch::aarch64::*;
    const LANES: usize = 8;
    // As in `sums_at_avx2`: 32-bit integer lanes, widened every 2^9 rows.
    const FLUSH: usize = 1 << 9;
    let split = magnitude.len().min(cap.len()) / LANES * LANES;
    let scale = vdupq_n_f32(t);
    let one = vdupq_n_u32(1);
    let mut n = [vdupq_n_f64(0.0); 4];
    let (mut s_total, mut e_total) = (0u64, 0u64);
    let mut row = 0;
    while row < split {
        let stop = (row + FLUSH * LANES).min(split);
        let (mut s_acc, mut e_acc) = ([vdupq_n_u32(0); 2], [vdupq_n_u32(0); 2]);
        while row < stop {
            for half in 0..2 {
                // SAFETY: `row + 8 <= split`, and `split` is at most either slice's length.
                let m = vld1q_f32(magnitude.as_ptr().add(row + 4 * half));
                let c = vld1q_f32(cap.as_ptr().add(row + 4 * half));
                let x = vcvtq_u32_f32(vminnmq_f32(vmulq_f32(scale, m), c));
                let product = vmulq_f32(vcvtq_f32_u32(x), m);
                n[2 * half] = vaddq_f64(n[2 * half], vcvt_f64_f32(vget_low_f32(product)));
                n[2 * half + 1] = vaddq_f64(n[2 * half + 1], vcvt_high_f64_f32(product));
                s_acc[half] = vaddq_u32(s_acc[half], vmulq_u32(x, vaddq_u32(x, one)));
                e_acc[half] = vaddq_u32(e_acc[half], x);
            }
            row += LANES;
        }
        for half in 0..2 {
            s_total += vaddlvq_u32(s_acc[half]);
            e_total += vaddlvq_u32(e_acc[half]);
        }
    }
    let mut lanes = [0f64; LANES];
    for (pair, sums) in n.iter().enumerate() {
        // SAFETY: two f64 into `lanes[2·pair..2·pair + 2]`, within its eight.
        vst1q_f64(lanes.as_mut_ptr().add(2 * pair), *sums);
    }
    for (&m, &c) in magnitude[split..].iter().zip(&cap[split..]) {
        let x = level(t, m, c);
        lanes[0] += (x as f32 * m) as f64;
        s_total += (x * (x + 1)) as u64;
        e_total += x as u64;
    }
    Sums {
        numerator: base + lanes.iter().sum::<f64>(),
        squares: 0.25 * magnitude.len() as f64 + s_total as f64,
        events: e_total as f64,
    }
}

/// An upper bound of `value` over the states between the ends of the interval `(start, end]`.
/// Its events, visited by rising scale `k / |v_i|`, each add `|v_i|` to `N` and `2k` to `S`,
/// so `S` grows along them at a rising slope `2k / |v_i|` between `2·start` and `2·end`: a
/// state that has added `ΔN` of the interval's `ΔN_all` has
/// `S ≥ S(start) + max(2·start·ΔN, ΔS_all − 2·end·(ΔN_all − ΔN))`. `(N(start) + ΔN)²` over that
/// is convex in `ΔN` on each side of the kink where the two lines meet, so its largest value
/// is at the start, the kink or the end; the start and end states are candidates themselves.
fn bound(start: f32, end: f32, start_sums: &Sums, end_sums: &Sums) -> f64 {
    // Levels and event scales are rounded in f32: slightly wider slopes keep it a bound.
    let (low, high) = (
        2.0 * start as f64 * (1.0 - 1e-5),
        2.0 * end as f64 * (1.0 + 1e-5),
    );
    let gained = end_sums.numerator - start_sums.numerator;
    let grown = end_sums.squares - start_sums.squares;
    let kink = ((high * gained - grown) / (high - low)).clamp(0.0, gained);
    let at_kink = (start_sums.numerator + kink).powi(2) / (start_sums.squares + low * kink);
    at_kink.max(start_sums.value()).max(end_sums.value())
}

/// Choose the magnitude levels of an extended code for the vector `v`: maximise
/// `Σ (x_i + ½)|v_i| / √Σ (x_i + ½)²` over `x_i ∈ 0..=max_level(i)`, where `x_i` is the level
/// of `|v_i|` at a common scale `t` (`x_i = min(⌊t |v_i|⌋, max_level(i))`), by branch and bound
/// over the scale (see the module docs). `top_level` is the largest `max_level`. The result is
/// in `scratch.levels`.
pub(crate) fn choose_levels(
    v: &[f32],
    max_level: impl Fn(usize) -> u32,
    top_level: u32,
    scratch: &mut LevelScratch,
) {
    // Levels and `x(x + 1)` must fit the sums' 32-bit integer lanes.
    debug_assert!(top_level < 1 << 12, "{top_level} levels");
    let dim = v.len();
    let LevelScratch {
        magnitude,
        cap,
        low,
        high,
        events,
        stack,
        levels,
    } = scratch;
    magnitude.clear();
    magnitude.extend(v.iter().map(|x| x.abs()));
    cap.clear();
    cap.extend((0..dim).map(|i| {
        if magnitude[i] > 0.0 {
            max_level(i).min(top_level) as f32
        } else {
            0.0
        }
    }));
    levels.clear();
    levels.resize(dim, 0);
    low.resize(dim, 0);
    high.resize(dim, 0);
    let base = 0.5 * magnitude.iter().map(|&m| m as f64).sum::<f64>();
    let (magnitude, cap) = (&magnitude[..], &cap[..]);
    let set_levels = |t: f32, levels: &mut Vec<u16>, scratch: &mut Vec<u32>| {
        levels_at(t, magnitude, cap, scratch);
        for (l, &x) in levels.iter_mut().zip(scratch.iter()) {
            *l = x as u16;
        }
    };
    // A scale past the last finite event, where every level is at its cap except those of
    // |v_i| so small that their first event is at +∞ (`beyond`).
    let (mut last, mut beyond) = (0f32, false);
    for t in (0..dim)
        .filter(|&i| cap[i] > 0.0)
        .map(|i| (cap[i] + 1.0) / magnitude[i])
    {
        if t.is_finite() {
            last = last.max(t);
        } else {
            beyond = true;
        }
    }
    let zero = sums_at(0.0, magnitude, cap, base);
    let end = sums_at(last, magnitude, cap, base);
    // The best state's value and the key of its last event (None: every level 0, the first
    // state). A new best replaces an equal one only if it comes earlier.
    let mut best: (f64, Option<EventKey>) = (zero.value(), None);
    let better = |value: f64, key: EventKey, best: &(f64, Option<EventKey>)| {
        value > best.0 || (value == best.0 && best.1.is_some_and(|b| key < b))
    };
    let whole = |t: f32| event_key(t.to_bits(), u32::MAX, u32::MAX, u32::MAX);
    let infinite = beyond.then(|| (f32::INFINITY, sums_at(f32::INFINITY, magnitude, cap, base)));
    for (t, sums) in [(last, end)].into_iter().chain(infinite) {
        if t > 0.0 && better(sums.value(), whole(t), &best) {
            best = (sums.value(), Some(whole(t)));
            set_levels(t, levels, low);
        }
    }
    stack.clear();
    if last > 0.0 {
        stack.push(Interval {
            start: 0.0,
            end: last,
            start_sums: zero,
            end_sums: end,
        });
    }
    while let Some(Interval {
        start,
        end,
        start_sums,
        end_sums,
    }) = stack.pop()
    {
        if end_sums.events == start_sums.events
            || bound(start, end, &start_sums, &end_sums) <= best.0
        {
            continue;
        }
        let middle = start + (end - start) * 0.5;
        if end_sums.events - start_sums.events > LEAF_EVENTS && start < middle && middle < end {
            let middle_sums = sums_at(middle, magnitude, cap, base);
            if better(middle_sums.value(), whole(middle), &best) {
                best = (middle_sums.value(), Some(whole(middle)));
                set_levels(middle, levels, low);
            }
            let lower = Interval {
                start,
                end: middle,
                start_sums,
                end_sums: middle_sums,
            };
            let upper = Interval {
                start: middle,
                end,
                start_sums: middle_sums,
                end_sums,
            };
            // The half with the larger bound is searched first.
            if bound(start, middle, &start_sums, &middle_sums)
                > bound(middle, end, &middle_sums, &end_sums)
            {
                stack.extend([upper, lower]);
            } else {
                stack.extend([lower, upper]);
            }
            continue;
        }
        // Visit the interval's events in order.
        events.clear();
        levels_at(start, magnitude, cap, low);
        levels_at(end, magnitude, cap, high);
        for (i, (&a, &b)) in low.iter().zip(high.iter()).enumerate() {
            if b > a {
                let m = magnitude[i];
                let (inverse, tie) = (1.0 / m, !m.to_bits());
                events.extend(
                    (a + 1..=b)
                        .map(|k| event_key((k as f32 * inverse).to_bits(), k, tie, i as u32)),
                );
            }
        }
        events.sort_unstable();
        let (mut numerator, mut squares) = (start_sums.numerator, start_sums.squares);
        let mut improved = None;
        for (at, &key) in events.iter().enumerate() {
            let (k, i) = event_parts(key);
            numerator += magnitude[i as usize] as f64;
            squares += 2.0 * k as f64;
            let value = numerator * numerator / squares;
            if better(value, key, &best) {
                best = (value, Some(key));
                improved = Some(at);
            }
        }
        if let Some(at) = improved {
            // `low` still holds the levels at the interval's start.
            for (l, &x) in levels.iter_mut().zip(low.iter()) {
                *l = x as u16;
            }
            for &key in &events[..=at] {
                levels[event_parts(key).1 as usize] += 1;
            }
        }
    }
}

/// The levels `choose_levels` gives each row of `vectors` (rows, `caps.len()`), row-major,
/// with `max_level(i) = caps[i]`, into `out` (rows, dim), row-major: the CPU reference of
/// [`Backend::code_levels`], in parallel over rows.
pub fn code_levels(vectors: &[f32], caps: &[u32], out: &mut [u16]) {
    use rayon::prelude::*;
    let dim = caps.len();
    debug_assert_eq!(vectors.len(), out.len());
    if dim == 0 {
        return;
    }
    let top = caps.iter().copied().max().unwrap_or(0);
    const ROWS_PER_TASK: usize = 256;
    out.par_chunks_mut(ROWS_PER_TASK * dim)
        .zip(vectors.par_chunks(ROWS_PER_TASK * dim))
        .for_each(|(out, rows)| {
            let mut scratch = LevelScratch::default();
            for (o, v) in out.chunks_exact_mut(dim).zip(rows.chunks_exact(dim)) {
                choose_levels(v, |i| caps[i], top, &mut scratch);
                o.copy_from_slice(&scratch.levels);
            }
        });
}

/// Fewer rows than this encode on the CPU even where the backend offers
/// [`Backend::code_levels`]: a launch and the copies cost more than the levels of so few.
const BACKEND_LEVELS_MIN_ROWS: usize = 4096;

/// Parts a block's rows are cut into so that the CPU's rotation and packing overlap the
/// backend's level search (each at least [`BACKEND_LEVELS_MIN_ROWS`] rows).
const PIPELINE_PARTS: usize = 4;

/// Encode the rows behind `out` ((rows, `code_size`), row-major) with their levels chosen by
/// `backend` ([`Backend::code_levels`]) and return `true`; or return `false`, writing nothing,
/// where the backend does not offer it or the rows are fewer than [`BACKEND_LEVELS_MIN_ROWS`]
/// (the codec then encodes on the CPU). The rows go through a pipeline over parts: while the
/// backend chooses the levels of part `s − 1`, the CPU rotates part `s` and packs the codes of
/// part `s − 2`. `rotate(first, rotated, aux)` writes the rows from `first` on, rotated, into
/// `rotated` ((part rows, `caps.len()`), row-major) and one value per row into `aux` (part
/// rows,) for `pack`; `pack(row, rotated, aux, levels, units, code)` writes row `row`'s code
/// from its rotated vector and levels (`units` is scratch).
#[allow(clippy::type_complexity)]
pub(crate) fn encode_through_backend(
    backend: &dyn Backend,
    caps: &[u32],
    code_size: usize,
    out: &mut [u8],
    rotate: impl Fn(usize, &mut [f32], &mut [f32]) + Sync,
    pack: impl Fn(usize, &[f32], f32, &[u16], &mut Vec<u32>, &mut [u8]) + Sync,
) -> Result<bool> {
    use rayon::prelude::*;
    const PACK_BLOCK: usize = 1024;
    let (width, cs) = (caps.len(), code_size);
    let rows = out.len() / cs;
    if !backend.offers_code_levels() || rows < BACKEND_LEVELS_MIN_ROWS {
        return Ok(false);
    }
    let part = rows.div_ceil(PIPELINE_PARTS).max(BACKEND_LEVELS_MIN_ROWS);
    let mut rotated = vec![0f32; rows * width];
    let mut aux = vec![0f32; rows];
    let mut levels = vec![0u16; rows * width];
    let mut rotated_parts: Vec<&mut [f32]> = rotated.chunks_mut(part * width).collect();
    let mut aux_parts: Vec<&mut [f32]> = aux.chunks_mut(part).collect();
    let mut level_parts: Vec<&mut [u16]> = levels.chunks_mut(part * width).collect();
    let mut code_parts: Vec<&mut [u8]> = out.chunks_mut(part * cs).collect();
    let parts = code_parts.len();
    for step in 0..parts + 2 {
        let (done, todo) = rotated_parts.split_at_mut(step.min(parts));
        let (aux_done, aux_todo) = aux_parts.split_at_mut(step.min(parts));
        let (packable, choosing) = level_parts.split_at_mut(step.saturating_sub(1).min(parts));
        let choose = (1..=parts).contains(&step).then(|| {
            let p = step - 1;
            (&*done[p], &mut *choosing[0])
        });
        let to_rotate = (step < parts).then(|| (&mut *todo[0], &mut *aux_todo[0]));
        let to_pack = (step >= 2).then(|| (step - 2, &mut *code_parts[step - 2]));
        let pack_part = |p: usize, codes: &mut [u8]| {
            let (rotated, aux, levels) = (&*done[p], &*aux_done[p], &*packable[p]);
            codes
                .par_chunks_mut(PACK_BLOCK * cs)
                .enumerate()
                .for_each(|(b, codes)| {
                    let mut units = Vec::new();
                    for (r, code) in (b * PACK_BLOCK..).zip(codes.chunks_exact_mut(cs)) {
                        pack(
                            p * part + r,
                            &rotated[r * width..(r + 1) * width],
                            aux[r],
                            &levels[r * width..(r + 1) * width],
                            &mut units,
                            code,
                        );
                    }
                });
        };
        std::thread::scope(|scope| -> Result<()> {
            let chosen = choose.map(|(vectors, levels)| {
                scope.spawn(move || {
                    if !backend.code_levels(vectors, caps, levels)? {
                        code_levels(vectors, caps, levels);
                    }
                    Ok::<(), crate::VlcError>(())
                })
            });
            rayon::join(
                || {
                    if let Some((rotated, aux)) = to_rotate {
                        rotate(step * part, rotated, aux);
                    }
                },
                || {
                    if let Some((p, codes)) = to_pack {
                        pack_part(p, codes);
                    }
                },
            );
            match chosen.map(|h| h.join()) {
                Some(Ok(result)) => result,
                Some(Err(panic)) => std::panic::resume_unwind(panic),
                None => Ok(()),
            }
        })?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Extended RaBitQ's sweep over every event (a heap over levels), as `choose_levels` was
    /// before session 24: the reference the branch and bound must agree with.
    fn sweep_levels(v: &[f32], max_level: impl Fn(usize) -> u32, top_level: u32) -> Vec<u16> {
        let dim = v.len();
        let mut order: Vec<u32> = (0..dim as u32).filter(|&i| v[i as usize] != 0.0).collect();
        order.sort_unstable_by(|&a, &b| {
            v[b as usize]
                .abs()
                .total_cmp(&v[a as usize].abs())
                .then(a.cmp(&b))
        });
        let inverse: Vec<f32> = order.iter().map(|&i| 1.0 / v[i as usize].abs()).collect();
        let n = order.len();
        let next = |k: u32, from: usize| (from..n).find(|&p| max_level(order[p] as usize) >= k);
        let mut heads = vec![n; top_level as usize + 1];
        let mut heap = std::collections::BinaryHeap::new();
        for k in 1..=top_level {
            if let Some(p) = next(k, 0) {
                heads[k as usize] = p;
                let t = k as f32 * inverse[p];
                heap.push(std::cmp::Reverse((t.to_bits(), k)));
            }
        }
        let mut numerator: f64 = 0.5 * v.iter().map(|x| x.abs() as f64).sum::<f64>();
        let mut squares: f64 = 0.25 * dim as f64;
        let mut best = (numerator * numerator / squares, 0usize);
        let mut events = Vec::new();
        while let Some(std::cmp::Reverse((_, k))) = heap.pop() {
            let p = heads[k as usize];
            let d = order[p];
            numerator += v[d as usize].abs() as f64;
            squares += 2.0 * k as f64;
            events.push(d);
            let value = numerator * numerator / squares;
            if value > best.0 {
                best = (value, events.len());
            }
            if let Some(p) = next(k, p + 1) {
                heads[k as usize] = p;
                let t = k as f32 * inverse[p];
                heap.push(std::cmp::Reverse((t.to_bits(), k)));
            }
        }
        let mut levels = vec![0u16; dim];
        for &d in &events[..best.1] {
            levels[d as usize] += 1;
        }
        levels
    }

    fn value(v: &[f32], levels: &[u16]) -> f64 {
        let (mut n, mut s) = (0f64, 0f64);
        for (x, &l) in v.iter().zip(levels) {
            n += (l as f64 + 0.5) * x.abs() as f64;
            s += (l as f64 + 0.5).powi(2);
        }
        n * n / s
    }

    /// Over dims with odd tails, caps from 1 to 2047 (`pcaq`'s widest, 12 bits), uniform and
    /// non-increasing (as `pcaq`'s widths are), vectors with zeros, repeated magnitudes (ties at one scale) and a wide
    /// dynamic range: the branch and bound reaches the reference sweep's value and chooses the
    /// sweep's levels.
    #[test]
    fn branch_and_bound_finds_the_sweeps_levels() {
        let mut rng = Rng::new(24);
        let mut scratch = LevelScratch::default();
        let (mut cases, mut same) = (0, 0);
        for &dim in &[1usize, 2, 7, 33, 64, 129, 384, 1000] {
            for trial in 0..24 {
                let v: Vec<f32> = (0..dim)
                    .map(|i| match trial % 4 {
                        // Gaussian.
                        0 => rng.normal() as f32,
                        // Zeros and repeated magnitudes: ties at the same scale.
                        1 => [0.0, 0.5, -0.5, 1.0, 0.25][rng.below(5)],
                        // A wide dynamic range, as in the principal axes.
                        2 => rng.normal() as f32 * (-(i as f32) / 40.0).exp(),
                        _ => rng.normal() as f32 * if i % 3 == 0 { 1e-3 } else { 1.0 },
                    })
                    .collect();
                let widths: Vec<u32> = match trial % 3 {
                    0 => vec![[1u32, 3, 7, 15, 127, 2047][trial / 3 % 6]; dim],
                    1 => (0..dim)
                        .map(|i| 127 >> (7 * i / dim.max(1)).min(6))
                        .collect(),
                    _ => (0..dim)
                        .map(|i| [2047u32, 511, 63, 3, 1][i * 5 / dim])
                        .collect(),
                };
                let top = *widths.iter().max().unwrap();
                let reference = sweep_levels(&v, |i| widths[i], top);
                choose_levels(&v, |i| widths[i], top, &mut scratch);
                let (want, got) = (value(&v, &reference), value(&v, &scratch.levels));
                // Past 127 levels an event's scale `k / |v_i|` in f32 can no longer separate
                // every pair of events, so a state the sweep reaches by counting may have no
                // scale of its own: the best one reachable is within about 1e-8.
                let tolerance = if top <= 127 { 1e-9 } else { 1e-7 };
                assert!(
                    (got - want).abs() <= tolerance * want.max(1e-30),
                    "dim {dim} trial {trial}: value {got} against the sweep's {want}"
                );
                for (i, (&l, &w)) in scratch.levels.iter().zip(&widths).enumerate() {
                    assert!(
                        l as u32 <= w,
                        "dim {dim} trial {trial}: level {l} over cap {w} at {i}"
                    );
                }
                // Wide caps are held to the value only (see the tolerance), and so are one and
                // two dimensions: every state of a 1-d vector has cosine 1, and at 2-d many
                // states tie, so which of them is chosen is a matter of rounding.
                if top <= 127 && dim > 2 {
                    cases += 1;
                    same += (scratch.levels == reference) as usize;
                }
            }
        }
        // Ties broken differently by rounding are rare; the same levels are the rule.
        eprintln!("{same} of {cases} identical with at most 127 levels");
        assert!(
            same * 100 >= cases * 95,
            "{same} of {cases} identical to the sweep"
        );
    }

    /// Codes as `pcaq` makes them at high rates: 1024 dimensions with a falling spectrum,
    /// 127 levels on most and 63 on the rest. Two states can tie to the rounding of the sums
    /// (the branch and bound computes a state's sums afresh, the sweep adds them up event by
    /// event), so a few vectors may get the other of two states of equal value.
    #[test]
    fn high_rate_codes_reach_the_sweeps_value() {
        let mut rng = Rng::new(5);
        let mut scratch = LevelScratch::default();
        let dim = 1024;
        let cap = |i: usize| if i < 900 { 127 } else { 63 };
        let mut same = 0;
        for _ in 0..40 {
            let v: Vec<f32> = (0..dim)
                .map(|i| rng.normal() as f32 * (1.0 + 3.0 * (-(i as f32) / 200.0).exp()))
                .collect();
            let reference = sweep_levels(&v, cap, 127);
            choose_levels(&v, cap, 127, &mut scratch);
            let (want, got) = (value(&v, &reference), value(&v, &scratch.levels));
            assert!(
                (got - want).abs() <= 1e-8 * want,
                "value {got} against {want}"
            );
            same += (scratch.levels == reference) as usize;
        }
        assert!(same >= 38, "{same} of 40 identical to the sweep");
    }

    /// The AVX2 builds of the sums and the levels are bit-identical to the scalar ones, over
    /// odd tails, zero magnitudes (whose cap is 0, and whose product is NaN at an infinite
    /// scale), caps up to 2047 (12 bits), dimensions past the point where the AVX2 sums widen
    /// their 32-bit lanes (4,096), and scales that leave levels below, at and above their caps.
    #[test]
    fn sums_and_levels_match_the_scalar_reference() {
        let mut rng = Rng::new(7);
        for dim in [1usize, 5, 8, 13, 31, 64, 67, 385, 4099, 8200] {
            let magnitude: Vec<f32> = (0..dim)
                .map(|i| {
                    if i % 7 == 3 {
                        0.0
                    } else {
                        rng.normal().abs() as f32
                    }
                })
                .collect();
            let cap: Vec<f32> = (0..dim)
                .map(|i| {
                    if magnitude[i] == 0.0 {
                        0.0
                    } else {
                        [0.0, 1.0, 15.0, 127.0, 2047.0][i % 5]
                    }
                })
                .collect();
            let base = 0.5 * magnitude.iter().map(|&m| m as f64).sum::<f64>();
            let (mut want_levels, mut got_levels) = (vec![0u32; dim], vec![1u32; dim]);
            for t in [0.0, 0.3, 2.0, 17.5, 300.0, 5000.0, f32::INFINITY] {
                let want = sums_at_scalar(t, &magnitude, &cap, base);
                let got = sums_at(t, &magnitude, &cap, base);
                assert_eq!(
                    (got.numerator.to_bits(), got.squares, got.events),
                    (want.numerator.to_bits(), want.squares, want.events),
                    "dim {dim} t {t}"
                );
                levels_at_scalar(t, &magnitude, &cap, &mut want_levels);
                levels_at(t, &magnitude, &cap, &mut got_levels);
                assert_eq!(got_levels, want_levels, "dim {dim} t {t}");
                assert_eq!(
                    want_levels.iter().map(|&x| x as f64).sum::<f64>(),
                    want.events,
                    "dim {dim} t {t}"
                );
            }
        }
    }

    #[test]
    fn zero_and_tiny_vectors_get_valid_levels() {
        let mut scratch = LevelScratch::default();
        choose_levels(&[0.0; 9], |_| 7, 7, &mut scratch);
        assert_eq!(scratch.levels, vec![0u16; 9]);
        let v = [1.0, 1e-45, -1e-40, 0.0, 0.3];
        choose_levels(&v, |_| 15, 15, &mut scratch);
        assert_eq!(scratch.levels, sweep_levels(&v, |_| 15, 15));
        choose_levels(&[], |_| 3, 3, &mut scratch);
        assert!(scratch.levels.is_empty());
    }
}
