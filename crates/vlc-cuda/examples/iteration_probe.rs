//! Where the time of one small training iteration goes on the CUDA device: `cargo run --release
//! -p vlc-cuda --example iteration_probe -- [points] [dim] [anchors] [repeats]` (default 10000
//! 128 256 200). Prints the median microseconds of the driver's own latencies (an idle stream
//! synchronise, a 4-byte read, an anchor-sized upload) and of each backend call of a training
//! iteration (assignment, trimmed thresholds, accumulation and update) on pinned points, the
//! anchors moving between calls as in training, and of the CPU reference's thresholds; then
//! whole trainings as `vlc train-bench` runs them. `VLC_PROBE_DATA=file.npy` probes that file's
//! vectors instead of the generated ones.

use std::time::Instant;
use vlc::backend::Backend;

/// "median / mean / 90th percentile" of microsecond samples.
fn spread(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    format!(
        "{:.1} / {mean:.1} / {:.1}",
        v[v.len() / 2],
        v[v.len() * 9 / 10]
    )
}

fn time<T>(samples: &mut Vec<f64>, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let out = f();
    samples.push(t.elapsed().as_secs_f64() * 1e6);
    out
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let arg = |i: usize, d: usize| args.get(i).copied().unwrap_or(d);
    let (mut n, mut dim, k, repeats) = (arg(0, 10_000), arg(1, 128), arg(2, 256), arg(3, 200));
    let iterations = arg(4, 30);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    };
    // Clustered: 64 centres, points scattered around them.
    let centres: Vec<f32> = (0..64 * dim).map(|_| 4.0 * next()).collect();
    let mut points: Vec<f32> = (0..n * dim)
        .map(|i| centres[((i / dim) % 64) * dim + i % dim] + next())
        .collect();
    // VLC_PROBE_DATA=file.npy: that file's vectors instead.
    if let Ok(path) = std::env::var("VLC_PROBE_DATA") {
        let m = vlc::io::read_vectors(std::path::Path::new(&path), None)?;
        (n, dim, points) = (m.rows, m.cols, m.data);
        println!("data: {path}, {n} x {dim}");
    }

    let host_anchors = points[..k * dim].to_vec();
    // Raw driver latencies on a stream of our own (with repeats = 0, only the trainings run).
    if repeats > 0 {
        let ctx = cudarc::driver::CudaContext::new(0)?;
        let stream = ctx.new_stream()?;
        let small = stream.alloc_zeros::<u32>(1)?;
        let mut big = stream.alloc_zeros::<f32>(k * dim)?;
        let (mut sync, mut read4, mut upload) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..repeats {
            time(&mut sync, || stream.synchronize())?;
            let mut one = [0u32];
            time(&mut read4, || stream.memcpy_dtoh(&small, &mut one))?;
            time(&mut upload, || {
                stream.memcpy_htod(&host_anchors, &mut big)?;
                stream.synchronize()
            })?;
        }
        println!(
            "driver (median / mean / 90th percentile us): sync {}, 4-byte read {}, {} KiB upload {}",
            spread(sync),
            spread(read4),
            k * dim * 4 / 1024,
            spread(upload)
        );
        // The same upload through page-locked memory (host copy included), and the host
        // compares that could skip it: one thread, and rayon over 64 KiB pieces.
        // SAFETY: every element is written by the copy below before the upload reads it.
        let mut pinned = unsafe { ctx.alloc_pinned_with_flags::<f32>(k * dim, 0) }?;
        // Byte views, as the backend compares (a float compare's loop is slower).
        // SAFETY: any initialised f32 is 4 initialised bytes; the views cover exactly the vecs,
        // which outlive them.
        let bytes = |v: &Vec<f32>| unsafe {
            std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len() * 4)
        };
        let mirror_floats = host_anchors.clone();
        let (mirror, current) = (bytes(&mirror_floats), bytes(&host_anchors));
        let (mut staged, mut compare, mut par_compare) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..repeats {
            time(&mut staged, || -> Result<(), Box<dyn std::error::Error>> {
                pinned.as_mut_slice()?.copy_from_slice(&host_anchors);
                stream.memcpy_htod(&pinned, &mut big)?;
                Ok(stream.synchronize()?)
            })?;
            let same = time(&mut compare, || {
                std::hint::black_box(mirror) == std::hint::black_box(current)
            });
            use rayon::prelude::*;
            let par_same = time(&mut par_compare, || {
                std::hint::black_box(mirror)
                    .par_chunks(1 << 16)
                    .zip(std::hint::black_box(current).par_chunks(1 << 16))
                    .all(|(a, b)| a == b)
            });
            assert!(same && par_same);
        }
        println!(
            "host: upload through page-locked memory {}, compare {}, compare on {} threads {}",
            spread(staged),
            spread(compare),
            rayon::current_num_threads(),
            spread(par_compare)
        );
        // A kernel launch (host side, and with its wait) and a free-memory query.
        let ptx = cudarc::nvrtc::compile_ptx(
            "extern \"C\" __global__ void nop(int* x) { if (x[0] == 7) x[0] = 8; }",
        )?;
        let module = ctx.load_module(ptx)?;
        let nop = module.load_function("nop")?;
        let mut word = stream.alloc_zeros::<i32>(1)?;
        let cfg = cudarc::driver::LaunchConfig::for_num_elems(1);
        let (mut launch, mut launch_wait, mut meminfo) = (Vec::new(), Vec::new(), Vec::new());
        use cudarc::driver::PushKernelArg;
        for _ in 0..repeats {
            // SAFETY: nop reads and may write the one i32 of `word`.
            time(&mut launch, || unsafe {
                stream.launch_builder(&nop).arg(&mut word).launch(cfg)
            })?;
            stream.synchronize()?;
            time(&mut launch_wait, || {
                // SAFETY: as above.
                unsafe { stream.launch_builder(&nop).arg(&mut word).launch(cfg) }?;
                stream.synchronize()
            })?;
            time(&mut meminfo, || ctx.mem_get_info())?;
        }
        println!(
            "driver: launch {}, launch and wait {}, free-memory query {}",
            spread(launch),
            spread(launch_wait),
            spread(meminfo)
        );
        // The assignment's GEMM shape on cuBLAS with TF32 math, as the backend sets it up.
        let blas = cudarc::cublas::CudaBlas::new(stream.clone())?;
        // SAFETY: sets the handle's math mode; no memory is touched.
        unsafe {
            cudarc::cublas::sys::cublasSetMathMode(
                *blas.handle(),
                cudarc::cublas::sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH,
            )
        }
        .result()?;
        let x = stream.clone_htod(&points)?;
        let c = stream.alloc_zeros::<f32>(k * dim)?;
        let mut tile = stream.alloc_zeros::<f32>(n * k)?;
        let cfg = cudarc::cublas::GemmConfig {
            transa: cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T,
            transb: cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N,
            m: k as i32,
            n: n as i32,
            k: dim as i32,
            alpha: 1.0f32,
            lda: dim as i32,
            ldb: dim as i32,
            beta: 0.0f32,
            ldc: k as i32,
        };
        let (mut gemm, mut gemm_wait) = (Vec::new(), Vec::new());
        use cudarc::cublas::Gemm;
        for _ in 0..repeats {
            // SAFETY: c is k x dim, x n x dim, tile n x k, as the column-major view needs.
            time(&mut gemm, || unsafe { blas.gemm(cfg, &c, &x, &mut tile) })?;
            stream.synchronize()?;
            time(
                &mut gemm_wait,
                || -> Result<(), Box<dyn std::error::Error>> {
                    // SAFETY: as above.
                    unsafe { blas.gemm(cfg, &c, &x, &mut tile) }?;
                    Ok(stream.synchronize()?)
                },
            )?;
        }
        println!(
            "cuBLAS {n} x {k} x {dim} TF32 GEMM: call {}, call and wait {}",
            spread(gemm),
            spread(gemm_wait)
        );
        drop((blas, x, c, tile));
        drop((small, big, word, stream, ctx));
    }

    let backend = vlc_cuda::CudaBackend::new(0)?;
    println!("device: {}", backend.device_name());
    if repeats > 0 {
        let _pin = backend.pin(&points)?;
        let mut anchors = host_anchors;
        let (mut assign, mut thresholds, mut update) = (Vec::new(), Vec::new(), Vec::new());
        let mut host_thresholds = Vec::new();
        for _ in 0..repeats {
            let nearest = time(&mut assign, || {
                backend.nearest_anchors(&points, &anchors, dim, 1)
            })?;
            let on_host = time(&mut host_thresholds, || {
                vlc::backend::trimmed_thresholds(&nearest.ids, &nearest.dists, k, 0.1)
            });
            let thr = time(&mut thresholds, || {
                backend.trimmed_thresholds(&nearest, k, 0.1)
            })?;
            assert_eq!(
                on_host, thr,
                "device thresholds differ from the CPU reference"
            );
            time(&mut update, || {
                backend.accumulate_and_update(&points, &mut anchors, dim, &nearest, &thr, 0.5)
            })?;
        }
        println!(
            "{n} x {dim}, {k} anchors, microseconds per call (median / mean / 90th percentile):"
        );
        println!("  assign            {}", spread(assign));
        println!("  thresholds        {}", spread(thresholds));
        println!("  (CPU reference)   {}", spread(host_thresholds));
        println!("  accumulate+update {}", spread(update));
    }

    // Whole trainings as `vlc train-bench` runs them (every iteration, no hold-out), with the
    // time of each iteration from the progress callback.
    let params = vlc::train::TrainParams {
        num_anchors: k,
        max_iterations: iterations,
        min_iterations: iterations,
        max_points_per_anchor: n.div_ceil(k),
        holdout_fraction: 0.0,
        ..Default::default()
    };
    let traced = Traced {
        inner: &backend,
        calls: Default::default(),
    };
    for run in 0..4 {
        let mut marks = vec![Instant::now()];
        let start = Instant::now();
        traced.calls.lock().unwrap().clear();
        let (_, report) = vlc::train::train_anchors(&traced, &points, dim, &params, &mut |_| {
            marks.push(Instant::now())
        })?;
        let total = start.elapsed().as_secs_f64() * 1e3;
        let phases = &report.phase_seconds;
        let per: Vec<f64> = marks
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64() * 1e6)
            .collect();
        // The loop as train-bench reports it: without sampling and upload.
        let training_loop = total - (phases.sampling + phases.upload) * 1e3;
        println!(
            "training {run}: {total:.2} ms, loop {training_loop:.2} ms (seeding {:.2}, assign \
             {:.2}, statistics {:.2}, update {:.2}, maintenance {:.2} ms), iterations {} us",
            phases.seeding * 1e3,
            phases.assign * 1e3,
            phases.statistics * 1e3,
            phases.update * 1e3,
            phases.maintenance * 1e3,
            spread(per)
        );
        // The last training's backend calls, grouped by kind and shape.
        if run == 3 {
            traced.summary();
        }
    }
    Ok(())
}

/// A backend that times every call of the one it wraps (each call returns host data, so it
/// has finished when it returns): where a training's time goes, call by call.
struct Traced<'b> {
    inner: &'b vlc_cuda::CudaBackend,
    /// (label, microseconds), in call order.
    calls: std::sync::Mutex<Vec<(String, f64)>>,
}

impl Traced<'_> {
    fn timed<T>(&self, label: String, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = f();
        let us = t.elapsed().as_secs_f64() * 1e6;
        self.calls.lock().unwrap().push((label, us));
        out
    }

    fn summary(&self) {
        let calls = self.calls.lock().unwrap();
        let mut groups: Vec<(String, Vec<f64>)> = Vec::new();
        for (label, us) in calls.iter() {
            match groups.iter_mut().find(|(l, _)| l == label) {
                Some((_, v)) => v.push(*us),
                None => groups.push((label.clone(), vec![*us])),
            }
        }
        println!("  backend calls of the last training (count, total ms, median / mean / 90th percentile us):");
        let mut costliest = (0.0, String::new(), Vec::new());
        for (label, v) in groups {
            let total: f64 = v.iter().sum::<f64>() / 1e3;
            if total > costliest.0 && !label.starts_with("pin") {
                costliest = (total, label.clone(), v.clone());
            }
            println!("    {label:<44} {:>4} {total:>8.2}  {}", v.len(), spread(v));
        }
        let each: Vec<String> = costliest
            .2
            .iter()
            .map(|us| format!("{:.1}", us / 1e3))
            .collect();
        println!("  {} in call order (ms): {}", costliest.1, each.join(" "));
    }
}

/// Anchor counts of seeding rounds vary: one label for all of them.
fn shape(points: usize, anchors: usize) -> String {
    if anchors < 64 {
        format!("{points} x <64")
    } else {
        format!("{points} x {anchors}")
    }
}

impl vlc::backend::Backend for Traced<'_> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn ranking_rounding(&self) -> f32 {
        self.inner.ranking_rounding()
    }
    fn pin<'a>(&'a self, points: &'a [f32]) -> vlc::Result<vlc::backend::PinGuard<'a>> {
        self.timed(format!("pin {}", points.len()), || self.inner.pin(points))
    }
    fn nearest_anchors(
        &self,
        points: &[f32],
        anchors: &[f32],
        dim: usize,
        per_point: usize,
    ) -> vlc::Result<vlc::backend::Nearest> {
        let label = format!(
            "nearest{per_point} {}",
            shape(points.len() / dim, anchors.len() / dim)
        );
        self.timed(label, || {
            self.inner.nearest_anchors(points, anchors, dim, per_point)
        })
    }
    fn accumulate(
        &self,
        points: &[f32],
        dim: usize,
        assignment: &[u32],
        dists: &[f32],
        thresholds: &[f32],
    ) -> vlc::Result<vlc::backend::AnchorSums> {
        self.timed("accumulate".into(), || {
            self.inner
                .accumulate(points, dim, assignment, dists, thresholds)
        })
    }
    fn update(
        &self,
        anchors: &mut [f32],
        dim: usize,
        sums: &vlc::backend::AnchorSums,
        step: f32,
    ) -> vlc::Result<()> {
        self.timed("update".into(), || {
            self.inner.update(anchors, dim, sums, step)
        })
    }
    fn accumulate_and_update(
        &self,
        points: &[f32],
        anchors: &mut [f32],
        dim: usize,
        nearest: &vlc::backend::Nearest,
        thresholds: &[f32],
        step: f32,
    ) -> vlc::Result<vlc::backend::AnchorSums> {
        self.timed("accumulate_and_update".into(), || {
            self.inner
                .accumulate_and_update(points, anchors, dim, nearest, thresholds, step)
        })
    }
    fn split_lists(
        &self,
        points: &[f32],
        dim: usize,
        centers: &[f32],
        lists: &[&[u32]],
    ) -> vlc::Result<Vec<Option<vlc::backend::ListSplit>>> {
        self.timed(format!("split_lists {}", lists.len()), || {
            self.inner.split_lists(points, dim, centers, lists)
        })
    }
    fn trimmed_thresholds(
        &self,
        nearest: &vlc::backend::Nearest,
        num_anchors: usize,
        trim: f32,
    ) -> vlc::Result<Vec<f32>> {
        self.timed("trimmed_thresholds".into(), || {
            self.inner.trimmed_thresholds(nearest, num_anchors, trim)
        })
    }
}
