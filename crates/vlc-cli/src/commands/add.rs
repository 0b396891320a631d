use crate::output::{human_bytes, versus_f32};
use crate::progress::BuildProgress;
use anyhow::{Context, Result};
use std::path::PathBuf;
use vlc::Index;

/// Add vectors to an index.
///
/// The new vectors are assigned to the index's anchors and encoded with its codecs as trained
/// at build time (nothing is retrained), so adding is fast and leaves the stored vectors as
/// they were. New vector i gets id N + i, N being the index's size before (or, once vectors
/// were removed, one past the largest id it has held: ids are never given twice). The result is
/// written atomically (a temporary file, then renamed): the index, or the --output file, is
/// replaced only once the whole result is written, and left as it was on any error.
///
/// The summary compares the new vectors' energy (mean squared distance to their anchor) with
/// the index's. Well above it, the collection has drifted from what the anchors were trained
/// on: recall on the new vectors falls, and `vlc build` over everything restores it.
#[derive(clap::Args)]
pub struct Args {
    /// The index to add to.
    pub index: PathBuf,
    /// Vectors to add, of the index's dimension: .npy (f32, f64, f16 or u8), .fvecs, .bvecs, or
    /// .f32/.bin/.raw (raw needs no --dim: the index gives it). Read a block at a time.
    pub input: PathBuf,
    /// Write the result here instead of replacing the index.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Compute backend for the assignment (and, on CUDA, the level search of the `pcaq` and
    /// `rabitq2`-`8` encode: the same codes as the CPU's): auto (a GPU when one works), cpu,
    /// cuda, wgpu.
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
    let output = a.output.as_ref().unwrap_or(&a.index);
    crate::output::check_outputs(&[output], &[("vectors to add", &a.input)])?;
    // Held until the grown index is saved: other runs changing this index wait for it.
    let _lock = if crate::output::same_file(output, &a.index) {
        Some(crate::output::lock_index(&a.index, a.quiet || a.json)?)
    } else {
        None
    };
    let index = Index::view(&a.index).with_context(|| format!("opening {}", a.index.display()))?;
    let input = vlc::io::VectorFile::open(&a.input, Some(index.dim()))
        .with_context(|| format!("reading {}", a.input.display()))?;
    let mut progress = BuildProgress::new(!a.quiet && !a.json);
    let backend = crate::backend::open(a.backend, a.quiet || a.json)?;
    let (grown, report) = index
        .add_from(&input, backend.as_ref(), &mut |e| progress.handle(e))
        .with_context(|| format!("adding {} to {}", a.input.display(), a.index.display()))?;
    progress.finish();
    // The result is complete in memory; `save` writes a temporary file and renames it over
    // `output`, so a mapped `index` of the same path stays valid until then.
    grown
        .save(output)
        .with_context(|| format!("saving {}", output.display()))?;
    drop(index);
    let file_size = std::fs::metadata(output)?.len();
    let n = grown.len();
    let bpv = file_size as f64 / n as f64;
    let ratio = report.added_energy / report.index_energy_before.max(f64::MIN_POSITIVE);
    if a.json {
        let j = serde_json::json!({
            "output": output, "added": report.added, "first_id": report.first_id,
            "vectors": n, "dim": grown.dim(), "file_bytes": file_size, "bytes_per_vector": bpv,
            "added_energy": report.added_energy, "index_energy_before": report.index_energy_before,
            "index_energy": grown.energy(), "backend": backend.name(), "seconds": report.seconds,
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        println!("added {} vectors to {}", report.added, output.display());
        println!(
            "  ids            {} to {}",
            report.first_id,
            report.first_id as usize + report.added - 1
        );
        println!("  vectors        {n} x {}", grown.dim());
        println!(
            "  energy         {:.6} for the added vectors, {:.6} for the index before ({ratio:.2}x){}",
            report.added_energy,
            report.index_energy_before,
            if ratio > 1.5 {
                ": they lie farther from the anchors than the vectors these were trained on; a rebuild would serve them better"
            } else {
                ""
            }
        );
        println!(
            "  file           {} = {bpv:.1} bytes/vector ({})",
            human_bytes(file_size),
            versus_f32(bpv, grown.dim())
        );
        println!("  time           {:.2} s", report.seconds);
    }
    Ok(())
}
