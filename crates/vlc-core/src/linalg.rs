//! Dense linear-algebra helpers on row-major `f32` buffers.

use rayon::prelude::*;

/// Dot product of two equal-length vectors (8 independent accumulators so the compiler
/// vectorises it).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0.0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        let (x, y) = (&a[c * 8..c * 8 + 8], &b[c * 8..c * 8 + 8]);
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = (acc[0] + acc[4]) + (acc[1] + acc[5]) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for i in chunks * 8..a.len() {
        s += a[i] * b[i];
    }
    s
}

/// Squared Euclidean distance of two equal-length vectors.
#[inline]
pub fn l2_sq(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0.0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        let (x, y) = (&a[c * 8..c * 8 + 8], &b[c * 8..c * 8 + 8]);
        for i in 0..8 {
            let d = x[i] - y[i];
            acc[i] += d * d;
        }
    }
    let mut s = (acc[0] + acc[4]) + (acc[1] + acc[5]) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for i in chunks * 8..a.len() {
        let d = a[i] - b[i];
        s += d * d;
    }
    s
}

/// Dot product in f64 (4 independent accumulators so the compiler vectorises it).
#[inline]
fn dot64(a: &[f64], b: &[f64]) -> f64 {
    let mut acc = [0.0f64; 4];
    let chunks = a.len() / 4;
    for c in 0..chunks {
        for i in 0..4 {
            acc[i] += a[c * 4 + i] * b[c * 4 + i];
        }
    }
    let mut s = (acc[0] + acc[2]) + (acc[1] + acc[3]);
    for i in chunks * 4..a.len() {
        s += a[i] * b[i];
    }
    s
}

/// `row -= Σ_j ⟨row, basis_j⟩ basis_j` over the rows of `basis` (orthonormal), all inner
/// products taken first (classical Gram–Schmidt: its loss of orthogonality grows with the
/// square of the rows' condition number, which for the near-orthonormal rows this is for stays
/// at f64 rounding).
fn project_out(row: &mut [f64], basis: &[f64], scratch: &mut Vec<f64>) {
    let dim = row.len();
    scratch.clear();
    scratch.extend(basis.chunks_exact(dim).map(|b| dot64(row, b)));
    for (b, &p) in basis.chunks_exact(dim).zip(scratch.iter()) {
        for (r, v) in row.iter_mut().zip(b) {
            *r -= p * v;
        }
    }
}

/// `c = alpha · a b + beta · c` in f64 on `matrixmultiply`'s kernels, `a` (m, k), `b` (k, n)
/// and `c` (m, n) addressed by (row stride, column stride) pairs.
fn gemm64(
    (m, k, n): (usize, usize, usize),
    alpha: f64,
    (a, a_strides): (&[f64], (usize, usize)),
    (b, b_strides): (&[f64], (usize, usize)),
    beta: f64,
    (c, c_strides): (&mut [f64], (usize, usize)),
) {
    if m == 0 || n == 0 {
        return;
    }
    // The last element each operand's shape and strides address.
    let last = |rows: usize, cols: usize, (row, col): (usize, usize)| {
        (rows.max(1) - 1) * row + (cols.max(1) - 1) * col
    };
    assert!(k == 0 || (last(m, k, a_strides) < a.len() && last(k, n, b_strides) < b.len()));
    assert!(last(m, n, c_strides) < c.len());
    // SAFETY: the asserts above put every element the shapes and strides address inside `a`,
    // `b` and `c` (k = 0 reads neither input); `c` is exclusively borrowed, so it overlaps
    // neither input.
    unsafe {
        matrixmultiply::dgemm(
            m,
            k,
            n,
            alpha,
            a.as_ptr(),
            a_strides.0 as isize,
            a_strides.1 as isize,
            b.as_ptr(),
            b_strides.0 as isize,
            b_strides.1 as isize,
            beta,
            c.as_mut_ptr(),
            c_strides.0 as isize,
            c_strides.1 as isize,
        );
    }
}

/// [`project_out`] for several rows at once (`rows`: (r, dim), `basis`: (n, dim), both
/// row-major) as two f64 GEMMs, the inner products `rows · basisᵀ` (into `scratch`, (r, n))
/// first, then `rows −= products · basis`: the same classical Gram–Schmidt step, on
/// `matrixmultiply`'s blocked kernels instead of one dot product after another.
fn project_out_rows(rows: &mut [f64], basis: &[f64], dim: usize, scratch: &mut Vec<f64>) {
    let (r, n) = (rows.len() / dim, basis.len() / dim);
    scratch.clear();
    scratch.resize(r * n, 0.0);
    gemm64(
        (r, dim, n),
        1.0,
        (rows, (dim, 1)),
        (basis, (1, dim)),
        0.0,
        (scratch, (n, 1)),
    );
    gemm64(
        (r, n, dim),
        -1.0,
        (scratch, (n, 1)),
        (basis, (dim, 1)),
        1.0,
        (rows, (dim, 1)),
    );
}

/// [`project_out_rows`] in tasks across the threads: the inner products a block of
/// [`PROJECTION_CHUNK`] basis rows at a time, then the update a block of as many columns at a
/// time. The blocks are fixed, not set by the thread count, so every entry's arithmetic is
/// the same on any number of threads.
fn project_out_rows_parallel(rows: &mut [f64], basis: &[f64], dim: usize) {
    const CHUNK: usize = PROJECTION_CHUNK;
    let (r, n) = (rows.len() / dim, basis.len() / dim);
    if r == 0 || n == 0 {
        return;
    }
    let starts = |len: usize| (0..len).step_by(CHUNK).collect::<Vec<_>>();
    let read: &[f64] = rows;
    // Inner products, layout (r, n): columns j0..j0 + w from basis rows j0..j0 + w.
    let parts: Vec<(usize, Vec<f64>)> = starts(n)
        .into_par_iter()
        .map(|j0| {
            let w = CHUNK.min(n - j0);
            let mut part = vec![0.0; r * w];
            let b = &basis[j0 * dim..(j0 + w) * dim];
            gemm64(
                (r, dim, w),
                1.0,
                (read, (dim, 1)),
                (b, (1, dim)),
                0.0,
                (&mut part, (w, 1)),
            );
            (j0, part)
        })
        .collect();
    let mut products = vec![0.0; r * n];
    for (j0, part) in &parts {
        let w = part.len() / r;
        for (i, chunk) in part.chunks_exact(w).enumerate() {
            products[i * n + j0..i * n + j0 + w].copy_from_slice(chunk);
        }
    }
    // Updates `products · basis`, columns c0..c0 + w at a time, then subtracted.
    let updates: Vec<(usize, Vec<f64>)> = starts(dim)
        .into_par_iter()
        .map(|c0| {
            let w = CHUNK.min(dim - c0);
            let mut update = vec![0.0; r * w];
            let b = &basis[c0..];
            let p: &[f64] = &products;
            gemm64(
                (r, n, w),
                1.0,
                (p, (n, 1)),
                (b, (dim, 1)),
                0.0,
                (&mut update, (w, 1)),
            );
            (c0, update)
        })
        .collect();
    for (c0, update) in &updates {
        let w = update.len() / r;
        for (row, u) in rows.chunks_exact_mut(dim).zip(update.chunks_exact(w)) {
            row[*c0..c0 + w]
                .iter_mut()
                .zip(u)
                .for_each(|(x, d)| *x -= d);
        }
    }
}

/// Basis rows, and columns, per task of [`project_out_rows_parallel`].
const PROJECTION_CHUNK: usize = 128;

/// Orthonormalise the rows of `rows` (count, dim), row-major, in order (Gram–Schmidt in f64:
/// row `i` keeps its component orthogonal to rows `0..i`, normalised), so rows that are close to
/// orthonormal come back orthonormal to f32 rounding and barely moved. `Err(i)` if row `i` has
/// less than half of its length outside the rows before it (the rows are not close to
/// orthonormal). Deterministic: the arithmetic of each row is fixed whatever the thread count
/// (`matrixmultiply` picks its kernels by the CPU's features, so a CPU with FMA and one without
/// may round the f64 sums differently, which can move an f32 entry by a unit in the last place).
///
/// Rows are finished in blocks of 128: a block is first projected against every finished row
/// (`project_out_rows_parallel`: f64 GEMMs in parallel tasks of 128 basis rows or columns),
/// then in pieces of 16 rows, each projected against the block's rows before it (two GEMMs),
/// and the piece's rows then one after another against its earlier rows. Opening a `pcaq`
/// index runs this on its stored rotation (up to dim x dim): on a 2-core AMD EPYC, 1,536 x
/// 1,536 took 1.9-2.2 s on one thread and 1.1-1.2 s on two with one dot product per pair of
/// rows, and takes 0.36-0.39 and 0.26-0.32 s this way (`bash bench/open_ab.sh`, logs
/// `bench/results/open_ab_*_session55.log`).
pub fn orthonormalize_rows(rows: &mut [f32], dim: usize) -> std::result::Result<(), usize> {
    const BLOCK: usize = 128;
    const PIECE: usize = 16;
    if dim == 0 {
        return Ok(());
    }
    let count = rows.len() / dim;
    let mut q: Vec<f64> = rows.iter().map(|&v| v as f64).collect();
    let lengths: Vec<f64> = q.chunks_exact(dim).map(|r| dot64(r, r).sqrt()).collect();
    let mut scratch = Vec::new();
    let mut start = 0;
    while start < count {
        let end = (start + BLOCK).min(count);
        let (done, rest) = q.split_at_mut(start * dim);
        let block = &mut rest[..(end - start) * dim];
        // Against the finished rows, in parallel tasks.
        project_out_rows_parallel(block, done, dim);
        // Within the block, a piece at a time, and within a piece one row after another.
        for piece_start in (0..end - start).step_by(PIECE) {
            let piece_end = (piece_start + PIECE).min(end - start);
            let (earlier, piece) = block.split_at_mut(piece_start * dim);
            let piece = &mut piece[..(piece_end - piece_start) * dim];
            project_out_rows(piece, earlier, dim, &mut scratch);
            for i in 0..piece_end - piece_start {
                let (before, row) = piece.split_at_mut(i * dim);
                let row = &mut row[..dim];
                project_out(row, before, &mut scratch);
                let norm = dot64(row, row).sqrt();
                // Not greater also for NaN, and for a zero row (0 against 0).
                let at = start + piece_start + i;
                let kept = norm.partial_cmp(&(0.5 * lengths[at]));
                if kept != Some(std::cmp::Ordering::Greater) {
                    return Err(at);
                }
                row.iter_mut().for_each(|v| *v /= norm);
            }
        }
        start = end;
    }
    rows.iter_mut().zip(&q).for_each(|(r, &v)| *r = v as f32);
    Ok(())
}

/// Largest dimension whose eigendecompositions use nalgebra's solver; above it, faer's.
pub(crate) const NALGEBRA_EIGEN_MAX_DIM: usize = 1536;

/// Eigenvalues and eigenvectors of the symmetric matrix `a` (dim, dim), row-major:
/// `(values, vectors)`, `vectors` of layout (dim, dim), row-major, row `j` the unit
/// eigenvector of `values[j]` (in no particular order). `None` if the solver does not converge.
///
/// Up to [`NALGEBRA_EIGEN_MAX_DIM`] dimensions nalgebra's solver, as in every version before
/// faer's came, so that the indexes built there (and every figure measured on them) stay as
/// they were: a `pcaq1` build of 2,000 vectors takes 2.6 s at 1,536 dimensions with it.
/// Above, its unblocked tridiagonalisation dominates (23.8 s at 3,072, 64.7 s at 4,096), and
/// faer's blocked one runs instead (7.3 and 16.2 s; `bash bench/pcaq_high_dim.sh`), on one
/// thread so that the result does not depend on the thread count. The two agree to rounding
/// on eigenvalues, but not on the signs and bases of the eigenvectors, which `pcaq` mixes
/// with a random rotation: the same data gives other, equally good codes.
pub(crate) fn symmetric_eigen(a: &[f64], dim: usize) -> Option<(Vec<f64>, Vec<f64>)> {
    assert_eq!(a.len(), dim * dim, "symmetric_eigen: a is not (dim, dim)");
    if dim <= NALGEBRA_EIGEN_MAX_DIM {
        Some(eigen_nalgebra(a, dim))
    } else {
        eigen_faer(a, dim)
    }
}

/// [`symmetric_eigen`] by nalgebra (unblocked Householder tridiagonalisation, implicit QR).
fn eigen_nalgebra(a: &[f64], dim: usize) -> (Vec<f64>, Vec<f64>) {
    let eigen =
        nalgebra::DMatrix::<f64>::from_fn(dim, dim, |i, j| a[i * dim + j]).symmetric_eigen();
    // Column-major storage: column j (eigenvector j) is contiguous, a row of the result.
    (
        eigen.eigenvalues.iter().copied().collect(),
        eigen.eigenvectors.as_slice().to_vec(),
    )
}

/// [`symmetric_eigen`] by faer (blocked tridiagonalisation, divide and conquer), one thread.
fn eigen_faer(a: &[f64], dim: usize) -> Option<(Vec<f64>, Vec<f64>)> {
    use faer::dyn_stack::{MemBuffer, MemStack};
    use faer::linalg::evd::{self, ComputeEigenvectors};
    let matrix = faer::MatRef::from_row_major_slice(a, dim, dim);
    let mut values = faer::diag::Diag::<f64>::zeros(dim);
    let mut vectors = faer::Mat::<f64>::zeros(dim, dim);
    let (params, par) = (Default::default(), faer::Par::Seq);
    let mut buffer = MemBuffer::new(evd::self_adjoint_evd_scratch::<f64>(
        dim,
        ComputeEigenvectors::Yes,
        par,
        params,
    ));
    evd::self_adjoint_evd(
        matrix,
        values.as_mut(),
        Some(vectors.as_mut()),
        par,
        MemStack::new(&mut buffer),
        params,
    )
    .ok()?;
    let values = (0..dim).map(|j| values[j]).collect();
    let rows = (0..dim * dim)
        .map(|k| vectors[(k % dim, k / dim)])
        .collect();
    Some((values, rows))
}

/// Squared norm of every row. `rows` layout: (n, dim), row-major. Returns n values. Rows
/// are split across threads in tasks of at least 2^16 values: a call on a few hundred anchors
/// (every search's anchor ranking) stays on the calling thread: waking the pool's threads
/// cost more than the norms.
pub fn row_norms_sq(rows: &[f32], dim: usize) -> Vec<f32> {
    let dim = dim.max(1);
    rows.par_chunks(dim)
        .with_min_len(((1 << 16) / dim).max(1))
        .map(|r| dot(r, r))
        .collect()
}

/// `out = a · bᵀ` for `a` (m, k) and `b` (n, k), both row-major; `out` is (m, n), row-major.
/// Single-threaded; callers parallelise over row blocks.
pub fn gemm_nt(a: &[f32], m: usize, b: &[f32], n: usize, k: usize, out: &mut [f32]) {
    assert!(a.len() >= m * k && b.len() >= n * k && out.len() >= m * n);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out[..m * n].fill(0.0);
        return;
    }
    // SAFETY: the asserts above guarantee that every element addressed through the given
    // dimensions and strides lies inside `a`, `b` and `out`; `out` is exclusively borrowed.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            k as isize,
            1,
            b.as_ptr(),
            1,
            k as isize,
            0.0,
            out.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

/// Rows per block so that a block's (rows, n) distance tile stays around 4 MiB.
pub fn block_rows(n: usize) -> usize {
    ((1 << 20) / n.max(1)).clamp(8, 4096)
}

/// Packs (distance, id) into one integer whose unsigned order is the order of
/// (`f32::total_cmp` on the distance, then the id): selections and sorts on these keys compare
/// one integer, and ties resolve to the smaller id.
#[inline]
pub fn order_key(dist: f32, id: u32) -> u64 {
    let b = dist.to_bits();
    let ordered = if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    };
    (ordered as u64) << 32 | id as u64
}

/// The distance of an [`order_key`].
#[inline]
pub fn key_dist(key: u64) -> f32 {
    let k = (key >> 32) as u32;
    f32::from_bits(if k & 0x8000_0000 != 0 {
        k & 0x7fff_ffff
    } else {
        !k
    })
}

/// The id of an [`order_key`].
#[inline]
pub fn key_id(key: u64) -> u32 {
    key as u32
}

/// The [`order_key`]s of the `m` smallest `values` (ids = positions), smallest first, into
/// `keys` (cleared first); ties go to the smaller position.
pub fn smallest_keys(values: &[f32], m: usize, keys: &mut Vec<u64>) {
    keys.clear();
    let m = m.max(1);
    if m * 4 > values.len() {
        keys.extend(
            values
                .iter()
                .enumerate()
                .map(|(j, &v)| order_key(v, j as u32)),
        );
        keep_smallest_keys(keys, m);
        return;
    }
    let mut running = SmallestKeys {
        keys: std::mem::take(keys),
        m,
        threshold: f32::INFINITY,
    };
    running.push(values, 0);
    running.finish();
    *keys = running.keys;
}

/// Keep the `m` smallest of `keys` ([`order_key`]s), smallest first.
pub fn keep_smallest_keys(keys: &mut Vec<u64>, m: usize) {
    if m < keys.len() {
        keys.select_nth_unstable(m - 1);
        keys.truncate(m);
    }
    keys.sort_unstable();
}

/// A running selection of the `m` smallest values of a row that arrives in segments (a
/// segment's ids are its positions plus an offset), as [`order_key`]s: ties go to the smaller
/// id, and the result does not depend on how the row was cut.
#[derive(Clone, Debug)]
pub struct SmallestKeys {
    /// Candidates gathered so far, unordered until [`SmallestKeys::finish`]; at most `2m`.
    pub keys: Vec<u64>,
    m: usize,
    /// Once `m` keys have gathered, the largest distance of `m` of them: a value above it has
    /// `m` smaller keys before it, so it cannot be among the `m` smallest.
    threshold: f32,
}

impl SmallestKeys {
    /// An empty selection of the `m` (at least 1) smallest.
    pub fn new(m: usize) -> Self {
        let m = m.max(1);
        Self {
            keys: Vec::with_capacity(2 * m),
            m,
            threshold: f32::INFINITY,
        }
    }

    /// Adds `values` with ids `offset`, `offset + 1`, ...
    pub fn push(&mut self, values: &[f32], offset: u32) {
        let m = self.m;
        let mut start = 0;
        while self.keys.len() < m && start < values.len() {
            self.keys
                .push(order_key(values[start], offset + start as u32));
            start += 1;
            if self.keys.len() == m {
                self.threshold = self
                    .keys
                    .iter()
                    .map(|&k| key_dist(k))
                    .fold(f32::MIN, f32::max);
            }
        }
        // Keep candidates at or below the threshold (32 values per SIMD compare), selecting
        // down to m whenever 2m have gathered.
        while start < values.len() {
            let chunk = &values[start..values.len().min(start + 32)];
            // `v < next_up(threshold)` is `v <= threshold`: ties (and −0 against +0) stay for
            // the key comparison to decide.
            let mut mask = crate::simd::below_mask(chunk, self.threshold.next_up());
            while mask != 0 {
                let j = mask.trailing_zeros() as usize;
                mask &= mask - 1;
                self.keys
                    .push(order_key(chunk[j], offset + (start + j) as u32));
                if self.keys.len() == 2 * m {
                    self.keys.select_nth_unstable(m - 1);
                    self.keys.truncate(m);
                    self.threshold = key_dist(self.keys[m - 1]);
                }
            }
            start += chunk.len();
        }
    }

    /// Leaves the `m` smallest keys seen (fewer if fewer came), smallest first, in
    /// [`SmallestKeys::keys`].
    pub fn finish(&mut self) {
        let m = self.m;
        if self.keys.len() > m {
            self.keys.select_nth_unstable(m - 1);
            self.keys.truncate(m);
        }
        self.keys.sort_unstable();
    }

    /// Empties the selection for another row.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.threshold = f32::INFINITY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Both eigensolvers on covariance-like matrices of odd sizes (one with a repeated
    /// eigenvalue): the same eigenvalues to rounding, and faer's vectors orthonormal
    /// eigenvectors (‖Av − λv‖ tiny next to ‖A‖), as `pcaq` above 1,536 dimensions needs.
    #[test]
    fn both_eigensolvers_decompose_symmetric_matrices_alike() {
        for (dim, seed) in [(1, 1), (7, 2), (37, 3), (70, 4)] {
            let mut r = Rng::new(seed);
            let m = dim + 5;
            let x: Vec<f64> = (0..dim * m).map(|_| r.normal()).collect();
            // A = X Xᵀ / m, plus, from 37 on, the first two axes given equal variance.
            let mut a = vec![0f64; dim * dim];
            for i in 0..dim {
                for j in 0..dim {
                    a[i * dim + j] =
                        (0..m).map(|k| x[i * m + k] * x[j * m + k]).sum::<f64>() / m as f64;
                }
            }
            if dim >= 37 {
                for i in 0..dim {
                    a[i] = 0.0;
                    a[i * dim] = 0.0;
                    a[dim + i] = 0.0;
                    a[i * dim + 1] = 0.0;
                }
                a[0] = 9.0;
                a[dim + 1] = 9.0;
            }
            let scale = a.iter().fold(0f64, |s, v| s.max(v.abs()));
            let (mut nv, _) = eigen_nalgebra(&a, dim);
            let (fv, vectors) = eigen_faer(&a, dim).unwrap();
            let mut sorted = fv.clone();
            nv.sort_by(f64::total_cmp);
            sorted.sort_by(f64::total_cmp);
            for (p, q) in nv.iter().zip(&sorted) {
                assert!((p - q).abs() <= 1e-10 * scale, "dim {dim}: {p} vs {q}");
            }
            for (j, &value) in fv.iter().enumerate() {
                let v = &vectors[j * dim..(j + 1) * dim];
                for i in 0..dim {
                    let av: f64 = (0..dim).map(|k| a[i * dim + k] * v[k]).sum();
                    assert!(
                        (av - value * v[i]).abs() <= 1e-10 * scale,
                        "dim {dim}, vector {j}"
                    );
                }
                for (l, w) in vectors.chunks_exact(dim).enumerate() {
                    let d = dot64(v, w);
                    let want = if l == j { 1.0 } else { 0.0 };
                    assert!((d - want).abs() < 1e-10, "dim {dim}: vectors {j}, {l}: {d}");
                }
            }
        }
        // The dispatch: nalgebra's up to the threshold.
        let a = [2.0, 1.0, 1.0, 2.0];
        assert_eq!(symmetric_eigen(&a, 2).unwrap(), eigen_nalgebra(&a, 2));
    }

    /// Rows of a random orthogonal matrix rounded to 8 bits per entry come back orthonormal to
    /// f32 rounding and close to where they were, across block boundaries (32 rows) and odd
    /// sizes; rows that depend on earlier ones are reported.
    #[test]
    fn orthonormalize_rows_restores_rounded_orthonormal_rows() {
        let mut r = Rng::new(4);
        for (count, dim) in [(1usize, 5usize), (33, 40), (70, 70), (100, 257)] {
            let gauss = nalgebra::DMatrix::<f64>::from_fn(dim, dim, |_, _| r.normal());
            let q = gauss.qr().q();
            let exact: Vec<f32> = (0..count * dim)
                .map(|k| q[(k / dim, k % dim)] as f32)
                .collect();
            let mut rows: Vec<f32> = exact
                .chunks_exact(dim)
                .flat_map(|row| {
                    let scale = row.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
                    row.iter().map(move |v| (v / scale).round() * scale)
                })
                .collect();
            orthonormalize_rows(&mut rows, dim).unwrap();
            let mut again: Vec<f32> = rows.clone();
            orthonormalize_rows(&mut again, dim).unwrap();
            for i in 0..count {
                let ri = &rows[i * dim..(i + 1) * dim];
                for j in 0..count {
                    let g = dot(ri, &rows[j * dim..(j + 1) * dim]);
                    let want = if i == j { 1.0 } else { 0.0 };
                    assert!((g - want).abs() < 2e-6, "{count}x{dim}: <{i},{j}> = {g}");
                }
                let moved = l2_sq(ri, &exact[i * dim..(i + 1) * dim]).sqrt();
                assert!(moved < 0.05, "{count}x{dim}: row {i} moved {moved}");
                let drift = l2_sq(ri, &again[i * dim..(i + 1) * dim]).sqrt();
                assert!(drift < 1e-5, "{count}x{dim}: not a fixed point ({drift})");
            }
        }
        let mut dependent = vec![1.0f32, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0e-3, 0.0];
        assert_eq!(orthonormalize_rows(&mut dependent, 3), Err(2));
        let mut zero = vec![0.0f32; 6];
        assert_eq!(orthonormalize_rows(&mut zero, 3), Err(0));
    }

    /// Rows of a random orthogonal matrix rounded to int8 with a scale per row, as a `pcaq`
    /// file stores its rotation. Layout: (count, dim), row-major.
    fn rounded_orthogonal_rows(count: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut r = Rng::new(seed);
        let gauss = nalgebra::DMatrix::<f64>::from_fn(dim, dim, |_, _| r.normal());
        let q = gauss.qr().q();
        (0..count)
            .flat_map(|i| {
                let row: Vec<f32> = (0..dim).map(|d| q[(i, d)] as f32).collect();
                let scale = row.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
                row.into_iter().map(move |v| (v / scale).round() * scale)
            })
            .collect()
    }

    /// The blocked, GEMM-based [`orthonormalize_rows`] against one dot product per pair of
    /// rows (the version before session 55, kept here as the reference): the same f32 rows to
    /// a few units in the last place, across its blocks (128 rows), tasks (128 basis rows or
    /// columns) and pieces (16 rows). And its rows are bit for bit the same on one thread as on
    /// several.
    #[test]
    fn orthonormalize_rows_matches_the_row_by_row_reference_on_any_thread_count() {
        fn reference(rows: &mut [f32], dim: usize) {
            let mut q: Vec<f64> = rows.iter().map(|&v| v as f64).collect();
            let mut scratch = Vec::new();
            for i in 0..rows.len() / dim {
                let (before, row) = q.split_at_mut(i * dim);
                let row = &mut row[..dim];
                project_out(row, before, &mut scratch);
                let norm = dot64(row, row).sqrt();
                row.iter_mut().for_each(|v| *v /= norm);
            }
            rows.iter_mut().zip(&q).for_each(|(r, &v)| *r = v as f32);
        }
        for (count, dim, seed) in [(15usize, 17usize, 1u64), (130, 140, 2), (300, 301, 3)] {
            let stored = rounded_orthogonal_rows(count, dim, seed);
            let mut expected = stored.clone();
            reference(&mut expected, dim);
            let run = |threads: usize| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let mut rows = stored.clone();
                pool.install(|| orthonormalize_rows(&mut rows, dim))
                    .unwrap();
                rows
            };
            let one = run(1);
            assert!(one == run(3), "{count}x{dim}: threads change the rows");
            for (k, (a, b)) in one.iter().zip(&expected).enumerate() {
                assert!(
                    (a - b).abs() <= 4.0 * f32::EPSILON * b.abs().max(1.0 / dim as f32),
                    "{count}x{dim}, entry {k}: {a} vs {b}"
                );
            }
        }
    }

    #[test]
    fn smallest_keys_match_a_full_sort_with_ties() {
        let mut r = Rng::new(9);
        for n in [1usize, 5, 31, 64, 100, 1000, 1027] {
            for m in [1usize, 2, 8, 25, 64, 300] {
                // Few distinct values, so ties (and −0 against +0) are common.
                let values: Vec<f32> = (0..n)
                    .map(|_| match r.below(5) {
                        0 => -0.0,
                        1 => 0.0,
                        k => (k as f32) * 0.5 + (r.below(8) as f32),
                    })
                    .collect();
                let mut want: Vec<u64> = values
                    .iter()
                    .enumerate()
                    .map(|(j, &v)| order_key(v, j as u32))
                    .collect();
                want.sort_unstable();
                want.truncate(m.max(1));
                let mut got = Vec::new();
                smallest_keys(&values, m, &mut got);
                assert_eq!(got, want, "n {n} m {m}");
                // The same row pushed in segments of any length (ids offset by the segment's
                // start) into one running selection.
                let mut running = SmallestKeys::new(m);
                for segment in [1usize, 3, 32, 33, 500] {
                    running.clear();
                    for (c, part) in values.chunks(segment).enumerate() {
                        running.push(part, (c * segment) as u32);
                    }
                    running.finish();
                    assert_eq!(running.keys, want, "n {n} m {m} segments of {segment}");
                }
            }
        }
    }

    #[test]
    fn dot_and_l2_match_naive_for_odd_sizes() {
        let mut rng = Rng::new(3);
        for dim in [1usize, 7, 8, 65, 384] {
            let a: Vec<f32> = (0..dim).map(|_| rng.normal() as f32).collect();
            let b: Vec<f32> = (0..dim).map(|_| rng.normal() as f32).collect();
            let nd: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            let nl: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| ((*x - *y) as f64).powi(2))
                .sum();
            assert!((dot(&a, &b) as f64 - nd).abs() < 1e-4 * (1.0 + nd.abs()));
            assert!((l2_sq(&a, &b) as f64 - nl).abs() < 1e-4 * (1.0 + nl));
        }
    }

    #[test]
    fn gemm_matches_naive() {
        let mut rng = Rng::new(5);
        let (m, n, k) = (13, 7, 65);
        let a: Vec<f32> = (0..m * k).map(|_| rng.normal() as f32).collect();
        let b: Vec<f32> = (0..n * k).map(|_| rng.normal() as f32).collect();
        let mut out = vec![0.0; m * n];
        gemm_nt(&a, m, &b, n, k, &mut out);
        for i in 0..m {
            for j in 0..n {
                let want = dot(&a[i * k..(i + 1) * k], &b[j * k..(j + 1) * k]);
                assert!((out[i * n + j] - want).abs() < 1e-3);
            }
        }
    }
}
