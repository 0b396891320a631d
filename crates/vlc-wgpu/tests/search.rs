//! WGPU search against the CPU search on the same index (the shared checks in
//! `vlc::conformance`). In CI it runs on Mesa's software Vulkan driver (lavapipe); without an
//! adapter every case prints `SKIPPED` and passes.

use vlc::conformance::{DeviceSearch, OpenSearch};

fn backend() -> Option<vlc_wgpu::WgpuBackend> {
    match vlc_wgpu::WgpuBackend::new() {
        Ok(b) => {
            eprintln!("search on {}", b.adapter_name());
            Some(b)
        }
        Err(e) => {
            eprintln!("SKIPPED: no WGPU adapter: {e}");
            None
        }
    }
}

/// Opens a `WgpuIndex` on `gpu` for each index the checks build.
fn opener(gpu: &vlc_wgpu::WgpuBackend) -> Box<OpenSearch<'_>> {
    Box::new(move |index| -> vlc::Result<DeviceSearch<'_>> {
        let device = vlc_wgpu::WgpuIndex::new(gpu, index)?;
        Ok(Box::new(move |q, p| device.search_batch(q, p)))
    })
}

#[test]
fn wgpu_search_matches_cpu_search() {
    let Some(gpu) = backend() else { return };
    vlc::conformance::check_search_matches_cpu(&opener(&gpu));
}

#[test]
fn wgpu_search_rejects_bad_parameters() {
    let Some(gpu) = backend() else { return };
    vlc::conformance::check_search_rejects_bad_parameters(&opener(&gpu));
}
