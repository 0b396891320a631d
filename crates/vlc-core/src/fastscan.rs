//! Fast-scan layout for the first stage of RaBitQ-family codes (the 1-bit code of `rabitq*`;
//! the sign plane plus a second-bit plane of `pcaq`): 32 vectors per block, code bytes
//! transposed so that one 32-byte load holds the same code byte (8 bits = two 4-bit groups) of
//! 32 vectors. A query's weights per bit are summed into a table per 4-bit group, quantised to
//! `u8`, so a block is scored with two byte shuffles per code byte (AVX2 `pshufb`, NEON `tbl`)
//! and 16-bit accumulation. With AVX-512BW, one 512-bit step takes two code bytes of the block
//! (each 128-bit lane's `vpshufb` reading its own byte's table); the sums are the same
//! integers.
//!
//! The quantised estimate only selects candidates: search rescores the candidate pool with the
//! exact f32 estimator (or the refine tier), so this approximation does not reach the results.
//!
//! Where the weights of a code's bits differ by orders of magnitude (`pcaq`, whose widest axes
//! weigh `2^(b−1)` grid steps per bit times a coordinate that spreads over about `2^b` steps),
//! one quantisation step for every table would be set by the heaviest groups and round the
//! light ones to nothing but noise. So the code bytes are ordered by a typical magnitude of
//! their bits' weights (given by the codec) and cut into up to [`MAX_SEGMENTS`] segments, each
//! a run of bytes within [`SEGMENT_RATIO`] of its first's magnitude; each segment's tables get
//! a step of their own, its 16-bit sums are converted and scaled apart, and the segments are
//! added in f32. Codes whose bits weigh alike (`rabitq*`) keep one segment and their bytes in
//! code order.
//!
//! Built in memory from the list-ordered codes of the index file (the file format does not
//! depend on it).

use crate::codec::FactorFormat;
use crate::simd::{level, SimdLevel};
use rayon::prelude::*;
use std::sync::LazyLock;

pub const BLOCK: usize = 32;
/// Code bytes summed in 16-bit lanes before widening (254 · 256 < 65536).
const PAIRS_PER_FLUSH: usize = 256;
/// Most segments of code bytes with a quantisation step of their own.
pub const MAX_SEGMENTS: usize = 4;
/// A code byte whose typical weight is below its segment's first byte's over this starts a new
/// segment (while fewer than [`MAX_SEGMENTS`] exist): its tables would use fewer than
/// 127 / 2 ≈ 64 of their 128 levels under the segment's step. (It was 8 up to session 35:
/// on a 1M x 384 `pcaq5`, 2 rather than 4 segments and recall@10 0.9689 rather than 0.9725
/// at nprobe 32 with the default pool, at the same QPS;
/// `bench/results/first_stage_ratio_2026-11-26.log`.)
pub const SEGMENT_RATIO: f32 = 2.0;

/// The block kernel this process runs, chosen once: the SIMD level, and on x86-64 with
/// AVX-512F enabled (see [`crate::simd::has_avx512`]) and AVX-512BW, the 512-bit kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    Scalar,
    Avx2,
    /// AVX2 plus AVX-512F and AVX-512BW: two of a block's byte pairs per step.
    #[cfg(target_arch = "x86_64")]
    Avx512Bw,
    Neon,
}

static KERNEL: LazyLock<Kernel> = LazyLock::new(|| match level() {
    SimdLevel::Scalar => Kernel::Scalar,
    SimdLevel::Neon => Kernel::Neon,
    SimdLevel::Avx2 => {
        #[cfg(target_arch = "x86_64")]
        if crate::simd::has_avx512() && is_x86_feature_detected!("avx512bw") {
            return Kernel::Avx512Bw;
        }
        Kernel::Avx2
    }
});

pub struct FastScan {
    /// First-stage code bytes per vector, i.e. pairs of 4-bit groups: ⌈dim/8⌉ for a 1-bit
    /// RaBitQ code, more for a code whose first stage holds a second bit plane.
    pairs: usize,
    /// List `a` owns blocks `block_offsets[a]..block_offsets[a+1]`. Layout: (num_anchors + 1,).
    block_offsets: Vec<usize>,
    /// Layout: (total_blocks, pairs, 32) bytes: `[blk][p][j]` = code byte p of slot j.
    codes: Vec<u8>,
    /// Per-slot factors f1, f2 (see `codec::rabitq`). Layout: (total_blocks · 32,).
    f1: Vec<f32>,
    f2: Vec<f32>,
    /// Byte `k` of a block's codes is byte `order[k]` of the first stage (the identity with one
    /// segment). Layout: (pairs,).
    order: Vec<usize>,
    /// Segment `s` holds the block bytes `segments[s]..segments[s + 1]`. Layout: (segments + 1,).
    segments: Vec<usize>,
    /// How a code stores the first stage's factors (after its `pairs` bytes).
    factors: FactorFormat,
    /// With 8-bit factors, the value of each byte: `[0][c]` f1's and `[1][c]` f2's, as
    /// [`FactorFormat::read`] gives them, looked up instead of decoded (filling the blocks,
    /// and the codes read one by one in [`FastScan::push_loose`]). Layout: (2, 256).
    byte_factors: Option<Box<[[f32; 256]; 2]>>,
}

/// The two factors stored at the start of `stored` in `format`, looked up in `byte_values`
/// ([`FastScan`]'s `byte_factors`) where the format has them: [`FactorFormat::read`], bit
/// for bit.
#[inline]
fn read_factors(
    byte_values: Option<&[[f32; 256]; 2]>,
    format: FactorFormat,
    stored: &[u8],
) -> (f32, f32) {
    match byte_values {
        Some(values) => (values[0][stored[0] as usize], values[1][stored[1] as usize]),
        None => format.read(stored),
    }
}

/// Vectors taken one by one from anywhere in the index (a filter's allowed vectors in lists
/// or blocks of which it allows few), their first stages copied a row each, to be turned into
/// blocks of 32 in [`FastScan`]'s layout and scored as a list's blocks are
/// ([`FastScan::score_loose`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct LooseBlocks {
    /// Each slot's first-stage bytes in the layout's byte order (rows of a partly filled
    /// block's empty slots zero). Layout: (blocks · 32, pairs), row-major.
    rows: Vec<u8>,
    /// One block in [`FastScan`]'s layout (scratch). Layout: (pairs, 32).
    block: Vec<u8>,
    /// Each slot's squared distance from the query to its anchor plus its `f1`: the
    /// `(base + f1)` of [`Affine`], added once as the slot is filled. Layout: (blocks · 32,).
    base_f1: Vec<f32>,
    /// Each slot's `f2`. Layout: (blocks · 32,).
    f2: Vec<f32>,
    /// Slots filled.
    len: usize,
}

impl LooseBlocks {
    /// Slots filled.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// The order of a first stage's `pairs` code bytes and their segments (see the module
/// docs), from `hints`, a typical magnitude of each bit's weight (pairs · 8,): a byte's
/// magnitude is the larger of its two 4-bit groups' sums. Without hints, or where one segment
/// holds every byte, the bytes keep code order.
pub fn segment_pairs(pairs: usize, hints: Option<&[f32]>) -> (Vec<usize>, Vec<usize>) {
    let identity = || ((0..pairs).collect(), vec![0, pairs]);
    let Some(hints) = hints.filter(|h| h.len() == pairs * 8 && pairs > 0) else {
        return identity();
    };
    let magnitude: Vec<f32> = hints
        .chunks_exact(8)
        .map(|b| {
            let (lo, hi) = b.split_at(4);
            lo.iter().sum::<f32>().max(hi.iter().sum())
        })
        .collect();
    let mut order: Vec<usize> = (0..pairs).collect();
    order.sort_by(|&a, &b| magnitude[b].total_cmp(&magnitude[a]).then(a.cmp(&b)));
    let mut segments = vec![0];
    let mut top = magnitude[order[0]];
    for (k, &p) in order.iter().enumerate().skip(1) {
        let m = magnitude[p];
        if segments.len() < MAX_SEGMENTS && m > 0.0 && m * SEGMENT_RATIO < top {
            segments.push(k);
            top = m;
        }
    }
    segments.push(pairs);
    if segments.len() == 2 {
        return identity();
    }
    (order, segments)
}

/// A query's quantised lookup table.
#[derive(Default, Clone)]
pub struct QueryLut {
    /// Layout: (pairs, 2, 16): for pair p (in the layout's byte order), 16 entries of group 2p
    /// then 16 of group 2p+1.
    lut: Vec<u8>,
    /// The first segment's quantisation step.
    delta: f32,
    /// Each segment's step. Layout: (segments,).
    deltas: Vec<f32>,
    /// The weights in the layout's byte order (scratch). Layout: (pairs · 8,).
    ordered: Vec<f32>,
    bias: f32,
    /// Subtracted from the scaled sum (Σ (P q) / √D for a 1-bit RaBitQ code).
    offset: f32,
    scale: f32,
}

impl FastScan {
    /// Transpose the first stage (`pairs` bytes of bit planes, then its two factors in
    /// `factors`' format) of list-ordered codes of `code_size` bytes into blocks, its bytes
    /// ordered and segmented by `hints` (see [`segment_pairs`]).
    /// `parallel`: fill the blocks on rayon's threads. Pass false where the caller may hold a
    /// lock that other rayon tasks wait on (a lazy initialiser): a thread waiting for its own
    /// parallel work may run one of those tasks, which would then wait for it.
    pub fn build(
        list_offsets: &[u64],
        codes: &[u8],
        (pairs, factors): (usize, FactorFormat),
        code_size: usize,
        hints: Option<&[f32]>,
        parallel: bool,
    ) -> FastScan {
        let (order, segments) = segment_pairs(pairs, hints);
        let cs = code_size;
        assert!(
            cs >= pairs + factors.bytes(),
            "RaBitQ codes hold at least the first stage"
        );
        let byte_factors = matches!(factors, FactorFormat::U8 { .. }).then(|| {
            let mut values = Box::new([[0f32; 256]; 2]);
            for c in 0..256 {
                (values[0][c], values[1][c]) = factors.read(&[c as u8; 2]);
            }
            values
        });
        let mut block_offsets = vec![0usize; list_offsets.len()];
        for a in 0..list_offsets.len() - 1 {
            let len = (list_offsets[a + 1] - list_offsets[a]) as usize;
            block_offsets[a + 1] = block_offsets[a] + len.div_ceil(BLOCK);
        }
        let total = *block_offsets.last().unwrap();
        let mut out = vec![0u8; total * pairs * BLOCK];
        let mut f1 = vec![0f32; total * BLOCK];
        let mut f2 = vec![0f32; total * BLOCK];
        // A search starts each list at a random place of these.
        crate::pages::advise_huge_pages(&out);
        crate::pages::advise_huge_pages(&f1);
        crate::pages::advise_huge_pages(&f2);
        // Block → (list, first position) map, then fill blocks in parallel.
        let mut starts = Vec::with_capacity(total);
        for a in 0..list_offsets.len() - 1 {
            let (lo, hi) = (list_offsets[a] as usize, list_offsets[a + 1] as usize);
            for b in 0..(hi - lo).div_ceil(BLOCK) {
                starts.push((lo + b * BLOCK, hi));
            }
        }
        // One block: its codes' bytes (pairs, BLOCK), its two factors (BLOCK,) each, and its
        // (first position, list end).
        let fill =
            |blk: &mut [u8], f1: &mut [f32], f2: &mut [f32], (start, end): (usize, usize)| {
                for j in 0..BLOCK.min(end - start) {
                    let code = &codes[(start + j) * cs..(start + j + 1) * cs];
                    for (k, &p) in order.iter().enumerate() {
                        blk[k * BLOCK + j] = code[p];
                    }
                    (f1[j], f2[j]) = read_factors(byte_factors.as_deref(), factors, &code[pairs..]);
                }
            };
        if parallel {
            out.par_chunks_mut(pairs * BLOCK)
                .zip(f1.par_chunks_mut(BLOCK).zip(f2.par_chunks_mut(BLOCK)))
                .zip(starts.par_iter())
                .for_each(|((blk, (f1, f2)), &range)| fill(blk, f1, f2, range));
        } else {
            out.chunks_mut(pairs * BLOCK)
                .zip(f1.chunks_mut(BLOCK).zip(f2.chunks_mut(BLOCK)))
                .zip(starts.iter())
                .for_each(|((blk, (f1, f2)), &range)| fill(blk, f1, f2, range));
        }
        FastScan {
            pairs,
            block_offsets,
            codes: out,
            f1,
            f2,
            order,
            segments,
            factors,
            byte_factors,
        }
    }

    /// The first stage's two factors, stored at the start of `stored` (a code's bytes after
    /// its first `pairs`): [`FactorFormat::read`], bit for bit.
    #[inline]
    fn read_factors(&self, stored: &[u8]) -> (f32, f32) {
        read_factors(self.byte_factors.as_deref(), self.factors, stored)
    }

    /// Put the first stage of `code` (a whole code of the index) into the next slot of
    /// `loose`, that of a vector at squared distance `query_anchor_dist` from the query's
    /// anchor. The slot's estimate ([`score_loose`](Self::score_loose)) is then the one
    /// [`scan`](Self::scan) gives the vector in its list, bit for bit.
    #[inline]
    pub(crate) fn push_loose(&self, loose: &mut LooseBlocks, code: &[u8], query_anchor_dist: f32) {
        let pairs = self.pairs;
        if loose.len.is_multiple_of(BLOCK) {
            // A new block (its empty slots zero).
            let blocks = loose.len / BLOCK + 1;
            loose.rows.resize(blocks * BLOCK * pairs, 0);
            loose.base_f1.resize(blocks * BLOCK, 0.0);
            loose.f2.resize(blocks * BLOCK, 0.0);
        }
        let row = &mut loose.rows[loose.len * pairs..(loose.len + 1) * pairs];
        if self.num_segments() == 1 {
            // Code order, 16 bytes at a time (a copy of a length known only at run time
            // would be a call).
            let mut rows = row.chunks_exact_mut(16);
            let mut from = code[..pairs].chunks_exact(16);
            for (o, c) in (&mut rows).zip(&mut from) {
                o.copy_from_slice(c);
            }
            for (o, &c) in rows.into_remainder().iter_mut().zip(from.remainder()) {
                *o = c;
            }
        } else {
            for (o, &p) in row.iter_mut().zip(&self.order) {
                *o = code[p];
            }
        }
        let (f1, f2) = self.read_factors(&code[pairs..]);
        loose.base_f1[loose.len] = query_anchor_dist + f1;
        loose.f2[loose.len] = f2;
        loose.len += 1;
    }

    /// The estimates of `loose`'s filled slots (`out`'s first `loose.len()`; `out` is resized
    /// to whole blocks), and `loose` emptied.
    pub(crate) fn score_loose(&self, lut: &QueryLut, loose: &mut LooseBlocks, out: &mut Vec<f32>) {
        let blocks = loose.len.div_ceil(BLOCK);
        out.resize(blocks * BLOCK, 0.0);
        // (base + f1) is each slot's own.
        let affine = self.affine(lut, 0.0);
        let block_bytes = self.pairs * BLOCK;
        loose.block.resize(block_bytes, 0);
        for (b, out) in out.chunks_exact_mut(BLOCK).enumerate() {
            transpose_rows(
                &loose.rows[b * block_bytes..(b + 1) * block_bytes],
                &mut loose.block,
            );
            let codes = &loose.block[..];
            let f1 = &loose.base_f1[b * BLOCK..(b + 1) * BLOCK];
            let f2 = &loose.f2[b * BLOCK..(b + 1) * BLOCK];
            if self.num_segments() > 1 {
                let segments = (&self.segments[..], &lut.deltas[..]);
                block_dists_segmented(codes, &lut.lut, segments, f1, f2, affine, out);
            } else {
                block_dists(codes, &lut.lut, f1, f2, affine, out);
            }
        }
        loose.len = 0;
        loose.rows.clear();
        loose.base_f1.clear();
        loose.f2.clear();
    }

    /// The map from a block's table sums to distance estimates for `lut`'s query and a list at
    /// squared distance `query_anchor_dist` ([`Affine`]): ip = scale·(delta·sum + bias) −
    /// offset, folded into one multiply-add per slot; with segments,
    /// ip = scale·(Σ_s delta_s·sum_s + bias) − offset.
    #[inline]
    fn affine(&self, lut: &QueryLut, query_anchor_dist: f32) -> Affine {
        Affine {
            a: if self.num_segments() > 1 {
                lut.scale
            } else {
                lut.scale * lut.delta
            },
            b: lut.scale * lut.bias - lut.offset,
            base: query_anchor_dist,
        }
    }

    /// Segments of the layout (1 where every byte shares one quantisation step).
    pub fn num_segments(&self) -> usize {
        self.segments.len() - 1
    }

    /// Quantise the table of a query whose first-stage estimate is
    /// `ip = scale · Σ_i bit_i · weights[i] − offset` over the `pairs · 8` code bits
    /// (`weights` zero-padded to that length). For a 1-bit RaBitQ code `weights` is the
    /// rotated query `P q`, `scale` = 2/√D and `offset` = Σ (P q) / √D.
    pub fn prepare(&self, weights: &[f32], scale: f32, offset: f32, out: &mut QueryLut) {
        let groups = self.pairs * 2;
        out.lut.clear();
        out.lut.resize(groups * 16, 0);
        let rq = if self.num_segments() == 1 {
            &weights[..groups * 4]
        } else {
            out.ordered.clear();
            out.ordered
                .extend(self.order.iter().flat_map(|&p| &weights[p * 8..p * 8 + 8]));
            &out.ordered[..]
        };
        out.deltas.clear();
        let mut bias = 0f32;
        for seg in self.segments.windows(2) {
            let w = &rq[seg[0] * 8..seg[1] * 8];
            let delta = w
                .chunks_exact(4)
                .map(|g| g.iter().map(|v| v.abs()).sum::<f32>())
                .fold(0f32, f32::max);
            let delta = if delta > 0.0 { delta / 127.0 } else { 1.0 };
            bias += group_tables(w, 1.0 / delta, &mut out.lut[seg[0] * 32..seg[1] * 32]);
            out.deltas.push(delta);
        }
        out.delta = out.deltas[0];
        out.bias = bias;
        out.offset = offset;
        out.scale = scale;
    }

    /// Bytes of the layout's codes and factors.
    pub fn bytes(&self) -> usize {
        self.codes.len() + 4 * (self.f1.len() + self.f2.len())
    }

    /// The head of list `anchor`: its first blocks' code bytes, at most `max_bytes` of them
    /// (whole blocks, at least one where the list has one), and the same blocks' factors
    /// `f1`, `f2`; for a prefetch before the list is scanned.
    pub fn list_head(&self, anchor: u32, max_bytes: usize) -> (&[u8], &[f32], &[f32]) {
        let b0 = self.block_offsets[anchor as usize];
        let b1 = self.block_offsets[anchor as usize + 1];
        let block_bytes = (self.pairs * BLOCK).max(1);
        let b1 = b1.min(b0 + (max_bytes / block_bytes).max(1));
        (
            &self.codes[b0 * block_bytes..b1 * block_bytes],
            &self.f1[b0 * BLOCK..b1 * BLOCK],
            &self.f2[b0 * BLOCK..b1 * BLOCK],
        )
    }

    /// Number of vectors in list `a` rounded up to whole blocks.
    pub fn padded_len(&self, anchor: u32) -> usize {
        (self.block_offsets[anchor as usize + 1] - self.block_offsets[anchor as usize]) * BLOCK
    }

    /// Estimated squared distances for every slot of list `anchor` (padding slots included;
    /// `out` has `padded_len` entries).
    pub fn scan(&self, lut: &QueryLut, anchor: u32, query_anchor_dist: f32, out: &mut [f32]) {
        self.scan_blocks(lut, anchor, query_anchor_dist, out, |_, _| false)
    }

    /// [`scan`](Self::scan), with each block of the list first offered to `handled(i, out)`
    /// (`i` the block's index in the list, `out` its 32 slots): a block for which it returns
    /// true (having written the slots itself) is not scanned.
    #[inline]
    pub(crate) fn scan_blocks(
        &self,
        lut: &QueryLut,
        anchor: u32,
        query_anchor_dist: f32,
        out: &mut [f32],
        mut handled: impl FnMut(usize, &mut [f32]) -> bool,
    ) {
        let (b0, b1) = (
            self.block_offsets[anchor as usize],
            self.block_offsets[anchor as usize + 1],
        );
        let segmented = self.num_segments() > 1;
        let affine = self.affine(lut, query_anchor_dist);
        for (i, blk) in (b0..b1).enumerate() {
            let codes = &self.codes[blk * self.pairs * BLOCK..(blk + 1) * self.pairs * BLOCK];
            let (f1, f2) = (
                &self.f1[blk * BLOCK..(blk + 1) * BLOCK],
                &self.f2[blk * BLOCK..(blk + 1) * BLOCK],
            );
            let out = &mut out[i * BLOCK..(i + 1) * BLOCK];
            if handled(i, out) {
                continue;
            }
            if segmented {
                let segments = (&self.segments[..], &lut.deltas[..]);
                block_dists_segmented(codes, &lut.lut, segments, f1, f2, affine, out);
            } else {
                block_dists(codes, &lut.lut, f1, f2, affine, out);
            }
        }
    }
}

/// 32 rows of `pairs` bytes (`rows`, layout (32, pairs), row-major) into a block of
/// [`FastScan`]'s layout (`block`, layout (pairs, 32): byte `k` of row `j` at `k · 32 + j`).
/// With SSE2 (x86-64) or NEON (aarch64), both part of their base instruction sets, 16 x 16
/// tiles at a time; the bytes past the last whole tile of 16 as [`transpose_rows_scalar`].
pub fn transpose_rows(rows: &[u8], block: &mut [u8]) {
    assert!(rows.len() == block.len() && rows.len().is_multiple_of(BLOCK));
    let pairs = rows.len() / BLOCK;
    let tiled = pairs / 16 * 16;
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        transpose_tiles(
            (rows, pairs, tiled, block),
            // SAFETY: SSE2 is part of x86-64; the slice holds the 16 bytes read.
            |s: &[u8]| unsafe { _mm_loadu_si128(s.as_ptr() as *const __m128i) },
            // SAFETY: SSE2 is part of x86-64.
            |a, b| unsafe { _mm_unpacklo_epi8(a, b) },
            // SAFETY: SSE2 is part of x86-64.
            |a, b| unsafe { _mm_unpackhi_epi8(a, b) },
            // SAFETY: SSE2 is part of x86-64; the slice holds the 16 bytes written.
            |v, s: &mut [u8]| unsafe { _mm_storeu_si128(s.as_mut_ptr() as *mut __m128i, v) },
        );
    }
    #[cfg(target_arch = "aarch64")]
    {
        use std::arch::aarch64::*;
        transpose_tiles(
            (rows, pairs, tiled, block),
            // SAFETY: NEON is part of aarch64; the slice holds the 16 bytes read.
            |s: &[u8]| unsafe { vld1q_u8(s.as_ptr()) },
            // SAFETY: NEON is part of aarch64.
            |a, b| unsafe { vzip1q_u8(a, b) },
            // SAFETY: NEON is part of aarch64.
            |a, b| unsafe { vzip2q_u8(a, b) },
            // SAFETY: NEON is part of aarch64; the slice holds the 16 bytes written.
            |v, s: &mut [u8]| unsafe { vst1q_u8(s.as_mut_ptr(), v) },
        );
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let tiled = 0;
    transpose_columns(rows, pairs, tiled..pairs, block);
}

/// Scalar reference of [`transpose_rows`].
pub fn transpose_rows_scalar(rows: &[u8], block: &mut [u8]) {
    assert!(rows.len() == block.len() && rows.len().is_multiple_of(BLOCK));
    let pairs = rows.len() / BLOCK;
    transpose_columns(rows, pairs, 0..pairs, block);
}

/// Columns `columns` of [`transpose_rows`], one byte at a time.
fn transpose_columns(rows: &[u8], pairs: usize, columns: std::ops::Range<usize>, block: &mut [u8]) {
    for k in columns {
        for j in 0..BLOCK {
            block[k * BLOCK + j] = rows[j * pairs + k];
        }
    }
}

/// The 16 x 16 tiles of [`transpose_rows`] for columns `0..tiled` (a multiple of 16, at most
/// `pairs`) of `rows` (32 rows of `pairs` bytes) into `block`, on a vector `V` of 16 bytes
/// that `load` reads from and `store` writes to a slice of 16: four rounds of interleaving
/// vector `i` with vector `i + 8` (`low` halves into `2i`, `high` into `2i + 1`, as SSE2's
/// `unpacklo` / `unpackhi` and NEON's `zip1` / `zip2`) transpose a tile.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline(always)]
fn transpose_tiles<V: Copy>(
    (rows, pairs, tiled, block): (&[u8], usize, usize, &mut [u8]),
    load: impl Fn(&[u8]) -> V,
    low: impl Fn(V, V) -> V,
    high: impl Fn(V, V) -> V,
    store: impl Fn(V, &mut [u8]),
) {
    for c in (0..tiled).step_by(16) {
        for j0 in [0, 16] {
            let mut x: [V; 16] = std::array::from_fn(|i| load(&rows[(j0 + i) * pairs + c..][..16]));
            for _ in 0..4 {
                x = std::array::from_fn(|i| {
                    let (a, b) = (x[i / 2], x[i / 2 + 8]);
                    if i % 2 == 0 {
                        low(a, b)
                    } else {
                        high(a, b)
                    }
                });
            }
            for (i, v) in x.into_iter().enumerate() {
                store(v, &mut block[(c + i) * BLOCK + j0..][..16]);
            }
        }
    }
}

/// The quantised tables of consecutive groups of 4 weights; returns Σ over groups of `min`.
///
/// Per group: `t[m]` = Σ `w[i]` over the bits `i` of `m`, added in increasing `i`; `min` =
/// `t[mask of the negative weights]` (the smallest sum); entry `m` of the group's 16 bytes in
/// `lut` = `(t[m] − min) · inv_delta` rounded, capped at 127. `weights` holds 4 per group and
/// `lut` 16 per group.
pub fn group_tables(weights: &[f32], inv_delta: f32, lut: &mut [u8]) -> f32 {
    assert!(weights.len().is_multiple_of(4) && lut.len() == weights.len() * 4);
    #[cfg(target_arch = "x86_64")]
    if level() == SimdLevel::Avx2 {
        // SAFETY: AVX2 was detected at run time; the lengths were checked above.
        return unsafe { group_tables_avx2(weights, inv_delta, lut) };
    }
    #[cfg(target_arch = "aarch64")]
    if level() == SimdLevel::Neon {
        // SAFETY: NEON was detected at run time; the lengths were checked above.
        return unsafe { group_tables_neon(weights, inv_delta, lut) };
    }
    group_tables_scalar(weights, inv_delta, lut)
}

/// Scalar reference of [`group_tables`].
pub fn group_tables_scalar(weights: &[f32], inv_delta: f32, lut: &mut [u8]) -> f32 {
    let mut bias = 0f32;
    for (w, lut) in weights.chunks_exact(4).zip(lut.chunks_exact_mut(16)) {
        // t[m]: the subset without m's top bit, plus w[top bit].
        let mut t = [0f32; 16];
        for m in 1..16usize {
            let top = (usize::BITS - 1 - m.leading_zeros()) as usize;
            t[m] = t[m ^ (1 << top)] + w[top];
        }
        let negative = (0..4).filter(|&i| w[i] < 0.0).fold(0, |m, i| m | 1 << i);
        let min = t[negative];
        bias += min;
        for (o, &v) in lut.iter_mut().zip(&t) {
            // Values are ≥ 0, so adding 0.5 and truncating rounds (no libm call).
            *o = ((v - min) * inv_delta + 0.5).min(127.0) as u8;
        }
    }
    bias
}

/// [`group_tables`] with AVX2: entries 0..8 of a group as one vector (masked adds of w0..w2
/// in increasing order), entries 8..16 as those plus w3, so every sum is the scalar one.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn group_tables_avx2(weights: &[f32], inv_delta: f32, lut: &mut [u8]) -> f32 {
    use std::arch::x86_64::*;
    // Lane m of select[i] is all ones when bit i of m is set.
    let bit = |i: i32| {
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let b = _mm256_set1_epi32(1 << i);
        _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(lanes, b), b))
    };
    let select = [bit(0), bit(1), bit(2)];
    let (inv, half, cap) = (
        _mm256_set1_ps(inv_delta),
        _mm256_set1_ps(0.5),
        _mm256_set1_ps(127.0),
    );
    let mut bias = 0f32;
    for (w, lut) in weights.chunks_exact(4).zip(lut.chunks_exact_mut(16)) {
        let mut lo = _mm256_setzero_ps();
        for (i, sel) in select.iter().enumerate() {
            lo = _mm256_add_ps(lo, _mm256_and_ps(_mm256_set1_ps(w[i]), *sel));
        }
        let hi = _mm256_add_ps(lo, _mm256_set1_ps(w[3]));
        let mut t = [0f32; 16];
        // SAFETY: t holds 16 floats.
        unsafe {
            _mm256_storeu_ps(t.as_mut_ptr(), lo);
            _mm256_storeu_ps(t.as_mut_ptr().add(8), hi);
        }
        let negative = (0..4).filter(|&i| w[i] < 0.0).fold(0, |m, i| m | 1 << i);
        let min = t[negative];
        bias += min;
        let m = _mm256_set1_ps(min);
        let quantise = |v| {
            let x = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(v, m), inv), half);
            _mm256_cvttps_epi32(_mm256_min_ps(x, cap))
        };
        // packus per 128-bit lane gives (lo 0..4, hi 0..4 | lo 4..8, hi 4..8); reorder the
        // 64-bit quarters to (lo 0..4, lo 4..8, hi 0..4, hi 4..8), then narrow to bytes.
        let words = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(
            quantise(lo),
            quantise(hi),
        ));
        let bytes = _mm_packus_epi16(
            _mm256_castsi256_si128(words),
            _mm256_extracti128_si256::<1>(words),
        );
        // SAFETY: lut holds 16 bytes for this group.
        unsafe { _mm_storeu_si128(lut.as_mut_ptr() as *mut __m128i, bytes) };
    }
    bias
}

/// Maps a block's table sums to distance estimates:
/// `out[j] = (base + f1[j]) + f2[j] · (a · sum[j] + b)`.
#[derive(Clone, Copy, Debug)]
pub struct Affine {
    pub a: f32,
    pub b: f32,
    pub base: f32,
}

/// Distance estimates of the 32 slots of one block: [`block_sums`] mapped through `affine`
/// with the slots' factors `f1`, `f2` (32 each). `out` holds 32 values.
#[inline]
pub fn block_dists(
    codes: &[u8],
    lut: &[u8],
    f1: &[f32],
    f2: &[f32],
    affine: Affine,
    out: &mut [f32],
) {
    assert!(f1.len() >= BLOCK && f2.len() >= BLOCK && out.len() >= BLOCK);
    match *KERNEL {
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => {
            // SAFETY: AVX2 was detected at run time; the slices hold 32 values (asserted).
            unsafe { block_dists_avx2(codes, lut, f1, f2, affine, out) }
        }
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512Bw => {
            // SAFETY: AVX2, AVX-512F and AVX-512BW were detected at run time; the slices hold
            // 32 values (asserted).
            unsafe { block_dists_avx512(codes, lut, f1, f2, affine, out) }
        }
        #[cfg(target_arch = "aarch64")]
        Kernel::Neon => {
            // SAFETY: NEON was detected at run time; the slices hold 32 values (asserted).
            unsafe { block_dists_neon(codes, lut, f1, f2, affine, out) }
        }
        _ => block_dists_scalar(codes, lut, f1, f2, affine, out),
    }
}

/// Scalar reference of [`block_dists`].
pub fn block_dists_scalar(
    codes: &[u8],
    lut: &[u8],
    f1: &[f32],
    f2: &[f32],
    affine: Affine,
    out: &mut [f32],
) {
    let mut sums = [0u32; BLOCK];
    block_sums_scalar(codes, lut, &mut sums);
    for j in 0..BLOCK {
        // Sums stay far below 2^31 (at most 254 per code byte): the signed conversion is exact.
        let ip = affine.a * sums[j] as i32 as f32 + affine.b;
        out[j] = (affine.base + f1[j]) + f2[j] * ip;
    }
}

/// Distance estimates of the 32 slots of one block whose code bytes are cut into segments:
/// `segments` = (bounds, steps), segment `s` the bytes `bounds[s]..bounds[s + 1]` with step
/// `steps[s]`; per slot `acc = Σ_s steps[s] · sum_s` ([`block_sums`] of the segment, added
/// in segment order), `ip = affine.a · acc + affine.b` and `(base + f1) + f2 · ip`. `out` holds
/// 32 values.
#[inline]
pub fn block_dists_segmented(
    codes: &[u8],
    lut: &[u8],
    segments: (&[usize], &[f32]),
    f1: &[f32],
    f2: &[f32],
    affine: Affine,
    out: &mut [f32],
) {
    assert!(f1.len() >= BLOCK && f2.len() >= BLOCK && out.len() >= BLOCK);
    assert!(segments.0.len() == segments.1.len() + 1);
    match *KERNEL {
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => {
            // SAFETY: AVX2 was detected at run time; the slices hold 32 values (asserted).
            unsafe { block_dists_segmented_avx2(codes, lut, segments, f1, f2, affine, out) }
        }
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512Bw => {
            // SAFETY: AVX2, AVX-512F and AVX-512BW were detected at run time; the slices hold
            // 32 values (asserted).
            unsafe { block_dists_segmented_avx512(codes, lut, segments, f1, f2, affine, out) }
        }
        _ => segmented_with(block_sums, codes, lut, segments, f1, f2, affine, out),
    }
}

/// Scalar reference of [`block_dists_segmented`].
pub fn block_dists_segmented_scalar(
    codes: &[u8],
    lut: &[u8],
    segments: (&[usize], &[f32]),
    f1: &[f32],
    f2: &[f32],
    affine: Affine,
    out: &mut [f32],
) {
    segmented_with(block_sums_scalar, codes, lut, segments, f1, f2, affine, out);
}

/// [`block_dists_segmented`] with `sums` for each segment's [`block_sums`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn segmented_with(
    sums: fn(&[u8], &[u8], &mut [u32; BLOCK]),
    codes: &[u8],
    lut: &[u8],
    (bounds, steps): (&[usize], &[f32]),
    f1: &[f32],
    f2: &[f32],
    affine: Affine,
    out: &mut [f32],
) {
    let mut acc = [0f32; BLOCK];
    let mut part = [0u32; BLOCK];
    for (seg, &step) in bounds.windows(2).zip(steps) {
        sums(
            &codes[seg[0] * BLOCK..seg[1] * BLOCK],
            &lut[seg[0] * 32..seg[1] * 32],
            &mut part,
        );
        for (a, &p) in acc.iter_mut().zip(&part) {
            // Sums stay far below 2^31: the signed conversion is exact.
            *a += step * p as i32 as f32;
        }
    }
    for j in 0..BLOCK {
        let ip = affine.a * acc[j] + affine.b;
        out[j] = (affine.base + f1[j]) + f2[j] * ip;
    }
}

/// Σ over code bytes p of lut[p][low nibble] + lut[p][high nibble], for the 32 slots of a block.
pub fn block_sums(codes: &[u8], lut: &[u8], out: &mut [u32; BLOCK]) {
    match *KERNEL {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 was detected at run time.
        Kernel::Avx2 => unsafe { block_sums_avx2(codes, lut, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2, AVX-512F and AVX-512BW were detected at run time.
        Kernel::Avx512Bw => unsafe { block_sums_avx512(codes, lut, out) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON was detected at run time.
        Kernel::Neon => unsafe { block_sums_neon(codes, lut, out) },
        _ => block_sums_scalar(codes, lut, out),
    }
}

/// Scalar reference of [`block_sums`].
pub fn block_sums_scalar(codes: &[u8], lut: &[u8], out: &mut [u32; BLOCK]) {
    let pairs = codes.len() / BLOCK;
    out.fill(0);
    for p in 0..pairs {
        let (lo, hi) = (&lut[p * 32..p * 32 + 16], &lut[p * 32 + 16..p * 32 + 32]);
        for j in 0..BLOCK {
            let b = codes[p * BLOCK + j];
            out[j] += lo[(b & 15) as usize] as u32 + hi[(b >> 4) as usize] as u32;
        }
    }
}

/// The 32 slot sums of a block as eight 32-bit lanes each, in slot order:
/// `[0..8], [8..16], [16..24], [24..32]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn block_sums_avx2_lanes(codes: &[u8], lut: &[u8]) -> [std::arch::x86_64::__m256i; 4] {
    use std::arch::x86_64::*;
    let pairs = codes.len() / BLOCK;
    assert!(lut.len() >= pairs * 32);
    let mask = _mm256_set1_epi8(0x0f);
    let zero = _mm256_setzero_si256();
    let mut total = [zero; 4];
    let mut start = 0;
    while start < pairs {
        let end = (start + PAIRS_PER_FLUSH).min(pairs);
        let (mut acc_a, mut acc_b) = (zero, zero);
        for p in start..end {
            // SAFETY: p < pairs, so codes[p*32..p*32+32] and lut[p*32..p*32+32] are in bounds
            // (checked by the assert and by `pairs = codes.len() / 32`).
            let (v, tlo, thi) = unsafe {
                (
                    _mm256_loadu_si256(codes.as_ptr().add(p * BLOCK) as *const __m256i),
                    _mm256_broadcastsi128_si256(_mm_loadu_si128(
                        lut.as_ptr().add(p * 32) as *const __m128i
                    )),
                    _mm256_broadcastsi128_si256(_mm_loadu_si128(
                        lut.as_ptr().add(p * 32 + 16) as *const __m128i
                    )),
                )
            };
            let lo = _mm256_and_si256(v, mask);
            let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
            let r = _mm256_add_epi8(_mm256_shuffle_epi8(tlo, lo), _mm256_shuffle_epi8(thi, hi));
            // Seen as 16-bit lanes, r = even byte + 256 · odd byte: summing r and r >> 8 keeps
            // the odd bytes' sums exactly and the even ones' recoverable (below), with shifts
            // instead of byte unpacks (which compete with pshufb for the shuffle port).
            acc_a = _mm256_add_epi16(acc_a, r);
            acc_b = _mm256_add_epi16(acc_b, _mm256_srli_epi16(r, 8));
        }
        // SAFETY: AVX2 is enabled here.
        unsafe { flush_window_avx2(acc_a, acc_b, &mut total) };
        start = end;
    }
    total
}

/// Adds one flush window's 16-bit sums to `total` (32-bit lanes in slot order, as
/// [`block_sums_avx2_lanes`] returns them). Over the window's byte pairs `r` (32 bytes, slot
/// `j` in byte `j`), `acc_a` = Σ r and `acc_b` = Σ r >> 8 as 16-bit lanes.
///
/// Always inlined, so that it is compiled with its caller's target features.
///
/// # Safety
/// AVX2 must be available.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn flush_window_avx2(
    acc_a: std::arch::x86_64::__m256i,
    acc_b: std::arch::x86_64::__m256i,
    total: &mut [std::arch::x86_64::__m256i; 4],
) {
    use std::arch::x86_64::*;
    // SAFETY: the caller guarantees AVX2; these intrinsics only compute on registers.
    unsafe {
        // Even bytes (slots 2i): acc_a − 256 · acc_b (mod 2^16; the true sums are below
        // 2^16). Odd bytes (slots 2i + 1): acc_b.
        let even = _mm256_sub_epi16(acc_a, _mm256_slli_epi16(acc_b, 8));
        // Interleave back to slot order: per 128-bit lane, unpacklo gives slots 0..8 (lane 0)
        // and 16..24 (lane 1), unpackhi 8..16 and 24..32.
        let (lo, hi) = (
            _mm256_unpacklo_epi16(even, acc_b),
            _mm256_unpackhi_epi16(even, acc_b),
        );
        let parts = [
            _mm256_cvtepu16_epi32(_mm256_castsi256_si128(lo)),
            _mm256_cvtepu16_epi32(_mm256_castsi256_si128(hi)),
            _mm256_cvtepu16_epi32(_mm256_extracti128_si256::<1>(lo)),
            _mm256_cvtepu16_epi32(_mm256_extracti128_si256::<1>(hi)),
        ];
        for (t, p) in total.iter_mut().zip(parts) {
            *t = _mm256_add_epi32(*t, p);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn block_sums_avx2(codes: &[u8], lut: &[u8], out: &mut [u32; BLOCK]) {
    // SAFETY: AVX2 is enabled for this function; the kernel checks the lengths.
    unsafe { store_sums_avx2(block_sums_avx2_lanes(codes, lut), out) };
}

/// Stores a block's 32 sums, as the kernels' lanes hold them, into `out`. Always inlined, so
/// that it is compiled with its caller's target features.
///
/// # Safety
/// AVX2 must be available.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn store_sums_avx2(lanes: [std::arch::x86_64::__m256i; 4], out: &mut [u32; BLOCK]) {
    use std::arch::x86_64::*;
    for (c, l) in lanes.iter().enumerate() {
        // SAFETY: the caller guarantees AVX2; out holds 32 u32 and c·8 + 8 <= 32.
        unsafe { _mm256_storeu_si256(out.as_mut_ptr().add(c * 8) as *mut __m256i, *l) };
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn block_dists_avx2(
    codes: &[u8],
    lut: &[u8],
    f1: &[f32],
    f2: &[f32],
    affine: Affine,
    out: &mut [f32],
) {
    // SAFETY: AVX2 is enabled for this function; the kernel checks the lengths, and the
    // caller guarantees 32 values in f1, f2 and out.
    unsafe { lanes_to_dists_avx2(block_sums_avx2_lanes(codes, lut), affine, f1, f2, out) };
}

/// [`store_dists_avx2`] of a block's 32 sums as the kernels' lanes hold them. Always inlined,
/// so that it is compiled with its caller's target features.
///
/// # Safety
/// AVX2 must be available; `f1`, `f2` and `out` must hold 32 values.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn lanes_to_dists_avx2(
    lanes: [std::arch::x86_64::__m256i; 4],
    affine: Affine,
    f1: &[f32],
    f2: &[f32],
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    // SAFETY: the caller guarantees AVX2 and 32 values in f1, f2 and out.
    unsafe {
        let sums = lanes.map(|l| _mm256_cvtepi32_ps(l));
        store_dists_avx2(sums, affine, f1, f2, out);
    }
}

/// `(base + f1) + f2 · (a · sum + b)` for the 32 slots whose sums are `sums` (four vectors of
/// 8, in slot order), into `out`. The caller guarantees 32 values in `f1`, `f2` and `out`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn store_dists_avx2(
    sums: [std::arch::x86_64::__m256; 4],
    affine: Affine,
    f1: &[f32],
    f2: &[f32],
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (a, b, base) = (
        _mm256_set1_ps(affine.a),
        _mm256_set1_ps(affine.b),
        _mm256_set1_ps(affine.base),
    );
    for (c, sum) in sums.iter().enumerate() {
        // SAFETY: the caller guarantees 32 values in f1, f2 and out; c·8 + 8 <= 32.
        unsafe {
            let ip = _mm256_add_ps(_mm256_mul_ps(a, *sum), b);
            let g1 = _mm256_loadu_ps(f1.as_ptr().add(c * 8));
            let g2 = _mm256_loadu_ps(f2.as_ptr().add(c * 8));
            let d = _mm256_add_ps(_mm256_add_ps(base, g1), _mm256_mul_ps(g2, ip));
            _mm256_storeu_ps(out.as_mut_ptr().add(c * 8), d);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn block_dists_segmented_avx2(
    codes: &[u8],
    lut: &[u8],
    segments: (&[usize], &[f32]),
    f1: &[f32],
    f2: &[f32],
    affine: Affine,
    out: &mut [f32],
) {
    // SAFETY: AVX2 is enabled for this function (and for the closure); the kernel checks the
    // lengths, and the caller guarantees 32 values in f1, f2 and out.
    unsafe {
        segmented_lanes_avx2(
            |c, l| block_sums_avx2_lanes(c, l),
            codes,
            lut,
            segments,
            f1,
            f2,
            affine,
            out,
        )
    }
}

/// [`block_dists_segmented`] with `lanes` for each segment's 32 sums (as
/// [`block_sums_avx2_lanes`] returns them). Always inlined, so that it is compiled with its
/// caller's target features.
///
/// # Safety
/// AVX2 must be available; `f1`, `f2` and `out` must hold 32 values.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn segmented_lanes_avx2(
    lanes: impl Fn(&[u8], &[u8]) -> [std::arch::x86_64::__m256i; 4],
    codes: &[u8],
    lut: &[u8],
    (bounds, steps): (&[usize], &[f32]),
    f1: &[f32],
    f2: &[f32],
    affine: Affine,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    // SAFETY: the caller guarantees AVX2 and 32 values in f1, f2 and out.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 4];
        for (seg, &step) in bounds.windows(2).zip(steps) {
            let sums = lanes(
                &codes[seg[0] * BLOCK..seg[1] * BLOCK],
                &lut[seg[0] * 32..seg[1] * 32],
            );
            let step = _mm256_set1_ps(step);
            for (a, l) in acc.iter_mut().zip(sums) {
                // The scalar reference's order: acc + step · sum, no fused multiply-add.
                *a = _mm256_add_ps(*a, _mm256_mul_ps(step, _mm256_cvtepi32_ps(l)));
            }
        }
        store_dists_avx2(acc, affine, f1, f2, out);
    }
}

/// [`block_sums_avx2_lanes`] with AVX-512BW, two of a block's byte pairs per step: one
/// 64-byte load holds pairs `p` and `p + 1` of the 32 slots, another their four 16-entry
/// tables, which `vshufi64x2` spreads so that each 128-bit lane's `vpshufb` reads its own
/// pair's table. At each flush the two 256-bit halves' 16-bit sums are added (a window holds
/// [`PAIRS_PER_FLUSH`] pairs in all, so they stay below 2^16) and flushed as the AVX2 kernel
/// does; an odd last pair takes a step with the upper half masked to zero. Every sum is the
/// same integer as the AVX2 kernel's.
///
/// # Safety
/// AVX2, AVX-512F and AVX-512BW must be available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f,avx512bw")]
unsafe fn block_sums_avx512_lanes(codes: &[u8], lut: &[u8]) -> [std::arch::x86_64::__m256i; 4] {
    use std::arch::x86_64::*;
    let pairs = codes.len() / BLOCK;
    assert!(lut.len() >= pairs * 32);
    let mask = _mm512_set1_epi8(0x0f);
    let mut total = [_mm256_setzero_si256(); 4];
    // One step on two pairs' code bytes `v` and tables `tables` (lanes: low p, high p,
    // low p + 1, high p + 1), as the AVX2 kernel's step on each half.
    let step = |v: __m512i, tables: __m512i, acc_a: &mut __m512i, acc_b: &mut __m512i| {
        let tlo = _mm512_shuffle_i64x2::<0b10_10_00_00>(tables, tables);
        let thi = _mm512_shuffle_i64x2::<0b11_11_01_01>(tables, tables);
        let lo = _mm512_and_si512(v, mask);
        let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), mask);
        let r = _mm512_add_epi8(_mm512_shuffle_epi8(tlo, lo), _mm512_shuffle_epi8(thi, hi));
        *acc_a = _mm512_add_epi16(*acc_a, r);
        *acc_b = _mm512_add_epi16(*acc_b, _mm512_srli_epi16::<8>(r));
    };
    let mut start = 0;
    while start < pairs {
        let end = (start + PAIRS_PER_FLUSH).min(pairs);
        let (mut acc_a, mut acc_b) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        let mut p = start;
        while p + 2 <= end {
            // SAFETY: p + 2 <= pairs, so codes[32p..32p + 64] and lut[32p..32p + 64] are in
            // bounds (`pairs = codes.len() / 32` and the assert above).
            let (v, tables) = unsafe {
                (
                    _mm512_loadu_si512(codes.as_ptr().add(p * BLOCK) as *const _),
                    _mm512_loadu_si512(lut.as_ptr().add(p * 32) as *const _),
                )
            };
            step(v, tables, &mut acc_a, &mut acc_b);
            p += 2;
        }
        if p < end {
            // SAFETY: p < pairs, so codes[32p..32p + 32] and lut[32p..32p + 32] are in bounds;
            // the masked loads read only those 32 bytes (and set the rest to zero, whose
            // tables give zero sums).
            let (v, tables) = unsafe {
                (
                    _mm512_maskz_loadu_epi8(0xffff_ffff, codes.as_ptr().add(p * BLOCK) as *const _),
                    _mm512_maskz_loadu_epi8(0xffff_ffff, lut.as_ptr().add(p * 32) as *const _),
                )
            };
            step(v, tables, &mut acc_a, &mut acc_b);
        }
        let fold = |x: __m512i| {
            _mm256_add_epi16(_mm512_castsi512_si256(x), _mm512_extracti64x4_epi64::<1>(x))
        };
        // SAFETY: AVX2 is enabled here.
        unsafe { flush_window_avx2(fold(acc_a), fold(acc_b), &mut total) };
        start = end;
    }
    total
}

/// [`block_sums_avx2`] with [`block_sums_avx512_lanes`].
///
/// # Safety
/// AVX2, AVX-512F and AVX-512BW must be available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f,avx512bw")]
unsafe fn block_sums_avx512(codes: &[u8], lut: &[u8], out: &mut [u32; BLOCK]) {
    // SAFETY: the features are enabled for this function; the kernel checks the lengths.
    unsafe { store_sums_avx2(block_sums_avx512_lanes(codes, lut), out) };
}

/// [`block_dists_avx2`] with [`block_sums_avx512_lanes`].
///
/// # Safety
/// AVX2, AVX-512F and AVX-512BW must be available; `f1`, `f2` and `out` must hold 32 values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f,avx512bw")]
unsafe fn block_dists_avx512(
    codes: &[u8],
    lut: &[u8],
    f1: &[f32],
    f2: &[f32],
    affine: Affine,
    out: &mut [f32],
) {
    // SAFETY: the features are enabled for this function; the kernel checks the lengths, and
    // the caller guarantees 32 values in f1, f2 and out.
    unsafe { lanes_to_dists_avx2(block_sums_avx512_lanes(codes, lut), affine, f1, f2, out) };
}

/// [`block_dists_segmented_avx2`] with [`block_sums_avx512_lanes`].
///
/// # Safety
/// AVX2, AVX-512F and AVX-512BW must be available; `f1`, `f2` and `out` must hold 32 values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f,avx512bw")]
unsafe fn block_dists_segmented_avx512(
    codes: &[u8],
    lut: &[u8],
    segments: (&[usize], &[f32]),
    f1: &[f32],
    f2: &[f32],
    affine: Affine,
    out: &mut [f32],
) {
    // SAFETY: the features are enabled for this function (and for the closure); the kernel
    // checks the lengths, and the caller guarantees 32 values in f1, f2 and out.
    unsafe {
        segmented_lanes_avx2(
            |c, l| block_sums_avx512_lanes(c, l),
            codes,
            lut,
            segments,
            f1,
            f2,
            affine,
            out,
        )
    }
}

/// [`group_tables`] with NEON: a group's 16 entries as four vectors, entries 0..4 by masked
/// adds of w0 and w1 in that order, then + w2 (4..8), + w3 (8..12) and + w2 + w3 (12..16), so
/// every sum is the scalar one; quantised like the scalar (`vminnm` ignores a NaN as `min`
/// does, and the float-to-integer conversion truncates and saturates like `as`).
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn group_tables_neon(weights: &[f32], inv_delta: f32, lut: &mut [u8]) -> f32 {
    use std::arch::aarch64::*;
    // SAFETY: the array holds four u32.
    let lane = unsafe { vld1q_u32([0u32, 1, 2, 3].as_ptr()) };
    let select = [
        vtstq_u32(lane, vdupq_n_u32(1)),
        vtstq_u32(lane, vdupq_n_u32(2)),
    ];
    let masked = |x: f32, sel: uint32x4_t| {
        vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(vdupq_n_f32(x)), sel))
    };
    let (inv, half, cap) = (vdupq_n_f32(inv_delta), vdupq_n_f32(0.5), vdupq_n_f32(127.0));
    let mut bias = 0f32;
    for (w, lut) in weights.chunks_exact(4).zip(lut.chunks_exact_mut(16)) {
        let q0 = vaddq_f32(
            vaddq_f32(vdupq_n_f32(0.0), masked(w[0], select[0])),
            masked(w[1], select[1]),
        );
        let q1 = vaddq_f32(q0, vdupq_n_f32(w[2]));
        let quarters = [
            q0,
            q1,
            vaddq_f32(q0, vdupq_n_f32(w[3])),
            vaddq_f32(q1, vdupq_n_f32(w[3])),
        ];
        let mut t = [0f32; 16];
        for (k, q) in quarters.iter().enumerate() {
            // SAFETY: t holds 16 floats; 4k + 4 <= 16.
            unsafe { vst1q_f32(t.as_mut_ptr().add(4 * k), *q) };
        }
        let negative = (0..4).filter(|&i| w[i] < 0.0).fold(0, |m, i| m | 1 << i);
        let min = t[negative];
        bias += min;
        let m = vdupq_n_f32(min);
        let quantise = |v| {
            let x = vaddq_f32(vmulq_f32(vsubq_f32(v, m), inv), half);
            vcvtq_u32_f32(vminnmq_f32(x, cap))
        };
        let narrow = |a, b| vmovn_u16(vcombine_u16(vmovn_u32(quantise(a)), vmovn_u32(quantise(b))));
        let bytes = vcombine_u8(
            narrow(quarters[0], quarters[1]),
            narrow(quarters[2], quarters[3]),
        );
        // SAFETY: lut holds 16 bytes for this group.
        unsafe { vst1q_u8(lut.as_mut_ptr(), bytes) };
    }
    bias
}

/// The 32 slot sums of a block as eight vectors of four, in slot order: a `tbl` lookup per
/// nibble, byte sums widened into 16-bit lanes, flushed to 32 bits every [`PAIRS_PER_FLUSH`].
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn block_sums_neon_lanes(codes: &[u8], lut: &[u8]) -> [std::arch::aarch64::uint32x4_t; 8] {
    use std::arch::aarch64::*;
    let pairs = codes.len() / BLOCK;
    assert!(lut.len() >= pairs * 32);
    let mask = vdupq_n_u8(0x0f);
    let mut total = [vdupq_n_u32(0); 8];
    let mut start = 0;
    while start < pairs {
        let end = (start + PAIRS_PER_FLUSH).min(pairs);
        let zero = vdupq_n_u16(0);
        let (mut s0, mut s1, mut s2, mut s3) = (zero, zero, zero, zero);
        for p in start..end {
            // SAFETY: p < pairs, so codes[p*32..p*32+32] and lut[p*32..p*32+32] are in bounds
            // (checked by the assert and by `pairs = codes.len() / 32`).
            let (v0, v1, tlo, thi) = unsafe {
                (
                    vld1q_u8(codes.as_ptr().add(p * BLOCK)),
                    vld1q_u8(codes.as_ptr().add(p * BLOCK + 16)),
                    vld1q_u8(lut.as_ptr().add(p * 32)),
                    vld1q_u8(lut.as_ptr().add(p * 32 + 16)),
                )
            };
            let look = |v| {
                vaddq_u8(
                    vqtbl1q_u8(tlo, vandq_u8(v, mask)),
                    vqtbl1q_u8(thi, vshrq_n_u8::<4>(v)),
                )
            };
            let (r0, r1) = (look(v0), look(v1));
            s0 = vaddw_u8(s0, vget_low_u8(r0));
            s1 = vaddw_high_u8(s1, r0);
            s2 = vaddw_u8(s2, vget_low_u8(r1));
            s3 = vaddw_high_u8(s3, r1);
        }
        for (c, s) in [s0, s1, s2, s3].into_iter().enumerate() {
            total[2 * c] = vaddw_u16(total[2 * c], vget_low_u16(s));
            total[2 * c + 1] = vaddw_high_u16(total[2 * c + 1], s);
        }
        start = end;
    }
    total
}

#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn block_sums_neon(codes: &[u8], lut: &[u8], out: &mut [u32; BLOCK]) {
    use std::arch::aarch64::*;
    // SAFETY: NEON is enabled for this function; the helper checks the lengths.
    let lanes = unsafe { block_sums_neon_lanes(codes, lut) };
    for (c, l) in lanes.iter().enumerate() {
        // SAFETY: out holds 32 u32; c·4 + 4 <= 32.
        unsafe { vst1q_u32(out.as_mut_ptr().add(c * 4), *l) };
    }
}

#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn block_dists_neon(
    codes: &[u8],
    lut: &[u8],
    f1: &[f32],
    f2: &[f32],
    affine: Affine,
    out: &mut [f32],
) {
    use std::arch::aarch64::*;
    // SAFETY: NEON is enabled for this function; the helper checks the lengths.
    let lanes = unsafe { block_sums_neon_lanes(codes, lut) };
    let (a, b, base) = (
        vdupq_n_f32(affine.a),
        vdupq_n_f32(affine.b),
        vdupq_n_f32(affine.base),
    );
    for (c, l) in lanes.iter().enumerate() {
        // SAFETY: the caller guarantees 32 values in f1, f2 and out; c·4 + 4 <= 32.
        unsafe {
            // Unfused multiply and add, as the scalar reference computes them.
            let ip = vaddq_f32(vmulq_f32(a, vcvtq_f32_s32(vreinterpretq_s32_u32(*l))), b);
            let g1 = vld1q_f32(f1.as_ptr().add(c * 4));
            let g2 = vld1q_f32(f2.as_ptr().add(c * 4));
            let d = vaddq_f32(vaddq_f32(base, g1), vmulq_f32(g2, ip));
            vst1q_f32(out.as_mut_ptr().add(c * 4), d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// The tiled transpose (SSE2 or NEON) gives the scalar one's bytes, whole tiles and odd
    /// tails alike, and the scalar one puts byte `k` of row `j` at `k · 32 + j`.
    #[test]
    fn transposed_rows_match_scalar_over_odd_tails() {
        let mut r = Rng::new(9);
        for pairs in [1usize, 5, 15, 16, 17, 31, 32, 48, 49, 100] {
            let rows: Vec<u8> = (0..BLOCK * pairs).map(|_| r.next_u64() as u8).collect();
            let (mut fast, mut scalar) = (vec![0u8; rows.len()], vec![0u8; rows.len()]);
            transpose_rows(&rows, &mut fast);
            transpose_rows_scalar(&rows, &mut scalar);
            assert_eq!(fast, scalar, "pairs {pairs}");
            for j in 0..BLOCK {
                for k in 0..pairs {
                    assert_eq!(scalar[k * BLOCK + j], rows[j * pairs + k], "pairs {pairs}");
                }
            }
        }
    }

    #[test]
    fn simd_group_tables_match_scalar_and_brute_force() {
        let mut r = Rng::new(4);
        for groups in [1usize, 2, 5, 96, 192] {
            let mut w: Vec<f32> = (0..groups * 4).map(|_| r.normal() as f32).collect();
            w[0] = 0.0;
            if groups > 1 {
                w[4..8].fill(-0.5);
            }
            let inv_delta = 127.0 / 3.0;
            let (mut a, mut b) = (vec![0u8; groups * 16], vec![0u8; groups * 16]);
            let bias_a = group_tables(&w, inv_delta, &mut a);
            let bias_b = group_tables_scalar(&w, inv_delta, &mut b);
            assert_eq!(a, b, "groups {groups}");
            assert_eq!(bias_a, bias_b, "groups {groups}");
            let mut bias = 0f64;
            for g in 0..groups {
                let gw = &w[4 * g..4 * g + 4];
                let min: f64 = gw.iter().filter(|v| **v < 0.0).map(|v| *v as f64).sum();
                bias += min;
                for m in 0..16 {
                    let t: f64 = (0..4)
                        .filter(|i| m >> i & 1 == 1)
                        .map(|i| gw[i] as f64)
                        .sum();
                    let want = ((t - min) * inv_delta as f64).round().min(127.0);
                    let got = b[16 * g + m] as f64;
                    assert!(
                        (got - want).abs() <= 1.0,
                        "group {g} entry {m}: {got} vs {want}"
                    );
                }
            }
            assert!((bias_b as f64 - bias).abs() < 1e-4 * (1.0 + bias.abs()));
        }
    }

    /// Random codes (pairs · 32 bytes), tables (pairs · 32 entries below 128) and factors f1,
    /// f2 (32 each) of one block.
    fn random_block(r: &mut Rng, pairs: usize) -> (Vec<u8>, Vec<u8>, Vec<f32>, Vec<f32>) {
        let codes = (0..pairs * BLOCK).map(|_| r.below(256) as u8).collect();
        let lut = (0..pairs * 32).map(|_| r.below(128) as u8).collect();
        let f1 = (0..BLOCK).map(|_| r.normal() as f32).collect();
        let f2 = (0..BLOCK).map(|_| r.normal() as f32).collect();
        (codes, lut, f1, f2)
    }

    #[test]
    fn simd_block_sums_match_scalar_for_all_sizes() {
        let mut r = Rng::new(2);
        for pairs in [1usize, 2, 7, 48, 300] {
            let (codes, lut, f1, f2) = random_block(&mut r, pairs);
            let (mut a, mut b) = ([0u32; BLOCK], [0u32; BLOCK]);
            block_sums(&codes, &lut, &mut a);
            block_sums_scalar(&codes, &lut, &mut b);
            assert_eq!(a, b, "pairs {pairs}");
            let affine = Affine {
                a: 0.013,
                b: -0.7,
                base: 1.25,
            };
            let (mut x, mut y) = ([0f32; BLOCK], [0f32; BLOCK]);
            block_dists(&codes, &lut, &f1, &f2, affine, &mut x);
            block_dists_scalar(&codes, &lut, &f1, &f2, affine, &mut y);
            assert_eq!(x, y, "pairs {pairs}");
        }
    }

    /// Both x86-64 kernels, called directly whatever this CPU's default, give the scalar sums
    /// and distances over pair counts around the 512-bit kernel's two-pair step and the flush
    /// window, with random tables and with every entry at its largest (127, the most a 16-bit
    /// window holds), one segment and several.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_and_avx2_kernels_match_scalar_across_flushes() {
        if level() != SimdLevel::Avx2 {
            eprintln!("SKIPPED avx512_and_avx2_kernels_match_scalar_across_flushes: no AVX2");
            return;
        }
        let avx512 = *KERNEL == Kernel::Avx512Bw;
        if !avx512 {
            eprintln!(
                "SKIPPED the AVX-512BW half of avx512_and_avx2_kernels_match_scalar_across_flushes: \
                 no AVX-512BW here, or VLC_NO_AVX512 set"
            );
        }
        let affine = Affine {
            a: 0.013,
            b: -0.7,
            base: 1.25,
        };
        let mut r = Rng::new(31);
        for pairs in [
            0usize, 1, 2, 3, 5, 255, 256, 257, 258, 259, 511, 512, 513, 600,
        ] {
            for full in [false, true] {
                let (codes, mut lut, f1, f2) = random_block(&mut r, pairs);
                if full {
                    lut.fill(127);
                }
                let what = format!("pairs {pairs}, full tables {full}");
                let mut want = [0u32; BLOCK];
                block_sums_scalar(&codes, &lut, &mut want);
                let mut want_dists = [0f32; BLOCK];
                block_dists_scalar(&codes, &lut, &f1, &f2, affine, &mut want_dists);
                let bounds = [0, pairs / 3, pairs];
                let steps = [0.25f32, 0.0078125];
                let segments = (&bounds[..], &steps[..]);
                let mut want_segmented = [0f32; BLOCK];
                block_dists_segmented_scalar(
                    &codes,
                    &lut,
                    segments,
                    &f1,
                    &f2,
                    affine,
                    &mut want_segmented,
                );
                let mut got = [0u32; BLOCK];
                let mut dists = [0f32; BLOCK];
                // SAFETY: AVX2 was detected above; f1, f2 and dists hold 32 values.
                unsafe {
                    block_sums_avx2(&codes, &lut, &mut got);
                    assert_eq!(got, want, "AVX2, {what}");
                    block_dists_avx2(&codes, &lut, &f1, &f2, affine, &mut dists);
                    assert_eq!(dists, want_dists, "AVX2 distances, {what}");
                    block_dists_segmented_avx2(
                        &codes, &lut, segments, &f1, &f2, affine, &mut dists,
                    );
                    assert_eq!(dists, want_segmented, "AVX2 segmented, {what}");
                }
                if avx512 {
                    // SAFETY: AVX2, AVX-512F and AVX-512BW were detected; f1, f2 and dists
                    // hold 32 values.
                    unsafe {
                        block_sums_avx512(&codes, &lut, &mut got);
                        assert_eq!(got, want, "AVX-512BW, {what}");
                        block_dists_avx512(&codes, &lut, &f1, &f2, affine, &mut dists);
                        assert_eq!(dists, want_dists, "AVX-512BW distances, {what}");
                        block_dists_segmented_avx512(
                            &codes, &lut, segments, &f1, &f2, affine, &mut dists,
                        );
                        assert_eq!(dists, want_segmented, "AVX-512BW segmented, {what}");
                    }
                }
            }
        }
    }

    #[test]
    fn simd_segmented_block_dists_match_scalar_for_odd_segments() {
        let mut r = Rng::new(9);
        for bounds in [
            vec![0usize, 1],
            vec![0, 1, 2],
            vec![0, 3, 4, 11],
            vec![0, 5, 37, 40, 300],
        ] {
            let pairs = *bounds.last().unwrap();
            let steps: Vec<f32> = (1..bounds.len())
                .map(|s| 0.5f32.powi(3 * s as i32) * (1.0 + r.normal().abs() as f32))
                .collect();
            let (codes, lut, f1, f2) = random_block(&mut r, pairs);
            let affine = Affine {
                a: 0.37,
                b: -0.7,
                base: 1.25,
            };
            let (mut x, mut y) = ([0f32; BLOCK], [0f32; BLOCK]);
            block_dists_segmented(&codes, &lut, (&bounds, &steps), &f1, &f2, affine, &mut x);
            block_dists_segmented_scalar(&codes, &lut, (&bounds, &steps), &f1, &f2, affine, &mut y);
            assert_eq!(x, y, "segments {bounds:?}");
            // Against the definition, slot by slot.
            for j in 0..BLOCK {
                let mut acc = 0f64;
                for (seg, &step) in bounds.windows(2).zip(&steps) {
                    let sum: u32 = (seg[0]..seg[1])
                        .map(|p| {
                            let byte = codes[p * BLOCK + j];
                            lut[p * 32 + (byte & 15) as usize] as u32
                                + lut[p * 32 + 16 + (byte >> 4) as usize] as u32
                        })
                        .sum();
                    acc += step as f64 * sum as f64;
                }
                let want = (1.25 + f1[j] as f64) + f2[j] as f64 * (0.37 * acc - 0.7);
                assert!(
                    (y[j] as f64 - want).abs() < 1e-4 * (1.0 + want.abs()),
                    "slot {j}: {} vs {want}",
                    y[j]
                );
            }
        }
    }

    #[test]
    fn segments_follow_the_weights_magnitudes() {
        // Alike weights: one segment, code order.
        let (order, segments) = segment_pairs(5, Some(&[1.0; 40]));
        assert_eq!((order, segments), ((0..5).collect(), vec![0, 5]));
        assert_eq!(segment_pairs(3, None), ((0..3).collect(), vec![0, 3]));
        // Bytes of magnitude 1, 1000, 30, 1000, 1: heaviest first, a cut below a half.
        let mut hints = Vec::new();
        for m in [1f32, 1000.0, 30.0, 1000.0, 1.0] {
            hints.extend([m / 4.0; 4]);
            hints.extend([0.0; 4]);
        }
        let (order, segments) = segment_pairs(5, Some(&hints));
        assert_eq!(order, vec![1, 3, 2, 0, 4]);
        assert_eq!(segments, vec![0, 2, 3, 5]);
        // At most MAX_SEGMENTS, the lightest bytes sharing the last; zero weights cut nothing.
        let mut hints = Vec::new();
        for k in 0..8 {
            hints.extend([0.1f32.powi(k); 8]);
        }
        hints.extend([0.0; 8]);
        let (order, segments) = segment_pairs(9, Some(&hints));
        assert_eq!(order, (0..9).collect::<Vec<_>>());
        assert_eq!(segments, vec![0, 1, 2, 3, 9]);
    }

    /// Weights as `pcaq`'s widest axes and its narrow ones give them: the light bytes' part
    /// of the estimate survives the segments, where one step set by the heavy bytes rounds it
    /// away.
    #[test]
    fn segments_keep_light_bytes_that_one_step_rounds_away() {
        let (pairs, n) = (24usize, 256usize);
        let factors = FactorFormat::F32;
        let code_size = pairs + factors.bytes();
        let mut r = Rng::new(17);
        let mut codes = vec![0u8; n * code_size];
        for code in codes.chunks_exact_mut(code_size) {
            for b in &mut code[..pairs] {
                *b = r.below(256) as u8;
            }
            factors.write(&mut code[pairs..], 0.0, 1.0);
        }
        // Bytes 0..4 weigh about 512 times the rest (an 11-bit axis's top bit against a 7-bit
        // axis's, each times its coordinate's spread).
        let heavy = |i: usize| i / 8 < 4;
        let hints: Vec<f32> = (0..pairs * 8)
            .map(|i| if heavy(i) { 512.0 } else { 1.0 })
            .collect();
        let weights: Vec<f32> = (0..pairs * 8)
            .map(|i| r.normal() as f32 * hints[i])
            .collect();
        let heavy_only: Vec<f32> = (0..pairs * 8)
            .map(|i| if heavy(i) { weights[i] } else { 0.0 })
            .collect();
        // The light bytes' exact part of each code's estimate.
        let exact: Vec<f64> = codes
            .chunks_exact(code_size)
            .map(|c| {
                (0..pairs * 8)
                    .filter(|&i| !heavy(i) && c[i / 8] >> (i % 8) & 1 == 1)
                    .map(|i| weights[i] as f64)
                    .sum()
            })
            .collect();
        let spread = (exact.iter().map(|v| v * v).sum::<f64>() / n as f64).sqrt();
        // The fast scan's light part: its estimate less that of the heavy weights alone (whose
        // tables and step are the same in both, so their rounding cancels).
        let error = |hints: Option<&[f32]>| {
            let fs = FastScan::build(
                &[0, n as u64],
                &codes,
                (pairs, factors),
                code_size,
                hints,
                false,
            );
            let estimate = |w: &[f32]| {
                let mut lut = QueryLut::default();
                fs.prepare(w, 1.0, 0.0, &mut lut);
                let mut out = vec![0f32; fs.padded_len(0)];
                fs.scan(&lut, 0, 0.0, &mut out);
                out
            };
            let (all, part) = (estimate(&weights), estimate(&heavy_only));
            let sq: f64 = (0..n)
                .map(|v| (all[v] as f64 - part[v] as f64 - exact[v]).powi(2))
                .sum();
            (fs.num_segments(), (sq / n as f64).sqrt())
        };
        let (one, coarse) = error(None);
        let (two, fine) = error(Some(&hints));
        assert_eq!((one, two), (1, 2));
        eprintln!(
            "light part's spread {spread}: RMS error {coarse} with one step, {fine} with segments"
        );
        assert!(coarse > 0.3 * spread, "{coarse} vs spread {spread}");
        assert!(fine < 0.05 * spread, "{fine} vs spread {spread}");
    }
}
