//! Writing results: `.npy` and JSON, always through a temporary file and a rename.

use anyhow::{Context, Result};
use std::path::Path;
use vlc::io::{npy_bytes, NpyType};

/// Fail, before any work, when an output path names the same file as one of the command's
/// inputs (compared by canonical path, so `./v.npy` and `v.npy` match): writing the result
/// there would replace data the user still needs, e.g. `vlc build v.npy -o v.npy` would swap
/// the vectors for their index. `inputs` pairs what each input is with its path. Then fail
/// where an output could not be written ([`vlc::format::check_writable`]: its directory
/// missing or read-only, or a directory named), rather than after hours of building.
pub fn check_outputs(outputs: &[&Path], inputs: &[(&str, &Path)]) -> Result<()> {
    for output in outputs {
        for (what, input) in inputs {
            if same_file(output, input) {
                anyhow::bail!(
                    "output {} is the {what} {}: writing it would replace that input; choose another output path",
                    output.display(),
                    input.display()
                );
            }
        }
    }
    for output in outputs {
        vlc::format::check_writable(output)
            .with_context(|| format!("cannot write the output {}", output.display()))?;
    }
    Ok(())
}

/// [`vlc::format::IndexLock`] on `index`, held while a command reads an index, changes it and
/// writes it back in place: two `vlc add` or `vlc remove` runs on one index then take turns.
/// Without it both read the same index and the later one's rename dropped the earlier one's
/// change (two concurrent adds of 300 and 400 vectors to 3,000 left 3,400). Says so on
/// stderr, unless `quiet`, when it has to wait.
pub fn lock_index(index: &Path, quiet: bool) -> Result<vlc::format::IndexLock> {
    Ok(vlc::format::IndexLock::acquire(index, &mut |lock| {
        if !quiet {
            eprintln!(
                "waiting for another run to finish with {} (lock {})",
                index.display(),
                lock.display()
            );
        }
    })?)
}

/// Whether paths `a` and `b` name the same file, compared by canonical path (links and `./`
/// seen through); where either does not exist yet, whether the paths are equal.
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    vlc::format::write_atomic(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// Row numbers (rows, cols), row-major, as an int32 `.npy` (the common ground truth format); each
/// must be below 2³¹.
pub fn npy_i32_ids(rows: usize, cols: usize, ids: &[u32]) -> Vec<u8> {
    let body: Vec<u8> = ids.iter().flat_map(|&i| (i as i32).to_le_bytes()).collect();
    npy_bytes(NpyType::I32, rows, cols, &body)
}

pub fn npy_f32(rows: usize, cols: usize, data: &[f32]) -> Vec<u8> {
    let body: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    npy_bytes(NpyType::F32, rows, cols, &body)
}

/// How an index's bytes per vector compare with raw f32 vectors of `dim` values:
/// "9.3x smaller than f32", or for refine tiers that outgrow them, "1.05x the size of f32".
pub fn versus_f32(bytes_per_vector: f64, dim: usize) -> String {
    let ratio = (4 * dim) as f64 / bytes_per_vector;
    if ratio >= 1.0 {
        format!("{ratio:.1}x smaller than f32")
    } else {
        format!("{:.2}x the size of f32", 1.0 / ratio)
    }
}

/// Human-readable byte count.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
