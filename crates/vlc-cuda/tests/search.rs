//! GPU search against the CPU search on the same index (the shared checks in
//! `vlc::conformance`). Without a usable GPU every case prints `SKIPPED` and passes.

use vlc::conformance::{DeviceSearch, OpenSearch};

fn backend() -> Option<vlc_cuda::CudaBackend> {
    if !vlc_cuda::device_available() {
        eprintln!("SKIPPED: no CUDA driver or device on this machine");
        return None;
    }
    Some(vlc_cuda::CudaBackend::new(0).expect("a CUDA device is present but the backend failed"))
}

/// Opens a `CudaIndex` on `gpu` for each index the checks build.
fn opener(gpu: &vlc_cuda::CudaBackend) -> Box<OpenSearch<'_>> {
    Box::new(move |index| -> vlc::Result<DeviceSearch<'_>> {
        let device = vlc_cuda::CudaIndex::new(gpu, index)?;
        Ok(Box::new(move |q, p| device.search_batch(q, p)))
    })
}

#[test]
fn gpu_search_matches_cpu_search() {
    let Some(gpu) = backend() else { return };
    vlc::conformance::check_search_matches_cpu(&opener(&gpu));
}

#[test]
fn gpu_search_extends_the_automatic_pool_like_the_cpu() {
    let Some(gpu) = backend() else { return };
    vlc::conformance::check_automatic_pool(&opener(&gpu));
}

#[test]
fn gpu_search_rejects_bad_parameters() {
    let Some(gpu) = backend() else { return };
    vlc::conformance::check_search_rejects_bad_parameters(&opener(&gpu));
}

#[test]
fn gpu_search_clamps_k_and_nprobe_like_the_cpu() {
    let Some(gpu) = backend() else { return };
    vlc::conformance::check_search_clamps_k_and_nprobe(&opener(&gpu));
}

#[test]
fn gpu_filtered_search_matches_cpu_filtered_search() {
    let Some(gpu) = backend() else { return };
    let gpu = &gpu;
    vlc::conformance::check_filtered_search_matches_cpu(&move |index| {
        let device = vlc_cuda::CudaIndex::new(gpu, index)?;
        Ok(Box::new(move |index, q, p, filter| {
            device.search_batch_filtered(index, q, p, filter)
        }))
    });
}
