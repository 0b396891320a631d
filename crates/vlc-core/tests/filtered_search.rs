//! Filtered search (`Index::id_filter`, `search_filtered`, `search_batch_filtered`): it
//! returns what the index holding only the allowed vectors returns, passes over lists without
//! one, and refuses a filter made for another index.

use vlc::synthetic::{clustered, queries_near};
use vlc::{
    exact_knn, BuildParams, CodecKind, CpuBackend, Index, SearchParams, SearchResults, VlcError,
};

fn build(data: &[f32], dim: usize, params: &BuildParams) -> Index {
    Index::build(data, dim, params, &CpuBackend, &mut |_| {})
        .unwrap()
        .0
}

/// `search_filtered` of each query, as rows of (queries, k) padded like a batch's.
fn one_at_a_time(
    index: &Index,
    queries: &[f32],
    params: &SearchParams,
    filter: Option<&vlc::IdFilter>,
) -> SearchResults {
    let dim = index.dim();
    let rows = queries.len() / dim;
    let mut out = SearchResults::padding(rows, params.k).unwrap();
    for (r, q) in queries.chunks(dim).enumerate() {
        let hits = match filter {
            Some(f) => index.search_filtered(q, params, f).unwrap(),
            None => index.search(q, params).unwrap(),
        };
        for (j, h) in hits.iter().enumerate() {
            out.ids[r * params.k + j] = h.id as i64;
            out.distances[r * params.k + j] = h.distance;
        }
    }
    out
}

/// The ids of the exact 10 nearest of `allowed` (ids = rows of `data`, (n, dim)) to each
/// query, as rows of 10.
fn truth_among(data: &[f32], dim: usize, queries: &[f32], allowed: &[u32]) -> Vec<u32> {
    let subset: Vec<f32> = allowed
        .iter()
        .flat_map(|&i| data[i as usize * dim..][..dim].iter().copied())
        .collect();
    exact_knn(&subset, queries, dim, 10)
        .unwrap()
        .into_iter()
        .map(|row| allowed[row as usize])
        .collect()
}

/// Every third id and 25 ids from the rest: a broad filter with a few stragglers.
fn allowed_ids(n: u32) -> Vec<u32> {
    (0..n)
        .filter(|i| i % 3 == 0 || (i % 3 == 1 && i % 97 == 1))
        .collect()
}

/// With every list probed, a filtered search gives, bit for bit, what an unfiltered search of
/// the index with every other vector removed gives (the same anchors, codecs and codes, and
/// the kept vectors in the same order): one query at a time and in batches (the batch's
/// anchors ranked by the backend), with a fixed and an automatic pool and a probe margin.
#[test]
fn a_filtered_search_returns_what_the_index_of_the_allowed_vectors_returns() {
    let dim = 24;
    let n = 3000;
    let data = clustered(n, dim, 30, 0.6, 5);
    let queries = queries_near(&data, dim, 40, 0.3, 6);
    let allowed = allowed_ids(n as u32);
    let others: Vec<u32> = (0..n as u32).filter(|i| !allowed.contains(i)).collect();
    let cases = [
        (CodecKind::Sq8, None),
        (CodecKind::RaBitQ1, None),
        (CodecKind::RaBitQ1, Some(CodecKind::Sq8)),
        (CodecKind::RaBitQ3, None),
        (CodecKind::PcaRaBitQ, None),
        (CodecKind::AnchorOnly, None),
    ];
    for (codec, refine) in cases {
        let params = BuildParams::default()
            .with_codec(codec)
            .with_refine(refine)
            .with_num_anchors(48);
        let index = build(&data, dim, &params);
        let filter = index.id_filter(&allowed);
        assert_eq!(filter.len(), allowed.len());
        let (kept, report) = index.remove_ids(&others).unwrap();
        assert_eq!(report.removed, others.len());
        let name = format!("{codec:?} + {refine:?}");
        for (rerank, probe_margin) in [(0, None), (30, None), (0, Some(1.0))] {
            let sp = SearchParams {
                k: 10,
                nprobe: index.num_anchors(),
                rerank,
                probe_margin,
            };
            let expected = kept.search_batch(&queries, &sp, &CpuBackend).unwrap();
            let batch = index
                .search_batch_filtered(&queries, &sp, &CpuBackend, &filter)
                .unwrap();
            assert_eq!(
                batch, expected,
                "{name}, pool {rerank}, margin {probe_margin:?}"
            );
            let single = one_at_a_time(&index, &queries, &sp, Some(&filter));
            let expected = one_at_a_time(&kept, &queries, &sp, None);
            assert_eq!(
                single, expected,
                "{name}, pool {rerank}, margin {probe_margin:?}"
            );
            assert!(batch
                .ids
                .iter()
                .all(|&id| id >= 0 && allowed.binary_search(&(id as u32)).is_ok()));
        }
    }
}

/// A narrow filter leaves many lists without an allowed vector, and a search ranks only the
/// anchors of the lists that hold one; their distances are the ones ranking every anchor
/// gives, so with every list probed the results are, bit for bit, those of the index with
/// every other vector removed (which ranks every anchor), one query at a time and in
/// batches. 300 anchors: where the CPU has an integer kernel, both rank on it, the filter's
/// lists with a packing of their own.
#[test]
fn a_narrow_filter_ranks_its_lists_as_the_whole_index_does() {
    let dim = 24;
    let n = 6000;
    let data = clustered(n, dim, 40, 0.6, 15);
    let queries = queries_near(&data, dim, 40, 0.3, 16);
    let allowed: Vec<u32> = (0..n as u32).filter(|i| i % 40 == 7).collect();
    let others: Vec<u32> = (0..n as u32).filter(|i| i % 40 != 7).collect();
    for (codec, refine) in [
        (CodecKind::Sq8, None),
        (CodecKind::RaBitQ1, Some(CodecKind::Sq8)),
    ] {
        let params = BuildParams::default()
            .with_codec(codec)
            .with_refine(refine)
            .with_num_anchors(300);
        let index = build(&data, dim, &params);
        assert_eq!(index.num_anchors(), 300);
        let filter = index.id_filter(&allowed);
        let (kept, _) = index.remove_ids(&others).unwrap();
        let empty = kept.list_sizes().iter().filter(|&&s| s == 0).count();
        assert!(empty > 50, "{empty} lists without an allowed vector");
        let sp = SearchParams {
            k: 10,
            nprobe: index.num_anchors(),
            rerank: 0,
            probe_margin: None,
        };
        let name = format!("{codec:?} + {refine:?}");
        let batch = index
            .search_batch_filtered(&queries, &sp, &CpuBackend, &filter)
            .unwrap();
        assert_eq!(
            batch,
            kept.search_batch(&queries, &sp, &CpuBackend).unwrap(),
            "{name}"
        );
        assert_eq!(
            one_at_a_time(&index, &queries, &sp, Some(&filter)),
            one_at_a_time(&kept, &queries, &sp, None),
            "{name}"
        );
    }
}

/// With the f32 refine tier, every list probed and every candidate rescored, a filtered search
/// finds the exact nearest allowed vectors.
#[test]
fn a_filtered_search_can_be_exact() {
    let dim = 16;
    let n = 2000;
    let data = clustered(n, dim, 20, 0.7, 8);
    let queries = queries_near(&data, dim, 30, 0.3, 9);
    let allowed = allowed_ids(n as u32);
    let truth: Vec<i64> = truth_among(&data, dim, &queries, &allowed)
        .into_iter()
        .map(i64::from)
        .collect();
    let index = build(
        &data,
        dim,
        &BuildParams::default()
            .with_codec(CodecKind::Sq4)
            .with_refine(Some(CodecKind::F32))
            .with_num_anchors(32),
    );
    let filter = index.id_filter(&allowed);
    let sp = SearchParams {
        k: 10,
        nprobe: 32,
        rerank: n,
        probe_margin: None,
    };
    let batch = index
        .search_batch_filtered(&queries, &sp, &CpuBackend, &filter)
        .unwrap();
    assert_eq!(batch.ids, truth);
    assert_eq!(
        one_at_a_time(&index, &queries, &sp, Some(&filter)).ids,
        truth
    );
}

/// A 12-d `sq8` index of 40 anchors over two groups 100 apart: `near` vectors (ids first)
/// and `far` ones after them; and `queries` queries near the first group.
fn near_and_far(near: usize, far: usize, queries: usize, seed: u64) -> (Index, Vec<f32>) {
    let dim = 12;
    let near = clustered(near, dim, 10, 0.5, seed);
    let far: Vec<f32> = clustered(far, dim, 4, 0.5, seed + 1)
        .iter()
        .map(|x| x + 100.0)
        .collect();
    let data = [near.clone(), far].concat();
    let params = BuildParams::default()
        .with_codec(CodecKind::Sq8)
        .with_num_anchors(40);
    let queries = queries_near(&near, dim, queries, 0.2, seed + 2);
    (build(&data, dim, &params), queries)
}

/// A selective filter whose vectors lie in lists far from the queries: the nearest lists that
/// hold one are probed, not the nearest lists, and one probe's worth of them (each counts the
/// share of its vectors allowed, here a few percent) is every list holding one: k neighbours.
#[test]
fn lists_without_an_allowed_vector_are_passed_over() {
    // The filter allows 30 of the far group.
    let (index, queries) = near_and_far(1500, 500, 20, 11);
    let allowed: Vec<u32> = (1500..2000).step_by(17).collect();
    let filter = index.id_filter(&allowed);
    for probe_margin in [None, Some(0.5)] {
        let sp = SearchParams {
            k: 10,
            nprobe: 1,
            rerank: 0,
            probe_margin,
        };
        let plain = index.search_batch(&queries, &sp, &CpuBackend).unwrap();
        assert!(plain.ids.iter().all(|&id| (0..1500).contains(&id)));
        // The 30 allowed vectors lie in a few lists: the nearest of them holds at least one.
        let batch = index
            .search_batch_filtered(&queries, &sp, &CpuBackend, &filter)
            .unwrap();
        // (Below 256 anchors a lone query ranks them in f32, a batch on 8-bit integers where
        // the CPU has an integer kernel: the distances may differ in their last digits.)
        let single = one_at_a_time(&index, &queries, &sp, Some(&filter));
        assert_eq!(batch.ids, single.ids);
        for row in batch.ids.chunks(10) {
            assert!(
                row.iter().all(|&id| allowed.contains(&(id as u32))),
                "{row:?}"
            );
        }
        // Enough probes reach k allowed vectors for every query.
        let wide = SearchParams { nprobe: 40, ..sp };
        let batch = index
            .search_batch_filtered(&queries, &wide, &CpuBackend, &filter)
            .unwrap();
        assert!(batch.ids.iter().all(|&id| allowed.contains(&(id as u32))));
    }
}

#[test]
fn empty_and_foreign_filters() {
    let dim = 8;
    let data = clustered(400, dim, 5, 0.5, 21);
    let queries = queries_near(&data, dim, 20, 0.2, 22);
    let params = BuildParams::default()
        .with_codec(CodecKind::Sq8)
        .with_num_anchors(10);
    let index = build(&data, dim, &params);
    let sp = SearchParams {
        k: 5,
        nprobe: 4,
        rerank: 0,
        probe_margin: None,
    };
    // Ids the index does not hold (never given) allow nothing; repeats count once.
    let none = index.id_filter(&[400, 401, u32::MAX]);
    assert!(none.is_empty());
    let results = index
        .search_batch_filtered(&queries, &sp, &CpuBackend, &none)
        .unwrap();
    assert!(results.ids.iter().all(|&id| id == -1));
    assert!(results.distances.iter().all(|d| d.is_infinite()));
    assert!(index
        .search_filtered(&queries[..dim], &sp, &none)
        .unwrap()
        .is_empty());
    let three = index.id_filter(&[7, 7, 9, 11, 11, 500]);
    assert_eq!(three.len(), 3);
    let hits = index
        .search_filtered(&queries[..dim], &SearchParams { nprobe: 10, ..sp }, &three)
        .unwrap();
    let mut ids: Vec<u32> = hits.iter().map(|h| h.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [7, 9, 11]);

    // A filter belongs to the index value it was made for.
    let (smaller, _) = index.remove_ids(&[9]).unwrap();
    let refused = |r: vlc::Result<SearchResults>| match r {
        Err(VlcError::InvalidParameter { name, reason }) => {
            assert_eq!(name, "filter");
            assert!(reason.contains("another index"), "{reason}");
        }
        other => panic!("expected an error, got {other:?}"),
    };
    refused(smaller.search_batch_filtered(&queries, &sp, &CpuBackend, &three));
    let other = build(&data, dim, &params);
    refused(other.search_batch_filtered(&queries, &sp, &CpuBackend, &three));
    assert!(other.search_filtered(&queries[..dim], &sp, &three).is_err());
    // Removed ids are no longer held, and so not allowed.
    assert_eq!(smaller.id_filter(&[7, 9, 11]).len(), 2);
}

/// A filter that allows every vector probes the lists an unfiltered search probes (each list
/// counts 1); one that allows a tenth probes about ten times as many, so that it scores about
/// as many allowed candidates and keeps its recall, where probing as many lists as unfiltered
/// (the index with the other vectors removed, searched at the same nprobe) loses it.
#[test]
fn nprobe_counts_lists_worth_of_allowed_vectors() {
    let dim = 20;
    let n = 6000;
    let data = clustered(n, dim, 40, 0.7, 41);
    let queries = queries_near(&data, dim, 100, 0.3, 42);
    let index = build(
        &data,
        dim,
        &BuildParams::default()
            .with_codec(CodecKind::Sq8)
            .with_num_anchors(64),
    );
    assert!(index.list_sizes().iter().all(|&s| s > 0));
    let everything: Vec<u32> = (0..n as u32).collect();
    let all = index.id_filter(&everything);
    for probe_margin in [None, Some(1.0)] {
        let sp = SearchParams {
            k: 10,
            nprobe: 6,
            rerank: 0,
            probe_margin,
        };
        let plain = index.search_batch(&queries, &sp, &CpuBackend).unwrap();
        let batch = index
            .search_batch_filtered(&queries, &sp, &CpuBackend, &all)
            .unwrap();
        assert_eq!(batch, plain, "margin {probe_margin:?}");
        let single = one_at_a_time(&index, &queries, &sp, Some(&all));
        assert_eq!(single, one_at_a_time(&index, &queries, &sp, None));
    }
    let tenth: Vec<u32> = (0..n as u32).filter(|i| i % 10 == 3).collect();
    let truth = truth_among(&data, dim, &queries, &tenth);
    let recall = |ids: &[i64]| {
        let hits = ids
            .chunks(10)
            .zip(truth.chunks(10))
            .map(|(got, want)| got.iter().filter(|&&g| want.contains(&(g as u32))).count())
            .sum::<usize>();
        hits as f64 / truth.len() as f64
    };
    let filter = index.id_filter(&tenth);
    let others: Vec<u32> = (0..n as u32).filter(|i| i % 10 != 3).collect();
    let (kept, _) = index.remove_ids(&others).unwrap();
    let sp = SearchParams {
        k: 10,
        nprobe: 2,
        rerank: 0,
        probe_margin: None,
    };
    let filtered = index
        .search_batch_filtered(&queries, &sp, &CpuBackend, &filter)
        .unwrap();
    let same_lists = kept.search_batch(&queries, &sp, &CpuBackend).unwrap();
    let unfiltered = index.search_batch(&queries, &sp, &CpuBackend).unwrap();
    let all_truth: Vec<i64> = exact_knn(&data, &queries, dim, 10)
        .unwrap()
        .into_iter()
        .map(i64::from)
        .collect();
    let unfiltered_recall = unfiltered
        .ids
        .chunks(10)
        .zip(all_truth.chunks(10))
        .map(|(got, want)| got.iter().filter(|g| want.contains(g)).count())
        .sum::<usize>() as f64
        / all_truth.len() as f64;
    eprintln!(
        "recall@10 at nprobe 2: unfiltered {unfiltered_recall:.3}, a tenth allowed {:.3}, \
         the same lists as unfiltered {:.3}",
        recall(&filtered.ids),
        recall(&same_lists.ids)
    );
    assert_eq!(
        one_at_a_time(&index, &queries, &sp, Some(&filter)).ids,
        filtered.ids
    );
    assert!(recall(&filtered.ids) >= unfiltered_recall - 0.02);
    assert!(recall(&filtered.ids) >= recall(&same_lists.ids) + 0.08);
}

/// A filter that allows a far group whole and 1 in 50 of the group the queries are near: the
/// lists a query ranks first (sized by the filter's mean share) hold too little, so it ranks
/// every list, takes every near list and then the nearest far one; a batch (ranked again for
/// those queries) takes the same lists as one query at a time.
#[test]
fn queries_whose_nearest_lists_hold_little_rank_every_list() {
    let (index, queries) = near_and_far(3000, 1000, 30, 51);
    let allowed: Vec<u32> = (0..4000).filter(|&i| i >= 3000 || i % 50 == 0).collect();
    let filter = index.id_filter(&allowed);
    let sp = SearchParams {
        k: 100,
        nprobe: 1,
        rerank: 0,
        probe_margin: None,
    };
    let batch = index
        .search_batch_filtered(&queries, &sp, &CpuBackend, &filter)
        .unwrap();
    let single = one_at_a_time(&index, &queries, &sp, Some(&filter));
    assert_eq!(batch.ids, single.ids);
    for row in batch.ids.chunks(100) {
        // Every allowed vector of the near group (60), then far ones.
        let near_hits = row.iter().filter(|&&id| (0..3000).contains(&id)).count();
        assert_eq!(near_hits, 60, "{row:?}");
        assert!(row.iter().filter(|&&id| id >= 3000).count() > 0, "{row:?}");
    }
}

/// A filter that leaves some of 4,096 lists without an allowed vector, at nprobe 1,024, ranks
/// thousands of the lists that hold one for each query (their anchors only): a block of 2,500
/// queries is then ranked a chunk of queries at a time (at most 2^22 entries per call), and
/// gives the bytes of the same queries searched in batches of 500, each ranked in one call, and
/// the lists that one query at a time takes.
#[test]
fn a_block_ranked_in_chunks_gives_the_results_of_smaller_batches() {
    let dim = 8;
    let n = 12_000;
    let data = clustered(n, dim, 300, 0.4, 61);
    let queries = queries_near(&data, dim, 2500, 0.2, 62);
    let index = build(
        &data,
        dim,
        &BuildParams::default()
            .with_codec(CodecKind::Sq8)
            .with_num_anchors(4096),
    );
    assert_eq!(index.num_anchors(), 4096);
    let allowed: Vec<u32> = (0..n as u32).step_by(2).collect();
    let filter = index.id_filter(&allowed);
    let sp = SearchParams {
        k: 10,
        nprobe: 1024,
        rerank: 0,
        probe_margin: None,
    };
    let whole = index
        .search_batch_filtered(&queries, &sp, &CpuBackend, &filter)
        .unwrap();
    assert!(whole
        .ids
        .iter()
        .all(|&id| id >= 0 && allowed.binary_search(&(id as u32)).is_ok()));
    for (part, chunk) in queries.chunks(500 * dim).enumerate() {
        let results = index
            .search_batch_filtered(chunk, &sp, &CpuBackend, &filter)
            .unwrap();
        let rows = part * 500 * 10..(part * 500 + chunk.len() / dim) * 10;
        assert_eq!(results.ids, whole.ids[rows.clone()], "part {part}");
        assert_eq!(results.distances, whole.distances[rows], "part {part}");
    }
    let single = one_at_a_time(&index, &queries[..100 * dim], &sp, Some(&filter));
    assert_eq!(single.ids, whole.ids[..100 * 10]);
}
