use crate::output::{npy_f32, npy_i32_ids, write_atomic};
use crate::progress::BuildProgress;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;
use vlc::eval::ground_truth;
use vlc::io::{npy_bytes, NpyType, VectorFile};
use vlc::Metric;

/// Compute exact nearest neighbours (ground truth) of queries among base vectors, for `vlc
/// eval --groundtruth` and `vlc bench` on your own data.
///
/// Every query is compared with every base vector (brute force on all --threads threads, the
/// base read a block at a time, so it need not fit in memory), and the order and distances are
/// exact: a GEMM pass picks candidates and each is then measured in double precision. Ids are
/// row numbers of the base file, which are the ids `vlc build` gives its vectors, nearest
/// first, equal distances to the smaller row.
///
/// Output: with `-o gt.npy`, ids (int32, queries x k) go to gt.npy and squared distances
/// (float32) to gt.distances.npy; `-o gt.ivecs` writes the ids in the .ivecs format instead
/// (distances still beside it, in gt.distances.npy).
#[derive(clap::Args)]
pub struct Args {
    /// Base vectors, the ones an index is built from (.npy f32/f64/f16/u8, .fvecs, .bvecs, or
    /// raw f32 with --dim).
    pub base: PathBuf,
    /// Query vectors, of the base's dimension (.npy, .fvecs, .bvecs, or raw f32).
    pub queries: PathBuf,
    /// Output file for the ids: .npy or .ivecs; distances go beside it (NAME.distances.npy).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Neighbours per query (at most the base's row count is returned). `vlc eval` needs at
    /// least 10, and 100 for recall@100.
    #[arg(short, default_value_t = 100)]
    pub k: usize,
    /// Distance: l2, or cosine (base and queries scaled to unit length first, as `vlc build
    /// --metric cosine` does; distances are then 2 − 2·cos). Use the metric the index has.
    #[arg(long, default_value = "l2")]
    pub metric: Metric,
    /// Dimension (required for raw f32 input; checked for the other formats).
    #[arg(long)]
    pub dim: Option<usize>,
    /// Where the distances run: cpu (all --threads threads), cuda (FP32 GEMMs), wgpu, or auto
    /// (a GPU that works, else cpu). The result is the same: the GEMM only picks candidates
    /// (its rounding checked), and the CPU measures them in double precision. From -k 199 the
    /// CPU ranks on any backend (a GPU selects at most 256 candidates per block without a pass
    /// per pick), and says so.
    #[arg(long, value_enum, default_value = "cpu")]
    pub backend: crate::backend::BackendChoice,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// How ground truth ids are written: `.npy` (int32, or int64 past 2³¹ rows) or `.ivecs`.
#[derive(Clone, Copy, PartialEq, Debug)]
enum IdFormat {
    Npy,
    Ivecs,
}

fn id_format(path: &Path) -> Result<IdFormat> {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(|e| e.to_ascii_lowercase())
        .as_deref()
    {
        Some("npy") => Ok(IdFormat::Npy),
        Some("ivecs") => Ok(IdFormat::Ivecs),
        _ => bail!(
            "output {} must end in .npy or .ivecs (ground truth ids)",
            path.display()
        ),
    }
}

/// The bytes of an ids file: `ids` (rows, cols), row-major, row numbers below `num_base_rows`.
fn id_file_bytes(
    format: IdFormat,
    rows: usize,
    cols: usize,
    ids: &[u32],
    num_base_rows: usize,
) -> Result<Vec<u8>> {
    let fits_i32 = num_base_rows <= i32::MAX as usize + 1;
    Ok(match format {
        IdFormat::Npy if fits_i32 => npy_i32_ids(rows, cols, ids),
        IdFormat::Npy => {
            let body: Vec<u8> = ids.iter().flat_map(|&i| (i as i64).to_le_bytes()).collect();
            npy_bytes(NpyType::I64, rows, cols, &body)
        }
        IdFormat::Ivecs if fits_i32 => {
            let mut out = Vec::with_capacity(rows * (cols + 1) * 4);
            for row in ids.chunks_exact(cols.max(1)) {
                out.extend_from_slice(&(cols as i32).to_le_bytes());
                row.iter()
                    .for_each(|&i| out.extend_from_slice(&(i as i32).to_le_bytes()));
            }
            out
        }
        IdFormat::Ivecs => bail!(
            ".ivecs holds int32 ids and the base has {num_base_rows} rows: write .npy (int64)"
        ),
    })
}

/// Exact neighbours of the rows of `queries` (read whole) among those of `base` (read a block
/// at a time), with a progress bar unless `quiet`. Returns the truth and the base's row count.
pub fn compute(
    base: &Path,
    queries: &Path,
    dim: Option<usize>,
    k: usize,
    metric: Metric,
    backend: &dyn vlc::Backend,
    quiet: bool,
) -> Result<(vlc::eval::GroundTruth, vlc::io::Matrix<f32>, usize)> {
    let source =
        VectorFile::open(base, dim).with_context(|| format!("reading {}", base.display()))?;
    let queries_m = vlc::io::read_vectors(queries, Some(source.cols()))
        .with_context(|| format!("reading {}", queries.display()))?;
    let mut progress = BuildProgress::new(!quiet);
    let truth = ground_truth(&source, &queries_m.data, k, metric, backend, &mut |e| {
        progress.handle(e)
    })
    .with_context(|| {
        format!(
            "computing the exact neighbours of {} among {}",
            queries.display(),
            base.display()
        )
    });
    progress.finish();
    Ok((truth?, queries_m, source.rows()))
}

/// `truth`'s ids as the (queries, k) matrix that `vlc eval` and `vlc bench` score against.
pub fn id_matrix(truth: &vlc::eval::GroundTruth) -> vlc::io::Matrix<i64> {
    vlc::io::Matrix {
        rows: truth.ids.len() / truth.k,
        cols: truth.k,
        data: truth.ids.iter().map(|&i| i as i64).collect(),
    }
}

pub fn run(a: Args) -> Result<()> {
    let format = id_format(&a.output)?;
    crate::output::refuse_overwriting_inputs(
        &[&a.output, &a.output.with_extension("distances.npy")],
        &[("base vectors", &a.base), ("queries file", &a.queries)],
    )?;
    if a.k == 0 {
        bail!("-k 0 is out of range: ask for at least 1 neighbour per query");
    }
    let quiet = a.quiet || a.json;
    let backend = crate::backend::open_with(a.backend, quiet, true)?;
    let start = Instant::now();
    let (truth, queries, num_base) = compute(
        &a.base,
        &a.queries,
        a.dim,
        a.k,
        a.metric,
        backend.as_ref(),
        quiet,
    )?;
    let seconds = start.elapsed().as_secs_f64();
    let dist_path = a.output.with_extension("distances.npy");
    let ids = id_file_bytes(format, queries.rows, truth.k, &truth.ids, num_base)?;
    write_atomic(&a.output, &ids)?;
    write_atomic(
        &dist_path,
        &npy_f32(queries.rows, truth.k, &truth.distances),
    )?;
    if a.json {
        let j = serde_json::json!({
            "base": a.base, "queries": a.queries, "vectors": num_base, "dim": queries.cols,
            "num_queries": queries.rows, "metric": a.metric.name(), "k": truth.k,
            "seconds": seconds, "ids": a.output, "distances": dist_path,
            "threads": rayon::current_num_threads(), "rescanned": truth.rescanned,
            "backend": truth.ranked_by, "requested_backend": backend.name(),
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        if truth.ranked_by != backend.name() {
            eprintln!(
                "note: {} candidates per query and block are more than the {} backend selects without a pass per pick ({}): the CPU ranked the blocks",
                vlc::eval::candidates_per_block(truth.k),
                backend.name(),
                backend.fast_picks()
            );
        }
        if truth.k < a.k {
            eprintln!(
                "the base has {num_base} vectors: {} neighbours per query, not {}",
                truth.k, a.k
            );
        }
        println!(
            "exact {} nearest neighbours ({}) of {} queries among {} vectors ({}-d) in {seconds:.2} s ({}, {} thread(s))",
            truth.k,
            a.metric.name(),
            queries.rows,
            num_base,
            queries.cols,
            truth.ranked_by,
            rayon::current_num_threads()
        );
        println!(
            "wrote ids to {} and distances to {}",
            a.output.display(),
            dist_path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ivecs_rows_are_the_count_then_the_ids() {
        let b = id_file_bytes(IdFormat::Ivecs, 2, 3, &[5, 1, 2, 0, 9, 7], 10).unwrap();
        let words: Vec<i32> = b
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(words, vec![3, 5, 1, 2, 3, 0, 9, 7]);
        assert!(id_file_bytes(IdFormat::Ivecs, 1, 1, &[0], 1 << 32).is_err());
        assert!(id_format(Path::new("gt.txt")).is_err());
        assert_eq!(id_format(Path::new("GT.NPY")).unwrap(), IdFormat::Npy);
    }
}
