//! Choosing the compute backend at run time.

use anyhow::Result;
use vlc::{Backend, CpuBackend};

/// Which backend a command should use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// A GPU when one works (CUDA), else the CPU.
    Auto,
    Cpu,
    Cuda,
}

/// Open the chosen backend; `auto` falls back to the CPU and says why on stderr.
pub fn open(choice: BackendChoice, quiet: bool) -> Result<Box<dyn Backend>> {
    match choice {
        BackendChoice::Cpu => Ok(Box::new(CpuBackend)),
        BackendChoice::Cuda => open_cuda().map_err(|e| anyhow::anyhow!("--backend cuda: {e}")),
        BackendChoice::Auto => match open_cuda() {
            Ok(b) => Ok(b),
            Err(e) => {
                if !quiet {
                    eprintln!("backend: cpu ({e})");
                }
                Ok(Box::new(CpuBackend))
            }
        },
    }
}

#[cfg(feature = "cuda")]
pub fn open_cuda() -> Result<Box<dyn Backend>> {
    let b = vlc_cuda::CudaBackend::new(0)?;
    eprintln!("backend: cuda ({})", b.device_name());
    Ok(Box::new(b))
}

#[cfg(not(feature = "cuda"))]
pub fn open_cuda() -> Result<Box<dyn Backend>> {
    anyhow::bail!("this vlc was built without the `cuda` feature")
}
