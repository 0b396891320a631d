use crate::output::{human_bytes, versus_f32};
use anyhow::{Context, Result};
use std::path::PathBuf;
use vlc::{Index, Metric};

/// Show what is inside an index file: header, sections, list balance and how it was built.
#[derive(clap::Args)]
pub struct Args {
    /// Index file.
    pub index: PathBuf,
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let info =
        vlc::format::inspect(&a.index).with_context(|| format!("reading {}", a.index.display()))?;
    let index = Index::view(&a.index).with_context(|| format!("opening {}", a.index.display()))?;
    let mut sizes = index.list_sizes();
    sizes.sort_unstable();
    let (min, median, max) = (sizes[0], sizes[sizes.len() / 2], sizes[sizes.len() - 1]);
    let empty = sizes.iter().filter(|&&s| s == 0).count();
    let bpv = info.file_size as f64 / info.num_vectors as f64;
    let report = index.build_report();
    if a.json {
        let j = serde_json::json!({
            "path": a.index, "format_version": info.version, "dim": info.dim, "vectors": info.num_vectors,
            "anchors": info.num_anchors, "anchor_precision": info.anchor_precision.name(), "metric": info.metric.name(), "normalized_on_input": info.metric == Metric::Cosine,
            "centred": index.centre().is_some(), "centre_norm": index.centre().map(norm),
            "codec": info.codec.name(), "code_size": index.code_size(), "pcaq_widths": index.pcaq_widths(),
            "refine": info.refine.map(|c| c.name()), "refine_code_size": index.refine_code_size(),
            "file_bytes": info.file_size, "bytes_per_vector": bpv, "compression_vs_f32": (4 * info.dim) as f64 / bpv,
            "list_sizes": {"min": min, "median": median, "max": max, "empty": empty},
            "sections": info.sections.iter().map(|(t, o, l)| serde_json::json!({"tag": t, "offset": o, "bytes": l})).collect::<Vec<_>>(),
            "build": report, "next_id": index.next_id(), "ids": index.id_storage(),
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
        return Ok(());
    }
    println!("{} (VLC index format v{})", a.index.display(), info.version);
    println!(
        "  vectors     {} x {} (the next added gets id {})",
        info.num_vectors,
        info.dim,
        index.next_id()
    );
    println!(
        "  metric      {}{}",
        info.metric.name(),
        if info.metric == Metric::Cosine {
            " (vectors and queries normalised to unit length on the way in)"
        } else {
            ""
        }
    );
    if let Some(centre) = index.centre() {
        println!(
            "  centre      subtracted on the way in (norm {:.4}: the data's mean, far from the origin next to its spread)",
            norm(centre)
        );
    }
    println!(
        "  anchors     {} stored as {} (list sizes: min {min}, median {median}, max {max}; {empty} empty)",
        info.num_anchors, info.anchor_precision
    );
    println!(
        "  codec       {} ({} bytes/vector)",
        info.codec,
        index.code_size()
    );
    if let Some(widths) = index.pcaq_widths() {
        println!("  bits        {}", describe_widths(widths));
    }
    match index.factor_formats() {
        Some((first, Some(full))) => {
            println!("  factors     {first} (first stage), {full} (full code), per vector")
        }
        Some((first, None)) => println!("  factors     {first}, per vector"),
        None => {}
    }
    println!("  ids         {}", index.id_storage());
    if let Some((bytes, segments)) = index.fast_scan_layout() {
        println!(
            "  fast scan   first {bytes} bytes of each code, {}",
            if segments == 1 {
                "one quantisation step".to_string()
            } else {
                format!("{segments} segments with a quantisation step each")
            }
        );
    }
    if let (Some(r), Some(size)) = (info.refine, index.refine_code_size()) {
        println!("  refine      {r} ({size} bytes/vector)");
    }
    println!(
        "  file        {} = {bpv:.1} bytes/vector, {}",
        human_bytes(info.file_size),
        versus_f32(bpv, info.dim)
    );
    if report.train.iterations > 0 {
        println!("  training    {} iterations ({}), final energy {:.6}, {} merges, {} splits, {} re-seeds",
            report.train.iterations, if report.train.converged { "converged" } else { "iteration cap" },
            report.final_energy, report.train.merges, report.train.splits, report.train.reseeds);
        println!("  build time  {:.2} s", report.total_seconds);
    }
    println!("  sections");
    for (tag, offset, len) in &info.sections {
        println!("    {tag}  offset {offset:>10}  {}", human_bytes(*len));
    }
    Ok(())
}

/// `pcaq`'s bit allocation in words, widest first: "16 axes x 3 bits, 96 x 2, 272 uncoded".
fn describe_widths(widths: &[u8]) -> String {
    let mut runs: Vec<(u8, usize)> = Vec::new();
    for &w in widths {
        match runs.last_mut() {
            Some((bits, count)) if *bits == w => *count += 1,
            _ => runs.push((w, 1)),
        }
    }
    runs.iter()
        .enumerate()
        .map(|(i, &(bits, count))| match (i, bits) {
            (_, 0) => format!("{count} uncoded"),
            (0, 1) => format!("{count} axes x 1 bit"),
            (0, b) => format!("{count} axes x {b} bits"),
            (_, b) => format!("{count} x {b}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Euclidean norm of a vector.
fn norm(v: &[f32]) -> f64 {
    v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt()
}

#[cfg(test)]
mod tests {
    #[test]
    fn widths_are_described_by_runs() {
        assert_eq!(
            super::describe_widths(&[3, 3, 2, 2, 2, 0]),
            "2 axes x 3 bits, 3 x 2, 1 uncoded"
        );
        assert_eq!(super::describe_widths(&[1; 4]), "4 axes x 1 bit");
    }
}
