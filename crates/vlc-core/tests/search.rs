//! Search: recall on clustered data (fails if ids were random), parameter and query checks,
//! batch = single, cosine metric.

use vlc::eval::{ground_truth, recall_at};
use vlc::synthetic::{clustered, queries_near};
use vlc::vectors::SliceSource;
use vlc::{exact_knn, BuildParams, CodecKind, CpuBackend, Index, Metric, SearchParams, VlcError};

fn truth(data: &[f32], queries: &[f32], dim: usize, k: usize) -> Vec<i64> {
    exact_knn(data, queries, dim, k)
        .unwrap()
        .into_iter()
        .map(i64::from)
        .collect()
}

#[test]
fn recall_on_clustered_data_per_codec() {
    let dim = 48;
    let data = clustered(8000, dim, 60, 0.6, 21);
    let queries = queries_near(&data, dim, 200, 0.3, 22);
    let gt = truth(&data, &queries, dim, 10);
    // (codec, refine, minimum recall@10 at nprobe 16 of 64 anchors)
    let cases = [
        (CodecKind::Sq8, None, 0.90),
        (CodecKind::Sq4, None, 0.75),
        (CodecKind::RaBitQ1, None, 0.45),
        (CodecKind::RaBitQ1, Some(CodecKind::Sq8), 0.90),
        (CodecKind::RaBitQ2, None, 0.65),
        (CodecKind::RaBitQ3, None, 0.78),
        (CodecKind::RaBitQ4, None, 0.85),
        (CodecKind::RaBitQ7, None, 0.90),
        (CodecKind::PcaRaBitQ, None, 0.78),
        (CodecKind::AnchorOnly, None, 0.0),
    ];
    let mut anchor_only = 0.0;
    for (codec, refine, floor) in cases {
        let params = BuildParams::default()
            .with_codec(codec)
            .with_refine(refine)
            .with_num_anchors(64);
        let (index, _) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
        let res = index
            .search_batch(
                &queries,
                &SearchParams {
                    k: 10,
                    nprobe: 16,
                    rerank: 100,
                    probe_margin: None,
                },
                &CpuBackend,
            )
            .unwrap();
        let r = recall_at(&res.ids, 10, &gt, 10, 10);
        eprintln!("{codec} + {refine:?}: recall@10 {r}");
        assert!(r >= floor, "{codec} + {refine:?}: recall@10 {r} < {floor}");
        if codec == CodecKind::AnchorOnly {
            anchor_only = r;
        }
        // Random ids would score about k/n = 0.00125.
        assert!(codec == CodecKind::AnchorOnly || r > 0.3);
    }
    assert!(
        anchor_only < 0.9,
        "anchor-only cannot rank within a list: {anchor_only}"
    );
}

#[test]
fn more_probes_never_lower_sq8_recall_much_and_full_probe_is_near_exact() {
    let dim = 16;
    let data = clustered(3000, dim, 20, 0.5, 5);
    let queries = queries_near(&data, dim, 100, 0.2, 6);
    let gt = truth(&data, &queries, dim, 10);
    let (index, _) = Index::build(
        &data,
        dim,
        &BuildParams::default().with_num_anchors(32),
        &CpuBackend,
        &mut |_| {},
    )
    .unwrap();
    let r = |nprobe| {
        let res = index
            .search_batch(
                &queries,
                &SearchParams {
                    k: 10,
                    nprobe,
                    rerank: 0,
                    probe_margin: None,
                },
                &CpuBackend,
            )
            .unwrap();
        recall_at(&res.ids, 10, &gt, 10, 10)
    };
    let (r1, r32) = (r(1), r(32));
    assert!(r32 >= r1);
    assert!(r32 > 0.97, "probing every list with 8-bit codes: {r32}");
}

#[test]
fn batch_matches_single_query_search() {
    let dim = 20;
    let data = clustered(1500, dim, 10, 0.5, 8);
    let queries = queries_near(&data, dim, 30, 0.2, 9);
    let params = BuildParams::default()
        .with_codec(CodecKind::RaBitQ1)
        .with_refine(Some(CodecKind::Sq4))
        .with_num_anchors(16);
    let (index, _) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
    let sp = SearchParams {
        k: 7,
        nprobe: 4,
        rerank: 30,
        probe_margin: None,
    };
    let batch = index.search_batch(&queries, &sp, &CpuBackend).unwrap();
    for q in 0..30 {
        let single = index.search(&queries[q * dim..(q + 1) * dim], &sp).unwrap();
        let ids: Vec<i64> = single.iter().map(|n| n.id as i64).collect();
        assert_eq!(&batch.ids[q * 7..q * 7 + ids.len()], &ids[..], "query {q}");
    }
    // A batch of a few queries is searched one query at a time (no GEMM packing per call):
    // exactly what `search` gives, distances included.
    let few = index
        .search_batch(&queries[3 * dim..8 * dim], &sp, &CpuBackend)
        .unwrap();
    for q in 0..5 {
        let single = index
            .search(&queries[(q + 3) * dim..(q + 4) * dim], &sp)
            .unwrap();
        let row = q * 7..q * 7 + single.len();
        let ids: Vec<i64> = single.iter().map(|n| n.id as i64).collect();
        let dists: Vec<f32> = single.iter().map(|n| n.distance).collect();
        assert_eq!(
            &few.ids[row.clone()],
            &ids[..],
            "query {q} of a small batch"
        );
        assert_eq!(
            &few.distances[row],
            &dists[..],
            "query {q} of a small batch"
        );
    }
}

/// Each thread keeps its search buffers from one query to the next, whatever the index: a
/// search right after searches of other indexes (other dims, codecs, metrics, pool sizes)
/// gives the bits a thread that never searched before gives.
#[test]
fn a_search_carries_nothing_over_from_other_indexes() {
    let build = |dim: usize, codec, refine, metric, seed| {
        let data = clustered(3000, dim, 12, 0.5, seed);
        let params = BuildParams::default()
            .with_codec(codec)
            .with_refine(refine)
            .with_metric(metric)
            .with_num_anchors(24);
        let (index, _) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
        let queries = queries_near(&data, dim, 40, 0.3, seed + 1);
        (index, queries)
    };
    let indexes = [
        build(48, CodecKind::PcaRaBitQ, None, Metric::L2, 31),
        build(
            20,
            CodecKind::RaBitQ1,
            Some(CodecKind::Sq8),
            Metric::Cosine,
            33,
        ),
        build(33, CodecKind::Sq4, None, Metric::L2, 35),
        build(48, CodecKind::RaBitQ3, None, Metric::L2, 37),
    ];
    let params = |i: usize| SearchParams {
        k: 5 + 3 * i,
        nprobe: 3 + 2 * i,
        rerank: [0, 200, 7, 60][i],
        probe_margin: (i % 2 == 1).then_some(1.5),
    };
    // Each index on a thread of its own that has searched nothing else: one query at a time,
    // a small batch and a large one.
    let search_all = |index: &Index, queries: &[f32], p: &SearchParams| {
        let dim = index.dim();
        let singles: Vec<Vec<(u32, u32)>> = queries
            .chunks(dim)
            .map(|q| {
                let hits = index.search(q, p).unwrap();
                hits.iter().map(|n| (n.id, n.distance.to_bits())).collect()
            })
            .collect();
        let few = index
            .search_batch(&queries[..5 * dim], p, &CpuBackend)
            .unwrap();
        let all = index.search_batch(queries, p, &CpuBackend).unwrap();
        (singles, few.ids, few.distances, all.ids, all.distances)
    };
    let fresh: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = indexes
            .iter()
            .enumerate()
            .map(|(i, (index, queries))| s.spawn(move || search_all(index, queries, &params(i))))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Then all of them on this thread, in turns, forwards and backwards.
    for round in 0..2 {
        let order: Vec<usize> = match round {
            0 => (0..indexes.len()).collect(),
            _ => (0..indexes.len()).rev().collect(),
        };
        for i in order {
            let (index, queries) = &indexes[i];
            let got = search_all(index, queries, &params(i));
            assert!(
                got == fresh[i],
                "round {round}, index {i}: results differ from a fresh thread's"
            );
        }
    }
}

/// From 256 anchors in 8-bit form, one query's anchor ranking runs on the integer kernel
/// where one is available, as a batch's does on the CPU backend, so a query gets the same
/// lists, candidates and distances alone as in a batch large enough for that path (64 queries
/// and more). Elsewhere both rank in f32, one by dot products and one by a GEMM, which round
/// differently (`batch_matches_single_query_search` covers that).
#[test]
fn one_query_ranks_anchors_as_a_batch_does() {
    if !(vlc::amx::available() || vlc::amx::two_pass_available()) {
        eprintln!("SKIPPED: a batch ranks on integers only with AMX, AVX-512 VNNI, AVX-VNNI or AVX2 (none here, or VLC_NO_AMX / VLC_NO_VNNI / VLC_NO_AVX2_INT8 is set)");
        return;
    }
    let dim = 40;
    let data = clustered(6000, dim, 60, 0.5, 31);
    let queries = queries_near(&data, dim, 80, 0.3, 32);
    let params = BuildParams::default()
        .with_codec(CodecKind::Sq8)
        .with_num_anchors(300);
    let (index, _) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
    assert!(
        index.num_anchors() >= 256,
        "{} anchors",
        index.num_anchors()
    );
    let sp = SearchParams {
        k: 10,
        nprobe: 12,
        rerank: 0,
        probe_margin: None,
    };
    let batch = index.search_batch(&queries, &sp, &CpuBackend).unwrap();
    for q in 0..80 {
        let single = index.search(&queries[q * dim..(q + 1) * dim], &sp).unwrap();
        let row = q * 10..q * 10 + single.len();
        let ids: Vec<i64> = single.iter().map(|n| n.id as i64).collect();
        let dists: Vec<f32> = single.iter().map(|n| n.distance).collect();
        assert_eq!(&batch.ids[row.clone()], &ids[..], "query {q}");
        assert_eq!(&batch.distances[row], &dists[..], "query {q}");
    }
    // Batches of every size rank as the large one: 16 to 63 queries used to keep the f32 GEMM
    // (the packed anchors were found by hashing them), whose distances differ in their last
    // digits and move the estimates built on them.
    for size in [5, 16, 17, 40, 63, 64] {
        for first in (0..80).step_by(size) {
            let rows = first..(first + size).min(80);
            let part = index
                .search_batch(&queries[rows.start * dim..rows.end * dim], &sp, &CpuBackend)
                .unwrap();
            let whole = rows.start * 10..rows.end * 10;
            assert_eq!(part.ids, batch.ids[whole.clone()], "batches of {size}");
            assert_eq!(part.distances, batch.distances[whole], "batches of {size}");
        }
    }
}

/// 200 clustered vectors of `dim` in an index of 8 anchors, and the vectors.
fn two_hundred_in_eight_lists(dim: usize) -> (Index, Vec<f32>) {
    let data = clustered(200, dim, 4, 0.5, 1);
    let (index, _) = Index::build(
        &data,
        dim,
        &BuildParams::default().with_num_anchors(8),
        &CpuBackend,
        &mut |_| {},
    )
    .unwrap();
    (index, data)
}

#[test]
fn invalid_search_parameters_and_queries_are_errors() {
    let dim = 8;
    let (index, data) = two_hundred_in_eight_lists(dim);
    let q = &data[..dim];
    let err = |p: SearchParams| index.search(q, &p).unwrap_err();
    assert!(matches!(
        err(SearchParams {
            k: 0,
            nprobe: 1,
            rerank: 0,
            probe_margin: None,
        }),
        VlcError::InvalidParameter { name: "k", .. }
    ));
    assert!(matches!(
        err(SearchParams {
            k: 1,
            nprobe: 0,
            rerank: 0,
            probe_margin: None,
        }),
        VlcError::InvalidParameter { name: "nprobe", .. }
    ));
    let ok = SearchParams {
        k: 3,
        nprobe: 2,
        rerank: 0,
        probe_margin: None,
    };
    assert!(matches!(
        index.search(&[1.0; 7], &ok),
        Err(VlcError::DimensionMismatch { .. })
    ));
    let mut nan = q.to_vec();
    nan[5] = f32::NAN;
    match index.search(&nan, &ok).unwrap_err() {
        VlcError::NonFinite {
            row: 0, column: 5, ..
        } => {}
        e => panic!("unexpected {e}"),
    }
    // Fewer hits than k in the probed lists: padded with -1.
    let res = index
        .search_batch(
            q,
            &SearchParams {
                k: 200,
                nprobe: 1,
                rerank: 0,
                probe_margin: None,
            },
            &CpuBackend,
        )
        .unwrap();
    assert!(res.ids.contains(&-1));
}

/// k above the vector count returns every vector, padded to k; nprobe above the anchor count
/// scans every list: an index that is still small answers the parameters of a large one.
#[test]
fn k_and_nprobe_above_the_index_are_clamped_and_padded() {
    let dim = 8;
    let (index, data) = two_hundred_in_eight_lists(dim);
    let queries = &data[..3 * dim];
    let run = |k, nprobe| {
        let p = SearchParams {
            k,
            nprobe,
            rerank: 0,
            probe_margin: None,
        };
        index.search_batch(queries, &p, &CpuBackend).unwrap()
    };
    // resolve: k and nprobe to the index, a pool deeper than the index to its size.
    let resolved = |k, rerank| {
        SearchParams {
            k,
            nprobe: 50,
            rerank,
            probe_margin: None,
        }
        .resolve(200, 8)
        .unwrap()
    };
    assert_eq!((resolved(250, 0).k, resolved(250, 0).nprobe), (200, 8));
    assert_eq!(resolved(50, 0).rerank, 200, "10·k = 500 > 200 vectors");
    assert_eq!(resolved(10, 0).rerank, 0, "10·k = 100 stays automatic");
    assert_eq!(resolved(10, 1000).rerank, 200);
    assert_eq!(resolved(10, 30).rerank, 30);
    // nprobe 9 and 1,000 scan the same 8 lists as nprobe 8.
    let all_lists = run(10, 8);
    assert_eq!(run(10, 9), all_lists);
    assert_eq!(run(10, 1000), all_lists);
    // k 250 on 200 vectors: every vector once per row, nearest first, then 50 pads.
    let wide = run(250, 1000);
    assert_eq!(wide.k, 250);
    assert_eq!(wide.ids.len(), 3 * 250);
    for (r, row) in wide.ids.chunks(250).enumerate() {
        let mut found: Vec<i64> = row[..200].to_vec();
        found.sort_unstable();
        assert_eq!(found, (0..200).collect::<Vec<i64>>(), "row {r}");
        assert!(row[200..].iter().all(|&i| i == -1), "row {r}");
        let d = &wide.distances[r * 250..(r + 1) * 250];
        assert!(d[..200].windows(2).all(|w| w[0] <= w[1]), "row {r}");
        assert!(d[200..].iter().all(|&x| x == f32::INFINITY), "row {r}");
        // The first 10 are the k = 10 search's.
        assert_eq!(&row[..10], &all_lists.ids[r * 10..(r + 1) * 10], "row {r}");
    }
    // One query: every vector, no padding in a Vec.
    let p = SearchParams {
        k: 250,
        nprobe: 1000,
        rerank: 0,
        probe_margin: None,
    };
    assert_eq!(index.search(&data[..dim], &p).unwrap().len(), 200);
    // SearchResults::widen keeps rows and pads them.
    let narrow = run(3, 8);
    let widened = narrow.clone().widen(5).unwrap();
    for r in 0..3 {
        assert_eq!(
            &widened.ids[r * 5..r * 5 + 3],
            &narrow.ids[r * 3..r * 3 + 3]
        );
        assert_eq!(&widened.ids[r * 5 + 3..r * 5 + 5], &[-1, -1]);
    }
    assert_eq!(narrow.clone().widen(2).unwrap(), narrow);
    // An absurd k fails cleanly (no abort on allocation): the rows would be k wide.
    for k in [usize::MAX / 2, 1usize << 60] {
        let p = SearchParams {
            k,
            nprobe: 8,
            rerank: 0,
            probe_margin: None,
        };
        match index.search_batch(queries, &p, &CpuBackend).unwrap_err() {
            VlcError::InvalidParameter { name: "k", .. } => {}
            e => panic!("unexpected {e}"),
        }
    }
}

#[test]
fn build_rejects_bad_input() {
    let dim = 4;
    let build = |data: &[f32]| {
        Index::build(data, dim, &BuildParams::default(), &CpuBackend, &mut |_| {}).map(|_| ())
    };
    let mut data = clustered(50, dim, 2, 0.5, 1);
    data[13 * dim + 2] = f32::INFINITY;
    match build(&data).unwrap_err() {
        VlcError::NonFinite {
            row: 13, column: 2, ..
        } => {}
        e => panic!("unexpected {e}"),
    }
    // Finite values whose squared length overflows f32 (2 · 1e19² = 2e38, past the limit of
    // about 2.1e37) are refused too, naming the row and the length summed in f64.
    data[13 * dim + 2] = 0.0;
    data[21 * dim..22 * dim].copy_from_slice(&[1e19, -1e19, 0.0, 0.0]);
    match build(&data).unwrap_err() {
        VlcError::TooLarge {
            row: 21,
            squared_length,
            ..
        } => assert!(
            (squared_length / 2e38 - 1.0).abs() < 1e-6,
            "{squared_length}"
        ),
        e => panic!("unexpected {e}"),
    }
    // Rows so close together that squared distances between them are subnormal in f32 are
    // refused; rows that are all the same (spread 0) are a valid, if degenerate, set.
    data[21 * dim..22 * dim].fill(0.5);
    let tiny: Vec<f32> = data.iter().map(|v| v * 1e-21).collect();
    match build(&tiny).unwrap_err() {
        VlcError::TooSmall { spread, .. } => assert!(spread > 0.0 && spread < 1e-38, "{spread}"),
        e => panic!("unexpected {e}"),
    }
    assert!(build(&vec![1e-21; 50 * dim]).is_ok());
    assert!(matches!(build(&[]), Err(VlcError::EmptyInput { .. })));
    assert!(matches!(
        build(&[0.0; 9]),
        Err(VlcError::DimensionMismatch { .. })
    ));
    let ok = clustered(50, dim, 2, 0.5, 1);
    let too_many = BuildParams::default().with_num_anchors(51);
    assert!(matches!(
        Index::build(&ok, dim, &too_many, &CpuBackend, &mut |_| {}),
        Err(VlcError::InvalidParameter { .. })
    ));
}

#[test]
fn cosine_metric_normalises_and_finds_scaled_copies() {
    let dim = 16;
    let data = clustered(1000, dim, 10, 0.5, 3);
    let params = BuildParams::default()
        .with_metric(Metric::Cosine)
        .with_num_anchors(16);
    let (index, _) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
    let q: Vec<f32> = data[42 * dim..43 * dim].iter().map(|v| v * 7.5).collect();
    let hits = index
        .search(
            &q,
            &SearchParams {
                k: 1,
                nprobe: 4,
                rerank: 0,
                probe_margin: None,
            },
        )
        .unwrap();
    assert_eq!(hits[0].id, 42);
    assert!(hits[0].distance < 0.01);
}

#[test]
fn cosine_metric_refuses_zero_vectors_and_names_the_row() {
    let dim = 16;
    let mut data = clustered(1000, dim, 10, 0.5, 4);
    let cosine = BuildParams::default()
        .with_metric(Metric::Cosine)
        .with_num_anchors(16);
    let zero_at = |err: VlcError| match err {
        VlcError::ZeroVector { row, .. } => row,
        e => panic!("expected a ZeroVector error, got {e}"),
    };
    let kept = data[637 * dim..638 * dim].to_vec();
    data[637 * dim..638 * dim].fill(0.0);
    let err = Index::build(&data, dim, &cosine, &CpuBackend, &mut |_| {}).unwrap_err();
    assert_eq!(zero_at(err), 637);
    // The l2 metric has no direction to take: a zero vector is an ordinary point there.
    let l2 = BuildParams::default().with_num_anchors(16);
    Index::build(&data, dim, &l2, &CpuBackend, &mut |_| {}).unwrap();
    // Ground truth of a cosine index also needs every base row's direction.
    let queries = data[..3 * dim].to_vec();
    let source = SliceSource::new(&data, dim).unwrap();
    let gt = |source: &SliceSource, queries: &[f32]| {
        ground_truth(source, queries, 5, Metric::Cosine, &CpuBackend, &mut |_| {})
    };
    assert_eq!(zero_at(gt(&source, &queries).unwrap_err()), 637);
    data[637 * dim..638 * dim].copy_from_slice(&kept);

    let (index, _) = Index::build(&data, dim, &cosine, &CpuBackend, &mut |_| {}).unwrap();
    let params = SearchParams {
        k: 5,
        nprobe: 4,
        rerank: 0,
        probe_margin: None,
    };
    let mut queries = data[..4 * dim].to_vec();
    queries[2 * dim..3 * dim].fill(0.0);
    let err = index
        .search_batch(&queries, &params, &CpuBackend)
        .unwrap_err();
    assert_eq!(zero_at(err), 2);
    assert_eq!(
        zero_at(
            index
                .search(&queries[2 * dim..3 * dim], &params)
                .unwrap_err()
        ),
        0
    );
    let source = SliceSource::new(&data, dim).unwrap();
    assert_eq!(zero_at(gt(&source, &queries).unwrap_err()), 2);
    // A query far smaller than the vectors still has a direction.
    let tiny: Vec<f32> = data[..dim].iter().map(|v| v * 1e-12).collect();
    assert_eq!(index.search(&tiny, &params).unwrap()[0].id, 0);

    // `add` refuses the rows.
    let mut more = data[..10 * dim].to_vec();
    more[7 * dim..8 * dim].fill(0.0);
    let err = index
        .add_from(
            &SliceSource::new(&more, dim).unwrap(),
            &CpuBackend,
            &mut |_| {},
        )
        .unwrap_err();
    assert_eq!(zero_at(err), 7);
}

#[test]
fn a_byte_budget_builds_pcaq_that_fills_it_without_passing_it() {
    // (n, dim, anchors, refine, budget in bytes per vector)
    for (n, dim, anchors, refine, budget) in [
        (3000, 64, 32, None, 20.0),
        (3000, 64, 32, None, 33.3),
        (2500, 200, 16, None, 61.0),
        (2000, 37, 8, Some(CodecKind::Sq8), 70.0),
        (1500, 96, 24, None, 1000.0),
    ] {
        let data = clustered(n, dim, 20, 0.5, dim as u64);
        let mut params = BuildParams::default()
            .with_num_anchors(anchors)
            .with_refine(refine)
            .with_bytes_per_vector(budget);
        params.train.max_iterations = 5;
        // `pcaq` only: at the largest budget a `rabitq` code may decode closer (see
        // `a_high_byte_budget_keeps_rabitq_where_it_decodes_closer`).
        params.pcaq_only = true;
        let (index, report) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
        assert_eq!(index.codec(), CodecKind::PcaRaBitQ);
        let size = index.file_size() as f64;
        let saved = vlc::format::to_bytes(&index);
        assert_eq!(saved.len() as f64, size, "file_size is the saved size");
        assert!(
            size <= budget * n as f64,
            "{n}x{dim} at {budget}: {} B/vector",
            size / n as f64
        );
        let bits = report.params.as_ref().unwrap().codec_params.bits;
        if bits < 8.0 {
            // One more byte of bit planes per code (and up to 8 more rotation rows) would not
            // have fitted: the budget is filled to within that step and the metadata's slack.
            let step = n as f64 + 8.0 * (dim as f64 + 4.0) + 1024.0;
            assert!(
                budget * n as f64 - size < step,
                "{n}x{dim} at {budget}: {} B/vector leaves more than a step",
                size / n as f64
            );
        } else {
            assert!(
                size < budget * n as f64 / 2.0,
                "only a large budget stops at 8 bits"
            );
        }
        // The index searches, and reopens with the rate it was built at.
        let back = Index::from_bytes(&saved).unwrap();
        assert_eq!(back.code_size(), index.code_size());
        let q = &data[..dim];
        let hits = back
            .search(
                q,
                &SearchParams {
                    k: 1,
                    nprobe: anchors,
                    rerank: 0,
                    probe_margin: None,
                },
            )
            .unwrap();
        assert_eq!(hits[0].id, 0, "{n}x{dim} at {budget}");
    }
}

/// 1,000 vectors of 256 dimensions in isotropic clusters: a principal-axis basis finds no
/// variance to concentrate bits on, and storing it costs `pcaq` 66 bytes per vector here (256
/// int8 rows of 260 bytes over 1,000 vectors). At a high budget (dim + 8 bytes, an 8-bit code
/// and an id) a byte budget keeps the widest `rabitq` that fits, `rabitq7`, whose estimates are
/// closer than those of `pcaq` at the same budget; at a low budget it keeps `pcaq`.
#[test]
fn a_high_byte_budget_keeps_rabitq_where_it_decodes_closer() {
    let (n, dim) = (1000usize, 256usize);
    let data = clustered(n, dim, 20, 0.5, 17);
    let queries: Vec<f32> = data[..50 * dim].iter().map(|v| v + 0.05).collect();
    let build = |params: BuildParams| {
        let mut params = params.with_num_anchors(16);
        params.train.max_iterations = 5;
        Index::build(&data, dim, &params, &CpuBackend, &mut |_| {})
            .unwrap()
            .0
    };
    // RMS relative error of the returned distances over the queries' 10 nearest.
    let error = |index: &Index| {
        let p = SearchParams {
            k: 10,
            nprobe: 16,
            rerank: 0,
            probe_margin: None,
        };
        let res = index.search_batch(&queries, &p, &CpuBackend).unwrap();
        let mut sum = 0f64;
        for (i, (&id, &d)) in res.ids.iter().zip(&res.distances).enumerate() {
            let (q, x) = (
                &queries[i / 10 * dim..][..dim],
                &data[id as usize * dim..][..dim],
            );
            let exact: f64 = q.iter().zip(x).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
            sum += ((d as f64 - exact) / exact).powi(2);
        }
        (sum / res.ids.len() as f64).sqrt()
    };
    let budget = dim as f64 + 8.0;
    let chosen = build(BuildParams::default().with_bytes_per_vector(budget));
    assert_eq!(chosen.codec(), CodecKind::RaBitQ7);
    assert!(chosen.file_size() as f64 <= budget * n as f64);
    let mut only = BuildParams::default().with_bytes_per_vector(budget);
    only.pcaq_only = true;
    let pcaq = build(only);
    assert_eq!(pcaq.codec(), CodecKind::PcaRaBitQ);
    let (r, p) = (error(&chosen), error(&pcaq));
    assert!(r < p, "rabitq7 error {r}, pcaq error {p}");
    let small = build(BuildParams::default().with_bytes_per_vector(40.0));
    assert_eq!(small.codec(), CodecKind::PcaRaBitQ);
}

#[test]
fn byte_budgets_that_cannot_hold_a_code_or_name_another_codec_are_errors() {
    let dim = 32;
    let data = clustered(1000, dim, 10, 0.5, 3);
    let build = |params: &BuildParams| Index::build(&data, dim, params, &CpuBackend, &mut |_| {});
    let base = BuildParams::default().with_num_anchors(16);
    for bad in [0.0, -3.0, f64::NAN, f64::INFINITY] {
        let err = build(&base.clone().with_bytes_per_vector(bad)).unwrap_err();
        assert!(
            matches!(
                err,
                VlcError::InvalidParameter {
                    name: "bytes_per_vector",
                    ..
                }
            ),
            "{bad}: {err}"
        );
    }
    // Ids alone take 10 bits per vector here, and the factors several bytes.
    let err = build(&base.clone().with_bytes_per_vector(3.0)).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("below the smallest pcaq index") && text.contains("bytes per vector"),
        "{text}"
    );
    let mut sq8 = base.clone().with_bytes_per_vector(40.0);
    sq8.codec = CodecKind::Sq8;
    let err = build(&sq8).unwrap_err();
    assert!(err.to_string().contains("fixed size"), "{err}");
}

#[test]
fn lists_to_scan_stops_past_the_margin_once_k_vectors_are_held() {
    // Squared anchor distances, nearest first; every list holds 4 vectors; energy 1.
    let dists = [1.0, 1.2, 1.5, 3.0, 3.1];
    let params = |k, probe_margin| SearchParams {
        k,
        nprobe: 5,
        rerank: 0,
        probe_margin,
    };
    let scan = |p: SearchParams, energy: f32| p.lists_to_scan(&dists, energy, |_| 4);
    assert_eq!(scan(params(10, None), 1.0), 5, "no margin: every probe");
    // Limit 1.0 + 0.6: the lists at 1.0, 1.2 and 1.5 (12 vectors >= k).
    assert_eq!(scan(params(10, Some(0.6)), 1.0), 3);
    // The margin scales with the energy: 0.6 x 4 = 2.4 takes in 3.0 and 3.1.
    assert_eq!(scan(params(10, Some(0.6)), 4.0), 5);
    // k = 14: three lists hold 12 < 14, so the fourth is scanned despite the margin.
    assert_eq!(scan(params(14, Some(0.6)), 1.0), 4);
    assert_eq!(scan(params(30, Some(0.0)), 1.0), 5, "fewer than k in all");
    // Margin 0: the nearest list, then only as many as k needs.
    assert_eq!(scan(params(4, Some(0.0)), 1.0), 1);
    assert_eq!(scan(params(5, Some(0.0)), 1.0), 2);
    assert_eq!(scan(params(5, Some(0.0)), 1.0), 2);
    assert_eq!(params(5, Some(0.5)).lists_to_scan(&[], 1.0, |_| 4), 0);
    // Bad margins are refused by the index.
    let dim = 8;
    let data = clustered(300, dim, 4, 0.5, 1);
    let (index, _) = Index::build(
        &data,
        dim,
        &BuildParams::default().with_num_anchors(8),
        &CpuBackend,
        &mut |_| {},
    )
    .unwrap();
    for m in [-1.0, f32::NAN, f32::INFINITY] {
        let e = index.search(&data[..dim], &params(5, Some(m))).unwrap_err();
        assert!(
            matches!(
                e,
                VlcError::InvalidParameter {
                    name: "probe_margin",
                    ..
                }
            ),
            "{e}"
        );
    }
}

#[test]
fn adaptive_probing_scans_few_lists_near_a_cluster_and_keeps_recall() {
    let dim = 32;
    let data = clustered(6000, dim, 40, 0.4, 31);
    let queries = queries_near(&data, dim, 200, 0.2, 32);
    let gt = truth(&data, &queries, dim, 10);
    let num_anchors = 64;
    let params = BuildParams::default()
        .with_codec(CodecKind::RaBitQ1)
        .with_refine(Some(CodecKind::Sq8))
        .with_num_anchors(num_anchors);
    let (index, _) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
    assert!(index.energy() > 0.0);
    let fixed = SearchParams {
        k: 10,
        nprobe: num_anchors,
        rerank: 0,
        probe_margin: None,
    };
    let adaptive = SearchParams {
        probe_margin: Some(1.0),
        ..fixed
    };
    let all = index.search_batch(&queries, &fixed, &CpuBackend).unwrap();
    let some = index
        .search_batch(&queries, &adaptive, &CpuBackend)
        .unwrap();
    let (r_all, r_some) = (
        recall_at(&all.ids, 10, &gt, 10, 10),
        recall_at(&some.ids, 10, &gt, 10, 10),
    );
    assert!(
        r_some >= r_all - 0.01,
        "adaptive {r_some} vs every list {r_all}"
    );
    // How many lists each query scanned, from the public rule and the anchors; each query's
    // adaptive result is the fixed search of exactly that many nearest lists.
    let sizes = index.list_sizes();
    let anchors = index.anchors();
    let mut scanned_total = 0;
    for (qi, q) in queries.chunks(dim).enumerate() {
        let mut near: Vec<(f32, usize)> = anchors
            .chunks(dim)
            .enumerate()
            .map(|(a, c)| (q.iter().zip(c).map(|(x, y)| (x - y) * (x - y)).sum(), a))
            .collect();
        near.sort_by(|x, y| x.partial_cmp(y).unwrap());
        let dists: Vec<f32> = near.iter().map(|n| n.0).collect();
        let n = adaptive.lists_to_scan(&dists, index.energy(), |j| sizes[near[j].1]);
        scanned_total += n;
        let single = index
            .search(
                q,
                &SearchParams {
                    nprobe: n,
                    probe_margin: None,
                    ..fixed
                },
            )
            .unwrap();
        let same = single
            .iter()
            .filter(|h| some.ids[qi * 10..qi * 10 + 10].contains(&(h.id as i64)))
            .count();
        assert!(
            same >= 9,
            "query {qi}: {same} of 10 as a fixed search of {n} lists"
        );
    }
    let mean = scanned_total as f64 / 200.0;
    eprintln!("margin 1: recall {r_some:.4} (every list {r_all:.4}), {mean:.1} lists per query");
    assert!(
        mean < num_anchors as f64 / 4.0,
        "queries near clusters should scan few lists, scanned {mean:.1} on average"
    );
}

/// Data whose 8 leading dimensions have 64 times the spread of the other 56 within clusters,
/// as where a few latent factors carry most of the variance: `pcaq` at 5 bits per dimension
/// gives those axes 9 and 11 bits. One grid step serves every axis, so such an axis spans
/// many steps and its top two bits split it far out in its tails; the first stage, which
/// fills the candidate pool, reads more of its bits (down to the cell of an 8-bit axis's top
/// two), and its fast scan gives the narrow axes' tables a quantisation step of their own
/// (segments), as one step set by the wide axes' tables would round theirs to noise. So a
/// pool of 50 keeps recall@10 within 0.02 of a pool of 1,000 (the test prints both: 0.986
/// and 0.9965; with one step for every table, as before segments, 0.9615, and a first stage
/// that read two bits of the wide axes fell short of that too).
#[test]
fn pcaq_first_stage_ranks_well_where_axes_are_wider_than_8_bits() {
    let (dim, n, lead, clusters) = (64usize, 6000usize, 8usize, 16usize);
    let mut rng = vlc::Rng::new(31);
    let centres: Vec<f32> = (0..clusters * dim).map(|_| rng.normal() as f32).collect();
    let point = |rng: &mut vlc::Rng, c: usize| -> Vec<f32> {
        (0..dim)
            .map(|d| {
                let spread = if d < lead { 0.5 } else { 0.5 / 64.0 };
                centres[c * dim + d] + spread * rng.normal() as f32
            })
            .collect()
    };
    let data: Vec<f32> = (0..n).flat_map(|i| point(&mut rng, i % clusters)).collect();
    let queries: Vec<f32> = (0..200)
        .flat_map(|i| point(&mut rng, i % clusters))
        .collect();
    let gt = truth(&data, &queries, dim, 10);
    let mut params = BuildParams::default()
        .with_codec(CodecKind::PcaRaBitQ)
        .with_num_anchors(16);
    params.codec_params.bits = 5.0;
    let (index, _) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
    let widths = index.pcaq_widths().expect("a pcaq index");
    assert!(widths[0] > 8, "widths {widths:?}");
    let recall = |rerank: usize| {
        let search = SearchParams {
            k: 10,
            nprobe: 4,
            rerank,
            probe_margin: None,
        };
        let res = index.search_batch(&queries, &search, &CpuBackend).unwrap();
        recall_at(&res.ids, 10, &gt, 10, 10)
    };
    let (small, large) = (recall(50), recall(1000));
    eprintln!("widths {widths:?}: recall@10 {small} with a pool of 50, {large} with 1000");
    assert!(large > 0.95, "recall@10 {large} with a pool of 1000");
    assert!(
        small >= large - 0.02,
        "recall@10 {small} with a pool of 50, {large} with 1000"
    );
}

/// Data far from the origin next to its spread (clusters of spread 0.3 moved about 100 units
/// along every axis): the build centres it, and search, single and batched, answers as well as
/// on the same data at the origin, also after vectors are added, after a save and load, and
/// within a byte budget. Before centring, `rabitq1` refined by `sq8` lost a tenth of its
/// recall on such data (anchor distances and query tables computed from norms of 500 and more).
#[test]
fn data_far_from_the_origin_is_centred_and_searched_as_well_as_at_the_origin() {
    let dim = 32;
    let near = clustered(3000, dim, 30, 0.3, 41);
    let near_queries = queries_near(&near, dim, 100, 0.2, 42);
    let shift = |rows: &[f32]| -> Vec<f32> {
        rows.iter()
            .enumerate()
            .map(|(k, &x)| x + 100.0 + (k % dim) as f32 / 8.0)
            .collect()
    };
    let (far, far_queries) = (shift(&near), shift(&near_queries));
    // A translation changes no distance: the same neighbours.
    let gt = truth(&near, &near_queries, dim, 10);
    assert_eq!(truth(&far, &far_queries, dim, 10), gt);
    let p = SearchParams {
        k: 10,
        nprobe: 8,
        rerank: 100,
        probe_margin: None,
    };
    for (codec, refine, budget) in [
        (CodecKind::RaBitQ1, Some(CodecKind::Sq8), None),
        (CodecKind::PcaRaBitQ, None, None),
        (CodecKind::Sq8, None, None),
        (CodecKind::PcaRaBitQ, None, Some(24.0)),
    ] {
        let mut params = BuildParams::default()
            .with_codec(codec)
            .with_refine(refine)
            .with_num_anchors(32);
        if let Some(b) = budget {
            params = params.with_bytes_per_vector(b);
        }
        let build = |data: &[f32]| Index::build(data, dim, &params, &CpuBackend, &mut |_| {});
        let (at_origin, far_index) = (build(&near).unwrap().0, build(&far).unwrap().0);
        assert!(at_origin.centre().is_none(), "{codec}");
        let centre = far_index.centre().expect("far data is centred");
        // The data's mean (all 3,000 rows are sampled).
        for (j, c) in centre.iter().enumerate() {
            let mean = far.iter().skip(j).step_by(dim).sum::<f32>() / 3000.0;
            assert!((c - mean).abs() < 1e-3, "dimension {j}: {c} vs {mean}");
        }
        if let Some(b) = budget {
            assert!(far_index.file_size() as f64 <= b * 3000.0, "{codec} at {b}");
        }
        let recall = |index: &Index, queries: &[f32]| {
            let ids = index.search_batch(queries, &p, &CpuBackend).unwrap().ids;
            recall_at(&ids, 10, &gt, 10, 10)
        };
        let (r_near, r_far) = (
            recall(&at_origin, &near_queries),
            recall(&far_index, &far_queries),
        );
        eprintln!("{codec} + {refine:?} ({budget:?} B): at the origin {r_near}, far {r_far}");
        assert!(
            r_far >= r_near - 0.02,
            "{codec}: {r_far} far, {r_near} at the origin"
        );
        // Single searches translate their query too.
        let batch = far_index
            .search_batch(&far_queries[..dim], &p, &CpuBackend)
            .unwrap();
        let single = far_index.search(&far_queries[..dim], &p).unwrap();
        assert_eq!(
            single.iter().map(|h| h.id as i64).collect::<Vec<_>>(),
            batch.ids
        );
        // Saved and loaded: the same centre and answers.
        let back = Index::from_bytes(&vlc::format::to_bytes(&far_index)).unwrap();
        assert_eq!(back.centre(), far_index.centre());
        let (fewer, _) = far_index.remove_ids(&[0, 1]).unwrap();
        assert_eq!(fewer.centre(), far_index.centre());
        assert_eq!(
            back.search_batch(&far_queries, &p, &CpuBackend).unwrap(),
            far_index
                .search_batch(&far_queries, &p, &CpuBackend)
                .unwrap()
        );
        // Added vectors (far too) are encoded in the same coordinates: each finds itself.
        let added = shift(&queries_near(&near, dim, 20, 0.05, 43));
        let source = vlc::SliceSource::new(&added, dim).unwrap();
        let (grown, _) = far_index
            .add_from(&source, &CpuBackend, &mut |_| {})
            .unwrap();
        let hits = grown
            .search_batch(&added, &SearchParams { k: 1, ..p }, &CpuBackend)
            .unwrap();
        let found = hits
            .ids
            .iter()
            .enumerate()
            .filter(|&(i, &id)| id == (3000 + i) as i64)
            .count();
        assert!(
            found >= 18,
            "{codec}: {found} of 20 added vectors find themselves"
        );
    }
}

#[test]
fn the_automatic_pool_rescores_what_the_first_stage_pushed_out_of_the_fixed_one() {
    // 16 dimensions: a 1-bit first stage ranks poorly, so true neighbours fall beyond its 10·k
    // best. Behind an exact (f32) second stage, the automatic pool rescores those 10·k and
    // the candidates beyond them within the first stage's error of the k-th best, a superset:
    // its i-th distance is never above the fixed pool's, and it finds more true neighbours.
    let dim = 16;
    let data = clustered(6000, dim, 12, 0.6, 41);
    let queries = queries_near(&data, dim, 300, 0.3, 42);
    let k = 10;
    let gt = truth(&data, &queries, dim, k);
    let params = BuildParams::default()
        .with_codec(CodecKind::RaBitQ1)
        .with_refine(Some(CodecKind::F32))
        .with_num_anchors(16);
    let (index, _) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
    let search = |rerank: usize| {
        let p = SearchParams {
            k,
            nprobe: 16,
            rerank,
            probe_margin: None,
        };
        index.search_batch(&queries, &p, &CpuBackend).unwrap()
    };
    let (auto, fixed) = (search(0), search(10 * k));
    for (i, (a, f)) in auto.distances.iter().zip(&fixed.distances).enumerate() {
        assert!(
            *a <= *f * (1.0 + 1e-6),
            "query {}, rank {}: {a} with the automatic pool, {f} with 10·k",
            i / k,
            i % k
        );
    }
    let (recall_auto, recall_fixed) = (
        recall_at(&auto.ids, k, &gt, k, k),
        recall_at(&fixed.ids, k, &gt, k, k),
    );
    eprintln!("recall@10: automatic pool {recall_auto}, 10·k {recall_fixed}");
    assert!(
        recall_auto > recall_fixed && recall_auto >= 0.99,
        "automatic pool {recall_auto}, 10·k {recall_fixed}"
    );
    // One query at a time keeps the same estimates as a batch does.
    for (i, q) in queries.chunks(dim).enumerate().take(50) {
        let hits = index
            .search(
                q,
                &SearchParams {
                    k,
                    nprobe: 16,
                    rerank: 0,
                    probe_margin: None,
                },
            )
            .unwrap();
        let ids: Vec<i64> = hits.iter().map(|n| i64::from(n.id)).collect();
        assert_eq!(ids, auto.ids[i * k..(i + 1) * k], "query {i}");
    }
}
