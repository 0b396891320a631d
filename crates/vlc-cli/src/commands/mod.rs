//! One module per subcommand.

mod add;
mod bench;
mod build;
mod demo;
mod eval;
mod groundtruth;
mod info;
mod remove;
mod search;
mod test_cuda;
mod train_bench;

use anyhow::{Context, Result};
use clap::Subcommand;
use std::path::Path;

#[derive(Subcommand)]
pub enum Command {
    /// Build an index from vectors (.npy f32/f64/f16/u8, .fvecs, .bvecs, or raw f32 with --dim).
    Build(build::Args),
    /// Add vectors to an index (encoded against its anchors and codecs; nothing retrained).
    Add(add::Args),
    /// Remove vectors from an index by id (the others keep their codes and ids).
    Remove(remove::Args),
    /// Search an index with query vectors; writes ids and distances (.npy or .json).
    Search(search::Args),
    /// Measure recall@1/10/100 and queries per second against ground truth over an nprobe sweep.
    Eval(eval::Args),
    /// Compute exact nearest neighbours of queries among base vectors (ground truth for eval and bench).
    Groundtruth(groundtruth::Args),
    /// Show what is inside an index file.
    Info(info::Args),
    /// Compare anchor training on CUDA and the CPU on synthetic data (times, energy, speedup).
    TestCuda(test_cuda::Args),
    /// The same comparison on the WGPU backend (Vulkan, Metal, DX12).
    TestGpu(test_cuda::Args),
    /// Time anchor training alone on one backend (used by bench/gpu_bench.py).
    TrainBench(train_bench::Args),
    /// Sweep codecs x nprobe on a dataset, compare with peers (e.g. FAISS), write tables and plots.
    Bench(bench::Args),
    /// Build, evaluate and query an index over a built-in sample of 5,000 real sentence
    /// embeddings (Debian package descriptions, all-MiniLM-L6-v2, 384-d).
    Demo(demo::Args),
}

pub fn run(command: Command) -> Result<()> {
    match command {
        Command::Build(a) => build::run(a),
        Command::Add(a) => add::run(a),
        Command::Remove(a) => remove::run(a),
        Command::Search(a) => search::run(a),
        Command::Eval(a) => eval::run(a),
        Command::Groundtruth(a) => groundtruth::run(a),
        Command::Info(a) => info::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Bench(a) => bench::run(a),
        Command::TestCuda(a) => test_cuda::run(a),
        Command::TestGpu(a) => test_cuda::run_wgpu(a),
        Command::TrainBench(a) => train_bench::run(a),
    }
}

/// Open an index (memory-mapped with `view`) and read queries of its dimension.
pub fn open_with_queries(
    index: &std::path::Path,
    view: bool,
    queries: &std::path::Path,
) -> Result<(vlc::Index, vlc::io::Matrix<f32>)> {
    use anyhow::Context;
    let idx = open_index(index, view)?;
    let q = vlc::io::read_vectors(queries, Some(idx.dim()))
        .with_context(|| format!("reading {}", queries.display()))?;
    Ok((idx, q))
}

/// Open an index, memory-mapped with `view`.
pub fn open_index(index: &std::path::Path, view: bool) -> Result<vlc::Index> {
    use anyhow::Context;
    if view {
        vlc::Index::view(index)
    } else {
        vlc::Index::load(index)
    }
    .with_context(|| format!("opening {}", index.display()))
}

/// Check a ground truth file against what it is scored with: one row per query, and every id
/// -1 (no neighbour, a padding some tools write) or below `id_bound` (the index's next id, or
/// the base's row count). An id past it means the file was computed on another base set, and
/// recall measured against it would be wrong without a word.
pub fn check_truth(truth: &vlc::io::Matrix<i64>, num_queries: usize, id_bound: u64) -> Result<()> {
    if truth.rows != num_queries {
        anyhow::bail!(
            "the ground truth has {} rows but there are {num_queries} queries",
            truth.rows
        );
    }
    let bad = truth
        .data
        .iter()
        .position(|&id| id < -1 || (id >= 0 && id as u64 >= id_bound));
    if let Some(at) = bad {
        anyhow::bail!(
            "the ground truth names id {} (query {}, column {}), but the ids here run from 0 to {}: \
             it was computed on another base set (`vlc groundtruth BASE QUERIES -o gt.npy` makes one)",
            truth.data[at],
            at / truth.cols.max(1),
            at % truth.cols.max(1),
            id_bound.saturating_sub(1)
        );
    }
    Ok(())
}

/// The ids in `path` ([`read_sorted_ids`]) and a filter of `index` allowing them, with a note
/// on stderr counting those the index does not hold (the filter ignores them).
fn filter_from_file(index: &vlc::Index, path: &Path) -> Result<(Vec<u32>, vlc::IdFilter)> {
    let ids = read_sorted_ids(path)?;
    let filter = index.id_filter(&ids);
    if filter.len() < ids.len() {
        eprintln!(
            "note: {} of the {} ids in {} are not in the index",
            ids.len() - filter.len(),
            ids.len(),
            path.display()
        );
    }
    Ok((ids, filter))
}

/// [`read_id_file`]'s ids, ascending, each once.
fn read_sorted_ids(path: &Path) -> Result<Vec<u32>> {
    let mut ids = read_id_file(path)?;
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// The ids in `path`: .npy of integers (int32, int64, uint32 or uint64; 1-d or 2-d), or
/// text with ids separated by spaces, commas or newlines (`vlc remove --ids-file`, `vlc search --allow-ids`).
fn read_id_file(path: &Path) -> Result<Vec<u32>> {
    let to_u32 = |v: i64| -> Result<u32> {
        u32::try_from(v)
            .with_context(|| format!("{}: {v} is not an id (0 to 2^32 - 1)", path.display()))
    };
    if path.extension().and_then(|e| e.to_str()) == Some("npy") {
        let m = vlc::io::read_ids(path).with_context(|| format!("reading {}", path.display()))?;
        return m.data.into_iter().map(to_u32).collect();
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.split(|c: char| c.is_whitespace() || c == ',')
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<i64>()
                .with_context(|| format!("{}: `{t}` is not an id", path.display()))
                .and_then(to_u32)
        })
        .collect()
}
