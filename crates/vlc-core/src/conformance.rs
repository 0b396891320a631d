//! Backend conformance suite: every primitive against a naive reference, on odd shapes
//! (dims 1, 7, 65, 384). Written once; [`conformance_suite!`](crate::conformance_suite) stamps
//! one test per check for a backend, and a backend whose device is absent skips with a
//! message. The CPU instance lives in `tests/conformance.rs`, the CUDA one in the CUDA crate.

use crate::backend::{AnchorSums, Backend, CpuBackend, Nearest};
use crate::Rng;

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| r.normal() as f32).collect()
}

fn naive_dist(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| ((*x - *y) as f64).powi(2))
        .sum()
}

/// Nearest anchors (1, 3 and 8 per point) against brute force; shapes straddle the 64-row and
/// 64-anchor tiles of the GPU kernels. Each shape runs with f32 anchors and with 8-bit anchors
/// (what an index holds by default, which the CPU backend ranks on its integer kernels where it can).
pub fn check_nearest(backend: &dyn Backend) {
    for &dim in &[1usize, 7, 65, 384] {
        for (&(n, k, m), eight_bit) in [
            (1usize, 1usize, 1usize),
            (37, 5, 3),
            (513, 33, 1),
            (130, 131, 1),
            (200, 64, 8),
            // Several picks per point (CUDA and WGPU select 8 to 256 by radix passes): more
            // picks than a warp's lanes, and the most they select that way.
            (40, 300, 40),
            (9, 1000, 256),
        ]
        .iter()
        .flat_map(|shape| [(shape, false), (shape, true)])
        {
            let points = random(n * dim, (dim * 1000 + n) as u64);
            let mut anchors = random(k * dim, (dim * 7 + k) as u64);
            if eight_bit {
                anchors = crate::anchor_store::StoredAnchors::encode(
                    &anchors,
                    dim,
                    crate::AnchorPrecision::Int8,
                )
                .decode(dim);
            }
            let got = backend.nearest_anchors(&points, &anchors, dim, m).unwrap();
            assert_eq!(got.ids.len(), n * m);
            for i in 0..n {
                let p = &points[i * dim..(i + 1) * dim];
                // Each anchor once, nearest first.
                let row = &got.ids[i * m..(i + 1) * m];
                let distinct: std::collections::HashSet<u32> = row.iter().copied().collect();
                assert_eq!(
                    distinct.len(),
                    m,
                    "dim {dim} n {n} k {k}: an anchor picked twice"
                );
                assert!(
                    got.dists[i * m..(i + 1) * m]
                        .windows(2)
                        .all(|w| w[0] <= w[1]),
                    "dim {dim} n {n} k {k}: distances out of order"
                );
                let mut want: Vec<(f64, u32)> = (0..k)
                    .map(|a| (naive_dist(p, &anchors[a * dim..(a + 1) * dim]), a as u32))
                    .collect();
                want.sort_by(|x, y| x.0.partial_cmp(&y.0).unwrap().then(x.1.cmp(&y.1)));
                let norm = |v: &[f32]| v.iter().map(|&x| x as f64 * x as f64).sum::<f64>();
                let largest_anchor = (0..k)
                    .map(|a| norm(&anchors[a * dim..(a + 1) * dim]))
                    .fold(0.0, f64::max);
                // A backend that ranks with rounded products (TF32, FP16) reports distances
                // within its stated rounding of ||p||^2 + ||c||^2 (twice it, as both the
                // reported and the competing distance may carry it).
                let rounding = 2.0 * backend.ranking_rounding() as f64 * (norm(p) + largest_anchor);
                for (j, &(want_d, _)) in want.iter().enumerate().take(m) {
                    let (gid, gd) = (got.ids[i * m + j], got.dists[i * m + j] as f64);
                    let tol = (1e-3 * (1.0 + want_d)).max(rounding);
                    // The id must be the reference's, unless the two are tied within rounding.
                    assert!(
                        (gd - want_d).abs() <= tol,
                        "dim {dim} n {n} k {k}: dist {gd} vs {want_d}"
                    );
                    let true_d =
                        naive_dist(p, &anchors[gid as usize * dim..(gid as usize + 1) * dim]);
                    assert!(
                        (true_d - want_d).abs() <= tol,
                        "dim {dim}: id {gid} is not the {j}-th nearest"
                    );
                }
            }
        }
    }
}

/// Trimmed accumulation and the update against a naive reference (one anchor left empty), and
/// the fused accumulate-and-update against the two.
pub fn check_accumulate_and_update(backend: &dyn Backend) {
    for &dim in &[1usize, 7, 65, 384] {
        let (n, k) = (301usize, 9usize);
        let points = random(n * dim, dim as u64);
        let mut r = Rng::new(dim as u64 + 1);
        let assignment: Vec<u32> = (0..n).map(|_| r.below(k - 1) as u32).collect(); // anchor k-1 stays empty
        let dists: Vec<f32> = (0..n).map(|_| r.next_f64() as f32).collect();
        let thresholds: Vec<f32> = (0..k).map(|a| 0.3 + 0.05 * a as f32).collect();
        let sums = backend
            .accumulate(&points, dim, &assignment, &dists, &thresholds)
            .unwrap();
        let mut magnitude = vec![0f64; k * dim];
        let mut want = AnchorSums {
            sums: vec![0.0; k * dim],
            kept: vec![0; k],
            members: vec![0; k],
        };
        for i in 0..n {
            let a = assignment[i] as usize;
            want.members[a] += 1;
            if dists[i] <= thresholds[a] {
                want.kept[a] += 1;
                for d in 0..dim {
                    want.sums[a * dim + d] += points[i * dim + d] as f64;
                    magnitude[a * dim + d] += (points[i * dim + d] as f64).abs();
                }
            }
        }
        assert_eq!(sums.kept, want.kept);
        assert_eq!(sums.members, want.members);
        // Stated tolerance: within 1e-5 of the sum of magnitudes (f32 accumulation meets it;
        // the CPU and CUDA backends accumulate in f64 and are far closer).
        for ((g, w), m) in sums.sums.iter().zip(&want.sums).zip(&magnitude) {
            assert!(
                (g - w).abs() <= 1e-5 * (1.0 + m),
                "sum {g} vs {w} (magnitude {m})"
            );
        }
        let mut anchors = random(k * dim, 99);
        let before = anchors.clone();
        backend.update(&mut anchors, dim, &sums, 0.5).unwrap();
        for a in 0..k {
            for d in 0..dim {
                let (b, g) = (before[a * dim + d], anchors[a * dim + d]);
                let want = if want.kept[a] > 0 {
                    b + 0.5 * ((want.sums[a * dim + d] / want.kept[a] as f64) as f32 - b)
                } else {
                    b
                };
                assert!(
                    (g - want).abs() < 1e-5 * (1.0 + want.abs()),
                    "anchor {a} dim {d}"
                );
            }
        }
        // The fused call moves the anchors the same way and reports the same counts.
        let mut fused = before.clone();
        let nearest = Nearest {
            per_point: 1,
            ids: assignment.clone(),
            dists: dists.clone(),
            resident: None,
        };
        let counts = backend
            .accumulate_and_update(&points, &mut fused, dim, &nearest, &thresholds, 0.5)
            .unwrap();
        assert_eq!(counts.kept, want.kept);
        assert_eq!(counts.members, want.members);
        for (i, (f, g)) in fused.iter().zip(&anchors).enumerate() {
            assert!(
                (f - g).abs() < 1e-5 * (1.0 + g.abs()),
                "fused update, element {i}: {f} vs {g}"
            );
        }

        // With the backend's own assignments (a GPU backend may keep them on its device), one
        // of them superseded by a later call: the same move as the CPU reference given the same
        // values.
        let centres = random(k * dim, dim as u64 + 2);
        let own = backend.nearest_anchors(&points, &centres, dim, 1).unwrap();
        let later = backend
            .nearest_anchors(&points, &random(k * dim, 5), dim, 1)
            .unwrap();
        let mean = own.dists.iter().map(|&d| d as f64).sum::<f64>() / n as f64;
        let thresholds = vec![mean as f32; k];
        for near in [&own, &later] {
            let mut got = before.clone();
            let counts = backend
                .accumulate_and_update(&points, &mut got, dim, near, &thresholds, 0.5)
                .unwrap();
            let plain = Nearest {
                resident: None,
                ..near.clone()
            };
            let mut want = before.clone();
            let want_counts = CpuBackend
                .accumulate_and_update(&points, &mut want, dim, &plain, &thresholds, 0.5)
                .unwrap();
            assert_eq!(counts.kept, want_counts.kept);
            assert_eq!(counts.members, want_counts.members);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() < 1e-5 * (1.0 + w.abs()),
                    "update with the backend's assignment, element {i}: {g} vs {w}"
                );
            }
        }
    }
}

/// Training iterations' calls in sequence on pinned points, each checked against the CPU
/// reference given the same inputs: assignment, thresholds from the backend's own assignment,
/// accumulate-and-update with those thresholds (a GPU backend may reuse what it grouped to
/// select them) or with others, anchors changed on the host between calls (as maintenance
/// does), and other calls in between that reuse the backend's buffers (a plain update, an
/// accumulation with more anchors), after which the same anchors must still be seen as they are.
pub fn check_iteration_sequences(backend: &dyn Backend) {
    for &(dim, n, k) in &[(24usize, 2000usize, 16usize), (130, 700, 45)] {
        let points = crate::synthetic::clustered(n, dim, 12, 0.4, dim as u64 + 20);
        let _pinned = backend.pin(&points).unwrap();
        let mut anchors = points[..k * dim].to_vec();
        let mut r = Rng::new(dim as u64 + 21);
        let close = |got: &[f32], want: &[f32], what: &str| {
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert!(
                    (g - w).abs() < 1e-5 * (1.0 + w.abs()),
                    "dim {dim}, {what}, element {i}: {g} vs {w}"
                );
            }
        };
        for step in 0..8 {
            let near = backend.nearest_anchors(&points, &anchors, dim, 1).unwrap();
            let want_near = CpuBackend
                .nearest_anchors(&points, &anchors, dim, 1)
                .unwrap();
            for i in 0..n {
                assert!(
                    (near.dists[i] - want_near.dists[i]).abs() <= 1e-3 * (1.0 + want_near.dists[i]),
                    "dim {dim} step {step} point {i}: distance {} vs {}",
                    near.dists[i],
                    want_near.dists[i]
                );
            }
            let thresholds = backend.trimmed_thresholds(&near, k, 0.1).unwrap();
            assert_eq!(
                thresholds,
                crate::backend::trimmed_thresholds(&near.ids, &near.dists, k, 0.1),
                "dim {dim} step {step}: thresholds"
            );
            // Odd steps pass other thresholds than those just selected.
            let thresholds: Vec<f32> = if step % 2 == 1 {
                thresholds.iter().map(|t| 0.9 * t).collect()
            } else {
                thresholds
            };
            let plain = Nearest {
                resident: None,
                ..near.clone()
            };
            let (mut got, mut want) = (anchors.clone(), anchors.clone());
            let counts = backend
                .accumulate_and_update(&points, &mut got, dim, &near, &thresholds, 0.7)
                .unwrap();
            let want_counts = CpuBackend
                .accumulate_and_update(&points, &mut want, dim, &plain, &thresholds, 0.7)
                .unwrap();
            assert_eq!(counts.kept, want_counts.kept, "dim {dim} step {step}: kept");
            assert_eq!(counts.members, want_counts.members, "dim {dim} step {step}");
            close(&got, &want, "accumulate-and-update");
            anchors = want;
            match step {
                // An anchor moved on the host, as a split or re-seed does.
                2 => {
                    let p = r.below(n);
                    anchors[..dim].copy_from_slice(&points[p * dim..(p + 1) * dim]);
                }
                // A plain update of other anchors in between.
                4 => {
                    let sums = CpuBackend
                        .accumulate(&points, dim, &plain.ids, &plain.dists, &thresholds)
                        .unwrap();
                    let mut other = random(k * dim, 7);
                    let mut want_other = other.clone();
                    backend.update(&mut other, dim, &sums, 0.5).unwrap();
                    CpuBackend.update(&mut want_other, dim, &sums, 0.5).unwrap();
                    close(&other, &want_other, "plain update");
                }
                // An accumulation of host data with more anchors in between.
                5 => {
                    let wide = 2 * k + 3;
                    let ids: Vec<u32> = (0..n).map(|_| r.below(wide) as u32).collect();
                    let dists: Vec<f32> = (0..n).map(|_| r.next_f64() as f32).collect();
                    let thr = vec![0.5f32; wide];
                    let got = backend
                        .accumulate(&points, dim, &ids, &dists, &thr)
                        .unwrap();
                    let want = CpuBackend
                        .accumulate(&points, dim, &ids, &dists, &thr)
                        .unwrap();
                    assert_eq!(got.kept, want.kept, "dim {dim}: wide accumulation");
                }
                _ => {}
            }
        }
    }
}

/// Anchor training through the backend ends within 0.5% of the CPU reference's energy.
/// Repeated one-per-point assignments of pinned points while the anchors move (a little, a
/// lot for a few, all at once, or change in number), as in training: each result is the
/// nearest anchor within rounding (a GPU backend may reuse distance bounds between calls).
pub fn check_nearest_with_moving_anchors(backend: &dyn Backend) {
    for &(dim, n, k) in &[(7usize, 3000usize, 40usize), (65, 1029, 33), (384, 700, 64)] {
        let points = random(n * dim, dim as u64 + 11);
        let _pinned = backend.pin(&points).unwrap();
        let mut anchors = random(k * dim, dim as u64 + 12);
        let mut r = Rng::new(dim as u64 + 13);
        for step in 0..10 {
            match step {
                // A few anchors jump to points (at step 4 while the others move a little, as
                // after re-seeding or splitting in training).
                3 | 4 => {
                    if step == 4 {
                        anchors
                            .iter_mut()
                            .for_each(|c| *c += 0.02 * r.normal() as f32);
                    }
                    for a in [0, k / 2, k - 1] {
                        let p = r.below(n);
                        anchors[a * dim..(a + 1) * dim]
                            .copy_from_slice(&points[p * dim..(p + 1) * dim]);
                    }
                }
                // All move far.
                6 => anchors = random(k * dim, dim as u64 + 14),
                // One anchor fewer.
                7 => anchors.truncate((k - 1) * dim),
                // Small moves.
                _ => anchors
                    .iter_mut()
                    .for_each(|c| *c += 0.02 * r.normal() as f32),
            }
            let k_now = anchors.len() / dim;
            let got = backend.nearest_anchors(&points, &anchors, dim, 1).unwrap();
            let norm = |v: &[f32]| v.iter().map(|&x| x as f64 * x as f64).sum::<f64>();
            for i in 0..n {
                let p = &points[i * dim..(i + 1) * dim];
                let (best, best_id) = (0..k_now)
                    .map(|a| (naive_dist(p, &anchors[a * dim..(a + 1) * dim]), a))
                    .fold((f64::INFINITY, 0), |x, y| if y.0 < x.0 { y } else { x });
                let gid = got.ids[i] as usize;
                assert!(gid < k_now, "step {step}: id {gid} of {k_now} anchors");
                let tol = 1e-3 * (1.0 + best);
                // Which anchor wins a near-tie may differ within the backend's stated rounding
                // of its products (twice it: one rounding on each side).
                let tie = 2.0
                    * backend.ranking_rounding() as f64
                    * (2.0 * norm(p)
                        + norm(&anchors[gid * dim..(gid + 1) * dim])
                        + norm(&anchors[best_id * dim..(best_id + 1) * dim]));
                let true_d = naive_dist(p, &anchors[gid * dim..(gid + 1) * dim]);
                assert!(
                    (true_d - best).abs() <= tol.max(tie),
                    "dim {dim} step {step} point {i}: anchor {gid} at {true_d}, nearest at {best}"
                );
                assert!(
                    (got.dists[i] as f64 - true_d).abs() <= tol,
                    "dim {dim} step {step} point {i}: distance {} vs {true_d}",
                    got.dists[i]
                );
            }
        }
    }
}

/// The robust estimator's trimming thresholds equal the CPU reference's value for value, from
/// the backend's own copy of an assignment (pinned points) and from host data alike; bad
/// arguments are typed errors.
pub fn check_trimmed_thresholds(backend: &dyn Backend) {
    for &(dim, n, k, trim) in &[
        (16usize, 5000usize, 37usize, 0.05f32),
        (3, 257, 64, 0.3),
        (40, 2000, 7, 0.0),
        (8, 1500, 300, 0.5),
        // Enough points for a GPU backend to group them on the device.
        (4, 70_000, 200, 0.05),
    ] {
        // Clustered, with exact duplicates (equal distances) in every tenth row.
        let mut points = crate::synthetic::clustered(n, dim, 9, 0.3, dim as u64);
        for i in (10..n).step_by(10) {
            let (a, b) = points.split_at_mut(i * dim);
            b[..dim].copy_from_slice(&a[(i - 10) * dim..(i - 9) * dim]);
        }
        let anchors = random(k * dim, dim as u64 + 5);
        let _pinned = backend.pin(&points).unwrap();
        let near = backend.nearest_anchors(&points, &anchors, dim, 1).unwrap();
        let want = crate::backend::trimmed_thresholds(&near.ids, &near.dists, k, trim);
        let got = backend.trimmed_thresholds(&near, k, trim).unwrap();
        assert_eq!(got, want, "dim {dim}, {n} points, {k} anchors, trim {trim}");
        // From the host copy (no resident result).
        let host = crate::backend::Nearest {
            resident: None,
            ..near.clone()
        };
        assert_eq!(backend.trimmed_thresholds(&host, k, trim).unwrap(), want);
        // An anchor with every point and the rest empty.
        let one = crate::backend::Nearest {
            per_point: 1,
            ids: vec![k as u32 - 1; n],
            dists: near.dists.clone(),
            resident: None,
        };
        let t = backend.trimmed_thresholds(&one, k, trim).unwrap();
        assert_eq!(
            t,
            crate::backend::trimmed_thresholds(&one.ids, &one.dists, k, trim)
        );
        assert!(t[..k - 1].iter().all(|v| v.is_infinite()));
        // Bad arguments.
        let mut out_of_range = one.clone();
        out_of_range.ids[n / 2] = k as u32;
        let e = backend
            .trimmed_thresholds(&out_of_range, k, trim)
            .unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        assert!(backend.trimmed_thresholds(&near, k, f32::NAN).is_err());
        assert!(backend.trimmed_thresholds(&near, k, 1.5).is_err());
    }
}

/// Lists cut in two for the split maintenance match the CPU reference: the same members on
/// each side (the data leaves no member near the cutting plane and no tie for the farthest)
/// and the same means within rounding, from pinned points and from host data; lists that
/// cannot be cut give None; bad arguments are typed errors.
pub fn check_split_lists(backend: &dyn Backend) {
    for &(dim, num_lists) in &[(384usize, 9usize), (5, 40), (33, 3)] {
        let mut r = Rng::new(dim as u64 + 21);
        let mut points = Vec::new();
        let mut lists: Vec<Vec<u32>> = Vec::new();
        let mut centers = Vec::new();
        for l in 0..num_lists {
            // Two blobs 8 apart along a random direction, of uneven sizes, members shuffled
            // among other lists' rows; the centre is near the middle.
            let size = [0usize, 1, 2, 37, 300, 1200][l % 6];
            let dir: Vec<f32> = (0..dim).map(|_| r.normal() as f32).collect();
            let norm = dir.iter().map(|v| v * v).sum::<f32>().sqrt();
            let base: Vec<f32> = (0..dim).map(|_| 3.0 * r.normal() as f32).collect();
            let mut list = Vec::new();
            for m in 0..size {
                let s = if m % 3 == 0 { 4.0 } else { -4.0 };
                list.push((points.len() / dim) as u32);
                points.extend(
                    (0..dim).map(|d| base[d] + s * dir[d] / norm + 0.05 * r.normal() as f32),
                );
            }
            lists.push(list);
            centers.extend(base.iter().map(|&b| b + 0.01 * r.normal() as f32));
        }
        // A list of identical points cannot be cut.
        let same = (points.len() / dim) as u32;
        let row: Vec<f32> = (0..dim).map(|_| r.normal() as f32).collect();
        for _ in 0..5 {
            points.extend_from_slice(&row);
        }
        lists.push((same..same + 5).collect());
        centers.extend_from_slice(&row);
        let refs: Vec<&[u32]> = lists.iter().map(|l| &l[..]).collect();
        let want = crate::backend::split::split_lists(&points, dim, &centers, &refs).unwrap();
        let compare = |got: Vec<Option<crate::backend::ListSplit>>| {
            assert_eq!(got.len(), want.len());
            for (l, (g, w)) in got.iter().zip(&want).enumerate() {
                match (g, w) {
                    (None, None) => {}
                    (Some(g), Some(w)) => {
                        assert_eq!((&g.minus, &g.plus), (&w.minus, &w.plus), "list {l}");
                        for (a, b) in g
                            .minus_mean
                            .iter()
                            .chain(&g.plus_mean)
                            .zip(w.minus_mean.iter().chain(&w.plus_mean))
                        {
                            assert!(
                                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                                "list {l}: {a} vs {b}"
                            );
                        }
                    }
                    _ => panic!("dim {dim} list {l}: {} vs {}", g.is_some(), w.is_some()),
                }
            }
        };
        assert!(want[..num_lists]
            .iter()
            .enumerate()
            .all(|(l, w)| w.is_some() == (l % 6 >= 2)));
        assert!(want[num_lists].is_none());
        compare(backend.split_lists(&points, dim, &centers, &refs).unwrap());
        {
            let _pinned = backend.pin(&points).unwrap();
            compare(backend.split_lists(&points, dim, &centers, &refs).unwrap());
            let beyond = [0, (points.len() / dim) as u32];
            let bad: Vec<&[u32]> = vec![&beyond];
            let e = backend
                .split_lists(&points, dim, &centers[..dim], &bad)
                .unwrap_err();
            assert!(e.to_string().contains("out of range"), "{e}");
            assert!(backend
                .split_lists(&points, dim, &centers, &refs[1..])
                .is_err());
        }
    }
}

pub fn check_training_matches_cpu(backend: &dyn Backend) {
    let dim = 64;
    let data = crate::synthetic::clustered(4000, dim, 30, 0.4, 3);
    let params = crate::TrainParams {
        num_anchors: 32,
        max_iterations: 10,
        min_iterations: 10,
        ..Default::default()
    };
    let energy = |b: &dyn Backend| {
        let (a, _) = crate::train::train_anchors(b, &data, dim, &params, &mut |_| {}).unwrap();
        let near = crate::CpuBackend
            .nearest_anchors(&data, &a, dim, 1)
            .unwrap();
        near.dists.iter().map(|&d| d as f64).sum::<f64>() / 4000.0
    };
    let (e_cpu, e_backend) = (energy(&crate::CpuBackend), energy(backend));
    assert!(
        (e_backend - e_cpu).abs() <= 0.005 * e_cpu,
        "{}: energy {e_backend} vs cpu {e_cpu}",
        backend.name()
    );
}

/// Shape errors are typed errors, not panics.
pub fn check_rejects_bad_shapes(backend: &dyn Backend) {
    assert!(
        backend
            .nearest_anchors(&[0.0; 10], &[0.0; 6], 3, 1)
            .is_err(),
        "10 values are not rows of 3"
    );
    assert!(
        backend.nearest_anchors(&[0.0; 6], &[0.0; 6], 3, 3).is_err(),
        "3 neighbours of 2 anchors"
    );
    assert!(backend.nearest_anchors(&[0.0; 6], &[0.0; 6], 3, 0).is_err());
    assert!(
        backend
            .accumulate(&[0.0; 6], 3, &[0, 5], &[0.0, 0.0], &[1.0, 1.0])
            .is_err(),
        "anchor id out of range"
    );
    let two_per_point = Nearest {
        per_point: 2,
        ids: vec![0, 1, 1, 0],
        dists: vec![0.0; 4],
        resident: None,
    };
    assert!(
        backend
            .accumulate_and_update(&[0.0; 6], &mut [0.0; 6], 3, &two_per_point, &[1.0; 2], 0.5)
            .is_err(),
        "accumulation takes one anchor per point"
    );
}

/// A device copy of one index that searches batches (built by the backend under test from the
/// canonical CPU [`Index`](crate::Index), e.g. CUDA's `CudaIndex` or WGPU's `WgpuIndex`).
pub type DeviceSearch<'a> =
    Box<dyn Fn(&[f32], &crate::SearchParams) -> crate::Result<crate::SearchResults> + 'a>;

/// Builds a backend's [`DeviceSearch`] for an index.
pub type OpenSearch<'a> = dyn Fn(&crate::Index) -> crate::Result<DeviceSearch<'a>> + 'a;

/// A `pcaq` index's widths and first-stage planes, for test labels.
fn pca_shape(index: &crate::Index) -> String {
    match &index.codec {
        crate::codec::Codec::Pca(p) => format!(
            "widest {} bits, {} first-stage planes below the sign, {} more",
            p.dim_bits()[0],
            p.stage1_plane_dims().len(),
            p.low_plane_dims().len()
        ),
        _ => String::new(),
    }
}

/// A device search against the CPU search on the same index, for every codec the device
/// kernels score, both metrics, odd dims, a refine tier and centred indexes (data far from
/// the origin): same probed lists and estimators,
/// so the results agree up to float rounding (summation orders differ, and the CPU's fast
/// scan of RaBitQ's 1-bit part and of `pcaq`'s first stage reads quantised tables). At least
/// 97% of the CPU's ids per case, equal distances where both return the same id at the same
/// rank, rows sorted and padded like the CPU's.
pub fn check_search_matches_cpu(open: &OpenSearch<'_>) {
    use crate::{BuildParams, CodecKind, Index, Metric, SearchParams};
    use CodecKind::{PcaRaBitQ, RaBitQ1, Sq4, Sq8};
    // (dim, codec, pcaq's bits per dimension, refine tier, per-anchor Jacobian, metric,
    // leading axes: the first 8 dimensions spread 64 times more than the rest)
    let cases = [
        (64, RaBitQ1, 0.0, None, false, Metric::L2, false),
        (36, RaBitQ1, 0.0, None, false, Metric::L2, false),
        // A rotation wider than one 64-column tile of the WGPU query products.
        (100, RaBitQ1, 0.0, None, false, Metric::L2, false),
        (64, CodecKind::RaBitQ3, 0.0, None, false, Metric::L2, false),
        (
            36,
            CodecKind::RaBitQ4,
            0.0,
            None,
            false,
            Metric::Cosine,
            false,
        ),
        (35, CodecKind::RaBitQ7, 0.0, None, false, Metric::L2, false),
        (
            64,
            CodecKind::RaBitQ2,
            0.0,
            Some(Sq8),
            false,
            Metric::L2,
            false,
        ),
        (35, RaBitQ1, 0.0, Some(Sq4), false, Metric::L2, false),
        // Float residuals as refine tiers and as a primary code.
        (
            36,
            RaBitQ1,
            0.0,
            Some(CodecKind::F16),
            false,
            Metric::Cosine,
            false,
        ),
        (
            35,
            CodecKind::RaBitQ2,
            0.0,
            Some(CodecKind::F32),
            false,
            Metric::L2,
            false,
        ),
        (33, CodecKind::F16, 0.0, None, false, Metric::L2, false),
        // Long second-stage codes, which CUDA scores by 32 lanes (516 bytes) and by 16 (260).
        (
            128,
            RaBitQ1,
            0.0,
            Some(CodecKind::F32),
            false,
            Metric::L2,
            false,
        ),
        (
            128,
            CodecKind::RaBitQ2,
            0.0,
            Some(CodecKind::F16),
            false,
            Metric::Cosine,
            false,
        ),
        (64, Sq8, 0.0, None, true, Metric::L2, false),
        (35, Sq4, 0.0, None, false, Metric::Cosine, false),
        // Primary codes on 4-byte boundaries, which a lone thread reads a word at a time: sq4
        // with a tail of 7 dimensions past its last whole word, sq8 without a Jacobian, f16
        // and f32.
        (39, Sq4, 0.0, None, false, Metric::L2, false),
        (48, Sq8, 0.0, None, false, Metric::Cosine, false),
        (34, CodecKind::F16, 0.0, None, false, Metric::L2, false),
        (36, CodecKind::F32, 0.0, None, false, Metric::L2, false),
        // sq8 at 45 dimensions: rows padded to 16 bytes on CUDA (49 → 64), read 16 levels
        // a load (twice), then 4 (three times), then one byte.
        (45, Sq8, 0.0, None, true, Metric::L2, false),
        // Scalar primary codes with global ranges, which the devices score against the
        // weights q ∘ step (CUDA's `search_queries_weighted`, WGPU's `WEIGHTED` pipelines):
        // sq8 at 45 dimensions, and with a scalar and a float refine tier, which read the query
        // itself (kept past the weights on CUDA).
        (45, Sq8, 0.0, None, false, Metric::L2, false),
        (40, Sq4, 0.0, Some(Sq8), false, Metric::L2, false),
        (
            37,
            Sq8,
            0.0,
            Some(CodecKind::F16),
            false,
            Metric::Cosine,
            false,
        ),
        (
            64,
            CodecKind::AnchorOnly,
            0.0,
            None,
            false,
            Metric::L2,
            false,
        ),
        // pcaq: one bit on leading axes (a single stage), two stages with and without planes
        // below the sign in the first, axes past 8 bits (several such planes), and a refine
        // tier after its first stage.
        (64, PcaRaBitQ, 0.5, None, false, Metric::L2, false),
        (36, PcaRaBitQ, 3.0, None, false, Metric::L2, false),
        (48, PcaRaBitQ, 7.5, None, false, Metric::Cosine, false),
        (64, PcaRaBitQ, 3.0, None, false, Metric::L2, true),
        (40, PcaRaBitQ, 5.0, None, false, Metric::L2, true),
        (64, PcaRaBitQ, 1.5, Some(Sq8), false, Metric::L2, false),
    ];
    // Data and queries 50 units from the origin along every axis: the index is centred and
    // the device must translate its queries (after normalising them, for the cosine metric).
    let far_cases = [
        (36, RaBitQ1, 0.0, Some(Sq8), false, Metric::L2, false),
        (64, PcaRaBitQ, 2.0, None, false, Metric::L2, false),
        (33, Sq8, 0.0, None, true, Metric::L2, false),
        (40, Sq8, 0.0, None, false, Metric::L2, false),
        (
            36,
            CodecKind::RaBitQ4,
            0.0,
            None,
            false,
            Metric::Cosine,
            false,
        ),
    ];
    // 100 anchors: a full and a partial 64-column tile of the WGPU query products.
    let (n, anchors) = (6_000, 100);
    let all =
        (cases.into_iter().map(|c| (c, false))).chain(far_cases.into_iter().map(|c| (c, true)));
    for ((dim, codec, bits, refine, jacobian, metric, leading), far) in all {
        let mut data = crate::synthetic::clustered(n, dim, 40, 0.4, 11);
        let mut queries = crate::synthetic::clustered(200, dim, 40, 0.5, 12);
        for row in data
            .chunks_exact_mut(dim)
            .chain(queries.chunks_exact_mut(dim))
        {
            if leading {
                row[8..].iter_mut().for_each(|v| *v /= 64.0);
            }
            if far {
                row.iter_mut().for_each(|v| *v += 50.0);
            }
        }
        let mut params = BuildParams::default()
            .with_codec(codec)
            .with_refine(refine)
            .with_metric(metric)
            .with_num_anchors(anchors);
        params.codec_params.jacobian = jacobian;
        if codec == PcaRaBitQ {
            params.codec_params.bits = bits;
        }
        let (index, _) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
        assert_eq!(index.centre().is_some(), far, "{codec} dim {dim}: centred");
        let device = open(&index).unwrap();
        let label = format!(
            "{codec}{}{} dim {dim} {metric:?}{}{}",
            if codec == PcaRaBitQ {
                format!(" {bits} bits ({})", pca_shape(&index))
            } else {
                String::new()
            },
            refine.map(|r| format!("+{r}")).unwrap_or_default(),
            if jacobian { " jacobian" } else { "" },
            if far { " far from the origin" } else { "" }
        );
        // The last two probe adaptively: a margin of 0 scans the nearest lists until they
        // hold k vectors; 0.5 adds the lists whose anchors are nearly as near.
        for (k, nprobe, rerank, probe_margin) in [
            (10, 8, 0, None),
            (1, 1, 0, None),
            (25, anchors, 60, None),
            (10, anchors, 0, Some(0.0)),
            (10, 32, 0, Some(0.5)),
        ] {
            let p = SearchParams {
                k,
                nprobe,
                rerank,
                probe_margin,
            };
            let overlap = compare_search_with_cpu(&label, &index, &queries, &p, &device);
            eprintln!(
                "{label} k {k} nprobe {nprobe} margin {probe_margin:?}: overlap {overlap:.4}"
            );
        }
    }
}

/// One device search of `queries` against the CPU's with the same parameters, asserting what
/// [`check_search_matches_cpu`] asserts per case: at least 97% of the CPU's ids, equal
/// distances where both return the same id at the same rank, rows sorted and padded like the
/// CPU's. Returns the share of the CPU's ids the device returned.
pub fn compare_search_with_cpu(
    label: &str,
    index: &crate::Index,
    queries: &[f32],
    params: &crate::SearchParams,
    device: &DeviceSearch<'_>,
) -> f64 {
    let cpu = index.search_batch(queries, params, &CpuBackend).unwrap();
    let dev = device(queries, params).unwrap();
    compare_results(label, params, &cpu, &dev)
}

/// What [`compare_search_with_cpu`] asserts, of results already found.
fn compare_results(
    label: &str,
    params: &crate::SearchParams,
    cpu: &crate::SearchResults,
    dev: &crate::SearchResults,
) -> f64 {
    let (k, nprobe) = (params.k, params.nprobe);
    assert_eq!(dev.ids.len(), cpu.ids.len(), "{label}");
    let (mut same, mut total) = (0usize, 0usize);
    for (c, g) in cpu.ids.chunks(k).zip(dev.ids.chunks(k)) {
        total += c.iter().filter(|&&i| i >= 0).count();
        same += g.iter().filter(|&&i| i >= 0 && c.contains(&i)).count();
    }
    let overlap = same as f64 / total as f64;
    assert!(
        overlap >= 0.97,
        "{label} k {k} nprobe {nprobe}: only {overlap:.3} of the CPU's ids"
    );
    for i in 0..cpu.ids.len() {
        if cpu.ids[i] == dev.ids[i] && cpu.ids[i] >= 0 {
            let (a, b) = (cpu.distances[i], dev.distances[i]);
            assert!(
                (a - b).abs() <= 2e-3 * (1.0 + a.abs()),
                "{label}: distance {a} on the CPU, {b} on the device"
            );
        }
    }
    for (row, ids) in dev.distances.chunks(k).zip(dev.ids.chunks(k)) {
        assert!(
            row.windows(2).all(|w| w[0] <= w[1]),
            "{label}: unsorted row"
        );
        for (d, i) in row.iter().zip(ids) {
            assert_eq!(*i < 0, *d == f32::INFINITY, "{label}: padding");
        }
    }
    overlap
}

/// A device copy's filtered batch search (e.g. CUDA's `CudaIndex::search_batch_filtered`):
/// the canonical index it was copied from, the queries, the parameters and a filter made for
/// that index.
pub type DeviceFilteredSearch<'a> = Box<
    dyn Fn(
            &crate::Index,
            &[f32],
            &crate::SearchParams,
            &crate::IdFilter,
        ) -> crate::Result<crate::SearchResults>
        + 'a,
>;

/// Builds a backend's [`DeviceFilteredSearch`] for an index.
pub type OpenFilteredSearch<'a> =
    dyn Fn(&crate::Index) -> crate::Result<DeviceFilteredSearch<'a>> + 'a;

/// A device's filtered search against the CPU's ([`crate::Index::search_batch_filtered`])
/// on the same index and filter, for filters that allow 0.5%, 5%, a third, all and none of
/// the vectors, those of a few lists only, and whole lists beside one vector of each other
/// list, over codecs with and without a second stage,
/// both metrics, odd dims, fixed, full and adaptive probing: every id returned is allowed,
/// each row holds as many as the CPU's (the same lists are probed), and the rows agree as
/// [`compare_search_with_cpu`]'s do (at least 97% of the CPU's ids, equal distances at equal
/// ranks and ids, sorted, padded alike). A filter made for another index, and a device copy
/// searched with another index than its own, are errors.
pub fn check_filtered_search_matches_cpu(open: &OpenFilteredSearch<'_>) {
    use crate::{BuildParams, CodecKind, Index, Metric, SearchParams};
    use std::collections::HashSet;
    // (dim, codec, pcaq's bits per dimension, refine tier, metric)
    let cases = [
        (64, CodecKind::RaBitQ1, 0.0, None, Metric::L2),
        (
            36,
            CodecKind::RaBitQ1,
            0.0,
            Some(CodecKind::Sq8),
            Metric::Cosine,
        ),
        (
            35,
            CodecKind::RaBitQ2,
            0.0,
            Some(CodecKind::F32),
            Metric::L2,
        ),
        (33, CodecKind::Sq8, 0.0, None, Metric::L2),
        (40, CodecKind::PcaRaBitQ, 3.0, None, Metric::L2),
        (35, CodecKind::F16, 0.0, None, Metric::Cosine),
        (32, CodecKind::AnchorOnly, 0.0, None, Metric::L2),
    ];
    let (n, anchors) = (6_000, 100);
    for (dim, codec, bits, refine, metric) in cases {
        let data = crate::synthetic::clustered(n, dim, 40, 0.4, 21);
        let queries = crate::synthetic::clustered(300, dim, 40, 0.5, 22);
        let mut params = BuildParams::default()
            .with_codec(codec)
            .with_refine(refine)
            .with_metric(metric)
            .with_num_anchors(anchors);
        if codec == CodecKind::PcaRaBitQ {
            params.codec_params.bits = bits;
        }
        let (index, _) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
        let device = open(&index).unwrap();
        let label = format!(
            "{codec}{} dim {dim} {metric:?}",
            refine.map(|r| format!("+{r}")).unwrap_or_default()
        );
        // Ids by a multiplicative hash, so that each share is spread over the lists; and the
        // ids of the vectors nearest 3 of the anchors (a few lists hold them all).
        let share = |per_mille: u64| -> Vec<u32> {
            (0..n as u32)
                .filter(|&i| (u64::from(i).wrapping_mul(2_654_435_761) >> 7) % 1000 < per_mille)
                .collect()
        };
        let mut few_lists = Vec::new();
        for a in 0..3 {
            let centre = &index.anchors()[a * dim..(a + 1) * dim];
            let near = crate::exact_knn(&data, centre, dim, 40).unwrap();
            few_lists.extend_from_slice(&near);
        }
        // Every vector of the 40 lists farthest from the first query and one of each other
        // list: the filter's mean share ranks few lists first, and a query among the sparse
        // lists (the first query and its neighbours) needs every one (a device that ranks
        // its lists itself hands such queries to the host).
        let mut far_first = (0..index.num_anchors()).collect::<Vec<_>>();
        let to_first = |a: &usize| {
            let centre = &index.anchors()[a * dim..(a + 1) * dim];
            -crate::linalg::l2_sq(centre, &queries[..dim])
        };
        far_first.sort_by(|a, b| to_first(a).total_cmp(&to_first(b)));
        let whole: HashSet<usize> = far_first[..40].iter().copied().collect();
        let mut lopsided = Vec::new();
        for list in 0..index.num_anchors() {
            let (lo, hi) = (
                index.list_offsets[list] as usize,
                index.list_offsets[list + 1] as usize,
            );
            let take = if whole.contains(&list) {
                hi
            } else {
                (lo + 1).min(hi)
            };
            lopsided.extend((lo..take).map(|p| index.ids.get_in_list(list, p)));
        }
        lopsided.sort_unstable();
        let filters = [
            ("0.5%", share(5)),
            ("5%", share(50)),
            ("a third", share(333)),
            ("all", (0..n as u32).collect()),
            ("none", Vec::new()),
            ("3 anchors' nearest", few_lists),
            ("40 whole lists and one of each other", lopsided),
        ];
        for (name, ids) in &filters {
            let filter = index.id_filter(ids);
            let allowed: HashSet<i64> = ids.iter().map(|&i| i64::from(i)).collect();
            for (k, nprobe, rerank, probe_margin) in [
                (10, 8, 0, None),
                (10, anchors, 0, None),
                (5, 16, 40, None),
                (10, 32, 0, Some(0.5)),
            ] {
                let p = SearchParams {
                    k,
                    nprobe,
                    rerank,
                    probe_margin,
                };
                let case = format!("{label}, filter {name}, k {k} nprobe {nprobe}");
                let cpu = index
                    .search_batch_filtered(&queries, &p, &CpuBackend, &filter)
                    .unwrap();
                let dev = device(&index, &queries, &p, &filter).unwrap();
                for (row, (c, d)) in cpu.ids.chunks(k).zip(dev.ids.chunks(k)).enumerate() {
                    let real = |r: &[i64]| r.iter().filter(|&&i| i >= 0).count();
                    assert_eq!(real(d), real(c), "{case}: row {row}'s neighbours");
                    for id in d.iter().filter(|&&i| i >= 0) {
                        assert!(allowed.contains(id), "{case}: id {id} is not allowed");
                    }
                }
                let overlap = if cpu.ids.iter().any(|&i| i >= 0) {
                    compare_results(&case, &p, &cpu, &dev)
                } else {
                    assert!(dev.ids.iter().all(|&i| i < 0), "{case}");
                    1.0
                };
                eprintln!("{case}: overlap {overlap:.4}");
            }
        }
    }
    // Filters whose queries rank hundreds of lists, more than a workgroup's invocations or a
    // warp's lanes: a device's cut adds runs of several lists' shares per invocation. Under
    // the 15% filter at nprobe 96 they rank over 768 lists (three quarters of them) and reach
    // the cut before the last.
    let (n, dim) = (20_000, 16);
    let data = crate::synthetic::clustered(n, dim, 64, 0.4, 23);
    let queries = crate::synthetic::clustered(100, dim, 64, 0.5, 24);
    let params = BuildParams::default()
        .with_codec(CodecKind::RaBitQ1)
        .with_num_anchors(1024);
    let (index, _) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
    let device = open(&index).unwrap();
    for (permille, nprobes) in [(50u64, &[16, 64][..]), (150, &[96][..])] {
        let ids: Vec<u32> = (0..n as u32)
            .filter(|&i| (u64::from(i).wrapping_mul(2_654_435_761) >> 7) % 1000 < permille)
            .collect();
        let filter = index.id_filter(&ids);
        let allowed: HashSet<i64> = ids.iter().map(|&i| i64::from(i)).collect();
        for &nprobe in nprobes {
            let ranked = filter.lists_to_rank(nprobe);
            assert!(ranked > 256, "{ranked} lists ranked at nprobe {nprobe}");
            if permille == 150 {
                // Over 768 lists ranked, and half again the cut's worth there to be found.
                let shares = &filter.allowed_by_list().shares;
                let worth = shares.iter().map(|&s| f64::from(s)).sum::<f64>() / 65_536.0;
                assert!(
                    ranked > 768 && worth > 1.5 * nprobe as f64,
                    "{ranked} lists, {worth}"
                );
            }
            let p = SearchParams {
                nprobe,
                ..SearchParams::default()
            };
            let case = format!(
                "rabitq1 dim {dim}, 1,024 lists, filter {}%, nprobe {nprobe}, {ranked} lists \
                 ranked",
                permille / 10
            );
            let cpu = index
                .search_batch_filtered(&queries, &p, &CpuBackend, &filter)
                .unwrap();
            let dev = device(&index, &queries, &p, &filter).unwrap();
            assert!(
                dev.ids.iter().all(|&i| i < 0 || allowed.contains(&i)),
                "{case}"
            );
            let real = |r: &[i64]| r.iter().filter(|&&i| i >= 0).count();
            for (row, (c, d)) in cpu.ids.chunks(p.k).zip(dev.ids.chunks(p.k)).enumerate() {
                assert_eq!(real(d), real(c), "{case}: row {row}'s neighbours");
            }
            let overlap = compare_results(&case, &p, &cpu, &dev);
            eprintln!("{case}: overlap {overlap:.4}");
        }
    }
    // A filter of another index, and this device copy searched with another index.
    let data = crate::synthetic::clustered(2_000, 16, 8, 0.3, 5);
    let params = BuildParams::default().with_num_anchors(16);
    let (index, _) = Index::build(&data, 16, &params, &CpuBackend, &mut |_| {}).unwrap();
    let (other, _) = Index::build(&data, 16, &params, &CpuBackend, &mut |_| {}).unwrap();
    let device = open(&index).unwrap();
    let p = SearchParams::default();
    let q = &data[..16 * 20];
    let foreign = other.id_filter(&[1, 2, 3]);
    assert!(
        device(&index, q, &p, &foreign).is_err(),
        "a filter of another index"
    );
    let theirs = other.id_filter(&[1, 2, 3]);
    assert!(
        device(&other, q, &p, &theirs).is_err(),
        "a device copy searched with another index"
    );
    let ours = index.id_filter(&[1, 2, 3]);
    let found = device(&index, q, &p, &ours).unwrap();
    assert!(found.ids.iter().all(|&i| (1..=3).contains(&i) || i < 0));
    assert!(found.ids.iter().any(|&i| i >= 0));
}

/// The automatic pool on a device (`rerank` 0, [`crate::SearchParams::automatic_pool`]), on
/// 16-d data where a 1-bit first stage ranks poorly, so true neighbours fall beyond its 10·k
/// best: the device rescores candidates beyond that pool as the CPU does. Behind an exact
/// (f32) second stage, its i-th distance is never above its fixed pool's of 10·k (it rescores
/// a superset), some rows differ from that pool's (it did rescore beyond it), its recall@10 is
/// at least the fixed pool's and at least 0.99, and it returns at least 99.8% of the CPU's ids
/// ([`compare_search_with_cpu`]).
pub fn check_automatic_pool(open: &OpenSearch<'_>) {
    use crate::{BuildParams, CodecKind, Index, SearchParams};
    let (dim, k) = (16, 10);
    let data = crate::synthetic::clustered(6000, dim, 12, 0.6, 41);
    let queries = crate::synthetic::queries_near(&data, dim, 300, 0.3, 42);
    let truth: Vec<i64> = crate::exact_knn(&data, &queries, dim, k)
        .unwrap()
        .into_iter()
        .map(i64::from)
        .collect();
    let params = BuildParams::default()
        .with_codec(CodecKind::RaBitQ1)
        .with_refine(Some(CodecKind::F32))
        .with_num_anchors(16);
    let (index, _) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
    let device = open(&index).unwrap();
    let at = |rerank| SearchParams {
        k,
        nprobe: 16,
        rerank,
        probe_margin: None,
    };
    let auto = device(&queries, &at(0)).unwrap();
    let fixed = device(&queries, &at(10 * k)).unwrap();
    for (i, (a, f)) in auto.distances.iter().zip(&fixed.distances).enumerate() {
        assert!(
            *a <= *f * (1.0 + 1e-6),
            "query {}, rank {}: {a} with the automatic pool, {f} with 10·k",
            i / k,
            i % k
        );
    }
    let changed = (auto.ids.chunks(k).zip(fixed.ids.chunks(k)))
        .filter(|(a, f)| a != f)
        .count();
    let recall = |ids: &[i64]| crate::eval::recall_at(ids, k, &truth, k, k);
    let (recall_auto, recall_fixed) = (recall(&auto.ids), recall(&fixed.ids));
    eprintln!(
        "automatic pool: recall@10 {recall_auto:.4} against {recall_fixed:.4} with 10·k; \
         {changed} of 300 rows changed"
    );
    assert!(
        changed > 0,
        "the automatic pool returned the fixed pool's rows"
    );
    assert!(
        recall_auto >= recall_fixed && recall_auto >= 0.99,
        "automatic pool {recall_auto}, 10·k {recall_fixed}"
    );
    let overlap = compare_search_with_cpu(
        "automatic pool, rabitq1+f32 dim 16",
        &index,
        &queries,
        &at(0),
        &device,
    );
    eprintln!("automatic pool: {overlap:.4} of the CPU's ids");
    // Behind an exact second stage only near-ties may order differently; a device that drops
    // some of the candidates it should rescore (e.g. WGPU's staging past its first 256, which
    // gave 0.9960) falls below this.
    assert!(
        overlap >= 0.998,
        "automatic pool: {overlap} of the CPU's ids behind an exact second stage"
    );
}

/// `n` clustered 16-d vectors (8 clusters, spread 0.3, from `seed`) and a CPU index of them
/// in 16 lists with `codec`, for the parameter checks.
fn small_index(n: usize, codec: crate::CodecKind, seed: u64) -> (Vec<f32>, crate::Index) {
    let data = crate::synthetic::clustered(n, 16, 8, 0.3, seed);
    let params = crate::BuildParams::default()
        .with_codec(codec)
        .with_num_anchors(16);
    let (index, _) = crate::Index::build(&data, 16, &params, &CpuBackend, &mut |_| {}).unwrap();
    (data, index)
}

/// A device search refuses what the CPU search refuses: k = 0, nprobe = 0, a negative or
/// non-finite probe margin, queries of the wrong dim, NaN, a query past
/// [`crate::vectors::MAX_SQUARED_LENGTH`] (one within it is answered in full), and in a
/// cosine index a zero query (named by its row, as the CPU names it).
pub fn check_search_rejects_bad_parameters(open: &OpenSearch<'_>) {
    use crate::{CodecKind, SearchParams};
    let dim = 16;
    let (data, index) = small_index(500, CodecKind::RaBitQ1, 3);
    let device = open(&index).unwrap();
    let q = &data[..dim];
    for (k, nprobe) in [(0, 4), (10, 0)] {
        let e = device(
            q,
            &SearchParams {
                k,
                nprobe,
                ..SearchParams::default()
            },
        )
        .unwrap_err();
        assert!(matches!(e, crate::VlcError::InvalidParameter { .. }), "{e}");
    }
    for margin in [-0.5, f32::NAN, f32::INFINITY] {
        let p = SearchParams {
            probe_margin: Some(margin),
            ..SearchParams::default()
        };
        let e = device(q, &p).unwrap_err();
        assert!(e.to_string().contains("probe_margin"), "{e}");
    }
    let e = device(&q[..dim - 1], &SearchParams::default()).unwrap_err();
    assert!(e.to_string().contains("dim"), "{e}");
    let mut nan = q.to_vec();
    nan[3] = f32::NAN;
    let p = SearchParams {
        k: 5,
        nprobe: 4,
        ..SearchParams::default()
    };
    assert!(device(&nan, &p).is_err());
    // A query long enough for squared distances to overflow f32 is refused, naming its row;
    // one just within the limit is answered in full, with finite distances, like the CPU.
    let squared_length: f32 = data[dim..2 * dim].iter().map(|v| v * v).sum();
    let within = (0.9 * crate::vectors::MAX_SQUARED_LENGTH / squared_length).sqrt();
    let scaled = |scale: f32| -> Vec<f32> {
        let mut rows = data[..2 * dim].to_vec();
        rows[dim..].iter_mut().for_each(|v| *v *= scale);
        rows
    };
    for e in [
        device(&scaled(2.0 * within), &p).unwrap_err(),
        index
            .search_batch(&scaled(2.0 * within), &p, &CpuBackend)
            .unwrap_err(),
    ] {
        assert!(matches!(e, crate::VlcError::TooLarge { row: 1, .. }), "{e}");
    }
    for result in [
        device(&scaled(within), &p).unwrap(),
        index
            .search_batch(&scaled(within), &p, &CpuBackend)
            .unwrap(),
    ] {
        assert!(result.ids.iter().all(|&id| id >= 0), "{:?}", result.ids);
        assert!(
            result.distances.iter().all(|d| d.is_finite()),
            "{:?}",
            result.distances
        );
    }

    let cosine = crate::BuildParams::default()
        .with_metric(crate::Metric::Cosine)
        .with_num_anchors(16);
    let (index, _) = crate::Index::build(&data, dim, &cosine, &CpuBackend, &mut |_| {}).unwrap();
    let device = open(&index).unwrap();
    let mut queries = data[..3 * dim].to_vec();
    queries[dim..2 * dim].fill(0.0);
    for e in [
        device(&queries, &p).unwrap_err(),
        index.search_batch(&queries, &p, &CpuBackend).unwrap_err(),
    ] {
        assert!(
            matches!(e, crate::VlcError::ZeroVector { row: 1, .. }),
            "{e}"
        );
    }
    assert!(device(&data[..3 * dim], &p).is_ok());
}

/// A device search clamps what the CPU search clamps ([`crate::SearchParams::resolve`]):
/// nprobe above the anchor count scans every list (the same results as nprobe = the anchor
/// count), and k above the vector count returns every vector, the rows padded to k with id
/// −1 and distance +∞ like the CPU's.
pub fn check_search_clamps_k_and_nprobe(open: &OpenSearch<'_>) {
    use crate::{CodecKind, SearchParams};
    let dim = 16;
    let (data, index) = small_index(300, CodecKind::Sq8, 5);
    let device = open(&index).unwrap();
    let queries = &data[..4 * dim];
    let at = |k, nprobe| SearchParams {
        k,
        nprobe,
        ..SearchParams::default()
    };
    let every_list = device(queries, &at(10, 16)).unwrap();
    for nprobe in [17, 1000] {
        assert_eq!(
            device(queries, &at(10, nprobe)).unwrap(),
            every_list,
            "nprobe {nprobe}"
        );
    }
    // k 310 on 300 vectors: every vector once per row, then 10 pads, against the CPU's.
    let wide = device(queries, &at(310, 1000)).unwrap();
    assert_eq!((wide.k, wide.ids.len()), (310, 4 * 310));
    for (r, row) in wide.ids.chunks(310).enumerate() {
        let mut found = row[..300].to_vec();
        found.sort_unstable();
        assert_eq!(found, (0..300).collect::<Vec<i64>>(), "row {r}");
        assert!(row[300..].iter().all(|&i| i == -1), "row {r}");
        let d = &wide.distances[r * 310 + 300..(r + 1) * 310];
        assert!(d.iter().all(|&x| x == f32::INFINITY), "row {r}");
    }
    compare_search_with_cpu(
        "k above the vector count",
        &index,
        queries,
        &at(310, 1000),
        &device,
    );
}

/// The encode primitive [`Backend::code_levels`]: a backend that offers it returns the CPU
/// reference's levels exactly, on odd dimensions and rows with awkward magnitudes (zeros,
/// subnormals, ranges of 2^80, many equal magnitudes, one large among many tiny), under
/// the caps of `pcaq` (falling widths) and `rabitq2`-`8` (one width), up to the widest; one
/// that does not returns `None`.
pub fn check_code_levels(backend: &dyn Backend) {
    use crate::codec::levels::code_levels;
    for &dim in &[1usize, 7, 65, 384, 1000] {
        let falling: Vec<u32> = (0..dim)
            .map(|i| match i * 8 / dim {
                0 => 127,
                1 => 31,
                2 | 3 => 7,
                4 => 3,
                5 => 1,
                _ => 0,
            })
            .collect();
        let caps_sets = [falling, vec![1; dim], vec![7; dim], vec![2047; dim]];
        for (c, caps) in caps_sets.iter().enumerate() {
            let rows = 300;
            let mut vectors = random(rows * dim, (dim * 31 + c) as u64);
            for (r, v) in vectors.chunks_exact_mut(dim).enumerate() {
                match r % 10 {
                    0 => v.fill(0.0),
                    1 => v.iter_mut().for_each(|x| *x *= 1e-40),
                    2 => v.iter_mut().for_each(|x| *x *= 1e20),
                    3 => v
                        .iter_mut()
                        .enumerate()
                        .for_each(|(i, x)| *x = if i % 3 == 0 { 1.0 } else { -1.0 }),
                    4 => v.iter_mut().skip(1).for_each(|x| *x *= 1e-6),
                    5 => v.iter_mut().for_each(|x| *x = (*x * 4.0).round() / 4.0),
                    6 => v.iter_mut().step_by(2).for_each(|x| *x = -0.0),
                    _ => {}
                }
            }
            let mut got = vec![u16::MAX; vectors.len()];
            let offered = backend.code_levels(&vectors, caps, &mut got).unwrap();
            assert_eq!(
                offered,
                backend.offers_code_levels(),
                "{}: code levels offered and returned disagree",
                backend.name()
            );
            if !offered {
                continue;
            }
            let mut want = vec![0u16; vectors.len()];
            code_levels(&vectors, caps, &mut want);
            for (r, (g, w)) in got.chunks(dim).zip(want.chunks(dim)).enumerate() {
                assert_eq!(g, w, "dim {dim} caps {c} row {r}");
            }
        }
    }
    if backend.offers_code_levels() {
        let mut out = [0u16; 8];
        assert!(
            backend
                .code_levels(&[1.0; 7], &[1; 2], &mut out[..7])
                .is_err(),
            "7 values in rows of 2"
        );
        assert!(
            backend
                .code_levels(&[1.0; 4], &[2048; 2], &mut out[..4])
                .is_err(),
            "a cap of 2048"
        );
        assert!(
            backend
                .code_levels(&[1.0; 4], &[3; 2], &mut out[..5])
                .is_err(),
            "5 levels for 4 values"
        );
        assert!(backend.code_levels(&[], &[3; 5], &mut []).unwrap());
    }
}

/// The extended codes encode the same bytes through [`ResidualCodec::encode_on`] with this
/// backend as on the CPU: `pcaq` at 1, 2.5 and 5 bits per dimension, `rabitq3` and
/// `rabitq8`, 13,000 rows of 96 and 5,000 of 384 dimensions against 40 anchors.
///
/// [`ResidualCodec::encode_on`]: crate::codec::ResidualCodec::encode_on
pub fn check_encode_matches_cpu(backend: &dyn Backend) {
    use crate::codec::ResidualCodec;
    use crate::CodecKind::{PcaRaBitQ, RaBitQ3, RaBitQ8};
    // 13,000 rows make four parts of the encode's pipeline (4,096 rows each, the last 712).
    for (dim, kind, bits, rows) in [
        (96usize, PcaRaBitQ, 1.0f32, 13_000),
        (384, PcaRaBitQ, 2.5, 5000),
        (96, PcaRaBitQ, 5.0, 13_000),
        (96, RaBitQ3, 0.0, 13_000),
        (384, RaBitQ8, 0.0, 5000),
    ] {
        let mut points = random(rows * dim, dim as u64 + 5);
        for v in points.chunks_exact_mut(dim) {
            for (d, x) in v.iter_mut().enumerate() {
                *x *= 0.1 + (-(d as f32) / 16.0).exp();
            }
        }
        let anchors = points[..40 * dim].to_vec();
        let assignment = CpuBackend
            .nearest_anchors(&points, &anchors, dim, 1)
            .unwrap()
            .ids;
        let params = crate::CodecParams {
            bits,
            ..Default::default()
        };
        let codec = crate::Codec::train(
            kind,
            &params,
            &points[..2000 * dim],
            &anchors,
            &assignment[..2000],
            dim,
        )
        .unwrap();
        let prepared = codec.prepare_anchors(&anchors);
        let mut want = vec![0u8; rows * codec.code_size()];
        codec.encode_prepared(&prepared, &points, &anchors, &assignment, &mut want);
        let mut got = vec![0u8; rows * codec.code_size()];
        codec
            .encode_on(backend, &prepared, &points, &anchors, &assignment, &mut got)
            .unwrap();
        let differing = got
            .chunks(codec.code_size())
            .zip(want.chunks(codec.code_size()))
            .filter(|(g, w)| g != w)
            .count();
        assert_eq!(
            differing,
            0,
            "{} at {bits} bits, dim {dim}: {differing} of {rows} codes differ",
            kind.name()
        );
    }
}

#[macro_export]
macro_rules! conformance_suite {
    ($name:ident, $make:expr) => {
        mod $name {
            fn backend() -> Option<Box<dyn $crate::Backend>> {
                $make
            }
            macro_rules! case {
                ($case:ident) => {
                    #[test]
                    fn $case() {
                        match backend() {
                            Some(b) => $crate::conformance::$case(b.as_ref()),
                            None => eprintln!(
                                "SKIPPED {}::{}: no device for this backend",
                                stringify!($name),
                                stringify!($case)
                            ),
                        }
                    }
                };
            }
            case!(check_nearest);
            case!(check_accumulate_and_update);
            case!(check_rejects_bad_shapes);
            case!(check_training_matches_cpu);
            case!(check_nearest_with_moving_anchors);
            case!(check_trimmed_thresholds);
            case!(check_split_lists);
            case!(check_iteration_sequences);
            case!(check_code_levels);
            case!(check_encode_matches_cpu);
        }
    };
}
