//! The backend conformance suite on WGPU. In CI it runs on Mesa's software Vulkan driver
//! (lavapipe); where no adapter exists every case prints `SKIPPED` and passes.

fn wgpu_backend() -> Option<Box<dyn vlc::Backend>> {
    match vlc_wgpu::WgpuBackend::new() {
        Ok(b) => {
            eprintln!("conformance on {}", b.adapter_name());
            Some(Box::new(b))
        }
        Err(e) => {
            eprintln!("no WGPU adapter: {e}");
            None
        }
    }
}

vlc::conformance_suite!(wgpu_suite, super::wgpu_backend());
