use crate::output::{human_bytes, versus_f32};
use crate::progress::BuildProgress;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use vlc::{BuildParams, Index, Metric};

/// Build an index.
///
/// Anchors are trained by annealed k-means on a sample (at most --max-points-per-anchor points
/// per anchor), then every vector is assigned to its nearest anchor and its residual encoded.
/// The input is read a block at a time (about 64 MiB of f32), never whole: memory holds the
/// training samples, one block and the codes, so a collection larger than memory as f32
/// builds. A NaN or infinite value fails the build (naming its row and column) when its row
/// is read; the output file is only written once the index is complete.
#[derive(clap::Args)]
pub struct Args {
    /// Input vectors: .npy (f32, f64, f16 or u8, C order), .fvecs, .bvecs, or .f32/.bin/.raw with --dim.
    pub input: PathBuf,
    /// Where to write the index (written to a temporary file, then renamed).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Residual codec, by bytes per vector at dim D: anchor-only (0), rabitq1 (D/8 + 4),
    /// rabitqB for B = 2 to 8 bits per dimension (B·D/8 + 8: rabitq2 D/4 + 8, rabitq4 D/2 + 8,
    /// rabitq7 7D/8 + 8), sq4 (D/2 + 4), sq8 (D + 4), f16 (2·D + 4, half-float residuals),
    /// f32 (4·D + 4; both mostly refine tiers, see --refine), or pcaqB. rabitq's rotation is
    /// regenerated from a seed, so it stores nothing and costs O(D log D) per query: at high
    /// rates on small collections of high-dimensional vectors rabitq5-8 are smaller and
    /// faster than pcaq, whose rotation is stored (D x D bytes) and applied as a matrix.
    /// pcaqB is RaBitQ codes in the principal axes of the residuals with B·D/8 bytes of bits
    /// (B above 0 and up to 8, e.g. pcaq0.75, pcaq1.5 or pcaq3.2) allocated where they lower
    /// the ranking error most: axes that are noise stay uncoded, axes with structure get
    /// several bits. The best recall per byte on anisotropic data such as text embeddings:
    /// B·D/8 + 8 bytes, plus the rotation's rows of the coded axes (up to D x D bytes, int8 with a scale per row) per index.
    /// RaBitQ-family sizes are larger by 4 (rabitq1) or 8 where the anchors are much longer
    /// than the residuals (tight clusters far apart), whose factors are kept as f32. Data
    /// whose mean lies far from the origin (over 4 times its spread) is centred first: its
    /// mean is subtracted from every vector and query, which changes no distance. RaBitQ-family codes are scanned a bit or two at a time and
    /// their candidates rescored with all bits. [default: sq8; pcaq with --bytes-per-vector]
    #[arg(long)]
    pub codec: Option<String>,
    /// Fill this footprint: bytes per vector of the whole index file (ids, anchors, codec
    /// parameters, codes, and the --refine tier when there is one). Builds pcaq at the largest
    /// rate that fits, chosen after the anchors are trained (at most 8 bits per dimension, so a
    /// budget above that size is not filled), or the widest of rabitq5-8 that fits where it
    /// decodes a training sample more closely (high budgets on small collections of
    /// high-dimensional vectors: pcaq stores its rotation, rabitq does not; --codec pcaq keeps
    /// pcaq whatever the budget). Fails, naming the
    /// smallest size possible, when the budget cannot hold the ids, anchors and factors plus
    /// one byte of code per vector.
    #[arg(long, value_name = "BYTES")]
    pub bytes_per_vector: Option<f64>,
    /// Finer codec stored beside the primary one to rerank the candidate pool: none, sq4
    /// (D/2 + 4 bytes per vector), sq8 (D + 4), f16 (2·D + 4: each residual dimension as a
    /// half float, so the rerank is near exact and recall is what the probed lists hold) or
    /// f32 (4·D + 4: exact up to f32 arithmetic, so it also orders neighbours whose distances
    /// differ by less than f16's rounding).
    #[arg(long, default_value = "none")]
    pub refine: String,
    /// Number of anchors (inverted lists); default about 4·√n, a power of two.
    #[arg(long)]
    pub anchors: Option<usize>,
    /// Distance: l2, or cosine (vectors and queries normalised on the way in; search then
    /// reports squared distances between unit vectors, 2 − 2·cos, so cos = 1 − d/2). A vector
    /// or query of zero length has no direction: under cosine it is an error naming its row.
    #[arg(long, default_value = "l2")]
    pub metric: Metric,
    /// Dimension (required for raw f32 input; checked for the other formats).
    #[arg(long)]
    pub dim: Option<usize>,
    /// Seed: the same seed and input give the same index.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// How anchors are stored: int8 (1 byte per value and a scale per anchor), int4 (half a
    /// byte per value and a scale per anchor, chosen to minimise the rounding error), f16 or
    /// f32. Vectors are encoded against the stored anchors, so the codes stay exact relative to
    /// them; only the residuals grow by the anchors' rounding, which for int8 is negligible and
    /// for int4 costs a little recall (about 0.004 recall@10 for rabitq1 on the 768-d benchmark
    /// set). int8 saves num_anchors·dim bytes over f16, int4 half of that again: worth it for
    /// small collections, where anchors are a large share of the file.
    #[arg(long, default_value = "int8")]
    pub anchor_precision: vlc::AnchorPrecision,
    /// Per-anchor, per-dimension quantisation ranges (diagonal Jacobian; sq8/sq4 only).
    #[arg(long)]
    pub jacobian: bool,
    /// Most anchor-training iterations.
    #[arg(long, default_value_t = 20)]
    pub max_iterations: usize,
    /// Training sample cap, in points per anchor.
    #[arg(long, default_value_t = 64)]
    pub max_points_per_anchor: usize,
    /// Fraction of each anchor's farthest members left out of its mean.
    #[arg(long, default_value_t = 0.05)]
    pub trim: f32,
    /// Temperature multiplier per iteration.
    #[arg(long, default_value_t = 0.9)]
    pub cooling: f32,
    /// Merge/split maintenance every this many iterations (0 = never).
    #[arg(long, default_value_t = 5)]
    pub maintenance_interval: usize,
    /// Compute backend for training and assignment (and, on CUDA, the level search of the
    /// `pcaq` and `rabitq2`-`8` encode: the same codes as the CPU's): auto (a GPU when one
    /// works), cpu, cuda, wgpu.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: crate::backend::BackendChoice,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// No progress bars.
    #[arg(short, long)]
    pub quiet: bool,
}

pub fn run(a: Args) -> Result<()> {
    crate::output::check_outputs(&[&a.output], &[("input vectors", &a.input)])?;
    let mut params =
        BuildParams::from_choices(a.codec.as_deref(), a.bytes_per_vector, Some(&a.refine))?
            .with_metric(a.metric)
            .with_seed(a.seed);
    params.train.num_anchors = a.anchors.unwrap_or(0);
    if a.anchors == Some(0) {
        bail!("--anchors must be at least 1");
    }
    params.train.max_iterations = a.max_iterations;
    params.train.max_points_per_anchor = a.max_points_per_anchor;
    params.train.trim_fraction = a.trim;
    params.train.cooling = a.cooling;
    params.train.maintenance_interval = a.maintenance_interval;
    params.codec_params.jacobian = a.jacobian;
    params.anchor_precision = a.anchor_precision;

    // The input is read a block at a time while building, never whole: a collection larger
    // than memory as f32 builds in the memory its training samples and codes take.
    let input = vlc::io::VectorFile::open(&a.input, a.dim)
        .with_context(|| format!("reading {}", a.input.display()))?;
    let mut progress = BuildProgress::new(!a.quiet && !a.json);
    let backend = crate::backend::open(a.backend, a.quiet || a.json)?;
    let (index, report) = Index::build_from(&input, &params, backend.as_ref(), &mut |e| {
        progress.handle(e)
    })
    .with_context(|| format!("building the index from {}", a.input.display()))?;
    progress.finish();
    index
        .save(&a.output)
        .with_context(|| format!("saving {}", a.output.display()))?;
    let file_size = std::fs::metadata(&a.output)?.len();
    let n = index.len();
    let bpv = file_size as f64 / n as f64;
    let ratio = (4 * input.cols()) as f64 / bpv;
    if a.json {
        let j = serde_json::json!({
            "output": a.output, "vectors": n, "dim": input.cols(), "anchors": index.num_anchors(),
            "metric": index.metric().name(), "codec": index.codec().name(),
            "refine": index.refine_codec().map(|c| c.name()),
            "file_bytes": file_size, "bytes_per_vector": bpv, "compression_vs_f32": ratio,
            "backend": backend.name(), "build_seconds": report.total_seconds,
            "train_seconds": report.train_seconds, "assign_seconds": report.assign_seconds,
            "encode_seconds": report.encode_seconds, "iterations": report.train.iterations,
            "converged": report.train.converged, "final_energy": report.final_energy,
            "energy_history": report.train.energy_history,
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        println!("built {}", a.output.display());
        println!(
            "  vectors        {n} x {} ({}{})",
            input.cols(),
            index.metric().name(),
            if index.metric() == Metric::Cosine {
                ", normalised on the way in"
            } else {
                ""
            }
        );
        println!(
            "  anchors        {} ({} iterations, {}; energy {:.6})",
            index.num_anchors(),
            report.train.iterations,
            if report.train.converged {
                "converged"
            } else {
                "iteration cap reached"
            },
            report.final_energy
        );
        let rate = index
            .pcaq_widths()
            .map(|w| {
                let bits = w.iter().map(|&b| b as f64).sum::<f64>() / w.len() as f64;
                format!(" at {bits:.3} bits per dimension")
            })
            .unwrap_or_default();
        println!(
            "  codec          {}{rate}{}",
            index.codec(),
            index
                .refine_codec()
                .map(|r| format!(" + {r} refine tier"))
                .unwrap_or_default()
        );
        println!(
            "  file           {} = {bpv:.1} bytes/vector ({})",
            human_bytes(file_size),
            versus_f32(bpv, input.cols())
        );
        println!("  build time     {:.2} s (train {:.2} s, assign {:.2} s, encode {:.2} s; reading the input included)",
            report.total_seconds, report.train_seconds, report.assign_seconds, report.encode_seconds);
    }
    Ok(())
}
