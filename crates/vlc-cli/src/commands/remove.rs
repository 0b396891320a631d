use crate::output::human_bytes;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use vlc::Index;

/// Remove vectors from an index by id.
///
/// The other vectors keep their codes and ids (ids are not renumbered), and `vlc add` goes on
/// after the largest id the index has held, so a removed id is never given again. Anchors and
/// codecs stay as trained. Every id must be in the index: an id that is not fails the command
/// and changes nothing. The result is written atomically (a temporary file, then renamed).
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("which").required(true).multiple(true).args(["ids", "ids_file"])))]
pub struct Args {
    /// The index to remove from.
    pub index: PathBuf,
    /// Ids to remove, separated by commas (e.g. --ids 3,17,42).
    #[arg(long, value_delimiter = ',')]
    pub ids: Vec<u32>,
    /// A file of ids to remove: .npy of integers (int32, int64, uint32 or uint64; 1-d or 2-d), or text with ids separated by
    /// spaces, commas or newlines.
    #[arg(long, value_name = "PATH")]
    pub ids_file: Option<PathBuf>,
    /// Write the result here instead of replacing the index.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    if let Some(ids_file) = &a.ids_file {
        let output = a.output.as_ref().unwrap_or(&a.index);
        crate::output::check_outputs(&[output], &[("ids file", ids_file)])?;
    }
    let mut ids = a.ids.clone();
    if let Some(path) = &a.ids_file {
        ids.extend(super::read_id_file(path)?);
    }
    if ids.is_empty() {
        bail!("no ids to remove");
    }
    let output = a.output.as_ref().unwrap_or(&a.index);
    // Held until the smaller index is saved: other runs changing this index wait for it.
    let _lock = if crate::output::same_file(output, &a.index) {
        Some(crate::output::lock_index(&a.index, a.json)?)
    } else {
        None
    };
    let index = Index::view(&a.index).with_context(|| format!("opening {}", a.index.display()))?;
    let (smaller, report) = index
        .remove_ids(&ids)
        .with_context(|| format!("removing from {}", a.index.display()))?;
    smaller
        .save(output)
        .with_context(|| format!("saving {}", output.display()))?;
    drop(index);
    let file_size = std::fs::metadata(output)?.len();
    if a.json {
        let j = serde_json::json!({
            "output": output, "removed": report.removed, "vectors": smaller.len(),
            "next_id": smaller.next_id(), "file_bytes": file_size, "seconds": report.seconds,
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        println!(
            "removed {} vectors from {}",
            report.removed,
            output.display()
        );
        println!(
            "  vectors        {} left; the next added gets id {}",
            smaller.len(),
            smaller.next_id()
        );
        println!("  file           {}", human_bytes(file_size));
    }
    Ok(())
}
