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
/// 64-anchor tiles of the GPU kernels.
pub fn check_nearest(backend: &dyn Backend) {
    for &dim in &[1usize, 7, 65, 384] {
        for &(n, k, m) in &[
            (1usize, 1usize, 1usize),
            (37, 5, 3),
            (513, 33, 1),
            (130, 131, 1),
            (200, 64, 8),
        ] {
            let points = random(n * dim, (dim * 1000 + n) as u64);
            let anchors = random(k * dim, (dim * 7 + k) as u64);
            let got = backend.nearest_anchors(&points, &anchors, dim, m).unwrap();
            assert_eq!(got.ids.len(), n * m);
            for i in 0..n {
                let p = &points[i * dim..(i + 1) * dim];
                let mut want: Vec<(f64, u32)> = (0..k)
                    .map(|a| (naive_dist(p, &anchors[a * dim..(a + 1) * dim]), a as u32))
                    .collect();
                want.sort_by(|x, y| x.0.partial_cmp(&y.0).unwrap().then(x.1.cmp(&y.1)));
                for j in 0..m {
                    let (gid, gd) = (got.ids[i * m + j], got.dists[i * m + j] as f64);
                    let tol = 1e-3 * (1.0 + want[j].0);
                    // The id must be the reference's, unless the two are tied within rounding.
                    assert!(
                        (gd - want[j].0).abs() <= tol,
                        "dim {dim} n {n} k {k}: dist {gd} vs {}",
                        want[j].0
                    );
                    let true_d =
                        naive_dist(p, &anchors[gid as usize * dim..(gid as usize + 1) * dim]);
                    assert!(
                        (true_d - want[j].0).abs() <= tol,
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
        for step in 0..8 {
            match step {
                // A few anchors jump to points.
                3 => {
                    for a in [0, k / 2] {
                        let p = r.below(n);
                        anchors[a * dim..(a + 1) * dim]
                            .copy_from_slice(&points[p * dim..(p + 1) * dim]);
                    }
                }
                // All move far.
                5 => anchors = random(k * dim, dim as u64 + 14),
                // One anchor fewer.
                6 => anchors.truncate((k - 1) * dim),
                // Small moves.
                _ => anchors
                    .iter_mut()
                    .for_each(|c| *c += 0.02 * r.normal() as f32),
            }
            let k_now = anchors.len() / dim;
            let got = backend.nearest_anchors(&points, &anchors, dim, 1).unwrap();
            for i in 0..n {
                let p = &points[i * dim..(i + 1) * dim];
                let best = (0..k_now)
                    .map(|a| naive_dist(p, &anchors[a * dim..(a + 1) * dim]))
                    .fold(f64::INFINITY, f64::min);
                let gid = got.ids[i] as usize;
                assert!(gid < k_now, "step {step}: id {gid} of {k_now} anchors");
                let tol = 1e-3 * (1.0 + best);
                let true_d = naive_dist(p, &anchors[gid * dim..(gid + 1) * dim]);
                assert!(
                    (true_d - best).abs() <= tol,
                    "dim {dim} step {step} point {i}: anchor {gid} at {true_d}, nearest at {best}"
                );
                assert!(
                    (got.dists[i] as f64 - best).abs() <= tol,
                    "dim {dim} step {step} point {i}: distance {} vs {best}",
                    got.dists[i]
                );
            }
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

/// A device search against the CPU search on the same index, for every codec the device
/// kernels score, both metrics, odd dims and a refine tier: same probed lists and estimators,
/// so the results agree up to float rounding (summation orders differ, and the CPU's 1-bit
/// scan reads quantised tables). At least 97% of the CPU's ids per case, equal distances where
/// both return the same id at the same rank, rows sorted and padded like the CPU's.
pub fn check_search_matches_cpu(open: &OpenSearch<'_>) {
    use crate::{BuildParams, CodecKind, Index, Metric, SearchParams};
    let cases = [
        (64, CodecKind::RaBitQ1, None, false, Metric::L2),
        (36, CodecKind::RaBitQ1, None, false, Metric::L2),
        (64, CodecKind::RaBitQ3, None, false, Metric::L2),
        (36, CodecKind::RaBitQ4, None, false, Metric::Cosine),
        (
            64,
            CodecKind::RaBitQ2,
            Some(CodecKind::Sq8),
            false,
            Metric::L2,
        ),
        (
            35,
            CodecKind::RaBitQ1,
            Some(CodecKind::Sq4),
            false,
            Metric::L2,
        ),
        (64, CodecKind::Sq8, None, true, Metric::L2),
        (35, CodecKind::Sq4, None, false, Metric::Cosine),
        (64, CodecKind::AnchorOnly, None, false, Metric::L2),
    ];
    let (n, anchors) = (6_000, 64);
    for (dim, codec, refine, jacobian, metric) in cases {
        let data = crate::synthetic::clustered(n, dim, 40, 0.4, 11);
        let queries = crate::synthetic::clustered(200, dim, 40, 0.5, 12);
        let mut params = BuildParams::default()
            .with_codec(codec)
            .with_refine(refine)
            .with_metric(metric)
            .with_num_anchors(anchors);
        params.codec_params.jacobian = jacobian;
        let (index, _) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
        let device = open(&index).unwrap();
        let label = format!(
            "{codec}{} dim {dim} {metric:?}{}",
            refine.map(|r| format!("+{r}")).unwrap_or_default(),
            if jacobian { " jacobian" } else { "" }
        );
        for (k, nprobe, rerank) in [(10, 8, 0), (1, 1, 0), (25, anchors, 60)] {
            let p = SearchParams { k, nprobe, rerank };
            let cpu = index.search_batch(&queries, &p, &CpuBackend).unwrap();
            let dev = device(&queries, &p).unwrap();
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
            eprintln!("{label} k {k} nprobe {nprobe}: overlap {overlap:.4}");
        }
    }
}

/// A device search refuses what the CPU search refuses: k = 0 or above the vector count,
/// nprobe = 0 or above the anchor count, queries of the wrong dim, NaN.
pub fn check_search_rejects_bad_parameters(open: &OpenSearch<'_>) {
    use crate::{BuildParams, CodecKind, Index, SearchParams};
    let dim = 16;
    let data = crate::synthetic::clustered(500, dim, 8, 0.3, 3);
    let params = BuildParams::default()
        .with_codec(CodecKind::RaBitQ1)
        .with_num_anchors(16);
    let (index, _) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
    let device = open(&index).unwrap();
    let q = &data[..dim];
    for (k, nprobe) in [(0, 4), (501, 4), (10, 0), (10, 17)] {
        let e = device(
            q,
            &SearchParams {
                k,
                nprobe,
                rerank: 0,
            },
        )
        .unwrap_err();
        assert!(matches!(e, crate::VlcError::InvalidParameter { .. }), "{e}");
    }
    let e = device(&q[..dim - 1], &SearchParams::default()).unwrap_err();
    assert!(e.to_string().contains("dim"), "{e}");
    let mut nan = q.to_vec();
    nan[3] = f32::NAN;
    let p = SearchParams {
        k: 5,
        nprobe: 4,
        rerank: 0,
    };
    assert!(device(&nan, &p).is_err());
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
        }
    };
}
