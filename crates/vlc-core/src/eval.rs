//! Ground truth and recall against it.

use crate::backend::{Backend, CpuBackend};
use crate::error::{Result, VlcError};
use crate::index::{BuildEvent, Metric};
use crate::vectors::{
    column_means, prepare_rows, prepare_rows_in_place, read_block_rows,
    validate_vectors_for_metric, PreparedRows, VectorSource,
};
use rayon::prelude::*;

/// The exact nearest neighbours of each query among the rows of a base set.
#[derive(Clone, Debug, PartialEq)]
pub struct GroundTruth {
    /// Neighbours per query: the `k` asked for, or the number of base rows if that is smaller.
    pub k: usize,
    /// Row numbers in the base set (0-based), nearest first; equal distances go to the
    /// smaller row. Layout: (num_queries, k), row-major.
    pub ids: Vec<u32>,
    /// Their squared L2 distances (for the cosine metric, between the rows scaled to unit
    /// length: 2 − 2·cos). Layout: (num_queries, k), row-major.
    pub distances: Vec<f32>,
    /// (query, block) pairs where the GEMM form's candidates could not be shown to hold the
    /// block's share of the query's nearest rows, so that every row of the block was measured
    /// exactly for the query (see [`ground_truth`]).
    pub rescanned: usize,
    /// The backend that ranked the blocks: the one given, or the CPU where the candidates per
    /// block are more than that backend selects in a fixed number of passes
    /// ([`Backend::fast_picks`]).
    pub ranked_by: &'static str,
}

/// The exact `k` nearest neighbours by squared L2 of each query (`queries`: (num_queries, dim),
/// row-major) among the rows of `base`, which is read a block at a time (about 64 MiB of f32,
/// as a build reads it; unless rayon's pool has one thread, a second thread reads the next
/// block while the current one is ranked, so two blocks are in memory, and its parallel steps
/// run on rayon's global pool), so a base set larger than memory works; with [`Metric::Cosine`] base
/// rows and queries are scaled to unit length first, as an index of that metric scales them.
///
/// Each block is ranked for every query in GEMM form through `backend` (`‖q‖² − 2⟨q, x⟩ +
/// ‖x‖²`, on rows translated by the first block's mean so that the norms stay small), which
/// keeps the `k + k/4 + 8` nearest rows of the block; those are then measured exactly (differences
/// squared and summed in f64) and merged into each query's list, ties going to the smaller row,
/// except candidates whose GEMM distance less the rounding bound below is already beyond the
/// query's k-th distance so far. Where `k + k/4 + 8` is more than `backend` selects in a fixed
/// number of passes ([`Backend::fast_picks`]), the CPU ranks instead
/// ([`GroundTruth::ranked_by`]).
/// The GEMM form only chooses candidates, and the choice is checked: a row it left out has a
/// GEMM distance at least the last candidate's, so its true distance is at least that minus
/// the GEMM's rounding bound (`2 · max(backend.ranking_rounding(), dim · ε)` times the
/// largest `‖q‖² + ‖x‖²` of the block). Where the query's k-th exact distance so far is not
/// below that, every row of the block is measured exactly for that query instead, as it is
/// where the backend returns a row twice or one outside the block ([`GroundTruth::rescanned`]
/// counts such cases). So the lists are exact whatever the backend's GEMM precision (CPU,
/// CUDA's TF32 or FP16, WGPU), as far as it keeps to its stated rounding.
///
/// Errors: `k` = 0; an empty base set; queries not of the base's dimension, empty, or with a
/// NaN or infinite value; a base row with one (named by row and column); more than 2³² base
/// rows. `progress` gets a `Stage` ("exact neighbours", the base's row count) and an
/// `Advance` after each block.
pub fn ground_truth(
    base: &dyn VectorSource,
    queries: &[f32],
    k: usize,
    metric: Metric,
    backend: &dyn Backend,
    progress: &mut dyn FnMut(&BuildEvent),
) -> Result<GroundTruth> {
    ground_truth_in_blocks(
        base,
        queries,
        k,
        metric,
        backend,
        read_block_rows(base.dim()),
        progress,
    )
}

/// Candidates per query that [`ground_truth`] asks its backend for from each block (fewer
/// where the block has fewer rows): `k + k/4 + 8`.
pub fn candidates_per_block(k: usize) -> usize {
    k + k / 4 + 8
}

/// [`ground_truth`] reading `block_rows` base rows at a time.
pub(crate) fn ground_truth_in_blocks(
    base: &dyn VectorSource,
    queries: &[f32],
    k: usize,
    metric: Metric,
    backend: &dyn Backend,
    block_rows: usize,
    progress: &mut dyn FnMut(&BuildEvent),
) -> Result<GroundTruth> {
    let (n, dim) = (base.num_rows(), base.dim());
    if k == 0 {
        return Err(VlcError::param("k", "must be at least 1"));
    }
    if n == 0 {
        return Err(VlcError::EmptyInput {
            what: base.describe(),
        });
    }
    if n as u64 > u32::MAX as u64 + 1 {
        return Err(VlcError::param(
            "base",
            format!("{n} rows: row numbers are 32-bit, at most 2^32 rows"),
        ));
    }
    let normalize = metric == Metric::Cosine;
    validate_vectors_for_metric(queries, dim, "queries", metric)?;
    let queries = prepare_rows(queries, dim, normalize, None).into_owned();
    let num_queries = queries.len() / dim;
    let k = k.min(n);
    let source = PreparedRows {
        inner: base,
        normalize,
        centre: None,
    };
    // Each query's nearest rows so far: (exact squared distance, row), sorted.
    let picks = candidates_per_block(k);
    let mut best: Vec<Vec<(f64, u32)>> = vec![Vec::with_capacity(k + picks); num_queries];
    let mut shifted_queries: Option<Vec<f32>> = None;
    let mut rescanned = 0;
    progress(&BuildEvent::Stage {
        name: "exact neighbours",
        total: n,
    });
    let block_rows = block_rows.max(1);
    // A GPU's selection scans each row once per pick above its fast range, which over blocks
    // of tens of thousands of rows takes many times the CPU's time (k 1,000 on an H200
    // machine: CUDA 4.7 s and WGPU 74 s against 1.1 s on its 16 cores): the CPU ranks then.
    let backend: &dyn Backend = if picks.min(block_rows).min(n) > backend.fast_picks() {
        &CpuBackend
    } else {
        backend
    };
    // Bound of the GEMM form's error, per unit of ‖q‖² + ‖x‖² (translated rows).
    let rounding = 2.0 * (backend.ranking_rounding() as f64).max(dim as f64 * f32::EPSILON as f64);
    // Ranks one block for every query and merges its nearest rows into the lists.
    let mut measure_block = |b: &BaseBlock| -> Result<()> {
        let (start, rows) = (b.start, b.block.len() / dim);
        let (block, shifted_block) = (&b.block, &b.shifted);
        let shifted_queries = shifted_queries
            .get_or_insert_with(|| prepare_rows(&queries, dim, false, Some(&b.mean)).into_owned());
        let per_point = picks.min(rows);
        let near = backend.nearest_anchors(shifted_queries, shifted_block, dim, per_point)?;
        let max_norm = b.max_norm;
        let rescanned_now: usize = best
            .par_iter_mut()
            .enumerate()
            .map(|(i, list)| {
                let q = &queries[i * dim..(i + 1) * dim];
                let measure = |j: usize| {
                    (
                        exact_distance(q, &block[j * dim..(j + 1) * dim]),
                        (start + j) as u32,
                    )
                };
                let candidates = &near.ids[i * per_point..(i + 1) * per_point];
                let mut chosen = candidates.to_vec();
                chosen.sort_unstable();
                let valid = chosen.windows(2).all(|w| w[0] < w[1])
                    && chosen.last().is_some_and(|&j| (j as usize) < rows);
                if !valid {
                    // Repeated or out-of-range rows: the backend broke its contract (seen
                    // on a software Vulkan driver that cuts long shader loops short);
                    // measure all.
                    list.extend((0..rows).map(measure));
                    sort_and_keep(list, k);
                    return 1;
                }
                let gemm = &near.dists[i * per_point..(i + 1) * per_point];
                let q_norm = squared_norm(&shifted_queries[i * dim..(i + 1) * dim]);
                // A row is at least its GEMM distance less this from the query (exactly).
                let slack = rounding * (q_norm + max_norm);
                // Once the list is full, a candidate that far beyond its k-th distance
                // cannot enter it: only the others are measured (in the later blocks of a
                // large base, most are not).
                let kth = if list.len() == k {
                    list[k - 1].0
                } else {
                    f64::INFINITY
                };
                list.extend(
                    candidates
                        .iter()
                        .zip(gemm)
                        .filter(|&(_, &d)| d as f64 - slack <= kth)
                        .map(|(&j, _)| measure(j as usize)),
                );
                sort_and_keep(list, k);
                if per_point == rows {
                    return 0;
                }
                // A row left out is at least this far (exactly) from the query.
                let last = gemm.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
                let floor = last - slack;
                if list.len() == k && list[k - 1].0 < floor {
                    return 0;
                }
                list.extend(
                    (0..rows)
                        .filter(|&j| chosen.binary_search(&(j as u32)).is_err())
                        .map(measure),
                );
                sort_and_keep(list, k);
                1
            })
            .sum();
        rescanned += rescanned_now;
        progress(&BuildEvent::Advance { done: start + rows });
        Ok(())
    };
    let mut reader = BlockReader {
        source: &source,
        block_rows,
        mean: None,
    };
    if rayon::current_num_threads() == 1 {
        // One thread asked for (`--threads 1`): read and rank in turn.
        let mut b = BaseBlock::default();
        for start in (0..n).step_by(block_rows) {
            reader.fill(start, &mut b)?;
            measure_block(&b)?;
        }
    } else {
        // A second thread reads and translates the next block while this one ranks and
        // measures the current one; two blocks' buffers go back and forth between them.
        std::thread::scope(|scope| -> Result<()> {
            let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<Result<BaseBlock>>(1);
            let (empty_tx, empty_rx) = std::sync::mpsc::channel::<BaseBlock>();
            for _ in 0..2 {
                empty_tx
                    .send(BaseBlock::default())
                    .expect("the receiver is alive");
            }
            scope.spawn(move || reader.run(empty_rx, full_tx));
            for message in full_rx {
                let b = message?;
                measure_block(&b)?;
                // The reader may have stopped (after the last block): the buffers are not
                // needed.
                let _ = empty_tx.send(b);
            }
            Ok(())
        })?;
    }
    let ids = best
        .iter()
        .flat_map(|l| l.iter().map(|&(_, id)| id))
        .collect();
    let distances = best
        .iter()
        .flat_map(|l| l.iter().map(|&(d, _)| d as f32))
        .collect();
    Ok(GroundTruth {
        k,
        ids,
        distances,
        rescanned,
        ranked_by: backend.name(),
    })
}

/// One block of the base set as [`ground_truth`] measures it.
#[derive(Default)]
struct BaseBlock {
    /// Its first row's number in the base set.
    start: usize,
    /// The rows as read (scaled to unit length for the cosine metric). Layout: (rows, dim),
    /// row-major.
    block: Vec<f32>,
    /// The same rows less `mean`, for the GEMM form. Layout: (rows, dim), row-major.
    shifted: Vec<f32>,
    /// The first block's column means, the translation of every block and of the queries.
    /// Layout: (dim,).
    mean: Vec<f32>,
    /// The largest squared norm of a row of `shifted`.
    max_norm: f64,
}

/// [`ground_truth`]'s reader of the base set's blocks.
struct BlockReader<'a> {
    source: &'a dyn VectorSource,
    block_rows: usize,
    /// The first block's column means, once it is read. Layout: (dim,).
    mean: Option<Vec<f32>>,
}

impl BlockReader<'_> {
    /// Reads the block of rows from `start` into `b`'s buffers (reused) and translates it.
    fn fill(&mut self, start: usize, b: &mut BaseBlock) -> Result<()> {
        let (n, dim) = (self.source.num_rows(), self.source.dim());
        let rows = self.block_rows.min(n - start);
        b.start = start;
        b.block.resize(rows * dim, 0.0);
        self.source.read_rows(start, &mut b.block)?;
        // The GEMM form loses digits with the norms; a common translation changes no distance.
        let mean = self.mean.get_or_insert_with(|| {
            column_means(&b.block, dim)
                .iter()
                .map(|&m| m as f32)
                .collect()
        });
        b.mean.clone_from(mean);
        // The translated block reuses its buffer (translating into a fresh 64 MiB one per
        // block took 1.3 s of CUDA's 3.8 s over 1M x 384 on an H200 machine).
        b.shifted.clear();
        b.shifted.extend_from_slice(&b.block);
        prepare_rows_in_place(&mut b.shifted, dim, false, Some(mean));
        b.max_norm = b
            .shifted
            .par_chunks_exact(dim)
            .map(squared_norm)
            .reduce(|| 0f64, f64::max);
        Ok(())
    }

    /// Fills the buffers that come back on `empty` with the blocks, in order, and sends each
    /// on `full`. Stops after the last block, after sending an error, or when the other side
    /// hangs up.
    fn run(
        mut self,
        empty: std::sync::mpsc::Receiver<BaseBlock>,
        full: std::sync::mpsc::SyncSender<Result<BaseBlock>>,
    ) {
        for start in (0..self.source.num_rows()).step_by(self.block_rows) {
            let Ok(mut b) = empty.recv() else {
                return;
            };
            let message = self.fill(start, &mut b).map(|()| b);
            let failed = message.is_err();
            if full.send(message).is_err() || failed {
                return;
            }
        }
    }
}

/// `‖x‖²`, summed in f64.
fn squared_norm(x: &[f32]) -> f64 {
    x.iter().map(|&v| (v as f64).powi(2)).sum()
}

/// `‖q − x‖²`, differences and sum in f64 (eight running sums, which the compiler keeps in
/// vector registers, then added pairwise).
fn exact_distance(q: &[f32], x: &[f32]) -> f64 {
    let mut sums = [0f64; 8];
    let (q8, x8) = (q.chunks_exact(8), x.chunks_exact(8));
    let tail: f64 = q8
        .remainder()
        .iter()
        .zip(x8.remainder())
        .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
        .sum();
    for (a, b) in q8.zip(x8) {
        for l in 0..8 {
            sums[l] += (a[l] as f64 - b[l] as f64).powi(2);
        }
    }
    let [a, b, c, d, e, f, g, h] = sums;
    ((a + b) + (c + d)) + ((e + f) + (g + h)) + tail
}

/// Sort `list` by distance, then row, and keep its first `k`.
fn sort_and_keep(list: &mut Vec<(f64, u32)>, k: usize) {
    list.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    list.truncate(k);
}

/// Mean over queries of |top-`at` results ∩ top-`at` ground truth| / `at`.
///
/// `ids`: (num_queries, k) results, −1 for padding; `truth`: (num_queries, truth_cols).
/// Needs `at <= k` and `at <= truth_cols`.
pub fn recall_at(ids: &[i64], k: usize, truth: &[i64], truth_cols: usize, at: usize) -> f64 {
    assert!(
        at >= 1 && at <= k && at <= truth_cols,
        "recall@{at} needs k >= {at} and {at} truth columns"
    );
    let nq = ids.len() / k;
    assert_eq!(
        truth.len() / truth_cols,
        nq,
        "results and ground truth differ in query count"
    );
    let mut hits = 0usize;
    for q in 0..nq {
        let got = &ids[q * k..q * k + at];
        let want = &truth[q * truth_cols..q * truth_cols + at];
        hits += got.iter().filter(|&&g| g >= 0 && want.contains(&g)).count();
    }
    hits as f64 / (nq * at) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::CpuBackend;
    use crate::vectors::SliceSource;

    /// Every distance in f64, fully sorted (distance, then row).
    fn brute_force(base: &[f32], queries: &[f32], dim: usize, k: usize) -> Vec<Vec<(f64, u32)>> {
        queries
            .chunks_exact(dim)
            .map(|q| {
                let mut all: Vec<(f64, u32)> = base
                    .chunks_exact(dim)
                    .enumerate()
                    .map(|(j, x)| {
                        let d = q
                            .iter()
                            .zip(x)
                            .map(|(&a, &b)| (a as f64 - b as f64).powi(2));
                        (d.sum(), j as u32)
                    })
                    .collect();
                all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                all.truncate(k);
                all
            })
            .collect()
    }

    #[test]
    fn ground_truth_is_the_exact_order_for_any_block_size() {
        let dim = 13;
        let mut base = crate::synthetic::clustered(500, dim, 7, 0.4, 3);
        // Exact duplicates (ties go to the smaller row), and data far from the origin.
        base.copy_within(0..dim * 20, dim * 100);
        let far: Vec<f32> = base.iter().map(|v| v + 1000.0).collect();
        let queries = crate::synthetic::queries_near(&base, dim, 40, 0.05, 9);
        let far_queries: Vec<f32> = queries.iter().map(|v| v + 1000.0).collect();
        for (base, queries) in [(&base, &queries), (&far, &far_queries)] {
            let source = SliceSource::new(base, dim).unwrap();
            for (k, block_rows) in [(10, 1), (10, 7), (25, 64), (10, 500), (600, 128)] {
                let got = ground_truth_in_blocks(
                    &source,
                    queries,
                    k,
                    Metric::L2,
                    &CpuBackend,
                    block_rows,
                    &mut |_| {},
                )
                .unwrap();
                let want = brute_force(base, queries, dim, k);
                assert_eq!(got.k, k.min(500));
                let want_ids: Vec<u32> = want.iter().flatten().map(|p| p.1).collect();
                assert_eq!(got.ids, want_ids, "k {k}, blocks of {block_rows}");
                for (d, w) in got.distances.iter().zip(want.iter().flatten()) {
                    assert_eq!(*d, w.0 as f32);
                }
            }
        }
    }

    /// The training primitives of the test backends below: the CPU's.
    macro_rules! cpu_training {
        () => {
            fn accumulate(
                &self,
                points: &[f32],
                dim: usize,
                assignment: &[u32],
                dists: &[f32],
                thresholds: &[f32],
            ) -> Result<crate::backend::AnchorSums> {
                CpuBackend.accumulate(points, dim, assignment, dists, thresholds)
            }
            fn update(
                &self,
                anchors: &mut [f32],
                dim: usize,
                sums: &crate::backend::AnchorSums,
                step: f32,
            ) -> Result<()> {
                CpuBackend.update(anchors, dim, sums, step)
            }
        };
    }

    /// A backend whose GEMM-form distances are off by up to the rounding it states (`rho` times
    /// `‖x‖² + ‖c‖²`), as a low-precision GPU GEMM may be: it chooses its candidates by them.
    /// With `cut`, only the first `cut` candidates are filled in and the rest are row 0 at
    /// distance 0, as lavapipe returned them when it stopped a long shader loop. `fast` is
    /// its [`Backend::fast_picks`].
    struct Coarse {
        rho: f32,
        cut: Option<usize>,
        fast: usize,
    }

    impl Backend for Coarse {
        fn name(&self) -> &'static str {
            "coarse"
        }
        fn ranking_rounding(&self) -> f32 {
            self.rho
        }
        fn fast_picks(&self) -> usize {
            self.fast
        }
        fn nearest_anchors(
            &self,
            points: &[f32],
            anchors: &[f32],
            dim: usize,
            per_point: usize,
        ) -> Result<crate::backend::Nearest> {
            let num_anchors = anchors.len() / dim;
            let all = CpuBackend.nearest_anchors(points, anchors, dim, num_anchors)?;
            let mut rng = crate::Rng::new(points.len() as u64);
            let (mut ids, mut dists) = (Vec::new(), Vec::new());
            for (i, p) in points.chunks_exact(dim).enumerate() {
                let p_norm = crate::linalg::dot(p, p);
                let row = &all.ids[i * num_anchors..(i + 1) * num_anchors];
                let mut noisy: Vec<(f32, u32)> = row
                    .iter()
                    .zip(&all.dists[i * num_anchors..(i + 1) * num_anchors])
                    .map(|(&j, &d)| {
                        let c = &anchors[j as usize * dim..(j as usize + 1) * dim];
                        let scale = self.rho * (p_norm + crate::linalg::dot(c, c));
                        (d + scale * (rng.next_f64() as f32 * 2.0 - 1.0), j)
                    })
                    .collect();
                noisy.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                if let Some(cut) = self.cut {
                    noisy[cut..].iter_mut().for_each(|p| *p = (0.0, 0));
                }
                ids.extend(noisy[..per_point].iter().map(|p| p.1));
                dists.extend(noisy[..per_point].iter().map(|p| p.0.max(0.0)));
            }
            Ok(crate::backend::Nearest {
                per_point,
                ids,
                dists,
                resident: None,
            })
        }
        cpu_training!();
    }

    /// The CPU backend, except that its `fail_on`-th ranking call (from 1) fails.
    struct FailsOnCall {
        fail_on: usize,
        calls: std::sync::atomic::AtomicUsize,
    }

    impl Backend for FailsOnCall {
        fn name(&self) -> &'static str {
            "fails"
        }
        fn nearest_anchors(
            &self,
            points: &[f32],
            anchors: &[f32],
            dim: usize,
            per_point: usize,
        ) -> Result<crate::backend::Nearest> {
            let call = 1 + self
                .calls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if call == self.fail_on {
                return Err(VlcError::Backend {
                    backend: "fails".into(),
                    reason: format!("call {call}"),
                });
            }
            CpuBackend.nearest_anchors(points, anchors, dim, per_point)
        }
        cpu_training!();
    }

    /// With one thread and with a reader thread: ranking that fails on any block (first,
    /// middle, last) gives its error back and nothing waits on the other side; a bad row gives
    /// the reader's error; otherwise the lists are exact.
    #[test]
    fn a_backend_error_on_any_block_stops_the_reader_and_comes_back() {
        let dim = 4;
        let mut base = crate::synthetic::clustered(100, dim, 3, 0.4, 3);
        let queries = base[..dim * 3].to_vec();
        let want = {
            let source = SliceSource::new(&base, dim).unwrap();
            ground_truth_in_blocks(
                &source,
                &queries,
                5,
                Metric::L2,
                &CpuBackend,
                100,
                &mut |_| {},
            )
            .unwrap()
        };
        // One thread reads and ranks in turn; more read on a second thread.
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let source = SliceSource::new(&base, dim).unwrap();
                // 100 rows in blocks of 16: 7 blocks.
                let run = |backend: &dyn Backend| {
                    ground_truth_in_blocks(&source, &queries, 5, Metric::L2, backend, 16, &mut |_| {})
                };
                for fail_on in [1, 2, 4, 7] {
                    let backend = FailsOnCall {
                        fail_on,
                        calls: Default::default(),
                    };
                    let err = run(&backend).unwrap_err();
                    assert!(
                        matches!(&err, VlcError::Backend { reason, .. } if *reason == format!("call {fail_on}")),
                        "{threads} threads: {err}"
                    );
                }
                let backend = FailsOnCall {
                    fail_on: 8,
                    calls: Default::default(),
                };
                let got = run(&backend).unwrap();
                assert_eq!(got.ids, want.ids, "{threads} threads");
                assert_eq!(got.distances, want.distances, "{threads} threads");
            });
            // A bad row in the sixth block: the reader's error, named by its row.
            let kept = std::mem::replace(&mut base[85 * dim + 1], f32::NAN);
            let source = SliceSource::new(&base, dim).unwrap();
            let err = pool
                .install(|| {
                    ground_truth_in_blocks(
                        &source,
                        &queries,
                        5,
                        Metric::L2,
                        &CpuBackend,
                        16,
                        &mut |_| {},
                    )
                })
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    VlcError::NonFinite {
                        row: 85,
                        column: 1,
                        ..
                    }
                ),
                "{threads} threads: {err}"
            );
            base[85 * dim + 1] = kept;
        }
    }

    #[test]
    fn candidates_of_a_coarse_gemm_are_checked_and_the_truth_stays_exact() {
        let dim = 16;
        let base = crate::synthetic::clustered(2000, dim, 10, 0.5, 5);
        let queries = crate::synthetic::queries_near(&base, dim, 30, 0.1, 6);
        let source = SliceSource::new(&base, dim).unwrap();
        let want = brute_force(&base, &queries, dim, 10);
        let want_ids: Vec<u32> = want.iter().flatten().map(|p| p.1).collect();
        let coarse = Coarse {
            rho: 0.05,
            cut: None,
            fast: usize::MAX,
        };
        let cut = Coarse {
            rho: f32::EPSILON,
            cut: Some(3),
            fast: usize::MAX,
        };
        // k 10 takes 20 candidates per block, one more than this backend selects fast: the
        // CPU ranks instead (were it used, its cut rows would be measured in full).
        let limited = Coarse {
            rho: f32::EPSILON,
            cut: Some(3),
            fast: 19,
        };
        for (backend, name) in [
            (&coarse as &dyn Backend, "coarse"),
            (&cut, "cut"),
            (&limited, "limited"),
            (&CpuBackend, "cpu"),
        ] {
            let got = ground_truth_in_blocks(
                &source,
                &queries,
                10,
                Metric::L2,
                backend,
                256,
                &mut |_| {},
            )
            .unwrap();
            assert_eq!(got.ids, want_ids, "{name}");
            let ranked_by = if matches!(name, "coarse" | "cut") {
                "coarse"
            } else {
                "cpu"
            };
            assert_eq!(got.ranked_by, ranked_by, "{name}");
            match name {
                // Its candidates miss neighbours often enough that the check must catch them.
                "coarse" => assert!(got.rescanned > 0),
                // Every (query, block) pair has row 0 repeated: all 30 x 8 are measured in full.
                "cut" => assert_eq!(got.rescanned, 30 * 8),
                _ => assert_eq!(got.rescanned, 0),
            }
        }
    }

    #[test]
    fn cosine_ground_truth_ranks_unit_rows() {
        let dim = 9;
        let base = crate::synthetic::clustered(300, dim, 5, 0.5, 1);
        // Rows scaled by different factors: cosine ignores the scale, L2 does not.
        let scaled: Vec<f32> = base
            .chunks_exact(dim)
            .enumerate()
            .flat_map(|(i, r)| r.iter().map(move |v| v * (1 + i % 5) as f32))
            .collect();
        let queries = crate::synthetic::queries_near(&base, dim, 20, 0.05, 2);
        let source = SliceSource::new(&scaled, dim).unwrap();
        let got = ground_truth_in_blocks(
            &source,
            &queries,
            10,
            Metric::Cosine,
            &CpuBackend,
            50,
            &mut |_| {},
        )
        .unwrap();
        let unit = crate::vectors::normalize_rows(&scaled, dim);
        let unit_queries = crate::vectors::normalize_rows(&queries, dim);
        let want = brute_force(&unit, &unit_queries, dim, 10);
        assert_eq!(
            got.ids,
            want.iter().flatten().map(|p| p.1).collect::<Vec<_>>()
        );
        let l2 = ground_truth(&source, &queries, 10, Metric::L2, &CpuBackend, &mut |_| {});
        assert_ne!(l2.unwrap().ids, got.ids);
    }

    #[test]
    fn ground_truth_names_bad_input() {
        let dim = 4;
        let mut base = crate::synthetic::clustered(100, dim, 3, 0.4, 3);
        let queries = base[..dim * 3].to_vec();
        let source = SliceSource::new(&base, dim).unwrap();
        let run = |source: &dyn VectorSource, queries: &[f32], k| {
            ground_truth_in_blocks(source, queries, k, Metric::L2, &CpuBackend, 16, &mut |_| {})
        };
        let err = run(&source, &queries, 0).unwrap_err();
        assert!(
            matches!(err, VlcError::InvalidParameter { name: "k", .. }),
            "{err}"
        );
        let err = run(&SliceSource::new(&[], dim).unwrap(), &queries, 5).unwrap_err();
        assert!(matches!(err, VlcError::EmptyInput { .. }), "{err}");
        let err = run(&source, &queries[..dim + 1], 5).unwrap_err();
        assert!(matches!(err, VlcError::DimensionMismatch { .. }), "{err}");
        let err = run(&source, &[], 5).unwrap_err();
        assert!(matches!(err, VlcError::EmptyInput { .. }), "{err}");
        let mut bad_queries = queries.clone();
        bad_queries[dim + 2] = f32::NAN;
        let err = run(&source, &bad_queries, 5).unwrap_err();
        assert!(
            matches!(
                err,
                VlcError::NonFinite {
                    row: 1,
                    column: 2,
                    ..
                }
            ),
            "{err}"
        );
        // A bad base row in the fifth block is named by its row in the whole set.
        base[70 * dim + 3] = f32::INFINITY;
        let source = SliceSource::new(&base, dim).unwrap();
        let err = run(&source, &queries, 5).unwrap_err();
        assert!(
            matches!(
                err,
                VlcError::NonFinite {
                    row: 70,
                    column: 3,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn recall_counts_overlap() {
        let ids = [0, 1, 2, 9, -1, 3];
        let truth = [2, 0, 1, 3, 9, 8];
        assert_eq!(super::recall_at(&ids, 3, &truth, 3, 3), 5.0 / 6.0);
        assert_eq!(super::recall_at(&ids, 3, &truth, 3, 1), 0.0);
    }
}
