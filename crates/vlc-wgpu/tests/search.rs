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
fn wgpu_search_extends_the_automatic_pool_like_the_cpu() {
    let Some(gpu) = backend() else { return };
    vlc::conformance::check_automatic_pool(&opener(&gpu));
}

#[test]
fn wgpu_search_rejects_bad_parameters() {
    let Some(gpu) = backend() else { return };
    vlc::conformance::check_search_rejects_bad_parameters(&opener(&gpu));
}

#[test]
fn wgpu_search_clamps_k_and_nprobe_like_the_cpu() {
    let Some(gpu) = backend() else { return };
    vlc::conformance::check_search_clamps_k_and_nprobe(&opener(&gpu));
}

/// The candidate pool in workgroup memory (the usual pool sizes) and in the storage buffer (a
/// pool over 1,024 slots, or too large for the adapter's workgroup memory) both give the CPU's
/// results.
#[test]
fn wgpu_search_pool_in_workgroup_or_storage_memory() {
    use vlc::{BuildParams, CodecKind, Index, SearchParams};
    let Some(gpu) = backend() else { return };
    let dim = 48;
    let data = vlc::synthetic::clustered(6_000, dim, 40, 0.4, 11);
    let queries = vlc::synthetic::clustered(200, dim, 40, 0.5, 12);
    let mut params = BuildParams::default()
        .with_codec(CodecKind::PcaRaBitQ)
        .with_num_anchors(100);
    params.codec_params.bits = 3.0;
    let (index, _) = Index::build(&data, dim, &params, &vlc::CpuBackend, &mut |_| {}).unwrap();
    let device = vlc_wgpu::WgpuIndex::new(&gpu, &index).unwrap();
    let usual = SearchParams {
        k: 10,
        nprobe: 16,
        ..SearchParams::default()
    };
    assert!(device.pool_in_workgroup_memory(&usual));
    // Deepen the pool until it goes to the storage buffer.
    let mut large = usual;
    large.rerank = 64;
    while device.pool_in_workgroup_memory(&large) {
        large.rerank *= 2;
        assert!(large.rerank < 1 << 22, "no pool goes to the storage buffer");
    }
    let search: vlc::conformance::DeviceSearch<'_> = Box::new(|q, p| device.search_batch(q, p));
    for (label, p) in [("workgroup pool", &usual), ("storage pool", &large)] {
        let overlap =
            vlc::conformance::compare_search_with_cpu(label, &index, &queries, p, &search);
        eprintln!("{label} (rerank {}): overlap {overlap:.4}", p.rerank);
    }
}

/// A scalar primary code with global ranges (`sq8`, `sq4` without a Jacobian) is scored against
/// per-query weights in workgroup memory where its dim weights fit beside search.wgsl's other
/// workgroup arrays (13,340 bytes) and the largest pool kept there (12 KiB): dim 45 on any
/// adapter of 26 KiB or more, not dim 6,000 below 48.5 KiB. Codes with per-anchor ranges (a
/// Jacobian), and dims too large, are scored per level against the query and its ranges. Each
/// gives the CPU's results.
#[test]
fn wgpu_search_scores_scalar_codes_by_weights_where_they_fit() {
    use vlc::{BuildParams, CodecKind, Index, SearchParams};
    let Some(gpu) = backend() else { return };
    let limit = gpu.workgroup_memory();
    eprintln!("workgroup memory: {limit} bytes");
    for (dim, codec, jacobian, n) in [
        (45, CodecKind::Sq8, false, 3_000),
        (45, CodecKind::Sq8, true, 3_000),
        (40, CodecKind::Sq4, false, 3_000),
        (6_000, CodecKind::Sq8, false, 400),
    ] {
        let data = vlc::synthetic::clustered(n, dim, 20, 0.4, 21);
        let queries = vlc::synthetic::clustered(60, dim, 20, 0.5, 22);
        let mut params = BuildParams::default()
            .with_codec(codec)
            .with_num_anchors(30);
        params.codec_params.jacobian = jacobian;
        let (index, _) = Index::build(&data, dim, &params, &vlc::CpuBackend, &mut |_| {}).unwrap();
        let device = vlc_wgpu::WgpuIndex::new(&gpu, &index).unwrap();
        let fits = 13_340 + 12 * 1024 + 4 * dim <= limit;
        assert_eq!(
            device.weighted(),
            !jacobian && fits,
            "{codec:?} at dim {dim}, jacobian {jacobian}"
        );
        let search: vlc::conformance::DeviceSearch<'_> = Box::new(|q, p| device.search_batch(q, p));
        let p = SearchParams {
            k: 10,
            nprobe: 8,
            ..SearchParams::default()
        };
        let label = format!("{codec:?} dim {dim} jacobian {jacobian}");
        let overlap =
            vlc::conformance::compare_search_with_cpu(&label, &index, &queries, &p, &search);
        eprintln!(
            "{label}: weighted {}, overlap {overlap:.4}",
            device.weighted()
        );
    }
}

#[test]
fn wgpu_filtered_search_matches_cpu_filtered_search() {
    let Some(gpu) = backend() else { return };
    let gpu = &gpu;
    vlc::conformance::check_filtered_search_matches_cpu(&move |index| {
        let device = vlc_wgpu::WgpuIndex::new(gpu, index)?;
        Ok(Box::new(move |index, q, p, filter| {
            device.search_batch_filtered(index, q, p, filter)
        }))
    });
}
