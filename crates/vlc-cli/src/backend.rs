//! Choosing the compute backend at run time.

use anyhow::Result;
use vlc::{Backend, CpuBackend, IdFilter, Index, SearchParams, SearchResults};

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
    open_with(choice, quiet, false)
}

/// [`open`], with CUDA's GEMMs in FP32 when `fp32` (else its default, TF32 and FP16 where
/// they rank well enough: `VLC_CUDA_PRECISION`).
pub fn open_with(choice: BackendChoice, quiet: bool, fp32: bool) -> Result<Box<dyn Backend>> {
    let open_cuda = || open_cuda_with(fp32);
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
    open_cuda_with(false)
}

#[cfg(feature = "cuda")]
fn open_cuda_with(fp32: bool) -> Result<Box<dyn Backend>> {
    let b = if fp32 {
        vlc_cuda::CudaBackend::with_precision(0, vlc_cuda::GemmPrecision::Fp32)?
    } else {
        vlc_cuda::CudaBackend::new(0)?
    };
    eprintln!("backend: cuda ({})", b.device_name());
    Ok(Box::new(b))
}

#[cfg(not(feature = "cuda"))]
pub fn open_cuda() -> Result<Box<dyn Backend>> {
    open_cuda_with(false)
}

#[cfg(not(feature = "cuda"))]
fn open_cuda_with(_fp32: bool) -> Result<Box<dyn Backend>> {
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

/// Where a batched search runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SearchBackend {
    /// A GPU that works and scores the index's codecs (every codec today): CUDA, then a
    /// hardware WGPU adapter; else the CPU.
    Auto,
    Cpu,
    /// A copy of the index on the first CUDA device.
    Cuda,
    /// A copy of the index on a WGPU adapter (Vulkan, Metal or DX12; software adapters
    /// included: set `WGPU_ADAPTER_NAME` to pick one).
    Wgpu,
}

/// A batched search: queries (num_queries, dim) and parameters to results.
pub type Search<'a> = dyn Fn(&[f32], &SearchParams) -> vlc::Result<SearchResults> + 'a;

/// What [`with_search`] runs.
type SearchBody<'a, R> = Box<dyn FnOnce(&Search) -> Result<R> + 'a>;

/// The CPU search over `index` (on the current rayon pool).
pub fn cpu_search(
    index: &Index,
) -> impl Fn(&[f32], &SearchParams) -> vlc::Result<SearchResults> + '_ {
    move |q, p| index.search_batch(q, p, &CpuBackend)
}

/// Run `body` with a search over `index` on the chosen backend (the GPU copy of the index is
/// built first and lives as long as `body` runs); with `filter`, a search that returns only
/// the vectors it allows (`CudaIndex::search_batch_filtered` and its WGPU twin on a GPU).
pub fn with_search<R>(
    choice: SearchBackend,
    index: &Index,
    filter: Option<&IdFilter>,
    body: impl FnOnce(&Search) -> Result<R>,
) -> Result<R> {
    let cpu = |body: SearchBody<'_, R>| match filter {
        None => body(&cpu_search(index)),
        Some(filter) => body(&|q: &[f32], p: &SearchParams| {
            index.search_batch_filtered(q, p, &CpuBackend, filter)
        }),
    };
    match choice {
        SearchBackend::Cpu => cpu(Box::new(body)),
        SearchBackend::Cuda => {
            search_cuda(index, filter, Box::new(body)).map_err(|e| e.context("--backend cuda"))
        }
        SearchBackend::Wgpu => {
            search_wgpu(index, filter, Box::new(body)).map_err(|e| e.context("--backend wgpu"))
        }
        SearchBackend::Auto => {
            if let Some(kind) = index.device_unsupported_codec() {
                eprintln!("search backend: cpu (GPU search does not support the {kind} codec yet)");
                return cpu(Box::new(body));
            }
            #[cfg(feature = "cuda")]
            if vlc_cuda::device_available() {
                return search_cuda(index, filter, Box::new(body));
            }
            #[cfg(feature = "wgpu")]
            match vlc_wgpu::WgpuBackend::new_hardware() {
                Ok(b) => return run_wgpu(&b, index, filter, Box::new(body)),
                Err(e) => eprintln!("search backend: cpu (no CUDA device; {e})"),
            }
            #[cfg(not(feature = "wgpu"))]
            eprintln!("search backend: cpu (no CUDA device)");
            cpu(Box::new(body))
        }
    }
}

#[cfg(feature = "cuda")]
fn search_cuda<R>(index: &Index, filter: Option<&IdFilter>, body: SearchBody<'_, R>) -> Result<R> {
    let b = vlc_cuda::CudaBackend::new(0)?;
    eprintln!("search backend: cuda ({})", b.device_name());
    let gpu = vlc_cuda::CudaIndex::new(&b, index)?;
    match filter {
        None => body(&|q: &[f32], p: &SearchParams| gpu.search_batch(q, p)),
        Some(filter) => {
            body(&|q: &[f32], p: &SearchParams| gpu.search_batch_filtered(index, q, p, filter))
        }
    }
}

#[cfg(not(feature = "cuda"))]
fn search_cuda<R>(
    _index: &Index,
    _filter: Option<&IdFilter>,
    _body: SearchBody<'_, R>,
) -> Result<R> {
    anyhow::bail!("this vlc was built without the `cuda` feature")
}

#[cfg(feature = "wgpu")]
fn search_wgpu<R>(index: &Index, filter: Option<&IdFilter>, body: SearchBody<'_, R>) -> Result<R> {
    run_wgpu(&vlc_wgpu::WgpuBackend::new()?, index, filter, body)
}

#[cfg(feature = "wgpu")]
fn run_wgpu<R>(
    b: &vlc_wgpu::WgpuBackend,
    index: &Index,
    filter: Option<&IdFilter>,
    body: SearchBody<'_, R>,
) -> Result<R> {
    eprintln!("search backend: wgpu ({})", b.adapter_name());
    let gpu = vlc_wgpu::WgpuIndex::new(b, index)?;
    match filter {
        None => body(&|q: &[f32], p: &SearchParams| gpu.search_batch(q, p)),
        Some(filter) => {
            body(&|q: &[f32], p: &SearchParams| gpu.search_batch_filtered(index, q, p, filter))
        }
    }
}

#[cfg(not(feature = "wgpu"))]
fn search_wgpu<R>(
    _index: &Index,
    _filter: Option<&IdFilter>,
    _body: SearchBody<'_, R>,
) -> Result<R> {
    anyhow::bail!("this vlc was built without the `wgpu` feature")
}
