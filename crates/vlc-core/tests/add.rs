//! Adding vectors to a built index (`Index::add_from`): stored vectors keep their codes and
//! ids, new ones are found under their new ids, adding in steps equals adding at once, the
//! result survives a file round trip, and bad input is refused.

use vlc::synthetic::clustered;
use vlc::{BuildParams, CodecKind, CpuBackend, Index, Metric, SearchParams, SliceSource, VlcError};

const DIM: usize = 32;

fn hits(index: &Index, queries: &[f32], k: usize, nprobe: usize) -> Vec<(u32, u32)> {
    let p = SearchParams {
        k,
        nprobe,
        ..Default::default()
    };
    queries
        .chunks(DIM)
        .flat_map(|q| index.search(q, &p).unwrap())
        .map(|h| (h.id, h.distance.to_bits()))
        .collect()
}

fn params() -> BuildParams {
    BuildParams::default()
        .with_codec(CodecKind::RaBitQ1)
        .with_refine(Some(CodecKind::Sq8))
        .with_num_anchors(32)
}

fn add(index: &Index, rows: &[f32]) -> Index {
    let source = SliceSource::new(rows, DIM).unwrap();
    index.add_from(&source, &CpuBackend, &mut |_| {}).unwrap().0
}

#[test]
fn added_vectors_are_found_under_their_new_ids_and_old_ones_stay() {
    let data = clustered(4000, DIM, 40, 0.5, 5);
    let (old, new) = data.split_at(3000 * DIM);
    let (base, _) = Index::build(old, DIM, &params(), &CpuBackend, &mut |_| {}).unwrap();
    let source = SliceSource::new(new, DIM).unwrap();
    let (grown, report) = base.add_from(&source, &CpuBackend, &mut |_| {}).unwrap();
    assert_eq!(
        (grown.len(), report.added, report.first_id),
        (4000, 1000, 3000)
    );

    // Every list holds its old members plus the new ones assigned to it.
    let added_per_list = grown
        .list_sizes()
        .iter()
        .zip(base.list_sizes())
        .map(|(g, b)| g.checked_sub(b).expect("a list lost members"))
        .sum::<usize>();
    assert_eq!(added_per_list, 1000);

    // Energy: the mean over both, with the new rows' own as reported.
    let expected = (base.energy() as f64 * 3000.0 + report.added_energy * 1000.0) / 4000.0;
    assert!((grown.energy() as f64 - expected).abs() < 1e-6 * expected);
    assert!((report.index_energy_before - base.energy() as f64).abs() < 1e-6);

    // Each added vector is its own nearest neighbour under its new id (all lists probed).
    let found = hits(&grown, new, 1, 32)
        .iter()
        .enumerate()
        .filter(|(i, (id, _))| *id as usize == 3000 + i)
        .count();
    assert!(
        found >= 990,
        "{found} of 1000 added vectors found under their ids"
    );
    // And each old vector still comes back first under its own id.
    let old_found = hits(&grown, &old[..200 * DIM], 1, 32)
        .iter()
        .enumerate()
        .filter(|(i, (id, _))| *id as usize == *i)
        .count();
    assert!(old_found >= 198, "{old_found} of 200 old vectors found");
}

#[test]
fn adding_in_steps_equals_adding_at_once_and_survives_a_file() {
    let data = clustered(3000, DIM, 30, 0.5, 6);
    let (old, new) = data.split_at(2000 * DIM);
    let (base, _) = Index::build(old, DIM, &params(), &CpuBackend, &mut |_| {}).unwrap();
    let at_once = add(&base, new);
    let in_steps = add(&add(&base, &new[..300 * DIM]), &new[300 * DIM..]);
    let queries = &data[..3000 * DIM];
    let expected = hits(&at_once, queries, 10, 8);
    assert_eq!(hits(&in_steps, queries, 10, 8), expected);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grown.vlc");
    in_steps.save(&path).unwrap();
    assert_eq!(hits(&Index::view(&path).unwrap(), queries, 10, 8), expected);
    assert_eq!(hits(&Index::load(&path).unwrap(), queries, 10, 8), expected);
}

#[test]
fn cosine_indexes_normalise_what_is_added() {
    let data = clustered(2000, DIM, 20, 0.5, 7);
    let p = params().with_metric(Metric::Cosine);
    let (base, _) = Index::build(&data, DIM, &p, &CpuBackend, &mut |_| {}).unwrap();
    // Row 11 again, at 7 times its length: the same direction.
    let scaled: Vec<f32> = data[11 * DIM..12 * DIM].iter().map(|v| v * 7.0).collect();
    let grown = add(&base, &scaled);
    let top = hits(&grown, &data[11 * DIM..12 * DIM], 2, 32);
    let mut ids: Vec<u32> = top.iter().map(|h| h.0).collect();
    ids.sort();
    assert_eq!(ids, [11, 2000]);
    assert_eq!(top[0].1, top[1].1, "same direction, same distance");
}

#[test]
fn adding_refuses_bad_input() {
    let data = clustered(1000, DIM, 10, 0.5, 8);
    let (base, _) = Index::build(&data, DIM, &params(), &CpuBackend, &mut |_| {}).unwrap();
    let wrong = vec![0.5f32; 3 * 31];
    let err = base
        .add_from(
            &SliceSource::new(&wrong, 31).unwrap(),
            &CpuBackend,
            &mut |_| {},
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            VlcError::DimensionMismatch {
                expected: 32,
                actual: 31,
                ..
            }
        ),
        "{err}"
    );
    let add = |rows: &[f32]| {
        base.add_from(
            &SliceSource::new(rows, DIM).unwrap(),
            &CpuBackend,
            &mut |_| {},
        )
        .map(|_| ())
        .unwrap_err()
    };
    let err = add(&[]);
    assert!(matches!(err, VlcError::EmptyInput { .. }), "{err}");
    let mut bad = data[..5 * DIM].to_vec();
    bad[4 * DIM + 9] = f32::NAN;
    let err = add(&bad);
    assert!(
        matches!(
            err,
            VlcError::NonFinite {
                row: 4,
                column: 9,
                ..
            }
        ),
        "{err}"
    );
    bad[4 * DIM + 9] = 1e30;
    let err = add(&bad);
    assert!(matches!(err, VlcError::TooLarge { row: 4, .. }), "{err}");
    // The index itself is untouched.
    assert_eq!(base.len(), 1000);
}

#[test]
fn removed_vectors_are_gone_and_their_ids_are_not_given_again() {
    let data = clustered(3000, DIM, 30, 0.5, 9);
    let (base, _) = Index::build(&data, DIM, &params(), &CpuBackend, &mut |_| {}).unwrap();
    // Every tenth vector, and the largest id, with a repeat.
    let mut doomed: Vec<u32> = (0..3000).step_by(10).collect();
    doomed.extend([2999, 2999]);
    let (smaller, report) = base.remove_ids(&doomed).unwrap();
    assert_eq!((report.removed, smaller.len()), (301, 2699));
    let expected_sizes: usize = smaller.list_sizes().iter().sum();
    assert_eq!(expected_sizes, 2699);
    // No removed id comes back, and every kept vector still finds itself first.
    let got = hits(&smaller, &data, 20, 32);
    let gone = |id: u32| id.is_multiple_of(10) || id == 2999;
    assert!(got.iter().all(|&(id, _)| !gone(id)));
    let found = (0..3000u32)
        .filter(|&i| !gone(i))
        .filter(|&i| got[i as usize * 20].0 == i)
        .count();
    assert!(found >= 2690, "{found} of 2699 kept vectors found first");
    // A kept vector's answers are the old ones with the removed ids left out (same codes,
    // same distances), wherever the old answers held enough kept ids.
    let old = hits(&base, &data[..50 * DIM], 40, 32);
    for (q, new) in got[..50 * 20].chunks(20).enumerate() {
        let kept: Vec<(u32, u32)> = old[q * 40..(q + 1) * 40]
            .iter()
            .copied()
            .filter(|&(id, _)| !gone(id))
            .take(20)
            .collect();
        if kept.len() == 20 {
            assert_eq!(new, &kept[..], "query {q}");
        }
    }
    // The largest id was removed; it is not given again.
    assert_eq!(base.next_id(), 3000);
    assert_eq!(smaller.next_id(), 3000);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("smaller.vlc");
    smaller.save(&path).unwrap();
    let reopened = Index::view(&path).unwrap();
    assert_eq!(reopened.next_id(), 3000);
    let (grown, added) = reopened
        .add_from(
            &SliceSource::new(&data[..2 * DIM], DIM).unwrap(),
            &CpuBackend,
            &mut |_| {},
        )
        .unwrap();
    assert_eq!(added.first_id, 3000);
    let top: Vec<u32> = hits(&grown, &data[..DIM], 1, 32)
        .iter()
        .map(|h| h.0)
        .collect();
    assert_eq!(top, [3000], "row 0 comes back under its new id");
    // Each list's ids still ascend after removing and adding, so every step keeps them coded
    // per list (format version 10) rather than packed.
    for (what, index) in [
        ("built", &base),
        ("removed", &smaller),
        ("reopened", &reopened),
        ("grown", &grown),
    ] {
        assert!(
            index.id_storage().starts_with("Elias-Fano per list"),
            "{what}: {}",
            index.id_storage()
        );
    }
}

#[test]
fn removing_refuses_unknown_ids_and_emptying_the_index() {
    let data = clustered(500, DIM, 5, 0.5, 10);
    let (base, _) = Index::build(&data, DIM, &params(), &CpuBackend, &mut |_| {}).unwrap();
    let err = base.remove_ids(&[3, 500, 7]).unwrap_err().to_string();
    assert!(err.contains("id 500 is not in the index"), "{err}");
    let all: Vec<u32> = (0..500).collect();
    let err = base.remove_ids(&all).unwrap_err().to_string();
    assert!(err.contains("empty index"), "{err}");
    // Removing and removing again: the second time the id is gone.
    let (smaller, _) = base.remove_ids(&[3]).unwrap();
    assert!(smaller.remove_ids(&[3]).is_err());
}

/// An index just built, grown or shrunk builds its fast-scan layout at its first search. Many
/// threads searching it at once (here inside a rayon pool, as a caller's `par_iter` would)
/// must neither deadlock nor answer differently from an index opened from a file. A layout
/// built with rayon inside the lazy initialiser once deadlocked here: a thread waiting for its
/// own parallel work picked up another search, which waited for the same initialiser.
#[test]
fn concurrent_first_searches_of_a_fresh_index_agree_and_finish() {
    use rayon::prelude::*;
    let data = clustered(30_000, DIM, 40, 0.5, 12);
    let (fresh, _) = Index::build(&data, DIM, &params(), &CpuBackend, &mut |_| {}).unwrap();
    let reopened = Index::from_bytes(&vlc::format::to_bytes(&fresh)).unwrap();
    let queries = data[..2000 * DIM].to_vec();
    let expected = hits(&reopened, &queries, 10, 8);
    let fresh = std::sync::Arc::new(fresh);
    for round in 0..4 {
        // A new copy each round, its layout not yet built.
        let copy = Index::from_bytes(&vlc::format::to_bytes(&fresh)).unwrap();
        let (grown, _) = copy
            .add_from(
                &SliceSource::new(&data[..DIM], DIM).unwrap(),
                &CpuBackend,
                &mut |_| {},
            )
            .unwrap();
        let (index, _) = grown.remove_ids(&[30_000]).unwrap();
        let queries = queries.clone();
        let (done, wait) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(8)
                .build()
                .unwrap();
            let p = SearchParams {
                k: 10,
                nprobe: 8,
                ..Default::default()
            };
            // A batch search of a fresh copy first (the CUDA search suite's pattern, which hung
            // on a 16-core machine), then single searches from the pool's threads.
            let batch_copy = Index::from_bytes(&vlc::format::to_bytes(&index)).unwrap();
            let fresh_batch = batch_copy.remove_ids(&[1]).unwrap().0;
            let batch =
                pool.install(|| fresh_batch.search_batch(&queries, &p, &CpuBackend).unwrap());
            let got: Vec<(u32, u32)> = pool.install(|| {
                queries
                    .par_chunks(DIM)
                    .flat_map_iter(|q| index.search(q, &p).unwrap())
                    .map(|h| (h.id, h.distance.to_bits()))
                    .collect()
            });
            done.send((got, batch.ids.len())).unwrap();
        });
        let (got, batch_len) = wait
            .recv_timeout(std::time::Duration::from_secs(120))
            .unwrap_or_else(|_| {
                panic!(
                    "round {round}: concurrent first searches did not finish in 120 s (deadlock)"
                )
            });
        assert_eq!(got, expected, "round {round}");
        assert_eq!(batch_len, 2000 * 10, "round {round}");
    }
}
