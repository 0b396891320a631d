use crate::output::{npy_f32, npy_i32_ids, write_atomic};
use crate::progress::BuildProgress;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;
use vlc::eval::ground_truth;
use vlc::io::{npy_bytes, NpyType, VectorFile};
use vlc::{Metric, VectorSource};

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
    /// Only the base rows with these ids are neighbours: the exact neighbours among the vectors
    /// a filter allows, to score `vlc search --allow-ids` or `vlc eval --allow-ids` with the
    /// same file. The ids written are still the base's rows. The file: .npy of integers
    /// (int32, int64, uint32 or uint64; 1-d or 2-d), or text with ids separated by spaces,
    /// commas or newlines; every id must be a row of the base.
    #[arg(long, value_name = "PATH")]
    pub allow_ids: Option<PathBuf>,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// The rows `rows` (ascending) of `inner` as a source of their own, row i being `inner`'s row
/// `rows[i]`: the base of the exact neighbours among the vectors a filter allows.
struct RowsOf<'a> {
    inner: &'a dyn VectorSource,
    rows: &'a [u32],
}

impl VectorSource for RowsOf<'_> {
    fn num_rows(&self) -> usize {
        self.rows.len()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn read_rows(&self, start: usize, out: &mut [f32]) -> vlc::Result<()> {
        let dim = self.dim();
        let wanted = &self.rows[start..start + out.len() / dim];
        // Runs of consecutive rows are read in one call.
        let mut first = 0;
        while first < wanted.len() {
            let mut end = first + 1;
            while end < wanted.len() && wanted[end] == wanted[end - 1] + 1 {
                end += 1;
            }
            let out = &mut out[first * dim..end * dim];
            self.inner.read_rows(wanted[first] as usize, out)?;
            first = end;
        }
        Ok(())
    }
    fn describe(&self) -> String {
        format!("{} (the rows allowed)", self.inner.describe())
    }
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
/// at a time), with a progress bar unless `quiet`; only among the rows `allowed` (ascending,
/// each a row of `base`) where given, the truth's ids still rows of `base`. Returns the truth
/// and the base's row count.
#[allow(clippy::too_many_arguments)] // two call sites; a struct would only rename them
pub fn compute(
    base: &Path,
    queries: &Path,
    dim: Option<usize>,
    k: usize,
    metric: Metric,
    backend: &dyn vlc::Backend,
    allowed: Option<&[u32]>,
    quiet: bool,
) -> Result<(vlc::eval::GroundTruth, vlc::io::Matrix<f32>, usize)> {
    let file =
        VectorFile::open(base, dim).with_context(|| format!("reading {}", base.display()))?;
    let queries_m = vlc::io::read_vectors(queries, Some(file.cols()))
        .with_context(|| format!("reading {}", queries.display()))?;
    let subset = match allowed {
        Some(rows) => {
            if let Some(&last) = rows.last().filter(|&&r| r as usize >= file.rows()) {
                bail!(
                    "id {last} is not a row of {} ({} rows): allowed ids are rows of the base",
                    base.display(),
                    file.rows()
                );
            }
            if rows.is_empty() {
                bail!("no ids are allowed: the exact neighbours among none are none");
            }
            Some(RowsOf { inner: &file, rows })
        }
        None => None,
    };
    let source: &dyn VectorSource = match &subset {
        Some(s) => s,
        None => &file,
    };
    let mut progress = BuildProgress::new(!quiet);
    let truth = ground_truth(source, &queries_m.data, k, metric, backend, &mut |e| {
        progress.handle(e)
    })
    .map(|mut truth| {
        if let Some(rows) = allowed {
            truth.ids.iter_mut().for_each(|i| *i = rows[*i as usize]);
        }
        truth
    })
    .with_context(|| {
        format!(
            "computing the exact neighbours of {} among {}",
            queries.display(),
            base.display()
        )
    });
    progress.finish();
    Ok((truth?, queries_m, file.rows()))
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
    crate::output::check_outputs(
        &[&a.output, &a.output.with_extension("distances.npy")],
        &[
            ("base vectors", a.base.as_path()),
            ("queries file", &a.queries),
        ]
        .into_iter()
        .chain(a.allow_ids.as_deref().map(|p| ("ids file", p)))
        .collect::<Vec<_>>(),
    )?;
    if a.k == 0 {
        bail!("-k 0 is out of range: ask for at least 1 neighbour per query");
    }
    let quiet = a.quiet || a.json;
    let allowed = a
        .allow_ids
        .as_deref()
        .map(super::read_sorted_ids)
        .transpose()?;
    let backend = crate::backend::open_with(a.backend, quiet, true)?;
    let start = Instant::now();
    let (truth, queries, num_base) = compute(
        &a.base,
        &a.queries,
        a.dim,
        a.k,
        a.metric,
        backend.as_ref(),
        allowed.as_deref(),
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
            "allowed": allowed.as_ref().map(Vec::len),
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
        let among = match &allowed {
            Some(rows) => format!("the {} allowed of {num_base}", rows.len()),
            None => num_base.to_string(),
        };
        if truth.k < a.k {
            eprintln!(
                "{among} vectors: {} neighbours per query, not {}",
                truth.k, a.k
            );
        }
        println!(
            "exact {} nearest neighbours ({}) of {} queries among {among} vectors ({}-d) in {seconds:.2} s ({}, {} thread(s))",
            truth.k,
            a.metric.name(),
            queries.rows,
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
