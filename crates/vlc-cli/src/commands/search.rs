use crate::backend::{with_search, Search, SearchBackend};
use anyhow::{bail, Context, Result};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use vlc::io::{npy_bytes, NpyType};
use vlc::search::{QUERY_BLOCK, SMALL_BATCH};
use vlc::{SearchParams, SearchResults, VectorSource};

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
    /// Queries per search call. The queries file is read, and the results written, a batch at
    /// a time, so memory does not grow with the number of queries. 0 = automatic: multiples
    /// of 4,096 queries that fill about 64 MiB (as f32 queries or as results), which give the
    /// results of one call with every query, byte for byte (on the CPU by construction; on CUDA
    /// and WGPU as measured in session 64). On the CPU other sizes give them too, except
    /// batches of fewer than 16 queries, which are searched one at a time: below 256 anchors
    /// (and on AVX2 CPUs without VNNI where a query probes more than 1/16 of the anchors)
    /// they rank anchors on another kernel (f32 or 8-bit integers), which can move a distance
    /// in its last digits and, rarely, a neighbour near the k-th. A last batch of fewer than
    /// 16 queries joins the one before.
    #[arg(long, default_value_t = 0)]
    pub batch_size: usize,
    /// Return only the vectors with the ids in this file (a filter).
    ///
    /// E.g. one user's or one source's documents. The file: .npy of integers (int32, int64,
    /// uint32 or uint64; 1-d or 2-d), or text with ids separated by spaces, commas or
    /// newlines. Each query probes the nearest lists that hold an allowed vector until they
    /// hold --nprobe lists' worth of them (a list counts the share of its vectors allowed: 0.1
    /// where a tenth is), so it scores about as many allowed candidates as an unfiltered
    /// search scores candidates and keeps its recall, but a narrow filter probes more lists
    /// (at most every list holding an allowed vector; lower --nprobe to trade recall for
    /// speed); in them, it scores little more than the allowed vectors. Ids the index does
    /// not hold are ignored (a note says how many). On a GPU backend the GPU scans only the
    /// allowed vectors of the lists probed (CUDA ranks the lists itself, WGPU takes them from
    /// the CPU). `vlc eval --allow-ids` measures the recall.
    #[arg(long, value_name = "PATH")]
    pub allow_ids: Option<PathBuf>,
}

/// Where the results go, as `-o` names it.
#[derive(Clone, Copy, PartialEq)]
enum Output {
    /// JSON on stdout.
    Stdout,
    Json,
    /// Ids to the path given, distances beside it.
    Npy,
}

/// Bytes of queries, or of their results, searched at a time by default (`--batch-size 0`):
/// the queries file is read a block at a time and each block's results are written before the
/// next is read, so memory does not grow with the number of queries.
const BLOCK_BYTES: usize = 64 << 20;

pub fn run(a: Args) -> Result<()> {
    // Checked before any work: a long search must not end in "wrong extension".
    let output = match &a.output {
        None => Output::Stdout,
        Some(p) => match p.extension().and_then(|e| e.to_str()) {
            Some("json") => Output::Json,
            Some("npy") => Output::Npy,
            _ => bail!(
                "output {} must end in .npy (ids, with distances in NAME.distances.npy) or .json",
                p.display()
            ),
        },
    };
    let distances_path = a.output.as_ref().map(|p| p.with_extension("distances.npy"));
    if let Some(p) = &a.output {
        let mut outputs = vec![p.as_path()];
        if output == Output::Npy {
            outputs.extend(distances_path.as_deref());
        }
        let mut inputs = vec![("index", a.index.as_path()), ("queries file", &a.queries)];
        inputs.extend(a.allow_ids.as_deref().map(|p| ("ids file", p)));
        crate::output::check_outputs(&outputs, &inputs)?;
    }
    let index = super::open_index(&a.index, a.view)?;
    let filter = a
        .allow_ids
        .as_deref()
        .map(|path| super::filter_from_file(&index, path))
        .transpose()?
        .map(|(_, filter)| filter);
    let reading = || format!("reading {}", a.queries.display());
    let queries = vlc::io::VectorFile::open(&a.queries, Some(index.dim())).with_context(reading)?;
    let (rows, dim, k) = (queries.rows(), queries.cols(), a.k);
    let params = SearchParams {
        k,
        nprobe: a.nprobe,
        rerank: a.rerank,
        probe_margin: a.probe_margin,
    };
    let block = match a.batch_size {
        // Whole blocks of the library's: the same results as one call with every query.
        0 => {
            let row_bytes = (4 * dim).max(12 * k);
            (BLOCK_BYTES / row_bytes / QUERY_BLOCK).max(1) * QUERY_BLOCK
        }
        n => n,
    }
    .clamp(1, rows);
    let bar = crate::progress::count_bar("searching", rows as u64);
    if output == Output::Stdout && std::io::stdout().is_terminal() {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden()); // not amid the JSON
    }
    // Every block's results, in order, to `sink` (first row, results).
    // A last call of fewer than SMALL_BATCH queries would search them one at a time, which
    // can rank anchors on another kernel than one call does: they join the call before.
    let call = |first: usize| match rows - first {
        left if left < block + SMALL_BATCH => left,
        _ => block,
    };
    let search_blocks = |search: &Search, sink: &mut BlockSink| -> Result<()> {
        let mut buffer = vec![0f32; (block + SMALL_BATCH).min(rows) * dim];
        let mut first = 0;
        while first < rows {
            let count = call(first);
            let values = &mut buffer[..count * dim];
            queries.read_rows(first, values).with_context(reading)?;
            let results = search(values, &params)
                .map_err(|e| e.with_row_offset(first))
                .with_context(|| format!("searching with {}", a.queries.display()))?;
            sink(first, &results)?;
            bar.inc(count as u64);
            first += count;
        }
        Ok(())
    };
    let run_search = |search: &Search| match output {
        Output::Stdout => {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            write_json(&mut out, rows, &mut |sink| search_blocks(search, sink))?;
            out.write_all(b"\n")?;
            out.flush()?;
            Ok(())
        }
        Output::Json => {
            let path = a.output.as_deref().unwrap();
            write_streamed(path, &mut |out| {
                write_json(out, rows, &mut |sink| search_blocks(search, sink))
            })
        }
        Output::Npy => {
            let (ids_path, distances_path) = (
                a.output.as_deref().unwrap(),
                distances_path.as_deref().unwrap(),
            );
            // The distances are written inside the ids' write, so both are complete before
            // either replaces a file.
            write_streamed(ids_path, &mut |ids| {
                ids.write_all(&npy_bytes(NpyType::I64, rows, k, &[]))?;
                write_streamed(distances_path, &mut |distances| {
                    distances.write_all(&npy_bytes(NpyType::F32, rows, k, &[]))?;
                    search_blocks(search, &mut |_, results| {
                        for id in &results.ids {
                            ids.write_all(&id.to_le_bytes())?;
                        }
                        for distance in &results.distances {
                            distances.write_all(&distance.to_le_bytes())?;
                        }
                        Ok(())
                    })
                })
            })?;
            eprintln!(
                "wrote ids to {} and distances to {}",
                ids_path.display(),
                distances_path.display()
            );
            Ok(())
        }
    };
    with_search(a.backend, &index, filter.as_ref(), run_search)?;
    bar.finish_and_clear();
    Ok(())
}

/// What receives each block's results: (the block's first query, its results).
type BlockSink<'a> = dyn FnMut(usize, &SearchResults) -> Result<()> + 'a;

/// The JSON of `rows` queries' hits (an array of `{"query", "ids", "distances"}`, each
/// query's hits only), as `serde_json::to_string_pretty` writes it, a block of queries at a
/// time from `blocks`. Nothing is written before the first block's results: a search that
/// fails there (bad parameters, a NaN in the first block) leaves standard output empty, not
/// an opened array.
fn write_json(
    out: &mut dyn Write,
    rows: usize,
    blocks: &mut dyn FnMut(&mut BlockSink) -> Result<()>,
) -> Result<()> {
    if rows == 0 {
        out.write_all(b"[]")?;
        return Ok(());
    }
    blocks(&mut |first, results| {
        if first == 0 {
            out.write_all(b"[")?;
        }
        let k = results.k;
        for (i, (ids, distances)) in results
            .ids
            .chunks_exact(k)
            .zip(results.distances.chunks_exact(k))
            .enumerate()
        {
            // Hits only: a row padded past the vectors found (id −1) ends early.
            let hits = ids.iter().take_while(|&&i| i >= 0).count();
            let record = serde_json::json!({
                "query": first + i,
                "ids": &ids[..hits],
                "distances": &distances[..hits],
            });
            let text = serde_json::to_string_pretty(&record)?;
            out.write_all(if first + i == 0 { b"\n" } else { b",\n" })?;
            for (n, line) in text.lines().enumerate() {
                if n > 0 {
                    out.write_all(b"\n")?;
                }
                write!(out, "  {line}")?;
            }
        }
        Ok(())
    })?;
    out.write_all(b"\n]")?;
    Ok(())
}

/// [`vlc::format::write_atomic_with`] of what `write` writes, where `write` may fail with any
/// error (a search's, a nested write's): that error is returned as it was, and `path` is left
/// as it was.
fn write_streamed(path: &Path, write: &mut dyn FnMut(&mut dyn Write) -> Result<()>) -> Result<()> {
    let mut failure = None;
    let written = vlc::format::write_atomic_with(path, &mut |out| {
        write(out).map_err(|e| {
            failure = Some(e);
            std::io::Error::other("stopped")
        })
    });
    match (failure, written) {
        (Some(e), _) => Err(e),
        (None, w) => w.with_context(|| format!("writing {}", path.display())),
    }
}
