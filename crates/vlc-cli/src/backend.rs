//! Choosing the compute backend at run time.

use anyhow::Result;
use vlc::{Backend, CpuBackend};

/// Which backend a command should use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// A GPU when one works (CUDA, then a hardware WGPU adapter), else the CPU.
    Auto,
    Cpu,
    Cuda,
    /// WGPU: Vulkan, Metal or DX12, software adapters included.
    Wgpu,
}

/// Open the chosen backend; `auto` falls back to the CPU and says why on stderr.
pub fn open(choice: BackendChoice, quiet: bool) -> Result<Box<dyn Backend>> {
    match choice {
        BackendChoice::Cpu => Ok(Box::new(CpuBackend)),
        BackendChoice::Cuda => open_cuda().map_err(|e| anyhow::anyhow!("--backend cuda: {e}")),
        BackendChoice::Wgpu => open_wgpu(true).map_err(|e| anyhow::anyhow!("--backend wgpu: {e}")),
        BackendChoice::Auto => match open_cuda()
            .or_else(|e| open_wgpu(false).map_err(|w| anyhow::anyhow!("{e}; {w}")))
        {
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

#[cfg(feature = "wgpu")]
pub fn open_wgpu(allow_software: bool) -> Result<Box<dyn Backend>> {
    let b = if allow_software {
        vlc_wgpu::WgpuBackend::new()?
    } else {
        vlc_wgpu::WgpuBackend::new_hardware()?
    };
    eprintln!("backend: wgpu ({})", b.adapter_name());
    Ok(Box::new(b))
}

#[cfg(not(feature = "wgpu"))]
pub fn open_wgpu(_allow_software: bool) -> Result<Box<dyn Backend>> {
    anyhow::bail!("this vlc was built without the `wgpu` feature")
}
