use crate::backend::{with_search, Search, SearchBackend};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;
use vlc::eval::recall_at;
use vlc::{Index, SearchParams, SearchResults};

/// Measure recall and speed of an index.
///
/// For each nprobe, all queries are searched with k = 10 (timed: QPS and µs/query, on
/// --threads threads or the GPU with --backend cuda; the fastest of --repeat passes) and once
/// with k = 100 (untimed, for recall@100). Recall@k is the mean fraction of the true k nearest
/// neighbours found among the k returned.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("truth").required(true).args(["groundtruth", "base"])))]
pub struct Args {
    /// Index file.
    pub index: PathBuf,
    /// Query vectors (.npy, .fvecs, .bvecs).
    #[arg(long)]
    pub queries: PathBuf,
    /// Exact neighbours of each query, nearest first (.npy int32, int64, uint32 or uint64, or .ivecs; `vlc
    /// groundtruth` makes one).
    #[arg(long)]
    pub groundtruth: Option<PathBuf>,
    /// Instead of --groundtruth: the vectors the index was built from (the file given to `vlc
    /// build`, row i = id i), to compute the exact neighbours from first (as `vlc groundtruth`
    /// does, with the index's metric). The index must hold exactly those rows: nothing added
    /// or removed since.
    #[arg(long)]
    pub base: Option<PathBuf>,
    /// Search with a filter: only the vectors with the ids in this file may be returned
    /// (`vlc search --allow-ids`, on any backend). With --base, the exact neighbours are computed
    /// among those vectors; a --groundtruth must be too (`vlc groundtruth --allow-ids` with
    /// the same file): an id it lists that the filter leaves out is an error. The file: .npy
    /// of integers (int32, int64, uint32 or uint64; 1-d or 2-d), or text with ids separated
    /// by spaces, commas or newlines.
    #[arg(long, value_name = "PATH")]
    pub allow_ids: Option<PathBuf>,
    /// Lists to probe, comma separated (values above the index's anchor count are measured
    /// once, at that count: every list).
    #[arg(long, value_delimiter = ',', default_values_t = [8usize, 16, 32, 64, 128])]
    pub nprobe: Vec<usize>,
    /// Candidates rescored by the second stage (a refine tier, or the full code of `rabitq2-8` and
    /// `pcaq` after their fast scan); 0 = automatic: the first stage's 10·k best, and beyond
    /// them every candidate whose first-stage estimate is within three standard deviations of
    /// that stage's error (measured on those 10·k) of the k-th best (CPU and GPUs alike). A
    /// fixed pool rescores exactly that many: smaller ones are faster and lose recall only
    /// where the first stage ranks poorly.
    #[arg(long, default_value_t = 0)]
    pub rerank: usize,
    /// Adaptive probing, comma separated margins (each measured at every --nprobe, which then
    /// caps the lists scanned): skip a list whose anchor is farther than the nearest anchor by
    /// more than MARGIN times the index's energy (mean squared vector-to-anchor distance, see
    /// `vlc info`), once the lists taken hold k vectors. Try 0.5 to 2; larger = more recall.
    #[arg(long, value_delimiter = ',')]
    pub probe_margin: Vec<f32>,
    /// Timed passes per nprobe; the fastest is reported (a shared machine's noise only ever
    /// slows a pass down).
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Queries per search call (0 = all of them in one call). `--batch-size 1` times the
    /// queries one at a time, as an application that answers its users one by one asks:
    /// the latency of a single search, which a batch's throughput hides.
    #[arg(long, default_value_t = 0)]
    pub batch_size: usize,
    /// Open the index with a memory map instead of reading it.
    #[arg(long)]
    pub view: bool,
    /// Print results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Where the search runs: cpu (on --threads threads), cuda or wgpu (a copy of the index on
    /// that GPU; timings include moving queries and results), or auto (a GPU that works and
    /// scores the index's codecs: cuda, then a hardware wgpu adapter; else cpu).
    #[arg(long, value_enum, default_value_t = SearchBackend::Cpu)]
    pub backend: SearchBackend,
}

#[derive(Serialize, Clone, Debug)]
pub struct EvalPoint {
    pub nprobe: usize,
    pub rerank: usize,
    /// The adaptive-probing margin, when one was set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_margin: Option<f32>,
    #[serde(rename = "recall@1")]
    pub recall_1: f64,
    #[serde(rename = "recall@10")]
    pub recall_10: f64,
    #[serde(rename = "recall@100")]
    pub recall_100: Option<f64>,
    pub qps: f64,
    pub ms_per_query: f64,
}

/// Search `queries` at every nprobe (for each probe margin of `margins`; `[None]` for fixed
/// probing) and score against `truth` (num_queries, truth_cols).
#[allow(clippy::too_many_arguments)] // one call site per command; a struct would only rename them
pub fn sweep(
    index: &Index,
    search: &Search,
    queries: &[f32],
    truth: &[i64],
    truth_cols: usize,
    nprobes: &[usize],
    margins: &[Option<f32>],
    rerank: usize,
    repeat: usize,
) -> Result<Vec<EvalPoint>> {
    let nq = queries.len() / index.dim();
    let mut points = Vec::new();
    for (&probe_margin, &nprobe) in margins
        .iter()
        .flat_map(|m| nprobes.iter().map(move |n| (m, n)))
    {
        let k = 10.min(index.len()).min(truth_cols);
        let params = SearchParams {
            k,
            nprobe,
            rerank,
            probe_margin,
        };
        let mut secs = f64::INFINITY;
        let mut res = None;
        for _ in 0..repeat.max(1) {
            let t = Instant::now();
            let r = search(queries, &params)
                .with_context(|| format!("searching with nprobe {nprobe}"))?;
            secs = secs.min(t.elapsed().as_secs_f64());
            res = Some(r);
        }
        let res = res.expect("at least one pass");
        let recall_100 = if truth_cols >= 100 && index.len() >= 100 {
            let p = SearchParams { k: 100, ..params };
            let r = search(queries, &p)?;
            Some(recall_at(&r.ids, 100, truth, truth_cols, 100))
        } else {
            None
        };
        points.push(EvalPoint {
            nprobe,
            rerank,
            probe_margin,
            recall_1: recall_at(&res.ids, k, truth, truth_cols, 1),
            recall_10: recall_at(&res.ids, k, truth, truth_cols, k),
            recall_100,
            qps: nq as f64 / secs,
            ms_per_query: secs * 1000.0 / nq as f64,
        });
    }
    Ok(points)
}

/// `search` over `queries` (num_queries, dim) in calls of `batch_size` queries (all in one
/// call for 0), the results put together in query order.
fn in_batches(
    search: &Search,
    queries: &[f32],
    params: &SearchParams,
    batch_size: usize,
    dim: usize,
) -> vlc::Result<SearchResults> {
    let nq = queries.len() / dim;
    if batch_size == 0 || batch_size >= nq {
        return search(queries, params);
    }
    let mut all = SearchResults {
        k: params.k,
        ids: Vec::with_capacity(nq * params.k),
        distances: Vec::with_capacity(nq * params.k),
    };
    for chunk in queries.chunks(batch_size * dim) {
        let r = search(chunk, params)?;
        all.ids.extend(r.ids);
        all.distances.extend(r.distances);
    }
    Ok(all)
}

/// The sweep's nprobe values with those above the anchor count measured as the anchor count
/// (every list, as search clamps them), each value once, in the order given.
fn clamp_nprobes(nprobes: &[usize], num_anchors: usize) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(nprobes.len());
    for &p in nprobes {
        let p = p.min(num_anchors);
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

pub fn print_table(points: &[EvalPoint]) {
    let margins = points.iter().any(|p| p.probe_margin.is_some());
    let margin = |p: &EvalPoint| match (margins, p.probe_margin) {
        (false, _) => String::new(),
        (true, None) => format!("{:>7}", "-"),
        (true, Some(m)) => format!("{m:>7}"),
    };
    println!(
        "{}{:>7} {:>9} {:>10} {:>11} {:>10} {:>9}",
        if margins { " margin" } else { "" },
        "nprobe",
        "recall@1",
        "recall@10",
        "recall@100",
        "QPS",
        "us/query"
    );
    for p in points {
        let r100 = p.recall_100.map_or("-".to_string(), |r| format!("{r:.4}"));
        println!(
            "{}{:>7} {:>9.4} {:>10.4} {:>11} {:>10.0} {:>9.2}",
            margin(p),
            p.nprobe,
            p.recall_1,
            p.recall_10,
            r100,
            p.qps,
            p.ms_per_query * 1e3
        );
    }
}

/// Ground truth for `vlc eval --base`: the exact 100 nearest rows of `base` (fewer if it has
/// fewer) for each query, by the index's metric. The index's ids must be the rows of `base`.
fn truth_from_base(
    index: &Index,
    base: &Path,
    queries: &Path,
    allowed: Option<&[u32]>,
    quiet: bool,
) -> Result<vlc::io::Matrix<i64>> {
    let rows = vlc::io::VectorFile::open(base, Some(index.dim()))
        .with_context(|| format!("reading {}", base.display()))?
        .rows();
    if rows != index.len() || index.next_id() as usize != rows {
        bail!(
            "{} has {rows} rows, but the index holds {} vectors with ids below {}: --base must \
             be the file the index was built from (row i = id i), with nothing added or \
             removed since (for other indexes, give --groundtruth in the ids the index uses)",
            base.display(),
            index.len(),
            index.next_id()
        );
    }
    // Ids the index does not hold are not rows either (the filter ignores them).
    let allowed = allowed.map(|ids| &ids[..ids.partition_point(|&i| (i as usize) < rows)]);
    if !quiet {
        eprintln!(
            "computing the exact neighbours of the queries among {} vectors of {} ({})",
            match allowed {
                Some(ids) => format!("the {} allowed of the {rows}", ids.len()),
                None => format!("the {rows}"),
            },
            base.display(),
            index.metric().name()
        );
    }
    let (truth, _, _) = super::groundtruth::compute(
        base,
        queries,
        Some(index.dim()),
        100,
        index.metric(),
        &vlc::CpuBackend,
        allowed,
        quiet,
    )?;
    Ok(super::groundtruth::id_matrix(&truth))
}

pub fn run(a: Args) -> Result<()> {
    let (index, queries) = super::open_with_queries(&a.index, a.view, &a.queries)?;
    let allowed = a
        .allow_ids
        .as_deref()
        .map(|path| super::filter_from_file(&index, path))
        .transpose()?;
    let allowed_ids = allowed.as_ref().map(|(ids, _)| ids.as_slice());
    let truth = match (&a.groundtruth, &a.base) {
        (Some(path), _) => {
            let truth =
                vlc::io::read_ids(path).with_context(|| format!("reading {}", path.display()))?;
            if let Some(ids) = allowed_ids {
                let out = truth.data.iter().find(|&&id| {
                    id >= 0 && u32::try_from(id).map_or(true, |id| ids.binary_search(&id).is_err())
                });
                if let Some(id) = out {
                    bail!(
                        "{} lists id {id}, which --allow-ids leaves out: give the exact neighbours \
                         among the allowed vectors (`vlc groundtruth --allow-ids` with the same \
                         file, or --base instead of --groundtruth)",
                        path.display()
                    );
                }
            }
            truth
        }
        (None, Some(base)) => truth_from_base(&index, base, &a.queries, allowed_ids, a.json)?,
        (None, None) => bail!("give --groundtruth or --base"),
    };
    super::check_truth(&truth, queries.rows, u64::from(index.next_id()))?;
    let searchable = allowed.as_ref().map_or(index.len(), |(_, f)| f.len());
    if searchable == 0 {
        bail!("none of the ids in the --allow-ids file is in the index: nothing to search");
    }
    if truth.cols < 10.min(searchable) {
        bail!(
            "ground truth has {} neighbours per query; eval needs at least 10 (`vlc groundtruth -k`)",
            truth.cols
        );
    }
    if let Some(bad) = a.probe_margin.iter().find(|m| !m.is_finite() || **m < 0.0) {
        bail!("--probe-margin {bad} is out of range: margins are finite numbers >= 0");
    }
    if a.nprobe.contains(&0) {
        bail!("nprobe 0 is out of range: a search probes at least one list");
    }
    let nprobes = clamp_nprobes(&a.nprobe, index.num_anchors());
    let above: Vec<String> = a
        .nprobe
        .iter()
        .filter(|&&p| p > index.num_anchors())
        .map(|p| p.to_string())
        .collect();
    if !above.is_empty() {
        eprintln!(
            "nprobe {} above the index's {} anchors: measured once at {} (every list)",
            above.join(", "),
            index.num_anchors(),
            index.num_anchors()
        );
    }
    let margins: Vec<Option<f32>> = if a.probe_margin.is_empty() {
        vec![None]
    } else {
        a.probe_margin.iter().map(|&m| Some(m)).collect()
    };
    let run_sweep = |search: &Search| {
        let dim = index.dim();
        let batched = |q: &[f32], p: &SearchParams| in_batches(search, q, p, a.batch_size, dim);
        sweep(
            &index,
            &batched,
            &queries.data,
            &truth.data,
            truth.cols,
            &nprobes,
            &margins,
            a.rerank,
            a.repeat,
        )
    };
    let filter = allowed.as_ref().map(|(_, filter)| filter);
    let points = with_search(a.backend, &index, filter, run_sweep)?;
    let filtered = allowed.as_ref().map(|(_, f)| f.len());
    let file_size = std::fs::metadata(&a.index)?.len();
    let bpv = file_size as f64 / index.len() as f64;
    let threads = rayon::current_num_threads();
    if a.json {
        let j = serde_json::json!({
            "index": a.index, "vectors": index.len(), "dim": index.dim(), "anchors": index.num_anchors(),
            "codec": index.codec().name(), "refine": index.refine_codec().map(|c| c.name()),
            "bytes_per_vector": bpv, "queries": queries.rows, "threads": threads,
            "batch_size": a.batch_size,
            "backend": format!("{:?}", a.backend).to_lowercase(),
            "cpu_kernels": vlc::simd::kernels(), "allowed": filtered, "results": points,
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        println!(
            "{}: {} vectors, {} anchors, {}{}, {bpv:.1} bytes/vector; {} queries{}{} on {threads} thread(s); CPU kernels: {}",
            a.index.display(), index.len(), index.num_anchors(), index.codec(),
            index.refine_codec().map(|r| format!(" + {r}")).unwrap_or_default(), queries.rows,
            filtered.map(|n| format!(" among {n} allowed vectors")).unwrap_or_default(),
            match a.batch_size {
                0 => String::new(),
                1 => ", one per call".to_string(),
                n => format!(", {n} per call"),
            },
            vlc::simd::kernels()
        );
        print_table(&points);
    }
    Ok(())
}
