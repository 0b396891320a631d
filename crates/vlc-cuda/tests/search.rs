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

/// A filter whose lists to rank outgrow the shared memory (one allowed vector of about 5 in
/// each of 6,000 lists at nprobe 1,024: every one of them would be ranked, 242 KB) has each
/// query's lists ranked on the CPU (cut to about 4,100 lists' probes): the results are still
/// the CPU's.
#[test]
fn gpu_filtered_search_beyond_the_shared_memory_ranks_on_the_host() {
    let Some(gpu) = backend() else { return };
    let (dim, n) = (16, 30_000);
    let data = vlc::synthetic::clustered(n, dim, 60, 0.5, 7);
    let queries = vlc::synthetic::clustered(200, dim, 60, 0.6, 8);
    let params = vlc::BuildParams::default().with_num_anchors(6_000);
    let (index, _) = vlc::Index::build(&data, dim, &params, &vlc::CpuBackend, &mut |_| {}).unwrap();
    // The first vector of each list.
    let in_order = index.device_view().ids.into_owned();
    let offsets = index.device_view().list_offsets.to_vec();
    let allowed: Vec<u32> = (0..index.num_anchors())
        .filter(|&a| offsets[a + 1] > offsets[a])
        .map(|a| in_order[offsets[a] as usize])
        .collect();
    let filter = index.id_filter(&allowed);
    let p = vlc::SearchParams {
        k: 10,
        nprobe: 1_024,
        rerank: 0,
        probe_margin: None,
    };
    let device = vlc_cuda::CudaIndex::new(&gpu, &index).unwrap();
    let got = device
        .search_batch_filtered(&index, &queries, &p, &filter)
        .unwrap();
    let cpu = index
        .search_batch_filtered(&queries, &p, &vlc::CpuBackend, &filter)
        .unwrap();
    let (mut same, mut total) = (0, 0);
    for (g, c) in got.ids.chunks(10).zip(cpu.ids.chunks(10)) {
        for id in g.iter().filter(|&&i| i >= 0) {
            assert!(allowed.contains(&(*id as u32)), "id {id} is not allowed");
        }
        total += c.iter().filter(|&&i| i >= 0).count();
        same += g.iter().filter(|&&i| i >= 0 && c.contains(&i)).count();
    }
    let overlap = same as f64 / total as f64;
    eprintln!(
        "{} lists with an allowed vector: {overlap:.4} of the CPU's ids",
        allowed.len()
    );
    assert!(overlap >= 0.97, "{overlap}");
}
