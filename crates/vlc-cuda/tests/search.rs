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

/// Opens a `CudaIndex` on `gpu` whose searches go one query per call, as an application that
/// answers its users one at a time asks: launches of one query take the kernel's blocks of
/// 1,024 threads (`_wide`) where a batch takes blocks of 256.
fn lone_opener(gpu: &vlc_cuda::CudaBackend) -> Box<OpenSearch<'_>> {
    Box::new(move |index| -> vlc::Result<DeviceSearch<'_>> {
        let device = vlc_cuda::CudaIndex::new(gpu, index)?;
        let dim = index.dim();
        Ok(Box::new(move |q, p| {
            let mut all = vlc::SearchResults {
                k: p.k,
                ids: Vec::with_capacity(q.len() / dim * p.k),
                distances: Vec::with_capacity(q.len() / dim * p.k),
            };
            for row in q.chunks(dim) {
                let one = device.search_batch(row, p)?;
                all.k = one.k;
                all.ids.extend(one.ids);
                all.distances.extend(one.distances);
            }
            Ok(all)
        }))
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

/// Lone queries (blocks of 1,024 threads) pass the same checks against the CPU as batches,
/// and return a batch's results: the same ids and distances, query by query. A batch of
/// more queries than the device has multiprocessors takes blocks of 256.
#[test]
fn gpu_lone_queries_match_the_cpu_and_the_batch() {
    let Some(gpu) = backend() else { return };
    assert!(
        gpu.multiprocessors() > 1,
        "a lone query takes wide blocks only below the multiprocessors"
    );
    vlc::conformance::check_search_matches_cpu(&lone_opener(&gpu));
    vlc::conformance::check_automatic_pool(&lone_opener(&gpu));
    let dim = 48;
    let data = vlc::synthetic::clustered(20_000, dim, 50, 0.5, 21);
    let num_queries = gpu.multiprocessors() + 40;
    let queries = vlc::synthetic::clustered(num_queries, dim, 50, 0.7, 22);
    for (codec, refine) in [
        (vlc::CodecKind::Sq8, None),
        (vlc::CodecKind::RaBitQ1, Some(vlc::CodecKind::Sq8)),
        (vlc::CodecKind::RaBitQ2, None),
    ] {
        let params = vlc::BuildParams::default()
            .with_num_anchors(200)
            .with_codec(codec)
            .with_refine(refine);
        let (index, _) =
            vlc::Index::build(&data, dim, &params, &vlc::CpuBackend, &mut |_| {}).unwrap();
        for nprobe in [4, 32] {
            let p = vlc::SearchParams {
                k: 10,
                nprobe,
                ..Default::default()
            };
            let batch = opener(&gpu)(&index).unwrap()(&queries, &p).unwrap();
            let lone = lone_opener(&gpu)(&index).unwrap()(&queries, &p).unwrap();
            assert_eq!(
                lone.ids, batch.ids,
                "{codec:?} + {refine:?}, nprobe {nprobe}: ids"
            );
            assert_eq!(
                lone.distances, batch.distances,
                "{codec:?} + {refine:?}, nprobe {nprobe}: distances"
            );
        }
    }
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
