use anyhow::{Context, Result};
use std::path::PathBuf;
use std::time::Instant;
use vlc::train::{train_anchors, TrainParams};

/// Time anchor training alone (a fixed number of iterations over every input vector) on a
/// backend: the GPU-vs-PyTorch comparison of bench/gpu_bench.py runs this.
#[derive(clap::Args)]
pub struct Args {
    /// Input vectors (.npy, .fvecs, ...).
    pub input: PathBuf,
    /// Anchors to train.
    #[arg(long, default_value_t = 4096)]
    pub anchors: usize,
    /// Iterations (all of them run: convergence does not stop early).
    #[arg(long, default_value_t = 20)]
    pub iterations: usize,
    /// Where training runs: cpu, cuda, wgpu, or auto (a GPU that works, else cpu).
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: crate::backend::BackendChoice,
    /// Train on a sample of at most this many points per anchor instead of every point.
    #[arg(long)]
    pub max_points_per_anchor: Option<usize>,
    /// Seed of the k-means++ seeding and the sample.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Train once untimed first (GPU libraries load their kernels on first use; PyTorch's
    /// timings in bench/gpu_bench.py exclude its warm-up the same way).
    #[arg(long)]
    pub warmup: bool,
    /// Rank every point against every anchor in each iteration (no distance bounds on the
    /// CPU; the GPU backends keep theirs, see VLC_CUDA_BOUNDS and VLC_WGPU_BOUNDS).
    #[arg(long)]
    pub no_distance_bounds: bool,
    /// Print the timing as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let data = vlc::io::read_vectors(&a.input, None)
        .with_context(|| format!("reading {}", a.input.display()))?;
    let backend = crate::backend::open(a.backend, a.json)?;
    let n = data.rows;
    let params = TrainParams {
        num_anchors: a.anchors,
        max_iterations: a.iterations,
        min_iterations: a.iterations,
        seed: a.seed,
        max_points_per_anchor: a
            .max_points_per_anchor
            .unwrap_or(n.div_ceil(a.anchors.max(1))),
        holdout_fraction: 0.0,
        distance_bounds: !a.no_distance_bounds,
        ..TrainParams::default()
    };
    let train = || {
        train_anchors(
            backend.as_ref(),
            &data.data,
            data.cols,
            &params,
            &mut |_| {},
        )
    };
    if a.warmup {
        train()?;
    }
    let t = Instant::now();
    let (anchors, report) = train()?;
    let seconds = t.elapsed().as_secs_f64();
    // The training loop proper (seeding and iterations), the data already on the device: what
    // PyTorch's timing in bench/gpu_bench.py covers too.
    let loop_seconds = seconds - report.phase_seconds.sampling - report.phase_seconds.upload;
    // Final energy over every vector, always measured by the CPU reference (exact FP32).
    let near = vlc::CpuBackend.nearest_anchors(&data.data, &anchors, data.cols, 1)?;
    let energy = near.dists.iter().map(|&d| d as f64).sum::<f64>() / n as f64;
    let j = serde_json::json!({
        "backend": backend.name(), "vectors": n, "dim": data.cols, "anchors": a.anchors, "iterations": report.iterations,
        "training_points": report.training_points, "seconds": seconds, "loop_seconds": loop_seconds, "final_energy": energy,
        "energy_history": report.energy_history, "phase_seconds": report.phase_seconds,
        "merges": report.merges, "splits": report.splits, "reseeds": report.reseeds,
        "ranked_history": report.ranked_history,
    });
    if a.json {
        println!("{}", serde_json::to_string(&j)?);
    } else {
        println!(
            "{}: {n} x {}, {} anchors, {} iterations in {seconds:.3} s (loop {loop_seconds:.3} s, sampling {:.3} s, upload {:.3} s); final energy {energy:.6}",
            backend.name(),
            data.cols,
            a.anchors,
            report.iterations,
            report.phase_seconds.sampling,
            report.phase_seconds.upload
        );
    }
    Ok(())
}

use vlc::Backend as _;
