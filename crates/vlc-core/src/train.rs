//! Anchor training: VLC's annealed k-means.
//!
//! 1. k-means++ seeding on a sample.
//! 2. Per iteration: nearest-anchor assignment (GEMM form, via the backend); per-anchor robust
//!    statistics (a trimmed mean: the `trim_fraction` of members farthest from their anchor are
//!    left out); a temperature-scaled update `c += η·max(T, T_min)·(mean − c)`; cooling
//!    `T ← T·cooling`.
//! 3. Every `maintenance_interval` iterations: near-duplicate anchors are merged and overloaded
//!    anchors split (2-means along their farthest member); empty anchors are re-seeded the same
//!    way after every iteration, so no anchor stays dead.
//! 4. Energy (mean squared distance to the nearest anchor) is tracked on the training points and
//!    on a held-out fraction; training stops when the held-out energy improves by less than
//!    `energy_tolerance` (relative) and fewer than `churn_tolerance` of points change anchor.
//!
//! Everything is deterministic for a given seed, whatever the thread count.

use crate::backend::{group_by_anchor, Backend, ListSplit as Split, SERIAL_MAX};
use crate::bounds::DistanceBounds;
use crate::error::{Result, VlcError};
use crate::rng::Rng;
use crate::vectors::{gather_rows, SliceSource, VectorSource};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Training knobs. `Default` gives the documented defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrainParams {
    /// Number of anchors (inverted lists). 0 = automatic: about 4·√n, rounded to a power of
    /// two, at least 1 and at most n / 4 (and never above n).
    pub num_anchors: usize,
    /// Upper bound on iterations (default 20).
    pub max_iterations: usize,
    /// Iterations always run before convergence may stop training (default 4).
    pub min_iterations: usize,
    /// Seed for sampling, seeding and maintenance (default 42).
    pub seed: u64,
    /// Training sample cap: at most this many points per anchor are used (default 64); the
    /// rest are only assigned afterwards.
    pub max_points_per_anchor: usize,
    /// k-means++ runs on at most this many points per anchor (default 16).
    pub seeding_points_per_anchor: usize,
    /// Fraction of each anchor's members, the farthest ones, left out of its mean (default 0.05).
    pub trim_fraction: f32,
    /// Base step of the update (default 1.0 = a full move to the robust mean).
    pub learning_rate: f32,
    /// Starting temperature (default 1.0).
    pub initial_temperature: f32,
    /// Multiplied into the temperature after each iteration (default 0.9).
    pub cooling: f32,
    /// The temperature never scales the step below this (default 0.5).
    pub min_temperature: f32,
    /// Merge / split every this many iterations; 0 disables maintenance (default 5).
    pub maintenance_interval: usize,
    /// Anchors closer than this fraction of the median nearest-anchor distance are merged
    /// (default 0.1).
    pub merge_threshold: f32,
    /// Anchors with more than this multiple of the mean list size are split (default 3.0).
    pub split_threshold: f32,
    /// Fraction of the training sample held out to check convergence (default 0.05).
    pub holdout_fraction: f32,
    /// Relative held-out energy improvement under which training may stop (default 1e-3).
    pub energy_tolerance: f64,
    /// Fraction of points changing anchor under which training may stop (default 0.01).
    pub churn_tolerance: f64,
    /// Keep distance bounds between assignments, so that points whose anchor is provably
    /// unchanged are not ranked again (default true; the anchors are the same up to near-ties
    /// of the ranking's rounding). Backends that keep bounds of their own (CUDA, WGPU) ignore it.
    pub distance_bounds: bool,
}

impl Default for TrainParams {
    fn default() -> Self {
        TrainParams {
            num_anchors: 0,
            max_iterations: 20,
            min_iterations: 4,
            seed: 42,
            max_points_per_anchor: 64,
            seeding_points_per_anchor: 16,
            trim_fraction: 0.05,
            learning_rate: 1.0,
            initial_temperature: 1.0,
            cooling: 0.9,
            min_temperature: 0.5,
            maintenance_interval: 5,
            merge_threshold: 0.1,
            split_threshold: 3.0,
            holdout_fraction: 0.05,
            energy_tolerance: 1e-3,
            churn_tolerance: 0.01,
            distance_bounds: true,
        }
    }
}

/// The automatic anchor count for `n` vectors: about 4·√n, a power of two, within [1, n/4].
pub fn auto_num_anchors(n: usize) -> usize {
    let target = 4.0 * (n as f64).sqrt();
    let pow = (target.log2().round().max(0.0)) as u32;
    let k = 1usize << pow.min(40);
    k.min((n / 4).max(1)).max(1)
}

impl TrainParams {
    /// Check ranges; `n` is the number of input vectors.
    pub fn validate(&self, n: usize) -> Result<()> {
        let k = self.num_anchors;
        if k > n {
            return Err(VlcError::param(
                "num_anchors",
                format!("{k} anchors need at least {k} vectors, got {n}"),
            ));
        }
        if self.max_iterations == 0 {
            return Err(VlcError::param("max_iterations", "must be at least 1"));
        }
        let unit = |name: &'static str, v: f32, lo: f32, hi: f32| {
            if !(v >= lo && v <= hi) {
                Err(VlcError::param(
                    name,
                    format!("must be in [{lo}, {hi}], got {v}"),
                ))
            } else {
                Ok(())
            }
        };
        unit("trim_fraction", self.trim_fraction, 0.0, 0.5)?;
        unit("learning_rate", self.learning_rate, 1e-3, 1.0)?;
        unit("cooling", self.cooling, 1e-3, 1.0)?;
        unit("min_temperature", self.min_temperature, 0.0, 1.0)?;
        unit("initial_temperature", self.initial_temperature, 1e-3, 1.0)?;
        unit("holdout_fraction", self.holdout_fraction, 0.0, 0.5)?;
        unit("merge_threshold", self.merge_threshold, 0.0, 1.0)?;
        // NaN fails too.
        if self.split_threshold.partial_cmp(&1.0) != Some(std::cmp::Ordering::Greater) {
            return Err(VlcError::param("split_threshold", "must be greater than 1"));
        }
        if self.max_points_per_anchor == 0 || self.seeding_points_per_anchor == 0 {
            return Err(VlcError::param(
                "max_points_per_anchor",
                "sample sizes must be at least 1",
            ));
        }
        Ok(())
    }
}

/// What one iteration did, for progress reporting.
#[derive(Clone, Debug, Serialize)]
pub struct IterationStats {
    pub iteration: usize,
    pub max_iterations: usize,
    /// Mean squared distance of training points to their nearest anchor (before the update).
    pub energy: f64,
    /// The same on the held-out points after the update (training energy if none held out).
    pub holdout_energy: f64,
    /// Fraction of training points whose nearest anchor changed.
    pub churn: f64,
    pub temperature: f32,
    pub step: f32,
    pub merged: usize,
    pub split: usize,
    pub reseeded: usize,
}

/// Summary of a training run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TrainReport {
    /// Wall time per phase, seconds: seeding, assignment, statistics (energy, churn and the
    /// trimming thresholds), update (trimmed accumulation and the anchor move, one backend
    /// call), maintenance (merge/split/re-seed), held-out check.
    pub phase_seconds: PhaseSeconds,
    pub num_anchors: usize,
    pub training_points: usize,
    pub holdout_points: usize,
    pub iterations: usize,
    pub converged: bool,
    pub energy_history: Vec<f64>,
    pub holdout_energy_history: Vec<f64>,
    pub churn_history: Vec<f64>,
    pub merges: usize,
    pub splits: usize,
    pub reseeds: usize,
    /// Points ranked against every anchor in each iteration's assignment (the others were
    /// settled by distance bounds); empty where the backend keeps its own bounds.
    pub ranked_history: Vec<usize>,
}

/// Wall time per training phase, in seconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PhaseSeconds {
    /// Drawing the training sample and gathering it.
    pub sampling: f64,
    /// Handing the sample to the backend ([`Backend::pin`]: a GPU backend uploads it here).
    pub upload: f64,
    pub seeding: f64,
    pub assign: f64,
    pub statistics: f64,
    pub update: f64,
    pub maintenance: f64,
    /// Part of `maintenance`: grouping members and merging near-duplicate anchors.
    pub merge: f64,
    /// Part of `maintenance`: splitting overloaded anchors and re-seeding empty ones.
    pub split: f64,
    pub holdout: f64,
}

/// Train `params.num_anchors` anchors (or the automatic count) on `data` (n, dim), row-major.
/// Returns the anchors, layout (num_anchors, dim), row-major, and a report.
pub fn train_anchors(
    backend: &dyn Backend,
    data: &[f32],
    dim: usize,
    params: &TrainParams,
    on_iteration: &mut dyn FnMut(&IterationStats),
) -> Result<(Vec<f32>, TrainReport)> {
    train_anchors_from(backend, &SliceSource::new(data, dim)?, params, on_iteration)
}

/// [`train_anchors`] on the rows of `source`, of which only the training sample (at most
/// `max_points_per_anchor` rows per anchor) is read into memory.
pub fn train_anchors_from(
    backend: &dyn Backend,
    source: &dyn VectorSource,
    params: &TrainParams,
    on_iteration: &mut dyn FnMut(&IterationStats),
) -> Result<(Vec<f32>, TrainReport)> {
    let dim = source.dim();
    if dim == 0 {
        return Err(VlcError::param("dim", "must be at least 1"));
    }
    let n = source.num_rows();
    if n == 0 {
        return Err(VlcError::EmptyInput {
            what: "training vectors".into(),
        });
    }
    params.validate(n)?;
    let k = if params.num_anchors == 0 {
        auto_num_anchors(n)
    } else {
        params.num_anchors
    };
    let mut rng = Rng::new(params.seed);
    let sampling = std::time::Instant::now();

    // Training sample in random order; the first `holdout` rows are held out.
    let cap = k.saturating_mul(params.max_points_per_anchor).max(k);
    let mut order = rng.sample_indices(n, cap.min(n));
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let mut holdout = (order.len() as f64 * params.holdout_fraction as f64) as usize;
    if order.len() - holdout < k || holdout < 16 {
        holdout = 0;
    }
    let held = gather_rows(source, &order[..holdout])?;
    let train = gather_rows(source, &order[holdout..])?;
    let num_train = train.len() / dim;
    let sampling = sampling.elapsed().as_secs_f64();
    let clock = std::time::Instant::now();
    let pinned = (backend.pin(&train)?, backend.pin(&held)?);
    let upload = clock.elapsed().as_secs_f64();

    let seed_count = k
        .saturating_mul(params.seeding_points_per_anchor)
        .clamp(k, num_train);
    let clock = std::time::Instant::now();
    let mut anchors = kmeans_plus_plus(
        backend,
        &train[..seed_count * dim],
        dim,
        k,
        &mut rng.fork(1),
    )?;
    let mut phases = PhaseSeconds {
        sampling,
        upload,
        seeding: clock.elapsed().as_secs_f64(),
        ..Default::default()
    };

    let mut report = TrainReport {
        num_anchors: k,
        training_points: num_train,
        holdout_points: holdout,
        ..Default::default()
    };
    let mut previous: Option<Vec<u32>> = None;
    let mut previous_holdout = f64::INFINITY;
    let mut temperature = params.initial_temperature;
    let mut maintenance_rng = rng.fork(2);
    let mut bounds = (params.distance_bounds && !backend.bounds_assignments())
        .then(|| DistanceBounds::new(&train, dim));
    for t in 0..params.max_iterations {
        let clock = std::time::Instant::now();
        let nearest = match bounds.as_mut() {
            Some(bounds) => {
                let nearest = bounds.nearest(backend, &train, &anchors, dim)?;
                report.ranked_history.push(bounds.ranked);
                nearest
            }
            None => backend.nearest_anchors(&train, &anchors, dim, 1)?,
        };
        phases.assign += clock.elapsed().as_secs_f64();
        let clock = std::time::Instant::now();
        let (assignment, dists) = (&nearest.ids, &nearest.dists);
        let energy = mean_f64(dists);
        let churn = previous.as_ref().map_or(1.0, |p| {
            let changed = if p.len() <= SERIAL_MAX {
                p.iter().zip(assignment).filter(|(a, b)| a != b).count()
            } else {
                p.par_iter()
                    .zip(assignment.par_iter())
                    .with_min_len(SERIAL_MAX)
                    .filter(|(a, b)| a != b)
                    .count()
            };
            changed as f64 / num_train as f64
        });

        let thresholds = backend.trimmed_thresholds(&nearest, k, params.trim_fraction)?;
        phases.statistics += clock.elapsed().as_secs_f64();
        let clock = std::time::Instant::now();
        let step = params.learning_rate * temperature.max(params.min_temperature);
        let sums = backend.accumulate_and_update(
            &train,
            &mut anchors,
            dim,
            &nearest,
            &thresholds,
            step,
        )?;
        phases.update += clock.elapsed().as_secs_f64();
        let clock = std::time::Instant::now();

        let mut stats = IterationStats {
            iteration: t + 1,
            max_iterations: params.max_iterations,
            energy,
            holdout_energy: energy,
            churn,
            temperature,
            step,
            merged: 0,
            split: 0,
            reseeded: 0,
        };
        let merge_before = phases.merge;
        let maintain = params.maintenance_interval > 0
            && (t + 1) % params.maintenance_interval == 0
            && t + 1 < params.max_iterations;
        // Member lists are only needed to merge, split or re-seed.
        let any_empty = sums.members.contains(&0);
        let mut members = if maintain || any_empty {
            Members::new(assignment, k)
        } else {
            Members { lists: Vec::new() }
        };
        if maintain {
            let free = merge_close_anchors(
                backend,
                &mut anchors,
                dim,
                &mut members,
                params.merge_threshold,
            )?;
            stats.merged = free.len();
            phases.merge += clock.elapsed().as_secs_f64();
            stats.split = split_overloaded(
                backend,
                &train,
                dim,
                &mut anchors,
                &mut members,
                free,
                params.split_threshold,
                &mut maintenance_rng,
            )?;
        }
        if any_empty || maintain {
            stats.reseeded = reseed_empty(
                backend,
                &train,
                dim,
                &mut anchors,
                &mut members,
                &mut maintenance_rng,
            )?;
        }

        let maintenance = clock.elapsed().as_secs_f64();
        phases.split += maintenance - (phases.merge - merge_before);
        phases.maintenance += maintenance;
        let clock = std::time::Instant::now();
        if holdout > 0 {
            let h = backend.nearest_anchors(&held, &anchors, dim, 1)?;
            stats.holdout_energy = h.dists.iter().map(|&d| d as f64).sum::<f64>() / holdout as f64;
        }
        phases.holdout += clock.elapsed().as_secs_f64();
        report.phase_seconds = phases.clone();
        report.energy_history.push(energy);
        report.holdout_energy_history.push(stats.holdout_energy);
        report.churn_history.push(churn);
        report.merges += stats.merged;
        report.splits += stats.split;
        report.reseeds += stats.reseeded;
        report.iterations = t + 1;
        on_iteration(&stats);

        let improvement =
            (previous_holdout - stats.holdout_energy) / previous_holdout.max(f64::MIN_POSITIVE);
        let quiet = !maintain && stats.reseeded == 0;
        if t + 1 >= params.min_iterations
            && quiet
            && improvement.abs() < params.energy_tolerance
            && churn < params.churn_tolerance
        {
            report.converged = true;
            break;
        }
        previous_holdout = stats.holdout_energy;
        previous = Some(nearest.ids);
        temperature *= params.cooling;
    }
    drop(pinned);
    // A large sample (gigabytes at 10^6 vectors) is freed on a helper thread: unmapping it
    // took about 0.1 s that the caller need not wait for.
    if (train.len() + held.len()) * 4 >= 1 << 26 {
        std::thread::spawn(move || drop((train, held)));
    }
    Ok((anchors, report))
}

/// Mean of `values` in f64, summed over fixed chunks in parallel and the chunks added in
/// order: the same result whatever the thread count.
fn mean_f64(values: &[f32]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    const CHUNK: usize = 1 << 14;
    let chunk_sum = |c: &[f32]| c.iter().map(|&d| d as f64).sum::<f64>();
    // Small inputs skip the thread pool (its dispatch costs more than the sum); the chunking,
    // and so the result, is the same either way.
    let partial: Vec<f64> = if values.len() <= 4 * CHUNK {
        values.chunks(CHUNK).map(chunk_sum).collect()
    } else {
        values.par_chunks(CHUNK).map(chunk_sum).collect()
    };
    partial.iter().sum::<f64>() / values.len() as f64
}

/// k-means++ seeding (D² sampling) on `points` (m, dim), in rounds: each round draws a batch of
/// new centres with probability ∝ D² (the squared distance to the nearest centre so far), then
/// updates D² with one backend call. Batches grow with the number of centres (at most k/16),
/// so there are O(16 + log k) rounds instead of k. Returns (k, dim) anchors.
fn kmeans_plus_plus(
    backend: &dyn Backend,
    points: &[f32],
    dim: usize,
    k: usize,
    rng: &mut Rng,
) -> Result<Vec<f32>> {
    let m = points.len() / dim;
    let _pinned = backend.pin(points)?;
    let row = |i: usize| &points[i * dim..(i + 1) * dim];
    let mut anchors = Vec::with_capacity(k * dim);
    let mut chosen = vec![false; m];
    let first = rng.below(m);
    anchors.extend_from_slice(row(first));
    chosen[first] = true;
    let mut best = backend.nearest_anchors(points, row(first), dim, 1)?.dists;
    let max_batch = (k / 16).max(1);
    let mut count = 1;
    while count < k {
        let batch = count.min(max_batch).min(k - count);
        // Draw `batch` targets on the D² prefix sums (one pass, then binary searches).
        let mut prefix = Vec::with_capacity(m);
        let mut total = 0f64;
        for (&d, &c) in best.iter().zip(&chosen) {
            total += if c { 0.0 } else { d as f64 };
            prefix.push(total);
        }
        let mut picks = Vec::with_capacity(batch);
        if total > 0.0 {
            for _ in 0..batch {
                let target = rng.next_f64() * total;
                let pick = prefix.partition_point(|&p| p <= target).min(m - 1);
                if !chosen[pick] {
                    chosen[pick] = true;
                    picks.push(pick);
                }
            }
        }
        if picks.is_empty() {
            // Every remaining point coincides with a centre (or all draws collided): take any
            // point not yet chosen.
            let start = rng.below(m);
            let pick = (0..m)
                .map(|o| (start + o) % m)
                .find(|&i| !chosen[i])
                .unwrap_or(start);
            chosen[pick] = true;
            picks.push(pick);
        }
        let batch = picks.len();
        let mut centres = Vec::with_capacity(batch * dim);
        for &p in &picks {
            centres.extend_from_slice(row(p));
        }
        let near = backend.nearest_anchors(points, &centres, dim, 1)?;
        best.iter_mut()
            .zip(&near.dists)
            .for_each(|(b, &d)| *b = b.min(d));
        anchors.extend_from_slice(&centres);
        count += batch;
    }
    Ok(anchors)
}

/// Member lists per anchor, kept up to date through merges and splits of one iteration.
struct Members {
    lists: Vec<Vec<u32>>,
}

impl Members {
    fn new(assignment: &[u32], k: usize) -> Self {
        let (offsets, members) = group_by_anchor(assignment, k);
        Members {
            lists: (0..k)
                .map(|a| members[offsets[a]..offsets[a + 1]].to_vec())
                .collect(),
        }
    }
}

/// Merge pairs of anchors closer than `threshold` × the median nearest-anchor distance. The
/// smaller list joins the larger (weighted mean); returns the freed anchor slots.
fn merge_close_anchors(
    backend: &dyn Backend,
    anchors: &mut [f32],
    dim: usize,
    members: &mut Members,
    threshold: f32,
) -> Result<Vec<usize>> {
    let k = anchors.len() / dim;
    if k < 3 || threshold <= 0.0 {
        return Ok(Vec::new());
    }
    let nn = backend.nearest_anchors(anchors, anchors, dim, 2)?;
    let mut pairs: Vec<(f32, usize, usize)> = (0..k)
        .map(|a| {
            let (i0, i1) = (nn.ids[2 * a] as usize, nn.ids[2 * a + 1] as usize);
            if i0 != a {
                (nn.dists[2 * a], a, i0)
            } else {
                (nn.dists[2 * a + 1], a, i1)
            }
        })
        .collect();
    let mut nn_dists: Vec<f32> = pairs.iter().map(|p| p.0).collect();
    let mid = k / 2;
    let (_, &mut median, _) = nn_dists.select_nth_unstable_by(mid, f32::total_cmp);
    let limit = threshold * threshold * median;
    pairs.retain(|p| p.0 < limit);
    pairs.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    let mut touched = vec![false; k];
    let mut freed = Vec::new();
    for (_, a, b) in pairs {
        if touched[a] || touched[b] {
            continue;
        }
        touched[a] = true;
        touched[b] = true;
        let (keep, gone) = if members.lists[a].len() >= members.lists[b].len() {
            (a, b)
        } else {
            (b, a)
        };
        let (wk, wg) = (
            members.lists[keep].len() as f32,
            members.lists[gone].len() as f32,
        );
        let total = (wk + wg).max(1.0);
        for d in 0..dim {
            let merged = if wk + wg > 0.0 {
                (anchors[keep * dim + d] * wk + anchors[gone * dim + d] * wg) / total
            } else {
                anchors[keep * dim + d]
            };
            anchors[keep * dim + d] = merged;
        }
        let moved = std::mem::take(&mut members.lists[gone]);
        members.lists[keep].extend(moved);
        freed.push(gone);
    }
    Ok(freed)
}

/// The cuts of the anchors of `batch` ([`Backend::split_lists`]); results in `batch` order.
fn propose_splits(
    backend: &dyn Backend,
    points: &[f32],
    dim: usize,
    anchors: &[f32],
    members: &Members,
    batch: &[usize],
) -> Result<Vec<Option<Split>>> {
    let mut centers = Vec::with_capacity(batch.len() * dim);
    for &a in batch {
        centers.extend_from_slice(&anchors[a * dim..(a + 1) * dim]);
    }
    let lists: Vec<&[u32]> = batch.iter().map(|&a| &members.lists[a][..]).collect();
    backend.split_lists(points, dim, &centers, &lists)
}

/// Anchor `big` keeps the minus side of `split`; slot `free` gets the plus side.
fn apply_split(
    anchors: &mut [f32],
    dim: usize,
    members: &mut Members,
    big: usize,
    free: usize,
    split: Split,
) {
    anchors[big * dim..(big + 1) * dim].copy_from_slice(&split.minus_mean);
    anchors[free * dim..(free + 1) * dim].copy_from_slice(&split.plus_mean);
    members.lists[big] = split.minus;
    members.lists[free] = split.plus;
}

/// Index of the largest list (ties to the smaller id).
fn largest(members: &Members) -> usize {
    (0..members.lists.len())
        .max_by(|&a, &b| {
            members.lists[a]
                .len()
                .cmp(&members.lists[b].len())
                .then(b.cmp(&a))
        })
        .unwrap_or(0)
}

/// Split overloaded anchors into the freed slots (retiring tiny anchors to make room), then
/// split the largest anchors into any slot still free. Returns the number of splits.
#[allow(clippy::too_many_arguments)]
fn split_overloaded(
    backend: &dyn Backend,
    points: &[f32],
    dim: usize,
    anchors: &mut [f32],
    members: &mut Members,
    mut free: Vec<usize>,
    threshold: f32,
    rng: &mut Rng,
) -> Result<usize> {
    let k = members.lists.len();
    let total: usize = members.lists.iter().map(Vec::len).sum();
    let mean = total as f32 / k as f32;
    let mut overloaded: Vec<usize> = (0..k)
        .filter(|&a| members.lists[a].len() as f32 > threshold * mean)
        .collect();
    overloaded.sort_by(|&a, &b| {
        members.lists[b]
            .len()
            .cmp(&members.lists[a].len())
            .then(a.cmp(&b))
    });
    if overloaded.len() > free.len() {
        // Retire the smallest anchors (under a tenth of the mean) to make room.
        let mut small: Vec<usize> = (0..k)
            .filter(|a| !free.contains(a) && (members.lists[*a].len() as f32) < 0.1 * mean)
            .collect();
        small.sort_by(|&a, &b| {
            members.lists[a]
                .len()
                .cmp(&members.lists[b].len())
                .then(a.cmp(&b))
        });
        for a in small.into_iter().take(overloaded.len() - free.len()) {
            let orphans = std::mem::take(&mut members.lists[a]);
            // Orphans go to the largest list for bookkeeping; the next assignment places them.
            let l = largest(members);
            members.lists[l].extend(orphans);
            free.push(a);
        }
    }
    // The overloaded anchors are distinct and none is a free slot, so their cuts are
    // independent: compute as many as there are free slots at once, then apply them in order,
    // each success taking the next free slot (a failed cut leaves its slot to the next anchor,
    // exactly as one cut at a time would).
    let mut splits = 0;
    let mut next = 0;
    while !free.is_empty() && next < overloaded.len() {
        let batch = &overloaded[next..(next + free.len()).min(overloaded.len())];
        let cuts = propose_splits(backend, points, dim, anchors, members, batch)?;
        for (&big, cut) in batch.iter().zip(cuts) {
            if let Some(cut) = cut {
                let slot = free
                    .pop()
                    .expect("a batch has at most one cut per free slot");
                apply_split(anchors, dim, members, big, slot, cut);
                splits += 1;
            }
        }
        next += batch.len();
    }
    // Slots still free go to the largest list, one after another (a list just cut may still be
    // the largest). A cut depends only on its anchor and its members, which change only when
    // that anchor is cut or filled, so the cuts of the largest lists are computed together
    // (one backend call) and kept until used or invalidated: the result is that of cutting one
    // at a time. With r slots left only the r largest lists can still be cut (reaching a list
    // takes one cut of each list above it), so a batch is the lists among the 1 + r largest
    // whose cut is not known yet.
    let mut cached: Vec<Option<Option<Split>>> = (0..k).map(|_| None).collect();
    let mut slots = free.into_iter();
    while let Some(slot) = slots.next() {
        let big = largest(members);
        if cached[big].is_none() {
            let mut batch: Vec<usize> = (0..k).collect();
            batch.sort_by(|&a, &b| {
                members.lists[b]
                    .len()
                    .cmp(&members.lists[a].len())
                    .then(a.cmp(&b))
            });
            batch.truncate(1 + slots.len());
            batch.retain(|&a| cached[a].is_none());
            let cuts = propose_splits(backend, points, dim, anchors, members, &batch)?;
            for (a, cut) in batch.into_iter().zip(cuts) {
                cached[a] = Some(cut);
            }
        }
        if matches!(cached[big], Some(Some(_))) {
            let Some(Some(cut)) = cached[big].take() else {
                unreachable!()
            };
            apply_split(anchors, dim, members, big, slot, cut);
            cached[slot] = None;
            splits += 1;
        } else {
            // Cannot be cut (kept as such: it stays the largest and the next slot fails too).
            let p = rng.below(points.len() / dim);
            anchors[slot * dim..(slot + 1) * dim].copy_from_slice(&points[p * dim..(p + 1) * dim]);
        }
    }
    Ok(splits)
}

/// Re-seed anchors that own no points by splitting the largest lists. Returns how many.
fn reseed_empty(
    backend: &dyn Backend,
    points: &[f32],
    dim: usize,
    anchors: &mut [f32],
    members: &mut Members,
    rng: &mut Rng,
) -> Result<usize> {
    let empty: Vec<usize> = (0..members.lists.len())
        .filter(|&a| members.lists[a].is_empty())
        .collect();
    let count = empty.len();
    if count > 0 {
        split_overloaded(
            backend,
            points,
            dim,
            anchors,
            members,
            empty,
            f32::INFINITY,
            rng,
        )?;
    }
    Ok(count)
}
