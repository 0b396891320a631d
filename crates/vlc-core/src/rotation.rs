//! A fast random orthogonal transform, regenerated from a seed (nothing to store).
//!
//! `ROUNDS` rounds of: multiply by a random ±1 diagonal, then apply the normalised
//! Walsh-Hadamard transform to a power-of-two block of the vector (the first `p` coordinates in
//! even rounds, the last `p` in odd rounds, `p` the largest power of two ≤ dim). Each step is
//! orthogonal, so the product is; for dim a power of two the blocks cover the whole vector.
//! Cost O(dim log dim) per vector instead of O(dim²) for a dense matrix.

use crate::rng::Rng;
#[cfg(target_arch = "x86_64")]
use crate::simd::{has_avx512, level, SimdLevel};

const ROUNDS: usize = 4;

#[derive(Clone, Debug)]
pub struct FastRotation {
    dim: usize,
    block: usize,
    /// Sign flips. Layout: (ROUNDS, dim), row-major, each ±1.
    signs: Vec<f32>,
}

/// The normalised Walsh-Hadamard transform of `v` (length a power of two), in place. Inlined
/// into the instruction-set variants of [`FastRotation::apply`] and
/// [`FastRotation::apply_inverse`], so one source compiles to each vector width; additions and
/// subtractions in the same order give bit-identical results at every width.
#[inline(always)]
fn fwht(v: &mut [f32]) {
    let n = v.len();
    let mut h = 1;
    if n >= 8 {
        // The first three stages (h = 1, 2, 4) stay inside chunks of 8: run them per chunk in
        // registers, with the same operations in the same order as the loop below.
        for c in v.chunks_exact_mut(8) {
            let mut x = [c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]];
            for step in [1usize, 2, 4] {
                for i in (0..8).step_by(2 * step) {
                    for j in i..i + step {
                        let (a, b) = (x[j], x[j + step]);
                        x[j] = a + b;
                        x[j + step] = a - b;
                    }
                }
            }
            c.copy_from_slice(&x);
        }
        h = 8;
    }
    while h < n {
        for pair in v.chunks_exact_mut(2 * h) {
            // Disjoint halves, so the butterflies vectorise.
            let (low, high) = pair.split_at_mut(h);
            for (x, y) in low.iter_mut().zip(high.iter_mut()) {
                let (a, b) = (*x, *y);
                *x = a + b;
                *y = a - b;
            }
        }
        h *= 2;
    }
    let scale = 1.0 / (n as f32).sqrt();
    v.iter_mut().for_each(|x| *x *= scale);
}

impl FastRotation {
    pub fn new(dim: usize, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let signs = (0..ROUNDS * dim)
            .map(|_| if rng.next_u64() & 1 == 1 { 1.0 } else { -1.0 })
            .collect();
        let block = if dim == 0 {
            0
        } else {
            1 << (usize::BITS - 1 - dim.leading_zeros())
        };
        FastRotation { dim, block, signs }
    }

    /// Rotate `v` (dim,) in place.
    pub fn apply(&self, v: &mut [f32]) {
        self.run(v, false)
    }

    /// Undo [`apply`](Self::apply) (the transpose).
    pub fn apply_inverse(&self, v: &mut [f32]) {
        self.run(v, true)
    }

    /// [`apply`](Self::apply) or its inverse, compiled for the widest vectors detected.
    fn run(&self, v: &mut [f32], inverse: bool) {
        debug_assert_eq!(v.len(), self.dim);
        #[cfg(target_arch = "x86_64")]
        if has_avx512() {
            // SAFETY: AVX-512F was detected at run time.
            return unsafe { self.run_avx512(v, inverse) };
        } else if level() == SimdLevel::Avx2 {
            // SAFETY: AVX2 was detected at run time.
            return unsafe { self.run_avx2(v, inverse) };
        }
        self.run_scalar(v, inverse)
    }

    #[inline(always)]
    fn run_scalar(&self, v: &mut [f32], inverse: bool) {
        if inverse {
            self.apply_inverse_scalar(v)
        } else {
            self.apply_scalar(v)
        }
    }

    /// Reference of [`apply`](Self::apply), compiled for the baseline instruction set.
    #[inline(always)]
    fn apply_scalar(&self, v: &mut [f32]) {
        for r in 0..ROUNDS {
            self.flip(r, v);
            self.transform(r, v);
        }
    }

    #[inline(always)]
    fn apply_inverse_scalar(&self, v: &mut [f32]) {
        for r in (0..ROUNDS).rev() {
            self.transform(r, v);
            self.flip(r, v);
        }
    }

    #[inline(always)]
    fn flip(&self, round: usize, v: &mut [f32]) {
        v.iter_mut()
            .zip(&self.signs[round * self.dim..(round + 1) * self.dim])
            .for_each(|(x, s)| *x *= s);
    }

    #[inline(always)]
    fn transform(&self, round: usize, v: &mut [f32]) {
        if round.is_multiple_of(2) {
            fwht(&mut v[..self.block]);
        } else {
            fwht(&mut v[self.dim - self.block..]);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn run_avx2(&self, v: &mut [f32], inverse: bool) {
        self.run_scalar(v, inverse)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn run_avx512(&self, v: &mut [f32], inverse: bool) {
        self.run_scalar(v, inverse)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn preserves_norms_and_inner_products_and_inverts() {
        for dim in [1usize, 7, 65, 384, 512] {
            let rot = FastRotation::new(dim, 3);
            let mut r = Rng::new(dim as u64);
            let a: Vec<f32> = (0..dim).map(|_| r.normal() as f32).collect();
            let b: Vec<f32> = (0..dim).map(|_| r.normal() as f32).collect();
            let (mut ra, mut rb) = (a.clone(), b.clone());
            rot.apply(&mut ra);
            rot.apply(&mut rb);
            let dot =
                |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| (p * q) as f64).sum::<f64>();
            assert!(
                (dot(&a, &b) - dot(&ra, &rb)).abs() < 1e-3 * (1.0 + dot(&a, &a)),
                "dim {dim}"
            );
            assert!(
                (dot(&a, &a) - dot(&ra, &ra)).abs() < 1e-3 * dot(&a, &a),
                "dim {dim}"
            );
            rot.apply_inverse(&mut ra);
            assert!(
                a.iter().zip(&ra).all(|(x, y)| (x - y).abs() < 1e-4),
                "dim {dim}"
            );
        }
    }

    #[test]
    fn vector_variants_are_bit_identical_to_the_reference() {
        for dim in [1usize, 7, 8, 65, 384, 768, 1000] {
            let rot = FastRotation::new(dim, 5);
            let mut r = Rng::new(dim as u64 + 1);
            let a: Vec<f32> = (0..dim).map(|_| r.normal() as f32).collect();
            let (mut fast, mut reference) = (a.clone(), a.clone());
            rot.apply(&mut fast);
            rot.apply_scalar(&mut reference);
            assert_eq!(fast, reference, "apply, dim {dim}");
            rot.apply_inverse(&mut fast);
            rot.apply_inverse_scalar(&mut reference);
            assert_eq!(fast, reference, "apply_inverse, dim {dim}");
        }
    }
}
