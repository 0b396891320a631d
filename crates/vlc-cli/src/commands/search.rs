use crate::backend::{with_search, SearchBackend};
use crate::output::{npy_f32, npy_i64, write_atomic};
use anyhow::{bail, Result};
use std::path::PathBuf;
use vlc::SearchParams;

/// Search an index.
///
/// Output: with `-o hits.npy`, ids go to hits.npy (int64, queries x k, −1 = no hit) and
/// distances to hits.distances.npy (float32, +inf = no hit); with `-o hits.json` both go to
/// one JSON file, each query's hits only; without -o, JSON is printed. k above the number of
/// indexed vectors returns them all; nprobe above the number of anchors scans every list.
/// Distances are estimated squared L2 distances; for an index built with `--metric cosine`,
/// between unit vectors (2 − 2·cos: cosine similarity = 1 − distance / 2).
#[derive(clap::Args)]
pub struct Args {
    /// Index file.
    pub index: PathBuf,
    /// Query vectors (.npy, .fvecs, .bvecs, or raw f32 with the index's dimension).
    pub queries: PathBuf,
    /// Neighbours per query (an index of fewer vectors returns them all).
    #[arg(short, default_value_t = 10)]
    pub k: usize,
    /// Inverted lists to scan per query (more = higher recall, slower; above the index's
    /// anchor count, every list).
    #[arg(long, default_value_t = 32)]
    pub nprobe: usize,
    /// Candidates rescored by the second stage (a refine tier, or the full code of `rabitq2-8` and
    /// `pcaq` after their fast scan); 0 = automatic: the first stage's 10·k best, and beyond
    /// them every candidate whose first-stage estimate is within three standard deviations of
    /// that stage's error (measured on those 10·k) of the k-th best (CPU and GPUs alike). A
    /// fixed pool rescores exactly that many: smaller ones are faster and lose recall only
    /// where the first stage ranks poorly.
    #[arg(long, default_value_t = 0)]
    pub rerank: usize,
    /// Adaptive probing: skip a list whose anchor is farther than the nearest anchor by more
    /// than MARGIN times the index's energy (mean squared vector-to-anchor distance, see
    /// `vlc info`), once the lists taken hold k vectors; --nprobe then caps the lists scanned.
    /// Queries near one cluster scan few lists, queries between clusters more. Try 0.5 to 2.
    #[arg(long)]
    pub probe_margin: Option<f32>,
    /// Output file: .npy (ids as int64, queries x k, −1 = no hit; distances beside it in
    /// NAME.distances.npy, +inf = no hit) or .json (each query's hits); without it, JSON on
    /// stdout. Distances are estimated squared L2, nearest first; for a `--metric cosine`
    /// index, between unit vectors (2 − 2·cos, so cosine similarity = 1 − distance / 2).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Open the index with a memory map instead of reading it.
    #[arg(long)]
    pub view: bool,
    /// Where the search runs: cpu, cuda or wgpu (a copy of the index on that GPU), or auto (a
    /// GPU that works and scores the index's codecs: cuda, then a hardware wgpu adapter; else
    /// cpu).
    #[arg(long, value_enum, default_value_t = SearchBackend::Cpu)]
    pub backend: SearchBackend,
}

pub fn run(a: Args) -> Result<()> {
    if let Some(p) = &a.output {
        // An .npy output also writes the distances beside it.
        let distances = p.with_extension("distances.npy");
        let outputs = match p.extension().and_then(|e| e.to_str()) {
            Some("npy") => vec![p.as_path(), &distances],
            _ => vec![p.as_path()],
        };
        crate::output::refuse_overwriting_inputs(
            &outputs,
            &[("index", &a.index), ("queries file", &a.queries)],
        )?;
    }
    let (index, queries) = super::open_with_queries(&a.index, a.view, &a.queries)?;
    let params = SearchParams {
        k: a.k,
        nprobe: a.nprobe,
        rerank: a.rerank,
        probe_margin: a.probe_margin,
    };
    let res = with_search(a.backend, &index, |search| {
        Ok(search(&queries.data, &params)?)
    })?;
    let json = || {
        let rows: Vec<_> = (0..queries.rows)
            .map(|q| {
                // Hits only: a row padded past the vectors found (id −1) ends early.
                let row = q * a.k..(q + 1) * a.k;
                let hits = res.ids[row.clone()].iter().take_while(|&&i| i >= 0).count();
                let (ids, distances) = (&res.ids[row.clone()], &res.distances[row]);
                serde_json::json!({"query": q, "ids": &ids[..hits], "distances": &distances[..hits]})
            })
            .collect();
        serde_json::to_string_pretty(&rows)
    };
    match &a.output {
        None => println!("{}", json()?),
        Some(p) => match p.extension().and_then(|e| e.to_str()) {
            Some("json") => write_atomic(p, json()?.as_bytes())?,
            Some("npy") => {
                let dist_path = p.with_extension("distances.npy");
                write_atomic(p, &npy_i64(queries.rows, a.k, &res.ids))?;
                write_atomic(&dist_path, &npy_f32(queries.rows, a.k, &res.distances))?;
                eprintln!(
                    "wrote ids to {} and distances to {}",
                    p.display(),
                    dist_path.display()
                );
            }
            _ => bail!("output {} must end in .npy or .json", p.display()),
        },
    }
    Ok(())
}
