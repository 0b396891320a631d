//! The backend conformance suite on CUDA (FP32 GEMMs, so results match the CPU reference within
//! rounding). Without a usable GPU every case prints `SKIPPED` and passes.

/// The backend under test; `None` (tests skip) only when this machine has no CUDA device. A
/// device that is present but fails to initialise fails the tests.
fn cuda() -> Option<Box<dyn vlc::Backend>> {
    if !vlc_cuda::device_available() {
        eprintln!("no CUDA driver or device on this machine");
        return None;
    }
    let b = vlc_cuda::CudaBackend::with_precision(0, vlc_cuda::GemmPrecision::Fp32)
        .expect("a CUDA device is present but the backend failed");
    eprintln!("conformance on {}", b.device_name());
    Some(Box::new(b))
}

vlc::conformance_suite!(cuda_suite, super::cuda());
