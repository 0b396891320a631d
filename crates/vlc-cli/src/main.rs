//! `vlc`: build, search, evaluate and inspect VLC indexes.

mod backend;
mod commands;
mod output;
mod plot;
mod progress;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// VLC (Vector-Lattice Compression): turn embedding vectors into a small, searchable index.
///
/// Typical use:
///   vlc build vectors.npy -o memory.vlc --codec rabitq1 --refine sq8
///   vlc eval memory.vlc --queries q.npy --groundtruth gt.npy
///   vlc search memory.vlc q.npy -k 10 -o hits.json
///   vlc info memory.vlc
///   vlc demo                      (everything above on a built-in sample)
#[derive(Parser)]
#[command(name = "vlc", version, about, long_about, verbatim_doc_comment)]
struct Cli {
    /// Worker threads (default: all cores). `--threads 1` measures single-core speed.
    #[arg(long, global = true)]
    threads: Option<usize>,
    #[command(subcommand)]
    command: commands::Command,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(t) = cli.threads {
        if t == 0 {
            eprintln!("error: --threads must be at least 1");
            return ExitCode::from(2);
        }
        if let Err(e) = rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()
        {
            eprintln!("error: cannot start {t} threads: {e}");
            return ExitCode::FAILURE;
        }
    }
    match commands::run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

// Keep `Subcommand` in scope for the derive in `commands`.
#[allow(unused_imports)]
use Subcommand as _;
