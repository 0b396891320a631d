use super::eval::sweep;
use crate::output::write_atomic;
use crate::plot::{svg, Series};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;
use vlc::codec::parse_refine;
use vlc::{BuildParams, CodecKind, CpuBackend, Index, Metric};

/// Sweep codecs × nprobe (× rerank depth) on a dataset and compare with peers.
///
/// Writes to --out: results.jsonl (one point per line, VLC and --peers), results.md (tables and
/// the Pareto check against every peer point), recall_qps.svg and recall_bytes.svg. Indexes are
/// built with all threads; searches run on --search-threads threads (default 1: single core).
/// Peer points come from bench/faiss_bench.py (same JSON schema).
#[derive(clap::Args)]
pub struct Args {
    /// Dataset directory with base.npy (or base.fvecs), query.npy (or queries.npy,
    /// query.fvecs) and, optionally, groundtruth.npy (or groundtruth.ivecs).
    pub dataset: Option<PathBuf>,
    /// Base vectors (instead of, or overriding, the dataset directory's).
    #[arg(long)]
    pub base: Option<PathBuf>,
    /// Query vectors, of the base's dimension (instead of, or overriding, the directory's).
    #[arg(long)]
    pub queries: Option<PathBuf>,
    /// Exact neighbours of each query among the base vectors, nearest first (.npy or .ivecs).
    /// Without it and without one in the dataset directory, the bench computes them (as `vlc
    /// groundtruth` does, 100 per query) and writes them to --out as groundtruth.npy, for
    /// the next run and for bench/faiss_bench.py.
    #[arg(long)]
    pub groundtruth: Option<PathBuf>,
    /// Index configurations, `codec` or `codec+refine`, comma separated, each optionally with
    /// `@PRECISION` for how its anchors are stored (`vlc build --anchor-precision`; default
    /// int8), e.g. `pcaq0.125@int4`; `pcaqB` is the variance-allocated codec at B bits per
    /// dimension on average (e.g. pcaq3.2 or pcaq0.75; see `vlc build --help`). The default
    /// sweep's `pcaq0.125@int4` is its smallest code: at high dimensions and few vectors the
    /// anchors are a large share of such a file, and int4 halves them. `pcaq:NB` is pcaq at
    /// the largest rate whose file fits N bytes per vector (see --match-peers). `rabitq7` is
    /// the sweep's high-rate code without a stored rotation: on small collections of
    /// high-dimensional vectors it fits under a D + 8 byte footprint (an 8-bit scalar code
    /// and its id) where `pcaq`'s rotation costs D x D bytes and a matrix product per query.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "rabitq1+f32,rabitq1+f16,rabitq1+sq8,rabitq1+sq4,pcaq0.125@int4,pcaq0.25,pcaq0.5,pcaq0.75,pcaq1,rabitq1,rabitq2,rabitq3,rabitq4,rabitq7,pcaq1.5,pcaq2,pcaq2.5,pcaq3,pcaq4,pcaq5,pcaq7.5,sq8,anchor-only"
    )]
    pub configs: Vec<String>,
    /// nprobe values (values above the anchor count are skipped).
    #[arg(long, value_delimiter = ',', default_values_t = [8usize, 16, 32, 64, 128, 256, 512])]
    pub nprobe: Vec<usize>,
    /// Candidate pool depths for configurations with a second stage (a refine tier, or the
    /// RaBitQ codecs and `pcaq`, whose fast pass is rescored with the full code); 0 = the
    /// automatic pool (`vlc search --help`: 10·k, and beyond them those within the first
    /// stage's error).
    /// The first depth runs at every nprobe, the others at the nprobe values of
    /// `--rerank-nprobe`: a pool smaller than 10·k pays where rescoring weighs as much as the
    /// scan of the lists, and on codes whose first stage already ranks well.
    #[arg(long, value_delimiter = ',', default_values_t = [0usize, 50, 30])]
    pub rerank: Vec<usize>,
    /// The nprobe values at which the depths after the first of `--rerank` are swept.
    #[arg(long, value_delimiter = ',', default_values_t = [8usize, 16, 32, 64, 128])]
    pub rerank_nprobe: Vec<usize>,
    /// Adaptive-probing margins (`vlc search --probe-margin`), each measured with the largest
    /// nprobe of the sweep as the cap, at the first and the last pool depth of --rerank;
    /// their points are named `CONFIG m<MARGIN>`.
    #[arg(long, value_delimiter = ',', default_values_t = [1.0f32, 1.5])]
    pub probe_margin: Vec<f32>,
    /// Anchors (default: automatic).
    #[arg(long)]
    pub anchors: Option<usize>,
    /// Seed of every build: with the default, a configuration here is the index that
    /// `vlc build --codec C [--refine R]` makes with its defaults.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Distance of every build and of the ground truth: l2, or cosine (vectors and queries
    /// scaled to unit length, as `vlc build --metric cosine`).
    #[arg(long, default_value = "l2")]
    pub metric: Metric,
    /// Threads for searching (timed).
    #[arg(long, default_value_t = 1)]
    pub search_threads: usize,
    /// Timed passes per search setting; QPS is the fastest pass's (noise on a shared machine
    /// only ever slows a pass down).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// JSON-lines files of peer points (e.g. from bench/faiss_bench.py).
    #[arg(long)]
    pub peers: Vec<PathBuf>,
    /// Also build `pcaq` at each peer's footprint (`pcaq:NB`, `vlc build --codec pcaq --bytes-per-vector
    /// N`), for every distinct bytes per vector among the --peers points up to dim + 16 (about
    /// pcaq's size at 8 bits per dimension), so that each peer meets VLC at its own size.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "true|false")]
    pub match_peers: bool,
    /// Output directory.
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Keep the built indexes in the output directory.
    #[arg(long)]
    pub keep_indexes: bool,
}

/// One measured configuration at one search setting.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Point {
    pub system: String,
    pub config: String,
    pub nprobe: usize,
    #[serde(default)]
    pub rerank: usize,
    /// The adaptive-probing margin (`nprobe` is then the cap), when one was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_margin: Option<f32>,
    pub bytes_per_vector: f64,
    #[serde(rename = "recall@1")]
    pub recall_1: f64,
    #[serde(rename = "recall@10")]
    pub recall_10: f64,
    #[serde(rename = "recall@100", default)]
    pub recall_100: Option<f64>,
    pub qps: f64,
    pub threads: usize,
    #[serde(default)]
    pub build_seconds: f64,
}

fn pick(
    dir: &Option<PathBuf>,
    explicit: &Option<PathBuf>,
    names: &[&str],
    what: &str,
) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p.clone());
    }
    let Some(d) = dir else {
        bail!("give a dataset directory or --{what}")
    };
    names
        .iter()
        .map(|n| d.join(n))
        .find(|p| p.exists())
        .with_context(|| format!("{} has none of {names:?}", d.display()))
}

/// A benchmark configuration.
#[derive(Clone, Debug, PartialEq)]
struct Config {
    codec: CodecKind,
    /// `pcaq`'s bits per dimension, when the spec gives them.
    bits: Option<f32>,
    /// The footprint `pcaq:NB` fills (`vlc build --codec pcaq --bytes-per-vector N`).
    bytes_per_vector: Option<f64>,
    refine: Option<CodecKind>,
    /// How anchors are stored (`None`: the build default).
    precision: Option<vlc::AnchorPrecision>,
}

fn parse_config(spec: &str) -> Result<Config> {
    let (codecs, precision) = match spec.split_once('@') {
        Some((codecs, p)) => (
            codecs,
            Some(p.parse::<vlc::AnchorPrecision>().map_err(|e| {
                anyhow::anyhow!("config `{spec}`: anchor precision after `@`: {e}")
            })?),
        ),
        None => (spec, None),
    };
    let mut parts = codecs.split('+');
    let primary = parts.next().unwrap_or("");
    let (codec, bits, bytes_per_vector) = match primary.split_once(':') {
        Some((name, footprint)) => {
            let bytes = footprint
                .strip_suffix(['B', 'b'])
                .unwrap_or(footprint)
                .parse::<f64>()
                .ok()
                .filter(|b| b.is_finite() && *b > 0.0);
            match (name.eq_ignore_ascii_case("pcaq"), bytes) {
                (true, Some(bytes)) => (CodecKind::PcaRaBitQ, None, Some(bytes)),
                _ => bail!(
                    "config `{spec}`: a footprint is written pcaq:NB, N the bytes per vector to fill (e.g. pcaq:64B)"
                ),
            }
        }
        None => {
            let (codec, bits) = vlc::codec::parse_codec_spec(primary)
                .with_context(|| format!("config `{spec}`"))?;
            (codec, bits, None)
        }
    };
    let refine =
        parse_refine(parts.next().unwrap_or("none")).with_context(|| format!("config `{spec}`"))?;
    if parts.next().is_some() {
        bail!("config `{spec}`: expected codec, codec+refine, or either with @precision");
    }
    Ok(Config {
        codec,
        bits,
        bytes_per_vector,
        refine,
        precision,
    })
}

/// `pcaq` at each distinct footprint of `peers` up to `dim + 16` bytes per vector (about its
/// size at 8 bits per dimension, the most it stores), named `pcaq:NB`; footprints are rounded
/// down to a tenth of a byte.
fn peer_footprints(peers: &[Point], dim: usize) -> Vec<String> {
    let mut tenths: Vec<u64> = peers
        .iter()
        .map(|p| (p.bytes_per_vector * 10.0).floor())
        .filter(|t| *t >= 10.0 && *t <= (dim as f64 + 16.0) * 10.0)
        .map(|t| t as u64)
        .collect();
    tenths.sort_unstable();
    tenths.dedup();
    tenths
        .into_iter()
        .map(|t| {
            if t % 10 == 0 {
                format!("pcaq:{}B", t / 10)
            } else {
                format!("pcaq:{}.{}B", t / 10, t % 10)
            }
        })
        .collect()
}

/// The exact 100 nearest neighbours of each query (fewer if the base has fewer rows), written to
/// `out`/groundtruth.npy (int32) for later runs and for bench/faiss_bench.py.
fn computed_truth(
    base: &vlc::io::Matrix<f32>,
    queries: &vlc::io::Matrix<f32>,
    metric: Metric,
    out: &Path,
) -> Result<vlc::io::Matrix<i64>> {
    let t = Instant::now();
    let source = vlc::SliceSource::new(&base.data, base.cols)?;
    let truth = vlc::eval::ground_truth(
        &source,
        &queries.data,
        100,
        metric,
        &CpuBackend,
        &mut |_| {},
    )
    .context("computing the ground truth")?;
    let path = out.join("groundtruth.npy");
    crate::output::write_atomic(
        &path,
        &crate::output::npy_i32_ids(queries.rows, truth.k, &truth.ids),
    )?;
    eprintln!(
        "no ground truth given: computed the exact {} nearest neighbours ({}) of each query in {:.1} s and wrote {}",
        truth.k,
        metric.name(),
        t.elapsed().as_secs_f64(),
        path.display()
    );
    Ok(super::groundtruth::id_matrix(&truth))
}

pub fn run(a: Args) -> Result<()> {
    let base_path = pick(&a.dataset, &a.base, &["base.npy", "base.fvecs"], "base")?;
    let query_path = pick(
        &a.dataset,
        &a.queries,
        &["query.npy", "queries.npy", "query.fvecs"],
        "queries",
    )?;
    // None: computed below, once the base is read.
    let gt_path = a.groundtruth.clone().or_else(|| {
        let dir = a.dataset.as_ref()?;
        ["groundtruth.npy", "groundtruth.ivecs"]
            .iter()
            .map(|n| dir.join(n))
            .find(|p| p.exists())
    });
    let mut peer_points: Vec<Point> = Vec::new();
    for p in &a.peers {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            peer_points.push(
                serde_json::from_str(line)
                    .with_context(|| format!("{} line {}", p.display(), i + 1))?,
            );
        }
    }
    let mut configs: Vec<(String, Config)> = a
        .configs
        .iter()
        .map(|s| parse_config(s).map(|c| (s.clone(), c)))
        .collect::<Result<_>>()?;
    if a.search_threads == 0 {
        bail!("--search-threads must be at least 1");
    }
    let base = vlc::io::read_vectors(&base_path, None)
        .with_context(|| format!("reading {}", base_path.display()))?;
    // Configurations up to here were asked for; those added for the peers' footprints may not
    // fit (a footprint below pcaq's smallest index of this data) and are then skipped.
    let asked = configs.len();
    if a.match_peers {
        for spec in peer_footprints(&peer_points, base.cols) {
            let config = parse_config(&spec)?;
            if !configs.iter().any(|(_, c)| *c == config) {
                configs.push((spec, config));
            }
        }
    }
    let queries = vlc::io::read_vectors(&query_path, Some(base.cols))
        .with_context(|| format!("reading {}", query_path.display()))?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let truth = match &gt_path {
        Some(p) => vlc::io::read_ids(p).with_context(|| format!("reading {}", p.display()))?,
        None => computed_truth(&base, &queries, a.metric, &a.out)?,
    };
    super::check_truth(&truth, queries.rows, base.rows as u64)?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(a.search_threads)
        .build()?;
    let mut points: Vec<Point> = Vec::new();
    eprintln!(
        "{} vectors x {}, {} queries; searching on {} thread(s); CPU kernels: {}",
        base.rows,
        base.cols,
        queries.rows,
        a.search_threads,
        vlc::simd::kernels()
    );
    for (number, (name, config)) in configs.iter().enumerate() {
        let mut params = BuildParams::default()
            .with_codec(config.codec)
            .with_refine(config.refine)
            .with_metric(a.metric)
            .with_seed(a.seed);
        if let Some(bits) = config.bits {
            params.codec_params.bits = bits;
        }
        if let Some(budget) = config.bytes_per_vector {
            params = params.with_bytes_per_vector(budget);
            // `pcaq:NB` is pcaq, as its name says (`vlc build --codec pcaq --bytes-per-vector N`).
            params.pcaq_only = true;
        }
        params.train.num_anchors = a.anchors.unwrap_or(0);
        if let Some(precision) = config.precision {
            params.anchor_precision = precision;
        }
        let t = Instant::now();
        let index = match Index::build(&base.data, base.cols, &params, &CpuBackend, &mut |_| {}) {
            Ok((index, _)) => index,
            Err(
                e @ vlc::VlcError::InvalidParameter {
                    name: "bytes_per_vector",
                    ..
                },
            ) if number >= asked => {
                eprintln!("  {name:<16} skipped (a peer's footprint): {e}");
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("building {name}")),
        };
        let build_seconds = t.elapsed().as_secs_f64();
        // The search layout is built now, so that no timed search pays for it.
        index.prepare_search();
        let bytes = index.file_size() as f64 / index.len() as f64;
        if a.keep_indexes {
            index.save(a.out.join(format!("{name}.vlc")))?;
        }
        let nprobes: Vec<usize> = a
            .nprobe
            .iter()
            .copied()
            .filter(|&p| p >= 1 && p <= index.num_anchors())
            .collect();
        let reranks: Vec<usize> = if index.has_second_stage() {
            a.rerank.clone()
        } else {
            vec![0]
        };
        // Fixed probing at every depth, then the adaptive margins at the first depth (for
        // recall) and the last (for speed), with the sweep's largest nprobe as the cap.
        let mut runs: Vec<(usize, Option<f32>)> = reranks.iter().map(|&r| (r, None)).collect();
        let mut margin_depths: Vec<usize> = reranks.first().into_iter().copied().collect();
        margin_depths.extend(reranks.last().filter(|&&r| Some(&r) != reranks.first()));
        if !nprobes.is_empty() {
            for &rerank in &margin_depths {
                runs.extend(a.probe_margin.iter().map(|&m| (rerank, Some(m))));
            }
        }
        for (i, &(rerank, margin)) in runs.iter().enumerate() {
            let nprobes: Vec<usize> = if margin.is_some() {
                vec![*nprobes.last().expect("checked above")]
            } else if i == 0 {
                nprobes.clone()
            } else {
                nprobes
                    .iter()
                    .copied()
                    .filter(|p| a.rerank_nprobe.contains(p))
                    .collect()
            };
            if nprobes.is_empty() {
                continue;
            }
            let results = pool.install(|| {
                sweep(
                    &index,
                    &crate::backend::cpu_search(&index),
                    &queries.data,
                    &truth.data,
                    truth.cols,
                    &nprobes,
                    &[margin],
                    rerank,
                    a.repeat,
                )
            })?;
            let config = match margin {
                Some(m) => format!("{name} m{m}"),
                None => name.clone(),
            };
            for r in results {
                eprintln!("  {config:<16} nprobe {:>4} rerank {:>4}: recall@10 {:.4}  {:>8.0} QPS  {bytes:.1} B/vector", r.nprobe, rerank, r.recall_10, r.qps);
                points.push(Point {
                    system: "vlc".into(),
                    config: config.clone(),
                    nprobe: r.nprobe,
                    rerank,
                    probe_margin: margin,
                    bytes_per_vector: bytes,
                    recall_1: r.recall_1,
                    recall_10: r.recall_10,
                    recall_100: r.recall_100,
                    qps: r.qps,
                    threads: a.search_threads,
                    build_seconds,
                });
            }
        }
    }
    points.extend(peer_points);
    write_outputs(
        &a.out,
        &points,
        &format!(
            "{} ({} x {}, {} queries)",
            base_path.display(),
            base.rows,
            base.cols,
            queries.rows
        ),
    )
}

/// Best recall@10 of a configuration over nprobe <= 128, with the QPS there.
fn best(points: &[&Point]) -> (f64, f64) {
    points
        .iter()
        .filter(|p| p.nprobe <= 128)
        .map(|p| (p.recall_10, p.qps))
        .fold((0.0, 0.0), |a, b| {
            if b.0 > a.0 || (b.0 == a.0 && b.1 > a.1) {
                b
            } else {
                a
            }
        })
}

pub fn write_outputs(out: &Path, points: &[Point], title: &str) -> Result<()> {
    let jsonl: String = points
        .iter()
        .map(|p| serde_json::to_string(p).unwrap() + "\n")
        .collect();
    write_atomic(&out.join("results.jsonl"), jsonl.as_bytes())?;
    // One group (table row, plot series) per configuration and pool depth.
    let mut groups: BTreeMap<(String, String), Vec<&Point>> = BTreeMap::new();
    for p in points {
        let label = if p.rerank == 0 {
            p.config.clone()
        } else {
            format!("{} pool {}", p.config, p.rerank)
        };
        groups.entry((p.system.clone(), label)).or_default().push(p);
    }
    let mut md = format!("# Benchmark: {title}\n\nSearch threads: {}. Bytes per vector: VLC = index file / vectors; peers as their script reports.\n\n", points.first().map_or(1, |p| p.threads));
    md += "## Best recall@10 per configuration (nprobe <= 128)\n\n| system | config | bytes/vector | best recall@10 | QPS there |\n|---|---|---|---|---|\n";
    let mut summary: Vec<_> = groups
        .iter()
        .map(|((s, c), ps)| (s, c, ps[0].bytes_per_vector, best(ps)))
        .collect();
    summary.sort_by(|a, b| a.2.total_cmp(&b.2));
    for (s, c, b, (r, q)) in &summary {
        md += &format!("| {s} | {c} | {b:.1} | {r:.4} | {q:.0} |\n");
    }
    // Pareto: each peer point must be matched by a VLC point with no more bytes, no less recall
    // and no fewer QPS.
    let vlc_points: Vec<&Point> = points.iter().filter(|p| p.system == "vlc").collect();
    let peers: Vec<&Point> = points.iter().filter(|p| p.system != "vlc").collect();
    if !peers.is_empty() {
        let beaten: Vec<bool> = peers
            .iter()
            .map(|f| {
                vlc_points.iter().any(|v| {
                    v.bytes_per_vector <= f.bytes_per_vector
                        && v.recall_10 >= f.recall_10
                        && v.qps >= f.qps
                })
            })
            .collect();
        md += &format!(
            "\n## Pareto check\n\n{} of {} peer points are matched or beaten by a VLC point (no more bytes, no less recall@10, no fewer QPS).\n",
            beaten.iter().filter(|b| **b).count(),
            peers.len()
        );
        let missing: Vec<_> = peers
            .iter()
            .zip(&beaten)
            .filter(|(_, b)| !**b)
            .map(|(p, _)| p)
            .collect();
        if !missing.is_empty() {
            md += "\nNot matched:\n\n| system | config | nprobe | bytes/vector | recall@10 | QPS |\n|---|---|---|---|---|---|\n";
            for p in missing {
                md += &format!(
                    "| {} | {} | {} | {:.1} | {:.4} | {:.0} |\n",
                    p.system, p.config, p.nprobe, p.bytes_per_vector, p.recall_10, p.qps
                );
            }
        }
    }
    md += "\n## All points\n\n| system | config | nprobe | rerank | bytes/vector | recall@1 | recall@10 | recall@100 | QPS |\n|---|---|---|---|---|---|---|---|---|\n";
    for p in points {
        md += &format!(
            "| {} | {} | {} | {} | {:.1} | {:.4} | {:.4} | {} | {:.0} |\n",
            p.system,
            p.config,
            p.nprobe,
            p.rerank,
            p.bytes_per_vector,
            p.recall_1,
            p.recall_10,
            p.recall_100.map_or("-".into(), |r| format!("{r:.4}")),
            p.qps
        );
    }
    write_atomic(&out.join("results.md"), md.as_bytes())?;

    let series_qps: Vec<Series> = groups
        .iter()
        .map(|((s, c), ps)| {
            let mut pts: Vec<(f64, f64)> = ps.iter().map(|p| (p.qps, p.recall_10)).collect();
            pts.sort_by(|a, b| a.1.total_cmp(&b.1));
            Series {
                name: format!("{s} {c}"),
                points: pts,
                dashed: s != "vlc",
            }
        })
        .collect();
    write_atomic(
        &out.join("recall_qps.svg"),
        svg(
            &format!("recall@10 vs QPS: {title}"),
            "queries per second (log scale)",
            "recall@10",
            &series_qps,
            true,
        )
        .as_bytes(),
    )?;
    let mut by_system: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for (s, _, b, (r, _)) in &summary {
        by_system.entry(s.to_string()).or_default().push((*b, *r));
    }
    let series_bytes: Vec<Series> = by_system
        .into_iter()
        .map(|(s, pts)| Series {
            dashed: s != "vlc",
            name: s,
            points: pts,
        })
        .collect();
    write_atomic(
        &out.join("recall_bytes.svg"),
        svg(
            &format!("best recall@10 (nprobe <= 128) vs bytes/vector: {title}"),
            "bytes per vector (log scale)",
            "recall@10",
            &series_bytes,
            true,
        )
        .as_bytes(),
    )?;
    println!("{md}");
    eprintln!(
        "wrote {}/results.jsonl, results.md, recall_qps.svg, recall_bytes.svg",
        out.display()
    );
    Ok(())
}
