//! Anchor training: determinism, no dead anchors, energy, parameter checks.

use vlc::synthetic::clustered;
use vlc::train::{auto_num_anchors, train_anchors, TrainParams};
use vlc::{Backend, CpuBackend};

fn params(k: usize, seed: u64) -> TrainParams {
    TrainParams {
        num_anchors: k,
        seed,
        ..TrainParams::default()
    }
}

#[test]
fn same_seed_gives_identical_anchors_and_other_seed_differs() {
    let dim = 24;
    let data = clustered(3000, dim, 20, 0.3, 1);
    let (a1, r1) = train_anchors(&CpuBackend, &data, dim, &params(32, 7), &mut |_| {}).unwrap();
    let (a2, r2) = train_anchors(&CpuBackend, &data, dim, &params(32, 7), &mut |_| {}).unwrap();
    assert_eq!(a1, a2);
    assert_eq!(r1.energy_history, r2.energy_history);
    // Thread count must not change the result.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let (a3, _) = pool
        .install(|| train_anchors(&CpuBackend, &data, dim, &params(32, 7), &mut |_| {}).unwrap());
    assert_eq!(a1, a3);
    let (a4, _) = train_anchors(&CpuBackend, &data, dim, &params(32, 8), &mut |_| {}).unwrap();
    assert_ne!(a1, a4);
}

#[test]
fn energy_drops_well_below_seeding_and_no_anchor_is_dead() {
    let dim = 16;
    let data = clustered(4000, dim, 40, 0.2, 3);
    let mut iterations = Vec::new();
    let (anchors, report) = train_anchors(&CpuBackend, &data, dim, &params(64, 1), &mut |s| {
        iterations.push(s.clone())
    })
    .unwrap();
    assert_eq!(anchors.len(), 64 * dim);
    assert!(anchors.iter().all(|v| v.is_finite()));
    let first = report.energy_history[0];
    let last = *report.energy_history.last().unwrap();
    assert!(last < 0.8 * first, "energy {first} -> {last}");
    assert_eq!(iterations.len(), report.iterations);
    // Every anchor owns at least one point afterwards.
    let near = CpuBackend.nearest_anchors(&data, &anchors, dim, 1).unwrap();
    let mut counts = vec![0; 64];
    near.ids.iter().for_each(|&a| counts[a as usize] += 1);
    assert!(counts.iter().all(|&c| c > 0), "dead anchors: {counts:?}");
}

#[test]
fn annealed_training_is_close_to_plain_lloyd() {
    // With trimming off, no cooling and no maintenance, training is Lloyd's algorithm; the
    // annealed defaults must land within a few percent of its energy.
    let dim = 32;
    let data = clustered(6000, dim, 50, 0.5, 11);
    let k = 64;
    let energy = |p: &TrainParams| {
        let (a, _) = train_anchors(&CpuBackend, &data, dim, p, &mut |_| {}).unwrap();
        let near = CpuBackend.nearest_anchors(&data, &a, dim, 1).unwrap();
        near.dists.iter().map(|&d| d as f64).sum::<f64>() / 6000.0
    };
    let lloyd = TrainParams {
        trim_fraction: 0.0,
        cooling: 1.0,
        maintenance_interval: 0,
        max_iterations: 30,
        ..params(k, 5)
    };
    let (e_lloyd, e_vlc) = (energy(&lloyd), energy(&params(k, 5)));
    assert!(
        e_vlc < 1.03 * e_lloyd,
        "annealed {e_vlc} vs Lloyd {e_lloyd}"
    );
}

#[test]
fn duplicate_points_do_not_break_training() {
    let dim = 4;
    let mut data = vec![1.0f32; 100 * dim];
    data.extend(std::iter::repeat_n(2.0, 100 * dim));
    let (anchors, _) = train_anchors(&CpuBackend, &data, dim, &params(8, 1), &mut |_| {}).unwrap();
    assert!(anchors.iter().all(|v| v.is_finite()));
}

#[test]
fn bad_parameters_are_errors() {
    let data = clustered(100, 4, 3, 0.1, 1);
    let err = train_anchors(&CpuBackend, &data, 4, &params(101, 1), &mut |_| {}).unwrap_err();
    assert!(
        err.to_string()
            .contains("101 anchors need at least 101 vectors"),
        "{err}"
    );
    let bad = TrainParams {
        trim_fraction: 0.9,
        ..params(4, 1)
    };
    assert!(train_anchors(&CpuBackend, &data, 4, &bad, &mut |_| {}).is_err());
    assert!(train_anchors(&CpuBackend, &[], 4, &params(1, 1), &mut |_| {}).is_err());
}

#[test]
fn automatic_anchor_count() {
    assert_eq!(auto_num_anchors(1), 1);
    assert_eq!(auto_num_anchors(60_601), 1024);
    assert_eq!(auto_num_anchors(100), 25);
    assert!(auto_num_anchors(1_000_000) >= 2048);
}

#[test]
fn distance_bounds_change_the_work_not_the_anchors() {
    // (dim, anchors, clusters): odd dimensions, two anchors (no movers possible), more anchors
    // than clusters (near-ties between anchors of one cluster), and a wide shape.
    for (case, &(dim, k, clusters)) in [(7, 2, 3), (24, 32, 20), (96, 17, 40), (200, 64, 30)]
        .iter()
        .enumerate()
    {
        let n = 3000;
        let data = clustered(n, dim, clusters, 0.3, 11 + case as u64);
        let run = |bounds: bool| {
            let p = TrainParams {
                max_iterations: 15,
                min_iterations: 15,
                distance_bounds: bounds,
                ..params(k, 5)
            };
            train_anchors(&CpuBackend, &data, dim, &p, &mut |_| {}).unwrap()
        };
        let (plain, plain_report) = run(false);
        let (bounded, report) = run(true);
        assert!(plain_report.ranked_history.is_empty());
        assert_eq!(report.ranked_history.len(), report.iterations);
        let points = report.training_points;
        assert_eq!(
            report.ranked_history[0], points,
            "the first assignment ranks every point"
        );
        // The bounds only settle points whose anchor is provably unchanged, and near-ties are
        // ranked: the assignments, hence the anchors and energies, are the plain run's.
        for (a, b) in plain_report
            .energy_history
            .iter()
            .zip(&report.energy_history)
        {
            assert!(
                (a - b).abs() <= 1e-6 * a.abs(),
                "case {case}: energy {a} vs {b}"
            );
        }
        let worst = plain
            .iter()
            .zip(&bounded)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(worst <= 1e-5, "case {case}: anchors differ by {worst}");
        if k > 2 {
            let ranked: usize = report.ranked_history.iter().sum();
            assert!(
                ranked < points * report.iterations * 9 / 10,
                "case {case}: bounds settled few points: {:?}",
                report.ranked_history
            );
        }
    }
}
