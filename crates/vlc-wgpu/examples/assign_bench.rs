//! Times one-per-point assignment (`nearest_anchors` with one neighbour, points pinned on the
//! device, as in training) on the WGPU adapter: `cargo run --release -p vlc-wgpu --example
//! assign_bench -- [points] [dim] [anchors] [repeats]` (default 1000000 384 4096 5). Prints the
//! adapter, then milliseconds per call and the implied TFLOP/s of the 2 n k d multiply-adds.
//! `VLC_WGPU_COOP=0` / `VLC_WGPU_WIDE=0` select the FP32 kernels for comparison.

use std::time::Instant;
use vlc::backend::Backend;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let arg = |i: usize, d: usize| args.get(i).copied().unwrap_or(d);
    let (n, dim, k, repeats) = (arg(0, 1_000_000), arg(1, 384), arg(2, 4096), arg(3, 5));
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    };
    let points: Vec<f32> = (0..n * dim).map(|_| next()).collect();
    let anchors: Vec<f32> = points[..k * dim].to_vec();
    let backend = vlc_wgpu::WgpuBackend::new()?;
    println!("adapter: {}", backend.adapter_name());
    let _pin = backend.pin(&points)?;
    for r in 0..repeats {
        let t = Instant::now();
        let got = backend.nearest_anchors(&points, &anchors, dim, 1)?;
        let s = t.elapsed().as_secs_f64();
        let energy = got.dists.iter().map(|&d| d as f64).sum::<f64>() / n as f64;
        println!(
            "call {r}: {:.1} ms, {:.1} TFLOP/s, mean distance {energy:.6}",
            s * 1e3,
            2.0 * (n * k * dim) as f64 / s / 1e12
        );
    }
    Ok(())
}
