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
///   vlc add memory.vlc new_vectors.npy
///   vlc remove memory.vlc --ids 3,17,42
///   vlc groundtruth vectors.npy q.npy -o gt.npy   (exact neighbours, for eval)
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
    exit_quietly_on_closed_pipe();
    quiet_vulkan_device_select();
    remove_partial_files_on_interrupt();
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

/// Rust programs ignore SIGPIPE, so writing to a closed pipe (`vlc info x.vlc | head -3`)
/// makes `println!` panic. Restoring the default action makes `vlc` end silently there, as
/// other command-line tools do.
fn exit_quietly_on_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: called first thing in `main`, before any other thread exists; setting a signal's
    // disposition to SIG_DFL installs no handler code, so nothing runs in signal context.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// An index is written to a hidden temporary file beside it and renamed over it when complete,
/// so an interrupted `vlc build` or `vlc add` never leaves a half-written index in its place; but
/// before session 64, Ctrl-C, `kill` or a closed terminal left the temporary file itself
/// (`.NAME.tmp-PID`, hidden, as large as the index). On SIGINT, SIGTERM and SIGHUP a thread
/// removes the files being written ([`vlc::format::remove_unfinished_writes`]), says so, and
/// ends the process by the same signal, as the default action would (exit status 128 + signal
/// in a shell). A signal the process was started with ignored (`nohup` ignores SIGHUP, a
/// background job of a script SIGINT) stays ignored.
fn remove_partial_files_on_interrupt() {
    #[cfg(unix)]
    {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let handled: Vec<i32> = [SIGINT, SIGTERM, SIGHUP]
            .into_iter()
            .filter(|&signal| !signal_is_ignored(signal))
            .collect();
        let Ok(mut signals) = signal_hook::iterator::Signals::new(&handled) else {
            return; // The default actions stay: only the clean-up is lost.
        };
        std::thread::spawn(move || {
            if let Some(signal) = signals.forever().next() {
                for path in vlc::format::remove_unfinished_writes() {
                    eprintln!("interrupted: removed the unfinished {}", path.display());
                }
                let _ = signal_hook::low_level::emulate_default_handler(signal);
                std::process::exit(128 + signal);
            }
        });
    }
}

/// Whether `signal`'s action is to be ignored (as `nohup` and shells set for some signals).
#[cfg(unix)]
fn signal_is_ignored(signal: i32) -> bool {
    // SAFETY: `sigaction` with a null new action only reads the current one into `current`, a
    // zeroed `sigaction` struct that lives across the call.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut current) == 0
            && current.sa_sigaction == libc::SIG_IGN
    }
}

/// Mesa's drivers install an implicit Vulkan layer (`VK_LAYER_MESA_device_select`) that, when
/// the Vulkan loader starts, tries to reach a Wayland or X display to order the GPUs, and on a
/// headless machine prints `error: XDG_RUNTIME_DIR is invalid or not set in the environment.`
/// twice to stderr: on every `vlc build`, whose `auto` backend looks for a GPU. VLC chooses its
/// adapter itself, so the layer is turned off (its own switch, `NODEVICE_SELECT=1`) unless the
/// user has set that variable.
fn quiet_vulkan_device_select() {
    if std::env::var_os("NODEVICE_SELECT").is_none() {
        // Called first thing in `main`, before any other thread exists, so no thread can be
        // reading the environment while it changes.
        std::env::set_var("NODEVICE_SELECT", "1");
    }
}

// Keep `Subcommand` in scope for the derive in `commands`.
#[allow(unused_imports)]
use Subcommand as _;
