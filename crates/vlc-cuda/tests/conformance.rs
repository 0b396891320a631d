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

/// Training on the GPU matches the CPU reference's energy.
#[test]
fn training_energy_matches_cpu() {
    let Some(gpu) = cuda() else {
        eprintln!("SKIPPED training_energy_matches_cpu: no device for this backend");
        return;
    };
    let dim = 64;
    let data = vlc::synthetic::clustered(4000, dim, 30, 0.4, 3);
    let params = vlc::TrainParams {
        num_anchors: 32,
        max_iterations: 10,
        min_iterations: 10,
        ..Default::default()
    };
    let energy = |b: &dyn vlc::Backend| {
        let (a, _) = vlc::train::train_anchors(b, &data, dim, &params, &mut |_| {}).unwrap();
        let near = vlc::CpuBackend.nearest_anchors(&data, &a, dim, 1).unwrap();
        near.dists.iter().map(|&d| d as f64).sum::<f64>() / 4000.0
    };
    use vlc::Backend;
    let (e_cpu, e_gpu) = (energy(&vlc::CpuBackend), energy(gpu.as_ref()));
    assert!(
        (e_gpu - e_cpu).abs() <= 0.005 * e_cpu,
        "gpu {e_gpu} vs cpu {e_cpu}"
    );
}
