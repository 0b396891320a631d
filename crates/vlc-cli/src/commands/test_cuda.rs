use anyhow::Result;
use std::time::Instant;
use vlc::train::{train_anchors, TrainParams};
use vlc::{Backend, CpuBackend};

/// Run anchor training on a GPU backend and on the CPU over the same synthetic data and
/// compare: time, final energy (measured exactly on the CPU for both) and speedup.
/// Small: 1,000 x 64, 32 anchors. --large: 10,000 x 128, 256 anchors. 30 iterations each.
#[derive(clap::Args)]
pub struct Args {
    /// The larger problem: 10,000 x 128 vectors, 256 anchors (else 1,000 x 64, 32 anchors).
    #[arg(long)]
    pub large: bool,
    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `vlc test-cuda`.
pub fn run(a: Args) -> Result<()> {
    compare(a, crate::backend::open_cuda()?)
}

/// `vlc test-gpu`: the same on WGPU (any adapter, software ones included).
pub fn run_wgpu(a: Args) -> Result<()> {
    compare(a, crate::backend::open_wgpu(true)?)
}

fn compare(a: Args, gpu: Box<dyn Backend>) -> Result<()> {
    let (n, dim, k) = if a.large {
        (10_000, 128, 256)
    } else {
        (1_000, 64, 32)
    };
    let data = vlc::synthetic::clustered(n, dim, k, 0.5, 7);
    let params = TrainParams {
        num_anchors: k,
        max_iterations: 30,
        min_iterations: 30,
        max_points_per_anchor: n,
        holdout_fraction: 0.0,
        ..Default::default()
    };
    let run = |b: &dyn Backend| -> Result<(f64, f64)> {
        // One untimed run first: kernel compilation, module load and handle creation.
        train_anchors(b, &data, dim, &params, &mut |_| {})?;
        let t = Instant::now();
        let (anchors, _) = train_anchors(b, &data, dim, &params, &mut |_| {})?;
        let secs = t.elapsed().as_secs_f64();
        let near = CpuBackend.nearest_anchors(&data, &anchors, dim, 1)?;
        Ok((
            secs,
            near.dists.iter().map(|&d| d as f64).sum::<f64>() / n as f64,
        ))
    };
    let (t_gpu, e_gpu) = run(gpu.as_ref())?;
    let (t_cpu, e_cpu) = run(&CpuBackend)?;
    let rel = (e_gpu - e_cpu) / e_cpu;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"vectors": n, "dim": dim, "anchors": k, "iterations": 30,
            "gpu_seconds": t_gpu, "cpu_seconds": t_cpu, "speedup": t_cpu / t_gpu,
            "gpu_energy": e_gpu, "cpu_energy": e_cpu, "energy_relative_difference": rel})
        );
    } else {
        println!("{n} x {dim}, {k} anchors, 30 iterations");
        println!(
            "  {:<5} {:>9.2} ms  energy {e_gpu:.6}",
            gpu.name(),
            t_gpu * 1e3
        );
        println!(
            "  cpu   {:>9.2} ms  energy {e_cpu:.6} ({} threads)",
            t_cpu * 1e3,
            rayon::current_num_threads()
        );
        println!(
            "  speedup {:.1}x, energy difference {:+.4}%",
            t_cpu / t_gpu,
            rel * 100.0
        );
    }
    Ok(())
}
