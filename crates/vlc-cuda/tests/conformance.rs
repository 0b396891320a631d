//! The backend conformance suite on CUDA, twice: with FP32 GEMMs (results match the CPU
//! reference within rounding), and with the precision users get (`CudaBackend::new`: the
//! mixed TF32 / FP16 default, or `VLC_CUDA_PRECISION`), whose near-ties the suite allows
//! within `ranking_rounding`. `VLC_CUDA_SMALL_WORK=0` sends the suite's small shapes through the
//! paths of large ones (distance bounds, FP16 tiles), except those of seeding size, which
//! `nearest_direct` ranks either way. Without a usable GPU every case prints
//! `SKIPPED` and passes.

/// `None` (tests skip) only when this machine has no CUDA device. A device that is present but
/// fails to initialise fails the tests.
fn cuda(precision: Option<vlc_cuda::GemmPrecision>) -> Option<Box<dyn vlc::Backend>> {
    if !vlc_cuda::device_available() {
        eprintln!("no CUDA driver or device on this machine");
        return None;
    }
    let b = match precision {
        Some(p) => vlc_cuda::CudaBackend::with_precision(0, p),
        None => vlc_cuda::CudaBackend::new(0),
    }
    .expect("a CUDA device is present but the backend failed");
    eprintln!("conformance on {} ({:?})", b.device_name(), b.precision());
    Some(Box::new(b))
}

vlc::conformance_suite!(cuda_suite, super::cuda(Some(vlc_cuda::GemmPrecision::Fp32)));
vlc::conformance_suite!(cuda_default_suite, super::cuda(None));
