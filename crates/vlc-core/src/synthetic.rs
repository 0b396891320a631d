//! Synthetic data for tests and benchmarks: Gaussian clusters of uneven size and spread.

use crate::rng::Rng;

/// `n` points of dimension `dim` around `clusters` random centres (unit-variance centres;
/// per-cluster spread between 0.5·`spread` and 1.5·`spread`; cluster sizes vary ~4x).
/// Layout: (n, dim), row-major. Deterministic for a seed.
pub fn clustered(n: usize, dim: usize, clusters: usize, spread: f32, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    let clusters = clusters.max(1);
    let centres: Vec<f32> = (0..clusters * dim).map(|_| rng.normal() as f32).collect();
    let spreads: Vec<f32> = (0..clusters)
        .map(|_| spread * (0.5 + rng.next_f64() as f32))
        .collect();
    let weights: Vec<f64> = (0..clusters).map(|_| 0.25 + rng.next_f64()).collect();
    let total: f64 = weights.iter().sum();
    let mut out = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let mut pick = rng.next_f64() * total;
        let mut c = clusters - 1;
        for (i, w) in weights.iter().enumerate() {
            if pick < *w {
                c = i;
                break;
            }
            pick -= w;
        }
        for d in 0..dim {
            out.push(centres[c * dim + d] + spreads[c] * rng.normal() as f32);
        }
    }
    out
}

/// Queries near the data: each is a data point plus noise of `noise` per dimension.
/// `data`: (n, dim). Returns (count, dim).
pub fn queries_near(data: &[f32], dim: usize, count: usize, noise: f32, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    let n = data.len() / dim;
    let mut out = Vec::with_capacity(count * dim);
    for _ in 0..count {
        let i = rng.below(n);
        out.extend(
            data[i * dim..(i + 1) * dim]
                .iter()
                .map(|&x| x + noise * rng.normal() as f32),
        );
    }
    out
}
