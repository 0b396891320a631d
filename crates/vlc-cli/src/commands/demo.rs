use super::eval::{print_table, sweep};
use crate::output::human_bytes;
use anyhow::{Context, Result};
use flate2::read::GzDecoder;
use std::io::BufRead;
use std::path::Path;
use std::time::Instant;
use vlc::{BuildParams, CodecKind, CpuBackend, Index, SearchParams};

const BASE: &[u8] = include_bytes!("../../../../data/sample/base.npy");
const TEXTS: &[u8] = include_bytes!("../../../../data/sample/texts.jsonl.gz");
const QUERIES: &[u8] = include_bytes!("../../../../data/sample/queries.npy");
const QUERY_TEXTS: &str = include_str!("../../../../data/sample/queries.jsonl");

/// Run VLC end to end on the built-in sample: 5,000 Debian package descriptions embedded with
/// all-MiniLM-L6-v2 (384-d), queried with 200 package synopses. Prints the index size, recall
/// against exact search, speed, and example queries with the texts of their hits.
#[derive(clap::Args)]
pub struct Args {
    /// Residual codec of the demo index.
    #[arg(long, default_value = "rabitq1")]
    pub codec: CodecKind,
    /// Refine tier: none, sq4 or sq8.
    #[arg(long, default_value = "sq8")]
    pub refine: String,
    /// Also save the demo index here.
    #[arg(long)]
    pub save: Option<std::path::PathBuf>,
    /// Example queries to show.
    #[arg(long, default_value_t = 3)]
    pub examples: usize,
    /// Print results as JSON.
    #[arg(long)]
    pub json: bool,
}

fn jsonl(text: &str) -> Result<Vec<serde_json::Value>> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).context("sample text"))
        .collect()
}

pub fn run(a: Args) -> Result<()> {
    let refine = vlc::codec::parse_refine(&a.refine)?;
    let base = vlc::io::decode_npy_f32(Path::new("<built-in base.npy>"), BASE)?;
    let queries = vlc::io::decode_npy_f32(Path::new("<built-in queries.npy>"), QUERIES)?;
    let mut texts = Vec::new();
    for line in std::io::BufReader::new(GzDecoder::new(TEXTS)).lines() {
        texts.push(serde_json::from_str::<serde_json::Value>(&line?)?);
    }
    let query_texts = jsonl(QUERY_TEXTS)?;
    let dim = base.cols;

    // Exact neighbours by brute force, to measure recall honestly.
    let t = Instant::now();
    let truth: Vec<i64> = vlc::exact_knn(&base.data, &queries.data, dim, 100)?
        .into_iter()
        .map(i64::from)
        .collect();
    let exact_seconds = t.elapsed().as_secs_f64();

    let params = BuildParams::default()
        .with_codec(a.codec)
        .with_refine(refine)
        .with_metric(vlc::Metric::Cosine);
    let (index, report) = Index::build(&base.data, dim, &params, &CpuBackend, &mut |_| {})?;
    if let Some(p) = &a.save {
        index.save(p)?;
    }
    // The search layout is built now, so that no timed search pays for it.
    index.prepare_search();
    let bpv = index.file_size() as f64 / base.rows as f64;
    let nprobes: Vec<usize> = [2, 4, 8, 16, 32]
        .into_iter()
        .filter(|&p| p <= index.num_anchors())
        .collect();
    let points = sweep(
        &index,
        &crate::backend::cpu_search(&index),
        &queries.data,
        &truth,
        100,
        &nprobes,
        &[None],
        0,
        1,
    )?;

    let show = a.examples.min(queries.rows);
    let mut examples = Vec::new();
    for q in 0..show {
        let row = q * queries.rows / show.max(1);
        let hits = index.search(
            queries.row(row),
            &SearchParams {
                k: 5,
                nprobe: 8.min(index.num_anchors()),
                ..SearchParams::default()
            },
        )?;
        let source = query_texts[row]["source"].as_u64().unwrap_or(u64::MAX);
        examples.push(serde_json::json!({
            "query": query_texts[row]["text"],
            "source_package": texts.get(source as usize).map(|t| t["package"].clone()),
            "hits": hits.iter().map(|h| {
                let t = &texts[h.id as usize];
                serde_json::json!({"id": h.id, "distance": h.distance, "package": t["package"], "synopsis": t["synopsis"], "is_source": h.id as u64 == source})
            }).collect::<Vec<_>>(),
        }));
    }
    if a.json {
        let j = serde_json::json!({
            "vectors": base.rows, "dim": dim, "anchors": index.num_anchors(), "codec": index.codec().name(),
            "refine": index.refine_codec().map(|c| c.name()), "index_bytes": index.file_size(), "bytes_per_vector": bpv,
            "raw_f32_bytes": base.rows * dim * 4, "build_seconds": report.total_seconds, "exact_search_seconds": exact_seconds,
            "results": points, "examples": examples,
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
        return Ok(());
    }
    println!("VLC demo: {} Debian package descriptions (all-MiniLM-L6-v2, {dim}-d, cosine), {} synopsis queries", base.rows, queries.rows);
    println!(
        "index: {} anchors, {}{}; {} = {bpv:.1} bytes/vector vs {} bytes as f32 ({:.1}x smaller); built in {:.2} s",
        index.num_anchors(), index.codec(), index.refine_codec().map(|r| format!(" + {r} refine")).unwrap_or_default(),
        human_bytes(index.file_size()), dim * 4, (dim * 4) as f64 / bpv, report.total_seconds
    );
    println!(
        "recall against exact search ({} threads):",
        rayon::current_num_threads()
    );
    print_table(&points);
    for e in &examples {
        println!(
            "\nquery: {}  (from package {})",
            e["query"].as_str().unwrap_or(""),
            e["source_package"].as_str().unwrap_or("?")
        );
        for h in e["hits"].as_array().unwrap() {
            println!(
                "  {} {:<28} {}",
                if h["is_source"].as_bool() == Some(true) {
                    "*"
                } else {
                    " "
                },
                h["package"].as_str().unwrap_or(""),
                h["synopsis"].as_str().unwrap_or("")
            );
        }
    }
    println!("\n(* = the package the query's synopsis came from)");
    Ok(())
}
