//! Query side: rank anchors, scan `nprobe` inverted lists with the primary codec, keep a
//! candidate pool, rerank it with the refine tier when the index has one, return the top k.

use crate::backend::Backend;
use crate::codec::{Codec, QueryState, ResidualCodec};
use crate::error::{Result, VlcError};
use crate::fastscan::{FastScan, LooseBlocks, QueryLut, BLOCK};
use crate::filter::IdFilter;
use crate::index::Index;
use crate::linalg::{key_dist, key_id, order_key, smallest_keys};
use crate::simd::below_mask;
use crate::vectors::validate_vectors_for_metric;
use rayon::prelude::*;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::LazyLock;

/// Search knobs.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SearchParams {
    /// Neighbours to return (≥ 1; above the number of vectors, every vector, the rows padded:
    /// see [`SearchParams::resolve`]).
    pub k: usize,
    /// Inverted lists to scan (≥ 1; above the number of anchors, every list); with
    /// `probe_margin`, the most to scan.
    pub nprobe: usize,
    /// Candidate pool rescored by the second stage (refine tier, or the full code after a fast
    /// scan); 0 = automatic. Ignored without a second stage.
    ///
    /// Automatic: the second stage rescores the first stage's 10·k best, then every other
    /// scanned candidate whose first-stage estimate is below the k-th best rescored distance
    /// plus three times the first stage's error, as measured on that pool
    /// ([`SearchParams::pool_size`] says more). Where the first stage ranks well, few or none
    /// are added; where it ranks poorly (few dimensions, tight neighbourhoods), those its
    /// error may have pushed out of the pool. The CPU and the GPU backends apply the same
    /// rule ([`SearchParams::automatic_pool`]).
    pub rerank: usize,
    /// Adaptive probing: of the `nprobe` nearest lists, skip those whose anchor is farther
    /// from the query (squared distance) than the nearest anchor by more than
    /// `probe_margin` times the index's energy (the mean squared distance of its vectors to
    /// their anchors, [`Index::energy`]), once the lists already taken hold at least k
    /// vectors. A query near one cluster then scans one or two lists, a query between
    /// clusters all the nearby ones. `None` scans all `nprobe` lists. Must be finite and ≥ 0.
    #[serde(default)]
    pub probe_margin: Option<f32>,
}

impl Default for SearchParams {
    fn default() -> Self {
        SearchParams {
            k: 10,
            nprobe: 16,
            rerank: 0,
            probe_margin: None,
        }
    }
}

impl SearchParams {
    /// These parameters as a search of an index of `num_vectors` vectors and `num_anchors`
    /// anchors runs them: k above the vector count returns every vector (the rows padded
    /// with id −1 and distance +∞ up to the k asked for), nprobe above the anchor count scans
    /// every list, as FAISS does, and a candidate pool (`rerank`, or 10·k) deeper than the
    /// index holds it all. So an index that is still small, or one whose size varies, can be
    /// searched with the same parameters as a large one. Errors: k = 0, nprobe = 0, a
    /// negative or non-finite probe margin.
    pub fn resolve(&self, num_vectors: usize, num_anchors: usize) -> Result<SearchParams> {
        if self.k == 0 {
            return Err(VlcError::param("k", "must be at least 1, got 0"));
        }
        if let Some(m) = self.probe_margin {
            if !m.is_finite() || m < 0.0 {
                return Err(VlcError::param(
                    "probe_margin",
                    format!("must be a finite number >= 0, got {m}"),
                ));
            }
        }
        if self.nprobe == 0 {
            return Err(VlcError::param("nprobe", "must be at least 1, got 0"));
        }
        let n = num_vectors.max(1);
        let k = self.k.min(n);
        // A pool deeper than the index holds every candidate either way; the GPUs size their
        // pools (shared or workgroup memory) by it.
        let automatic = 10usize.saturating_mul(k);
        let rerank = match self.rerank {
            0 if automatic > n => n,
            r => r.min(n),
        };
        Ok(SearchParams {
            k,
            nprobe: self.nprobe.min(num_anchors.max(1)),
            rerank,
            ..*self
        })
    }

    /// How many of the nearest lists a query scans. `probes`: the `nprobe` nearest anchors'
    /// squared distances, nearest first; `list_len(j)`: the size of the j-th of those lists;
    /// `energy`: the index's mean squared vector-to-anchor distance. Without a margin, all of
    /// them; with one, the first list j ≥ 1 whose distance exceeds the nearest by more than
    /// `probe_margin · energy` while the lists before it hold at least k vectors ends the scan
    /// (both conditions only grow with j, so the lists scanned are always a prefix). The GPU
    /// search kernels apply the same rule.
    pub fn lists_to_scan(
        &self,
        probes: &[f32],
        energy: f32,
        list_len: impl FnMut(usize) -> usize,
    ) -> usize {
        self.prefix_to_scan(probes.len(), |j| probes[j], energy, list_len)
    }

    /// [`Self::lists_to_scan`] over `num_probes` probes whose j-th squared distance is
    /// `dist(j)`, so that callers holding (anchor, distance) pairs need no copy.
    fn prefix_to_scan(
        &self,
        num_probes: usize,
        dist: impl Fn(usize) -> f32,
        energy: f32,
        mut list_len: impl FnMut(usize) -> usize,
    ) -> usize {
        let Some(margin) = self.probe_margin else {
            return num_probes;
        };
        if num_probes == 0 {
            return 0;
        }
        let limit = dist(0) + margin * energy;
        let mut held = 0usize;
        for j in 0..num_probes {
            if j > 0 && dist(j) > limit && held >= self.k {
                return j;
            }
            held += list_len(j);
        }
        num_probes
    }

    /// Candidates kept for the second stage (refine tier, or the full RaBitQ code after a
    /// fast scan): `rerank`, or 10·k when 0; just k without a second stage.
    ///
    /// With `rerank` 0 ([`SearchParams::automatic_pool`]) a search treats this pool as a
    /// start, not a limit: after rescoring it, it takes the standard deviation of the pool's
    /// first-stage errors (second-stage distance − first-stage estimate) as the query's error
    /// `s`, and when the pool's worst estimate is below the k-th best rescored distance plus
    /// [`ERROR_MARGIN`]·`s`, it rescores every scanned candidate beyond the pool whose
    /// estimate is below that bound too. The CPU keeps the first stage's estimates of every
    /// scanned candidate for this; the GPU kernels score the scanned lists' first stage
    /// again. On a GPU the k-th best in the bound is the pool's threshold as of the block's
    /// last compaction (it tightens per round of candidates, not per candidate, so a GPU
    /// rescores at least the candidates it would with the CPU's order), and `s` is taken
    /// over every candidate of the pool in `f32` (the CPU's, in `f64`, leaves out those
    /// whose bit-plane code stopped early, above the k-th best).
    pub fn pool_size(&self, has_second_stage: bool) -> usize {
        if has_second_stage {
            let r = if self.rerank == 0 {
                10 * self.k
            } else {
                self.rerank
            };
            r.max(self.k)
        } else {
            self.k
        }
    }

    /// Whether the pool of [`SearchParams::pool_size`] is automatic: rescored, then extended
    /// by the candidates beyond it within [`ERROR_MARGIN`] times the first stage's error of
    /// the k-th best (`rerank` 0 with a second stage).
    pub fn automatic_pool(&self, has_second_stage: bool) -> bool {
        has_second_stage && self.rerank == 0
    }

    /// The GPU kernels' `error_margin`: [`ERROR_MARGIN`] with the automatic pool
    /// ([`SearchParams::automatic_pool`]), 0 for a fixed one.
    pub fn error_margin(&self, has_second_stage: bool) -> f32 {
        if self.automatic_pool(has_second_stage) {
            ERROR_MARGIN
        } else {
            0.0
        }
    }
}

/// With the automatic pool ([`SearchParams::pool_size`]), a candidate beyond the pool is
/// rescored when its first-stage estimate is below the k-th best rescored distance plus this
/// many times the query's first-stage error (the standard deviation over the pool): for
/// errors near normal, a true neighbour is missed with a chance of about 0.1% (three standard
/// deviations), whatever the codec, the dimension and the data.
pub const ERROR_MARGIN: f32 = 3.0;

/// One result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Neighbor {
    pub id: u32,
    /// Estimated squared L2 distance (between unit vectors for the cosine metric).
    pub distance: f32,
}

/// Results of a batch. Rows with fewer than k hits (the probed lists held fewer vectors, or
/// the index holds fewer than k) are padded with id −1 and distance +∞.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchResults {
    pub k: usize,
    /// Layout: (num_queries, k), row-major.
    pub ids: Vec<i64>,
    /// Layout: (num_queries, k), row-major.
    pub distances: Vec<f32>,
}

impl SearchResults {
    /// `rows` x `k` results of padding only (id −1, distance +∞). An error, not an abort,
    /// where they cannot be allocated: k above the vector count is clamped for the search but
    /// the rows are as wide as the k asked for, so an absurd k must fail cleanly.
    pub fn padding(rows: usize, k: usize) -> Result<SearchResults> {
        let too_big = || {
            VlcError::param(
                "k",
                format!("{rows} queries x k = {k} results do not fit in memory"),
            )
        };
        let n = rows.checked_mul(k).ok_or_else(too_big)?;
        let mut ids = Vec::new();
        let mut distances = Vec::new();
        ids.try_reserve_exact(n).map_err(|_| too_big())?;
        distances.try_reserve_exact(n).map_err(|_| too_big())?;
        ids.resize(n, -1i64);
        distances.resize(n, f32::INFINITY);
        Ok(SearchResults { k, ids, distances })
    }

    /// These rows widened to `k` columns (≥ `self.k`) with padding (id −1, distance +∞): a
    /// search run with k clamped to the vector count ([`SearchParams::resolve`]), returned
    /// as wide as the k asked for.
    pub fn widen(self, k: usize) -> Result<SearchResults> {
        if k <= self.k {
            return Ok(self);
        }
        let rows = self.ids.len() / self.k.max(1);
        let mut out = SearchResults::padding(rows, k)?;
        for r in 0..rows {
            let (from, to) = (r * self.k..(r + 1) * self.k, r * k..r * k + self.k);
            out.ids[to.clone()].copy_from_slice(&self.ids[from.clone()]);
            out.distances[to].copy_from_slice(&self.distances[from]);
        }
        Ok(out)
    }
}

/// Anchors ranked first for an adaptive search (all `nprobe` for a fixed one): the queries
/// whose margin reaches past them are ranked again for all `nprobe`.
const FIRST_ADAPTIVE_PROBES: usize = 32;

fn first_probes(params: &SearchParams) -> usize {
    match params.probe_margin {
        Some(_) => params.nprobe.min(FIRST_ADAPTIVE_PROBES),
        None => params.nprobe,
    }
}

/// A pool entry. `key` packs the distance (as order-preserving bits) above the list position,
/// so one integer compare orders candidates by (distance, position): selection and sorting
/// touch no floats and ties resolve deterministically.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    key: u64,
    anchor: u32,
    /// ‖q − anchor‖², for the second stage.
    anchor_dist: f32,
}

impl PartialEq for Candidate {
    fn eq(&self, o: &Self) -> bool {
        self.key == o.key
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Candidate {
    #[inline]
    fn cmp(&self, o: &Self) -> Ordering {
        self.key.cmp(&o.key)
    }
}

impl Candidate {
    #[inline]
    fn new(dist: f32, position: u32, anchor: u32, anchor_dist: f32) -> Self {
        Candidate {
            key: order_key(dist, position),
            anchor,
            anchor_dist,
        }
    }
    #[inline]
    fn dist(&self) -> f32 {
        key_dist(self.key)
    }
    #[inline]
    fn position(&self) -> usize {
        key_id(self.key) as usize
    }
}

/// Batches of fewer queries are searched one query at a time ([`Index::search_batch`]),
/// whose anchor ranking can differ from a batch's in the last digits (f32 dot products below
/// 256 anchors where a batch ranks on 8-bit integers, or on AVX2 CPUs without VNNI the other
/// way round when a query probes more than 1/16 of the anchors).
pub const SMALL_BATCH: usize = 16;

/// Queries [`Index::search_batch`] ranks anchors for at a time. A caller that splits a large
/// batch into calls of a multiple of it, with no call of fewer than [`SMALL_BATCH`] queries
/// (searched one at a time), gets the results of one call.
pub const QUERY_BLOCK: usize = 4096;

/// Anchors from which one query's ranking reads them as 8-bit integers where it can
/// ([`Index::rank_anchors_one`]). Below it the integer kernel's fixed cost (splitting the
/// query into two 8-bit pieces) outweighs what it saves. One query at a time on this repo's
/// 2-core AMD EPYC VM, 384-d (history, session 50): on AVX-512 VNNI 3 µs slower at 64
/// anchors, 3 µs faster at 128, 2x faster at 1,024 and 7x at 16,384; on the AVX2 kernel 5 µs
/// slower at 128, 7 µs faster at 256, 1.9x faster at 1,024 and 3.9x at 16,384.
pub(crate) const INTEGER_MIN_ANCHORS: usize = 256;

/// Per-thread scratch reused across queries, calls and indexes (every buffer is cleared or
/// resized where it is used): each thread keeps one ([`with_scratch`]), so that a search
/// allocates nothing per query once its thread has searched before, but the neighbours it
/// returns (`Index::search`; `Index::search_batch` writes into its result rows).
#[derive(Default)]
struct Scratch {
    /// The query in the index's coordinates, where that differs from the query given
    /// (cosine metric, or a centre). Layout: (dim,).
    prepared: Vec<f32>,
    /// The lists a query scans: (anchor, squared distance), nearest first.
    probes: Vec<(u32, f32)>,
    primary: QueryState,
    refine: QueryState,
    /// First-stage estimates: of the list being scanned, or, with the automatic pool, of
    /// every list scanned, one after another (padding slots dropped; see `scanned`).
    dists: Vec<f32>,
    /// With the automatic pool, the lists scanned: (anchor, squared distance to the query,
    /// position of the list's first vector, start of its estimates in `dists`), in the order
    /// scanned; a list whose allowed vectors a filter has scored one by one, as one such
    /// entry per allowed vector (a list of one at its position).
    scanned: Vec<(u32, f32, u32, u32)>,
    /// Candidates below the current threshold; shrunk to the pool size whenever it holds
    /// twice that many (amortised O(1) per insertion, no heap).
    pool: Vec<Candidate>,
    /// Distance a candidate must beat to enter `pool`.
    worst: f32,
    /// The query's squared distance to every anchor ranked ([`Index::rank_anchors_one`]:
    /// every anchor, or a filter's lists'). Layout: (num_ranked,).
    anchor_dists: Vec<f32>,
    /// The query's dot products with every anchor ranked: the integer kernel's, layout (rows,
    /// anchors rounded up to 32), row-major, of which row 0 is the query's (see
    /// [`crate::amx::dots`]); or [`crate::simd::matrix_vector`]'s on the f32 anchors,
    /// layout (num_ranked,).
    anchor_dots: Vec<f32>,
    /// The probed anchors as [`order_key`]s of (distance, anchor), nearest first.
    order: Vec<u64>,
    /// The second stage's k best so far, worst on top.
    best: BinaryHeap<Candidate>,
    /// The rotated query. Layout: (padded dim,).
    rotated: Vec<f32>,
    /// Fast-scan weights of codecs whose first stage weighs bits unevenly.
    weights: Vec<f32>,
    lut: QueryLut,
    /// With a fast scan, the allowed vectors of a filter's sparse lists and blocks waiting to
    /// be scored together ([`Index::score_loose`]), from one list or several.
    loose: LooseBlocks,
    /// `loose`'s slots: (anchor, squared distance to the query, position). Layout: (slots,).
    loose_slots: Vec<(u32, f32, u32)>,
    /// `loose`'s estimates. Layout: (slots rounded up to whole blocks,).
    loose_dists: Vec<f32>,
}

/// The lists each query of a block scans ([`Index::block_probes`]), all queries' in one
/// buffer.
struct BlockProbes {
    /// (anchor, squared distance) per scanned list, nearest first within a query. Layout:
    /// the rows of queries 0, 1, ... one after another.
    lists: Vec<(u32, f32)>,
    /// Query `i`'s row is `lists[offsets[i]..offsets[i + 1]]`. Layout: (num_queries + 1,).
    offsets: Vec<usize>,
}

/// Queries of a block whose anchors [`Index::rank_rows`] ranks.
struct RankedRows<'a> {
    /// The block's queries. Layout: (num_queries, dim), row-major.
    prepared: &'a [f32],
    /// Rows of `prepared` to rank, ascending; `None`: every row.
    queries: Option<&'a [usize]>,
    /// The anchors ranked: the index's, or a filtered batch's subset of them
    /// ([`RankedAnchors`]). Layout: (num_ranked, dim), row-major.
    anchors: &'a [f32],
    /// Anchors ranked per query.
    per_point: usize,
    /// `anchors` packed for the CPU's integer kernels, where they pack and such a kernel ranks
    /// a batch here.
    packed: Option<&'a crate::amx::PackedAnchors>,
}

/// The anchors a filtered batch ranks: where some list holds no allowed vector, only those of
/// the lists that hold one ([`IdFilter::ranked_lists`]), gathered for the block, with the
/// filter's packing of them.
struct RankedAnchors<'a> {
    /// The lists ranked, ascending; `None`: every list.
    lists: Option<&'a [u32]>,
    /// Their anchors. Layout: (num_ranked, dim), row-major.
    anchors: std::borrow::Cow<'a, [f32]>,
    /// `anchors` packed for the integer kernels, where a batch ranks on them here
    /// ([`Index::packed_for_batches`]).
    packed: Option<&'a crate::amx::PackedAnchors>,
}

impl<'a> RankedAnchors<'a> {
    /// The anchors `filter`'s batch ranks in `index`.
    fn new(index: &'a Index, filter: &'a IdFilter) -> Self {
        let index_packing = index.packed_for_batches();
        match filter.ranked_lists() {
            None => RankedAnchors {
                lists: None,
                anchors: std::borrow::Cow::Borrowed(&index.anchors[..]),
                packed: index_packing,
            },
            Some(lists) => RankedAnchors {
                lists: Some(lists),
                anchors: std::borrow::Cow::Owned(index.anchors_of(lists)),
                packed: index_packing.and_then(|_| index.filter_packing(filter)),
            },
        }
    }

    /// The anchor (list) of ranked row `j`.
    #[inline]
    fn list(&self, j: u32) -> u32 {
        self.lists.map_or(j, |lists| lists[j as usize])
    }
}

/// The most (anchor, distance) entries one ranking call of [`Index::rank_rows`] returns: 32
/// MiB of them.
const RANKED_ENTRIES: usize = 1 << 22;

impl BlockProbes {
    fn row(&self, i: usize) -> &[(u32, f32)] {
        &self.lists[self.offsets[i]..self.offsets[i + 1]]
    }
}

thread_local! {
    /// This thread's [`Scratch`]: kept while the thread lives, so that its buffers, grown to
    /// the largest query the thread has searched, are not allocated again for every query.
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// Runs `f` with this thread's [`Scratch`], or with a fresh one where the thread's is in use
/// (a rayon worker that waits inside `f` may run another search on the same thread) or gone
/// (a search from a thread-local destructor).
fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    let mut f = Some(f);
    let kept = SCRATCH.try_with(|cell| {
        cell.try_borrow_mut()
            .ok()
            .map(|mut scratch| (f.take().expect("called once"))(&mut scratch))
    });
    match kept {
        Ok(Some(result)) => result,
        _ => (f.take().expect("not called yet"))(&mut Scratch::default()),
    }
}

impl Index {
    /// The parameters a search of this index runs with ([`SearchParams::resolve`]).
    fn resolve_search(&self, params: &SearchParams) -> Result<SearchParams> {
        params.resolve(self.num_vectors, self.num_anchors())
    }

    /// Whether search rescores a candidate pool: with the refine tier, or with the full RaBitQ
    /// code after the fast 1-bit scan. `SearchParams::rerank` sizes that pool.
    pub fn has_second_stage(&self) -> bool {
        self.refine.is_some() || self.codec.fast_scan_bytes().is_some()
    }

    fn pool_size(&self, params: &SearchParams) -> usize {
        params.pool_size(self.has_second_stage())
    }

    /// Search one query (dim,). Results nearest first; fewer than k when the probed lists (or
    /// the index) hold fewer vectors.
    ///
    /// Runs on the calling thread and allocates only the returned neighbours: each thread
    /// keeps its search buffers (the candidate pool, the query's tables, every anchor's
    /// distance) from one search to the next, whatever the index, sized by the largest
    /// search it has run. [`Index::search_batch`] keeps them the same way on each of its
    /// threads.
    pub fn search(&self, query: &[f32], params: &SearchParams) -> Result<Vec<Neighbor>> {
        self.search_with(query, params, None)
    }

    /// [`Index::search`] that returns only vectors `filter` allows ([`Index::id_filter`]):
    /// it probes the nearest lists that hold an allowed vector until they hold `nprobe`
    /// lists' worth of them, each list counting the share of its vectors allowed (see
    /// [`crate::filter`]: a narrow filter takes more lists, and more time). Fewer than k
    /// neighbours where every list holding one holds fewer allowed vectors. Errors as
    /// [`Index::search`] does, and when `filter` was made for another index.
    pub fn search_filtered(
        &self,
        query: &[f32],
        params: &SearchParams,
        filter: &IdFilter,
    ) -> Result<Vec<Neighbor>> {
        self.search_with(query, params, Some(filter))
    }

    fn search_with(
        &self,
        query: &[f32],
        params: &SearchParams,
        filter: Option<&IdFilter>,
    ) -> Result<Vec<Neighbor>> {
        let params = &self.resolve_search(params)?;
        validate_vectors_for_metric(query, self.dim, "query", self.metric)?;
        if let Some(filter) = filter {
            self.check_filter(filter)?;
            self.gather_for_search(filter, 1);
        }
        Ok(with_scratch(|scratch| {
            self.search_one(query, params, filter, scratch);
            self.neighbors(scratch).collect()
        }))
    }

    /// [`Index::search`] of a query already checked, with parameters already resolved:
    /// the anchors ranked and the query rotated by dot products. The neighbours are left in
    /// `scratch` ([`Index::neighbors`]).
    fn search_one(
        &self,
        query: &[f32],
        params: &SearchParams,
        filter: Option<&IdFilter>,
        scratch: &mut Scratch,
    ) {
        let mut prepared = std::mem::take(&mut scratch.prepared);
        let q = self.prepare_one(query, &mut prepared);
        let mut probes = std::mem::take(&mut scratch.probes);
        // The ranked lists (every list, or a filter's, see `rank_anchors_one`).
        let lists = filter.and_then(IdFilter::ranked_lists);
        let keys_to_probes = |order: &[u64], probes: &mut Vec<(u32, f32)>| {
            probes.clear();
            probes.extend(order.iter().map(|&k| {
                let j = key_id(k);
                (lists.map_or(j, |lists| lists[j as usize]), key_dist(k))
            }));
        };
        let n = match filter {
            Some(filter) if filter.is_empty() => {
                probes.clear();
                0
            }
            Some(filter) => {
                // The nearest lists holding an allowed vector, until nprobe lists' worth
                // (`filtered_block_probes` takes the same for a batch): only they are ranked.
                let with = filter.lists_with_allowed();
                let first = filter.lists_to_rank(params.nprobe);
                let count = if 4 * first > with {
                    // A narrow filter, which ranks most of the lists holding one: all of them
                    // ranked, sorted only as far as the cut.
                    self.rank_anchors_one(q, None, Some(filter), scratch);
                    let count = self.filtered_probes_in_order(
                        filter,
                        &scratch.anchor_dists,
                        params.nprobe,
                        &mut scratch.order,
                    );
                    keys_to_probes(&scratch.order[..count], &mut probes);
                    count
                } else {
                    self.rank_anchors_one(q, Some(first), Some(filter), scratch);
                    keys_to_probes(&scratch.order, &mut probes);
                    let complete = first >= with;
                    match self.filtered_probe_count(filter, &probes, params.nprobe, complete) {
                        Some(count) => count,
                        None => {
                            // Too little in the first lists: rank every list holding one.
                            smallest_keys(&scratch.anchor_dists, with, &mut scratch.order);
                            keys_to_probes(&scratch.order, &mut probes);
                            self.filtered_probe_count(filter, &probes, params.nprobe, true)
                                .expect("every list holding an allowed vector was ranked")
                        }
                    }
                };
                probes.truncate(count);
                self.lists_to_scan(&probes, params, Some(filter))
            }
            None => {
                let first = first_probes(params);
                self.rank_anchors_one(q, Some(first), None, scratch);
                keys_to_probes(&scratch.order, &mut probes);
                let mut n = self.lists_to_scan(&probes, params, None);
                if n == first && first < params.nprobe {
                    // The margin reaches past the first lists: select all nprobe.
                    smallest_keys(&scratch.anchor_dists, params.nprobe, &mut scratch.order);
                    keys_to_probes(&scratch.order, &mut probes);
                    n = self.lists_to_scan(&probes, params, None);
                }
                n
            }
        };
        self.search_prepared(q, None, &probes[..n], params, filter, scratch);
        scratch.probes = probes;
        scratch.prepared = prepared;
    }

    /// The neighbours the last search with `scratch` found, nearest first.
    fn neighbors<'a>(&'a self, scratch: &'a Scratch) -> impl Iterator<Item = Neighbor> + 'a {
        scratch.pool.iter().map(|c| Neighbor {
            id: self.ids.get_in_list(c.anchor as usize, c.position()),
            distance: c.dist().max(0.0),
        })
    }

    /// Writes the neighbours the last search with `scratch` found into a result row (`ids`
    /// and `dists`, each (k,), padded beyond what it found).
    fn write_neighbors(&self, scratch: &Scratch, ids: &mut [i64], dists: &mut [f32]) {
        for ((n, id), dist) in self.neighbors(scratch).zip(ids).zip(dists) {
            *id = n.id as i64;
            *dist = n.distance;
        }
    }

    /// `query` (dim,) in the index's coordinates ([`Index::prepare_queries`]): `query` itself,
    /// or its prepared copy in `buffer`.
    fn prepare_one<'a>(&self, query: &'a [f32], buffer: &'a mut Vec<f32>) -> &'a [f32] {
        let normalize = self.metric == crate::index::Metric::Cosine;
        if !normalize && self.centre.is_none() {
            return query;
        }
        buffer.clear();
        buffer.extend_from_slice(query);
        crate::vectors::prepare_row_in_place(buffer, normalize, self.centre.as_deref());
        buffer
    }

    /// Search a batch (num_queries, dim) on all threads of the current rayon pool; anchor
    /// ranking runs through `backend` as one GEMM per block of queries. A batch of fewer than
    /// 16 queries is searched as [`Index::search`] searches one: ranking the anchors and
    /// rotating the query by dot products costs less than packing them for a GEMM. The two
    /// paths round differently, so a query's distances can differ between a small batch and
    /// a large one by about 1e-5 relative (and where two candidates are that close, their
    /// order).
    pub fn search_batch(
        &self,
        queries: &[f32],
        params: &SearchParams,
        backend: &dyn Backend,
    ) -> Result<SearchResults> {
        self.search_batch_with(queries, params, backend, None)
    }

    /// [`Index::search_batch`] that returns only vectors `filter` allows, as
    /// [`Index::search_filtered`] searches one query. Rows with fewer allowed vectors in the
    /// lists probed than k are padded (id −1, distance +∞).
    pub fn search_batch_filtered(
        &self,
        queries: &[f32],
        params: &SearchParams,
        backend: &dyn Backend,
        filter: &IdFilter,
    ) -> Result<SearchResults> {
        self.search_batch_with(queries, params, backend, Some(filter))
    }

    fn search_batch_with(
        &self,
        queries: &[f32],
        params: &SearchParams,
        backend: &dyn Backend,
        filter: Option<&IdFilter>,
    ) -> Result<SearchResults> {
        // Rows are as wide as the k asked for; a k above the vector count leaves padding.
        let k = params.k;
        let params = &self.resolve_search(params)?;
        validate_vectors_for_metric(queries, self.dim, "queries", self.metric)?;
        if let Some(filter) = filter {
            self.check_filter(filter)?;
        }
        // Before the queries go parallel: the layout is then built in parallel, once.
        self.prepare_search();
        let dim = self.dim;
        let nq = queries.len() / dim;
        if let Some(filter) = filter {
            self.gather_for_search(filter, nq);
        }
        let SearchResults {
            mut ids,
            mut distances,
            ..
        } = SearchResults::padding(nq, k)?;
        if nq < SMALL_BATCH {
            // A few queries (an application asking as its users do): one at a time, ranking
            // the anchors and rotating the query by dot products. The GEMM paths pack every
            // anchor and the rotation on each call, which for one query took about 0.15 ms
            // of its 0.2 ms.
            let write = |(q, (ids, dists)): (&[f32], (&mut [i64], &mut [f32]))| {
                with_scratch(|scratch| {
                    self.search_one(q, params, filter, scratch);
                    self.write_neighbors(scratch, ids, dists);
                })
            };
            if nq == 1 {
                // On the calling thread: the pool has nothing to share out, and handing the
                // query to one of its threads only adds a wait for that thread.
                write((queries, (&mut ids[..], &mut distances[..])));
            } else {
                queries
                    .par_chunks(dim)
                    .zip(ids.par_chunks_mut(k).zip(distances.par_chunks_mut(k)))
                    .for_each(write);
            }
            return Ok(SearchResults { k, ids, distances });
        }
        const BLOCK: usize = QUERY_BLOCK;
        for (b, block) in queries.chunks(BLOCK * dim).enumerate() {
            let prepared = self.prepare_queries(block);
            let probes = self.block_probes(&prepared, params, filter, backend)?;
            // Codecs with a dense rotation rotate the whole block as one GEMM.
            let rotated = self.codec.rotate_queries(&prepared);
            let m = block.len() / dim;
            let start = b * BLOCK;
            let ids = &mut ids[start * k..(start + m) * k];
            let distances = &mut distances[start * k..(start + m) * k];
            let search_one = |(i, (ids, dists)): (usize, (&mut [i64], &mut [f32]))| {
                let q = &prepared[i * dim..(i + 1) * dim];
                let probes = probes.row(i);
                let rq = rotated.as_ref().map(|(r, w)| &r[i * w..(i + 1) * w]);
                with_scratch(|scratch| {
                    self.search_prepared(q, rq, probes, params, filter, scratch);
                    self.write_neighbors(scratch, ids, dists);
                })
            };
            ids.par_chunks_mut(k)
                .zip(distances.par_chunks_mut(k))
                .enumerate()
                .for_each(search_one);
        }
        Ok(SearchResults { k, ids, distances })
    }

    /// What a device needs to rank the lists of a filtered search with `params` itself
    /// ([`crate::device_view::DeviceFilterLists`]); an error where `filter` was made for
    /// another index, or `params` are invalid.
    pub fn device_filter_lists<'f>(
        &self,
        params: &SearchParams,
        filter: &'f IdFilter,
    ) -> Result<crate::device_view::DeviceFilterLists<'f>> {
        let params = self.resolve_search(params)?;
        self.check_filter(filter)?;
        Ok(crate::device_view::DeviceFilterLists {
            instance: self.instance,
            lists_to_rank: filter.lists_to_rank(params.nprobe),
            lists_with_allowed: filter.lists_with_allowed(),
            allowed_count: filter.len(),
            allowed: filter.allowed_by_list(),
        })
    }

    /// What a device search of `queries` (num_queries, dim) with `filter` needs
    /// ([`crate::device_view::DeviceFilter`]): each query's probed lists, ranked on the CPU
    /// as [`Index::search_batch_filtered`] ranks them on the CPU backend (only the anchors of
    /// lists that hold an allowed vector, a few per query for a narrow filter), and the
    /// allowed vectors list by list. The same errors as [`Index::search_batch_filtered`]; `params` are
    /// resolved against this index as a search resolves them.
    pub fn device_filter<'f>(
        &self,
        queries: &[f32],
        params: &SearchParams,
        filter: &'f IdFilter,
    ) -> Result<crate::device_view::DeviceFilter<'f>> {
        let params = &self.resolve_search(params)?;
        validate_vectors_for_metric(queries, self.dim, "queries", self.metric)?;
        self.check_filter(filter)?;
        self.prepare_search();
        let dim = self.dim;
        let num_queries = queries.len() / dim;
        let mut out = crate::device_view::DeviceFilter {
            instance: self.instance,
            probe_anchors: Vec::new(),
            probe_distances: Vec::new(),
            probe_offsets: Vec::with_capacity(num_queries + 1),
            max_probes: 0,
            allowed_count: filter.len(),
            allowed: filter.allowed_by_list(),
        };
        out.probe_offsets.push(0);
        for block in queries.chunks(QUERY_BLOCK * dim) {
            let prepared = self.prepare_queries(block);
            let probes = self.block_probes(&prepared, params, Some(filter), &crate::CpuBackend)?;
            for i in 0..block.len() / dim {
                let row = probes.row(i);
                out.max_probes = out.max_probes.max(row.len());
                out.probe_anchors.extend(row.iter().map(|&(a, _)| a));
                out.probe_distances.extend(row.iter().map(|&(_, d)| d));
                let total = u32::try_from(out.probe_anchors.len()).map_err(|_| {
                    VlcError::param(
                        "queries",
                        "a filtered device search of this batch probes more than 2^32 lists in all: search it in smaller batches",
                    )
                })?;
                out.probe_offsets.push(total);
            }
        }
        Ok(out)
    }

    /// The lists each query of a block (num_queries, dim) scans: (anchor, squared distance),
    /// nearest first. With a probe margin the anchors are ranked for the first
    /// [`first_probes`] lists only, and again for all nprobe for the queries whose margin
    /// reaches past those: selecting and sorting hundreds of anchors per query costs as much
    /// as scanning a few short lists. With a filter, see [`Index::filtered_block_probes`].
    fn block_probes(
        &self,
        prepared: &[f32],
        params: &SearchParams,
        filter: Option<&IdFilter>,
        backend: &dyn Backend,
    ) -> Result<BlockProbes> {
        if let Some(filter) = filter {
            return self.filtered_block_probes(prepared, params, filter, backend);
        }
        let dim = self.dim;
        let row = |near: &crate::backend::Nearest, i: usize, out: &mut Vec<(u32, f32)>| {
            let m = near.per_point;
            out.extend((0..m).map(|j| (near.ids[i * m + j], near.dists[i * m + j])));
        };
        let first = first_probes(params);
        let packed = self.packed_for_batches();
        let near = backend.nearest_index_anchors(prepared, &self.anchors, dim, first, packed)?;
        let num_queries = prepared.len() / dim;
        let mut probes = BlockProbes {
            lists: Vec::with_capacity(num_queries * first),
            offsets: Vec::with_capacity(num_queries + 1),
        };
        probes.offsets.push(0);
        // Queries whose margin reaches past the first lists.
        let mut again = Vec::new();
        for i in 0..num_queries {
            let start = probes.lists.len();
            row(&near, i, &mut probes.lists);
            let n = self.lists_to_scan(&probes.lists[start..], params, None);
            if n == first && first < params.nprobe {
                again.push(i);
            }
            probes.lists.truncate(start + n);
            probes.offsets.push(probes.lists.len());
        }
        if again.is_empty() {
            return Ok(probes);
        }
        let ranked_again = RankedRows {
            prepared,
            queries: Some(&again),
            anchors: &self.anchors,
            per_point: params.nprobe,
            packed,
        };
        self.rank_again(probes, &ranked_again, backend, |near, r, out| {
            let start = out.len();
            row(near, r, out);
            let n = self.lists_to_scan(&out[start..], params, None);
            out.truncate(start + n);
        })
    }

    /// [`Index::block_probes`] with a filter: each query's nearest lists that hold an allowed
    /// vector, until `nprobe` lists' worth ([`Index::filtered_probe_count`]), as
    /// [`Index::search_one`] takes them. Only the anchors of lists that hold one are ranked
    /// ([`RankedAnchors`]): [`IdFilter::lists_to_rank`] of them, and all of them for the
    /// queries whose first lists hold too little.
    fn filtered_block_probes(
        &self,
        prepared: &[f32],
        params: &SearchParams,
        filter: &IdFilter,
        backend: &dyn Backend,
    ) -> Result<BlockProbes> {
        let dim = self.dim;
        let num_queries = prepared.len() / dim;
        let with = filter.lists_with_allowed();
        if with == 0 {
            return Ok(BlockProbes {
                lists: Vec::new(),
                offsets: vec![0; num_queries + 1],
            });
        }
        let ranked = RankedAnchors::new(self, filter);
        // Query `r`'s ranked lists, cut to what it probes, appended to `out`; false (nothing
        // appended) where they hold too little and others follow.
        let take = |near: &crate::backend::Nearest, r: usize, out: &mut Vec<(u32, f32)>| {
            let (m, start) = (near.per_point, out.len());
            out.extend((0..m).map(|j| (ranked.list(near.ids[r * m + j]), near.dists[r * m + j])));
            let complete = out.len() - start >= with;
            match self.filtered_probe_count(filter, &out[start..], params.nprobe, complete) {
                Some(count) => {
                    out.truncate(start + count);
                    let n = self.lists_to_scan(&out[start..], params, Some(filter));
                    out.truncate(start + n);
                    true
                }
                None => {
                    out.truncate(start);
                    false
                }
            }
        };
        let mut again = Vec::new();
        let mut probes = BlockProbes {
            lists: Vec::new(),
            offsets: vec![0],
        };
        let rows = RankedRows {
            prepared,
            queries: None,
            anchors: &ranked.anchors,
            per_point: filter.lists_to_rank(params.nprobe),
            packed: ranked.packed,
        };
        self.rank_rows(&rows, backend, |i, near, r| {
            if !take(near, r, &mut probes.lists) {
                again.push(i);
            }
            probes.offsets.push(probes.lists.len());
        })?;
        if again.is_empty() {
            return Ok(probes);
        }
        // Every list holding an allowed vector ranked for the queries whose first lists held
        // too little.
        let ranked_again = RankedRows {
            queries: Some(&again),
            per_point: with,
            ..rows
        };
        self.rank_again(probes, &ranked_again, backend, |near, r, out| {
            let complete = take(near, r, out);
            debug_assert!(complete, "every list holding an allowed vector was ranked");
        })
    }

    /// `probes` with the rows of `again.queries` (ascending) replaced: those queries' anchors
    /// ranked again ([`Index::rank_rows`]), and `fill(near, r, out)` appending the lists of
    /// the query in row r of `near` to `out`.
    fn rank_again(
        &self,
        probes: BlockProbes,
        again: &RankedRows,
        backend: &dyn Backend,
        fill: impl Fn(&crate::backend::Nearest, usize, &mut Vec<(u32, f32)>),
    ) -> Result<BlockProbes> {
        let queries = again.queries.expect("the queries to rank again");
        // Their rows first, in order; then merged with the others'.
        let mut filled = BlockProbes {
            lists: Vec::with_capacity(queries.len() * again.per_point.min(64)),
            offsets: vec![0],
        };
        self.rank_rows(again, backend, |_, near, r| {
            fill(near, r, &mut filled.lists);
            filled.offsets.push(filled.lists.len());
        })?;
        let num_queries = again.prepared.len() / self.dim;
        let mut rebuilt = BlockProbes {
            lists: Vec::with_capacity(probes.lists.len() + filled.lists.len()),
            offsets: Vec::with_capacity(num_queries + 1),
        };
        rebuilt.offsets.push(0);
        let mut ranked_again = queries.iter().enumerate().peekable();
        for i in 0..num_queries {
            match ranked_again.next_if(|&(_, &q)| q == i) {
                Some((r, _)) => rebuilt.lists.extend_from_slice(filled.row(r)),
                None => rebuilt.lists.extend_from_slice(probes.row(i)),
            }
            rebuilt.offsets.push(rebuilt.lists.len());
        }
        Ok(rebuilt)
    }

    /// Ranks `rows.per_point` anchors for the chosen rows of `rows.prepared` through
    /// `backend`, a chunk of rows at a time so that a chunk's ranking holds at most
    /// [`RANKED_ENTRIES`] entries (a filtered search may rank every anchor for a block of
    /// 4,096 queries: 2 GiB at 65,536 anchors in one call), and calls `each(i, near, r)` for
    /// the i-th chosen row, in order, whose ranking is row r of `near`.
    fn rank_rows(
        &self,
        rows: &RankedRows,
        backend: &dyn Backend,
        mut each: impl FnMut(usize, &crate::backend::Nearest, usize),
    ) -> Result<()> {
        let dim = self.dim;
        let count = rows
            .queries
            .map_or(rows.prepared.len() / dim, <[usize]>::len);
        let chunk = (RANKED_ENTRIES / rows.per_point.max(1)).max(1);
        let mut gathered = Vec::new();
        for start in (0..count).step_by(chunk) {
            let end = (start + chunk).min(count);
            let points = match rows.queries {
                None => &rows.prepared[start * dim..end * dim],
                Some(queries) => {
                    gathered.clear();
                    for &q in &queries[start..end] {
                        gathered.extend_from_slice(&rows.prepared[q * dim..(q + 1) * dim]);
                    }
                    &gathered[..]
                }
            };
            let near = backend.nearest_index_anchors(
                points,
                rows.anchors,
                dim,
                rows.per_point,
                rows.packed,
            )?;
            for r in 0..end - start {
                each(start + r, &near, r);
            }
        }
        Ok(())
    }

    /// The prefix of `probes` (anchor, squared distance), nearest first, that a query scans:
    /// see [`SearchParams::lists_to_scan`]; with a filter, a list holds its allowed vectors.
    fn lists_to_scan(
        &self,
        probes: &[(u32, f32)],
        params: &SearchParams,
        filter: Option<&IdFilter>,
    ) -> usize {
        params.prefix_to_scan(
            probes.len(),
            |j| probes[j].1,
            self.energy(),
            |j| {
                let a = probes[j].0 as usize;
                match filter {
                    Some(filter) => filter.list_count(a),
                    None => (self.list_offsets[a + 1] - self.list_offsets[a]) as usize,
                }
            },
        )
    }

    /// Fill `scratch.anchor_dists` with every anchor's squared distance and, with `nprobe`,
    /// `scratch.order` with the keys of the `nprobe` nearest anchors; with a filter that leaves
    /// some list without an allowed vector, of the lists that hold one only
    /// ([`IdFilter::ranked_lists`]; key and entry `j` are its `j`-th list).
    ///
    /// From [`INTEGER_MIN_ANCHORS`] anchors in 8- or 4-bit form, where an integer kernel runs
    /// ([`crate::amx::few_rows_kernel`]: AVX-512 VNNI, AVX-VNNI, AMX, or AVX2), the dot
    /// products come from it: the anchors are read as bytes, a quarter of f32's memory
    /// traffic, which is what one query's ranking waits on once the anchors outgrow the
    /// caches. Where a batch's ranking on the CPU backend runs on integers too (on AVX2, where
    /// each query picks at most 1/16 of the anchors), the two give the same bits. Fewer
    /// anchors keep the f32 dot products.
    fn rank_anchors_one(
        &self,
        q: &[f32],
        nprobe: Option<usize>,
        filter: Option<&IdFilter>,
        scratch: &mut Scratch,
    ) {
        let dim = self.dim;
        let qn = crate::linalg::dot(q, q);
        // With a filter that leaves some list without an allowed vector, only the lists that
        // hold one; row j of the ranking is list `lists[j]`.
        let lists = filter.and_then(IdFilter::ranked_lists);
        let ranked = lists.map_or(self.num_anchors(), <[u32]>::len);
        let packed = self.integer_anchors().map(|packed| match filter {
            Some(filter) if lists.is_some() => self
                .filter_packing(filter)
                .expect("the anchors of some lists pack where all of them do"),
            _ => packed,
        });
        match packed {
            Some(packed) => crate::amx::dots(q, 1, packed, &mut scratch.anchor_dots),
            None => {
                // The anchors' dot products side by side (f32 anchors, or no integer kernel
                // here: NEON, or fewer than INTEGER_MIN_ANCHORS anchors); a subset's row by
                // row, each as it comes out side by side.
                scratch.anchor_dots.clear();
                scratch.anchor_dots.resize(ranked, 0.0);
                match lists {
                    None => {
                        crate::simd::matrix_vector(&self.anchors, dim, q, &mut scratch.anchor_dots)
                    }
                    Some(lists) => {
                        for (&a, out) in lists.iter().zip(scratch.anchor_dots.chunks_mut(1)) {
                            let a = a as usize;
                            crate::simd::matrix_vector(
                                &self.anchors[a * dim..(a + 1) * dim],
                                dim,
                                q,
                                out,
                            );
                        }
                    }
                }
            }
        }
        let dots = &scratch.anchor_dots[..ranked];
        let distance = |d: f32, norm: f32| (qn - 2.0 * d + norm).max(0.0);
        scratch.anchor_dists.clear();
        match lists {
            None => scratch.anchor_dists.extend(
                dots.iter()
                    .zip(&self.anchor_norms)
                    .map(|(&d, &norm)| distance(d, norm)),
            ),
            Some(lists) => scratch.anchor_dists.extend(
                dots.iter()
                    .zip(lists)
                    .map(|(&d, &a)| distance(d, self.anchor_norms[a as usize])),
            ),
        }
        if let Some(nprobe) = nprobe {
            smallest_keys(&scratch.anchor_dists, nprobe, &mut scratch.order);
        }
    }

    /// The anchors packed for an integer kernel, when one runs here, the index has at least
    /// [`INTEGER_MIN_ANCHORS`] and they are in 8- or 4-bit form; packed at the first call.
    fn integer_anchors(&self) -> Option<&crate::amx::PackedAnchors> {
        if self.num_anchors() < INTEGER_MIN_ANCHORS || crate::amx::few_rows_kernel().is_none() {
            return None;
        }
        self.stored_packing()
    }

    /// [`Index::packed_anchors`], packed at the first call.
    pub(crate) fn stored_packing(&self) -> Option<&crate::amx::PackedAnchors> {
        self.packed_anchors
            .get_or_init(|| crate::amx::packed_anchors(&self.anchors, self.num_anchors(), self.dim))
            .as_deref()
    }

    /// The anchors packed for the integer kernels that rank a batch's ([`CpuBackend`]'s
    /// choice), where such a kernel runs here and they are in 8- or 4-bit form: the packing
    /// [`Index::integer_anchors`] keeps, whatever the number of anchors. With it a batch of
    /// any size ranks on the kernel a large one does; found by hashing the anchors, a batch of
    /// 16 to 63 queries (or a block's last few) kept the f32 GEMM, whose distances differ in
    /// their last digits and so did the estimates built on them.
    ///
    /// [`CpuBackend`]: crate::CpuBackend
    fn packed_for_batches(&self) -> Option<&crate::amx::PackedAnchors> {
        if !(crate::amx::available() || crate::amx::two_pass_available())
            || crate::amx::few_rows_kernel().is_none()
        {
            return None;
        }
        self.stored_packing()
    }

    /// `rotated`: `q` already in the codec's basis, when the batch computed it. The neighbours
    /// are left in `scratch` ([`Index::neighbors`]).
    fn search_prepared(
        &self,
        q: &[f32],
        rotated: Option<&[f32]>,
        probes: &[(u32, f32)],
        params: &SearchParams,
        filter: Option<&IdFilter>,
        scratch: &mut Scratch,
    ) {
        let pool_size = self.pool_size(params);
        // The automatic pool keeps every estimate, for the candidates beyond the pool.
        let keep_all = params.automatic_pool(self.has_second_stage());
        self.begin_query(q, rotated, scratch);
        let prefetch = self.prefetch_lists();
        match filter {
            None => {
                for (i, &(anchor, anchor_dist)) in probes.iter().enumerate() {
                    if let Some(&(next, _)) = probes.get(i + 1).filter(|_| prefetch) {
                        self.prefetch_list(next);
                    }
                    self.scan_list(anchor, anchor_dist, pool_size, keep_all, None, scratch);
                }
            }
            Some(filter) => {
                for (i, &(anchor, anchor_dist)) in probes.iter().enumerate() {
                    if let Some(&(next, _)) = probes.get(i + 1).filter(|_| prefetch) {
                        match self.filtered_scan(next, filter) {
                            // Its allowed vectors' codes are in the filter's copy.
                            FilteredScan::Alone if filter.gathered().is_some() => {}
                            FilteredScan::Alone | FilteredScan::ByBlock => {
                                self.prefetch_allowed(next, filter)
                            }
                            FilteredScan::Whole => self.prefetch_list(next),
                        }
                    }
                    let filter = Some(filter);
                    self.scan_list(anchor, anchor_dist, pool_size, keep_all, filter, scratch);
                    // The lone allowed vectors set aside so far, once they fill a block.
                    if scratch.loose.len() >= BLOCK {
                        self.score_loose(pool_size, keep_all, scratch);
                    }
                }
                self.score_loose(pool_size, keep_all, scratch);
            }
        }
        self.finish_query(q, pool_size, params.k, keep_all, scratch)
    }

    /// Whether a search prefetches each next list ([`Index::prefetch_list`]): where the codes a
    /// search reads (primary, refine and fast-scan copy) exceed half the last-level cache, or
    /// the cache's size is unknown. Within it, the lists are mostly in cache already and the
    /// hints only cost instructions (on the dev set, 3.6 MiB, 2-5% of the QPS at nprobe 64;
    /// on 1M x 384, 55 MiB, they gain 13-33%: docs/benchmarks.md, "List prefetch").
    /// `VLC_LIST_PREFETCH=1` or `0` sets it either way.
    fn prefetch_lists(&self) -> bool {
        match *LIST_PREFETCH {
            ListPrefetch::Always => true,
            ListPrefetch::Never => false,
            ListPrefetch::Above(cache_half) => {
                let searched = self.codes.len()
                    + self.refine.as_ref().map_or(0, |(_, codes)| codes.len())
                    + self.fastscan().map_or(0, FastScan::bytes);
                searched > cache_half
            }
        }
    }

    /// Hint the CPU to fetch the head of list `anchor` (see [`LIST_PREFETCH_BYTES`]) while the
    /// list before it is scanned. A list holds few blocks (about 2 of 32 vectors at 60,000
    /// vectors and 1,024 anchors), too few for the hardware prefetcher to find its stream, so
    /// without this each list starts with cache misses that stall one after another.
    fn prefetch_list(&self, anchor: u32) {
        match self.fastscan() {
            Some(fs) => {
                let (codes, f1, f2) = fs.list_head(anchor, LIST_PREFETCH_BYTES);
                prefetch(codes);
                prefetch(f1);
                prefetch(f2);
            }
            None => {
                let cs = self.codec.code_size();
                let (lo, hi) = (
                    self.list_offsets[anchor as usize] as usize * cs,
                    self.list_offsets[anchor as usize + 1] as usize * cs,
                );
                prefetch(&self.codes[lo..hi.min(lo + LIST_PREFETCH_BYTES)]);
            }
        }
    }

    /// How [`Index::scan_list`] scans list `anchor` under `filter`, from the share of it the
    /// filter allows ([`FilteredScan`]).
    #[inline]
    pub(crate) fn filtered_scan(&self, anchor: u32, filter: &IdFilter) -> FilteredScan {
        let a = anchor as usize;
        let size = (self.list_offsets[a + 1] - self.list_offsets[a]) as usize;
        let allowed = filter.list_count(a);
        if allowed > 0 && ALONE_SHARE * allowed <= size {
            FilteredScan::Alone
        } else if BY_BLOCK_SHARE * allowed <= size {
            FilteredScan::ByBlock
        } else {
            FilteredScan::Whole
        }
    }

    /// [`Index::prefetch_list`] for a list scanned block by block under `filter`: the codes
    /// of its first allowed vectors (at most [`ALLOWED_PREFETCH`]), which a sparse block
    /// scores alone, rather than the head of the list, which such a list mostly passes over.
    fn prefetch_allowed(&self, anchor: u32, filter: &IdFilter) {
        let (lo, hi) = (
            self.list_offsets[anchor as usize] as usize,
            self.list_offsets[anchor as usize + 1] as usize,
        );
        let cs = self.codec.code_size();
        let mut left = ALLOWED_PREFETCH;
        for start in (lo..hi).step_by(32) {
            let mut bits = filter.bits(start, 32.min(hi - start));
            while bits != 0 && left > 0 {
                let p = start + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                left -= 1;
                prefetch(&self.codes[p * cs..(p + 1) * cs]);
            }
            if left == 0 {
                return;
            }
        }
    }

    /// Build the query's tables and empty its candidate pool.
    fn begin_query(&self, q: &[f32], rotated: Option<&[f32]>, scratch: &mut Scratch) {
        scratch.primary.query.clear();
        scratch.primary.query.extend_from_slice(q);
        match self.fastscan() {
            Some(fs) => {
                // The full-code tables are only needed when they rescore the pool.
                let full = self.refine.is_none().then_some(&mut scratch.primary);
                self.codec.prepare_fast_scan(
                    q,
                    rotated,
                    fs,
                    &mut scratch.rotated,
                    &mut scratch.weights,
                    &mut scratch.lut,
                    full,
                );
            }
            None => self.codec.prepare_query(&mut scratch.primary),
        }
        scratch.pool.clear();
        scratch.worst = f32::INFINITY;
        scratch.dists.clear();
        scratch.scanned.clear();
    }

    /// Score list `anchor` with the primary codec (or its fast-scan copy) and add what beats
    /// the pool's threshold. `keep_all`: append the list's estimates to those of the lists
    /// before it (the automatic pool's), instead of overwriting them. With a filter, the
    /// estimates of the vectors it leaves out are +∞.
    fn scan_list(
        &self,
        anchor: u32,
        anchor_dist: f32,
        pool_size: usize,
        keep_all: bool,
        filter: Option<&IdFilter>,
        scratch: &mut Scratch,
    ) {
        let (lo, hi) = (
            self.list_offsets[anchor as usize] as usize,
            self.list_offsets[anchor as usize + 1] as usize,
        );
        if lo == hi {
            return;
        }
        let mode = filter.map(|f| (f, self.filtered_scan(anchor, f)));
        if let Some((filter, FilteredScan::Alone)) = mode {
            let list = (anchor, anchor_dist, lo, hi);
            self.score_alone(list, pool_size, keep_all, filter, scratch);
            return;
        }
        let base = if keep_all { scratch.dists.len() } else { 0 };
        if keep_all {
            scratch
                .scanned
                .push((anchor, anchor_dist, lo as u32, base as u32));
        }
        let all = &mut scratch.dists;
        let (cs, primary) = (self.codec.code_size(), &mut scratch.primary);
        // A list scanned whole under a filter ([`FilteredScan::Whole`]) is scanned as
        // unfiltered, then the exclusion applied (none where the filter allows the whole
        // list). The others are taken block by block.
        let by_block = mode.and_then(|(f, m)| (m == FilteredScan::ByBlock).then_some(f));
        // With a filter, whether a block was scanned whole (and needs the exclusion).
        let mut scanned_whole = mode.is_some_and(|(f, m)| {
            m == FilteredScan::Whole && f.list_count(anchor as usize) < hi - lo
        });
        match (self.fastscan(), by_block) {
            (Some(fs), None) => {
                all.resize(base + fs.padded_len(anchor), 0.0);
                fs.scan(&scratch.lut, anchor, anchor_dist, &mut all[base..]);
                all.truncate(base + hi - lo);
            }
            (Some(fs), Some(filter)) => {
                all.resize(base + fs.padded_len(anchor), 0.0);
                let out = &mut all[base..];
                let (loose, loose_slots) = (&mut scratch.loose, &mut scratch.loose_slots);
                fs.scan_blocks(&scratch.lut, anchor, anchor_dist, out, |i, out| {
                    // A block of few allowed vectors: they wait in `loose` to be scored with
                    // others alike, their slots here +∞.
                    let start = lo + BLOCK * i;
                    let out = &mut out[..BLOCK.min(hi - start)];
                    let mut allowed = filter.bits(start, out.len());
                    if allowed.count_ones() > FAST_SCAN_ALONE {
                        scanned_whole = true;
                        return false;
                    }
                    out.fill(f32::INFINITY);
                    while allowed != 0 {
                        let p = start + allowed.trailing_zeros() as usize;
                        allowed &= allowed - 1;
                        loose_slots.push((anchor, anchor_dist, p as u32));
                        fs.push_loose(loose, &self.codes[p * cs..(p + 1) * cs], anchor_dist);
                    }
                    true
                });
                all.truncate(base + hi - lo);
            }
            (None, None) => {
                all.resize(base + hi - lo, 0.0);
                let codes = &self.codes[lo * cs..hi * cs];
                self.codec
                    .scan(primary, anchor, anchor_dist, codes, &mut all[base..]);
            }
            (None, Some(filter)) => {
                // Blocks as a fast scan's; consecutive blocks to scan whole are scanned in one
                // call (a codec may set up per list, e.g. per-anchor scales). `run`: the first
                // of them, pending.
                all.resize(base + hi - lo, 0.0);
                let out = &mut all[base..];
                let mut run = None;
                for start in (lo..hi).step_by(BLOCK).chain([hi]) {
                    if start < hi {
                        let block = &mut out[start - lo..hi.min(start + BLOCK) - lo];
                        if !self.sparse_block(filter, primary, anchor, anchor_dist, start, block) {
                            run.get_or_insert(start);
                            continue;
                        }
                    }
                    if let Some(first) = run.take() {
                        scanned_whole = true;
                        let codes = &self.codes[first * cs..start * cs];
                        let out = &mut out[first - lo..start - lo];
                        self.codec.scan(primary, anchor, anchor_dist, codes, out);
                    }
                }
            }
        }
        if let Some(filter) = filter.filter(|_| scanned_whole) {
            filter.exclude(lo, &mut scratch.dists[base..]);
        }
        let dists = &scratch.dists[base..];
        // Most slots lose against the pool's threshold: test 32 at a time, then push the few
        // that pass (re-checked, as the threshold tightens when the pool shrinks).
        let n = hi - lo;
        for start in (0..n).step_by(32) {
            let chunk = &dists[start..n.min(start + 32)];
            let mut mask = below_mask(chunk, scratch.worst);
            while mask != 0 {
                let j = start + mask.trailing_zeros() as usize;
                mask &= mask - 1;
                let d = dists[j];
                if d >= scratch.worst {
                    continue;
                }
                scratch
                    .pool
                    .push(Candidate::new(d, (lo + j) as u32, anchor, anchor_dist));
                if scratch.pool.len() == 2 * pool_size {
                    scratch.worst = shrink_pool(&mut scratch.pool, pool_size);
                }
            }
        }
    }

    /// Score the allowed vectors of `list` = (anchor, squared distance to the query, first
    /// and one-past-last position), a list scored one by one under `filter`
    /// ([`FilteredScan::Alone`]), reading their codes from the filter's copy where it has
    /// gathered them ([`Index::gather_for_search`]). With a fast scan, they wait in blocks
    /// of 32 (filled from this list and the next ones scored so) to be scored as a list's
    /// block is ([`Index::score_loose`]): the estimate an unfiltered scan would give each, at
    /// a fraction of the full code's cost. Without one, each is scored with the full code
    /// ([`Index::keep_estimate`]).
    fn score_alone(
        &self,
        list: (u32, f32, usize, usize),
        pool_size: usize,
        keep_all: bool,
        filter: &IdFilter,
        scratch: &mut Scratch,
    ) {
        let (anchor, anchor_dist, lo, hi) = list;
        let cs = self.codec.code_size();
        let fastscan = self.fastscan();
        let score = |p: usize, code: &[u8], scratch: &mut Scratch| match fastscan {
            Some(fs) => {
                scratch.loose_slots.push((anchor, anchor_dist, p as u32));
                fs.push_loose(&mut scratch.loose, code, anchor_dist);
            }
            None => {
                let d = self
                    .codec
                    .estimate_below(
                        &mut scratch.primary,
                        anchor,
                        anchor_dist,
                        code,
                        f32::INFINITY,
                        0.0,
                    )
                    .unwrap_or(f32::INFINITY);
                keep_estimate(
                    scratch,
                    (anchor, anchor_dist, p as u32),
                    d,
                    pool_size,
                    keep_all,
                );
            }
        };
        match filter.gathered() {
            Some(gathered) => {
                let by_list = filter.allowed_by_list();
                // (By index: anchor-only codes are empty.)
                let (codes, positions) = gathered.list(anchor as usize, cs, by_list);
                for (i, &p) in positions.iter().enumerate() {
                    score(p as usize, &codes[i * cs..(i + 1) * cs], scratch);
                }
            }
            None => {
                for p in filter.allowed_in(lo, hi) {
                    score(p, &self.codes[p * cs..(p + 1) * cs], scratch);
                }
            }
        }
    }

    /// Score the allowed vectors waiting in `scratch.loose` ([`Index::score_alone`]) and keep
    /// their estimates ([`keep_estimate`]).
    fn score_loose(&self, pool_size: usize, keep_all: bool, scratch: &mut Scratch) {
        let Some(fs) = self.fastscan() else {
            return;
        };
        if scratch.loose.len() == 0 {
            return;
        }
        let mut out = std::mem::take(&mut scratch.loose_dists);
        fs.score_loose(&scratch.lut, &mut scratch.loose, &mut out);
        let slots = std::mem::take(&mut scratch.loose_slots);
        for (&slot, &d) in slots.iter().zip(&out) {
            keep_estimate(scratch, slot, d, pool_size, keep_all);
        }
        scratch.loose_slots = slots;
        scratch.loose_slots.clear();
        scratch.loose_dists = out;
    }

    /// With a filter, for a codec without a fast scan, the block of (at most 32) first-stage
    /// estimates `out` of the vectors at positions `start..` in list `anchor`, where the block
    /// holds at most [`SCAN_ALONE`] allowed vectors: those scored one by one with the full
    /// code (`primary`'s tables), the others +∞; false, `out` untouched, where it holds more,
    /// to be scanned whole.
    fn sparse_block(
        &self,
        filter: &IdFilter,
        primary: &mut QueryState,
        anchor: u32,
        anchor_dist: f32,
        start: usize,
        out: &mut [f32],
    ) -> bool {
        let mut allowed = filter.bits(start, out.len());
        if allowed.count_ones() > SCAN_ALONE {
            return false;
        }
        out.fill(f32::INFINITY);
        let cs = self.codec.code_size();
        while allowed != 0 {
            let j = allowed.trailing_zeros() as usize;
            allowed &= allowed - 1;
            let code = &self.codes[(start + j) * cs..(start + j + 1) * cs];
            out[j] = self
                .codec
                .estimate_below(primary, anchor, anchor_dist, code, f32::INFINITY, 0.0)
                .unwrap_or(f32::INFINITY);
        }
        true
    }

    /// Rescore the pool with the second stage (when there is one) and leave the top k in it,
    /// nearest first. `adaptive`: the automatic pool ([`SearchParams::pool_size`]), with
    /// every scanned list's estimates kept in `scratch.dists`.
    fn finish_query(
        &self,
        q: &[f32],
        pool_size: usize,
        k: usize,
        adaptive: bool,
        scratch: &mut Scratch,
    ) {
        if scratch.pool.len() > pool_size {
            shrink_pool(&mut scratch.pool, pool_size);
        }
        let Scratch {
            pool: found,
            best,
            dists,
            scanned,
            refine,
            primary,
            ..
        } = scratch;
        // Second stage: the refine tier, or the full RaBitQ code after a fast 1-bit scan.
        let rescore: Option<(&Codec, &[u8], &mut QueryState)> = match &self.refine {
            Some((codec, codes)) => {
                refine.query.clear();
                refine.query.extend_from_slice(q);
                codec.prepare_query(refine);
                Some((codec, codes, refine))
            }
            None if self.fastscan().is_some() => Some((&self.codec, &self.codes, primary)),
            None => None,
        };
        if let Some((codec, codes, state)) = rescore {
            let rcs = codec.code_size();
            // Only a full pool leaves candidates out: those whose keys are above its largest.
            let boundary = found
                .iter()
                .map(|c| c.key)
                .max()
                .filter(|_| adaptive && found.len() == pool_size);
            // The first stage's k best are scored first: their full estimates set a limit
            // that lets a bit-plane code stop scoring a later candidate as soon as its
            // remaining planes cannot bring it back under the k-th best (the same top k as
            // scoring every candidate in full).
            if found.len() > k {
                found.select_nth_unstable(k - 1);
            }
            best.clear();
            let kth = |best: &BinaryHeap<Candidate>| match best.peek() {
                Some(worst) if best.len() == k => worst.dist(),
                _ => f32::INFINITY,
            };
            // Scores `c` with the second stage and keeps it if it is among the k best; its
            // second-stage distance, or None where a bit-plane code stopped above `limit`.
            let mut score = |c: Candidate, limit: f32, best: &mut BinaryHeap<Candidate>| {
                let p = c.position();
                let d = codec.estimate_below(
                    state,
                    c.anchor,
                    c.anchor_dist,
                    &codes[p * rcs..(p + 1) * rcs],
                    limit,
                    c.dist(),
                )?;
                let c = Candidate::new(d, p as u32, c.anchor, c.anchor_dist);
                if best.len() < k {
                    best.push(c);
                } else if best.peek().is_some_and(|worst| c < *worst) {
                    best.pop();
                    best.push(c);
                }
                Some(d)
            };
            // The first stage's errors over the pool, only where candidates beyond it may
            // be rescored (a full automatic pool).
            let (mut sum, mut sum_sq, mut measured) = (0f64, 0f64, 0usize);
            with_codes_ahead(found, codes, rcs, |c| {
                let d = score(c, kth(best), best);
                if let Some(d) = d.filter(|_| boundary.is_some()) {
                    let e = f64::from(d - c.dist());
                    sum += e;
                    sum_sq += e * e;
                    measured += 1;
                }
            });
            let mean = sum / measured.max(1) as f64;
            let spread = (sum_sq / measured.max(1) as f64 - mean * mean)
                .max(0.0)
                .sqrt() as f32;
            let margin = ERROR_MARGIN * spread;
            // Candidates beyond the pool, when its worst estimate is under the bound: gathered
            // first, then scored with their codes fetched ahead, like the pool's.
            if let Some(boundary) = boundary.filter(|&b| key_dist(b) < kth(best) + margin) {
                found.clear();
                let bound = kth(best) + margin;
                for (l, &(anchor, anchor_dist, lo, at)) in scanned.iter().enumerate() {
                    let end = scanned
                        .get(l + 1)
                        .map_or(dists.len(), |next| next.3 as usize);
                    let list = &dists[at as usize..end];
                    for start in (0..list.len()).step_by(32) {
                        let chunk = &list[start..list.len().min(start + 32)];
                        let mut mask = below_mask(chunk, bound);
                        while mask != 0 {
                            let j = start + mask.trailing_zeros() as usize;
                            mask &= mask - 1;
                            let c = Candidate::new(list[j], lo + j as u32, anchor, anchor_dist);
                            if c.key > boundary {
                                found.push(c);
                            }
                        }
                    }
                }
                with_codes_ahead(found, codes, rcs, |c| {
                    if c.dist() < kth(best) + margin {
                        score(c, kth(best), best);
                    }
                });
            }
            found.clear();
            found.extend(best.drain());
        }
        // Only the best k need ordering.
        if found.len() > k {
            found.select_nth_unstable(k - 1);
            found.truncate(k);
        }
        found.sort_unstable();
    }
}

/// Calls `f` on each of `candidates` in order, with the second-stage code (of `code_size`
/// bytes, in `codes`) of the candidate a few places ahead prefetched: second-stage codes are
/// scattered over the index, so their cache misses then overlap instead of stalling one after
/// another.
fn with_codes_ahead(
    candidates: &[Candidate],
    codes: &[u8],
    code_size: usize,
    mut f: impl FnMut(Candidate),
) {
    const AHEAD: usize = 4;
    let fetch = |c: &Candidate| {
        let p = c.position();
        prefetch(&codes[p * code_size..(p + 1) * code_size]);
    };
    candidates.iter().take(AHEAD).for_each(fetch);
    for (i, &c) in candidates.iter().enumerate() {
        if let Some(next) = candidates.get(i + AHEAD) {
            fetch(next);
        }
        f(c);
    }
}

/// Keep the `size` best candidates of `pool` (unordered); returns the largest distance kept,
/// the threshold new candidates must beat.
fn shrink_pool(pool: &mut Vec<Candidate>, size: usize) -> f32 {
    pool.select_nth_unstable(size - 1);
    pool.truncate(size);
    pool[size - 1].dist()
}

/// When searches prefetch lists ([`Index::prefetch_lists`]), decided once.
#[derive(Clone, Copy, Debug)]
enum ListPrefetch {
    Always,
    Never,
    /// When an index's searched codes exceed this many bytes: half the last-level cache.
    Above(usize),
}

static LIST_PREFETCH: LazyLock<ListPrefetch> =
    LazyLock::new(|| match std::env::var("VLC_LIST_PREFETCH").as_deref() {
        Ok("1") => ListPrefetch::Always,
        Ok("0") => ListPrefetch::Never,
        _ => match last_level_cache_bytes() {
            Some(bytes) => ListPrefetch::Above(bytes / 2),
            None => ListPrefetch::Always,
        },
    });

/// The size of the CPU's last-level cache as Linux reports it for CPU 0
/// (`/sys/devices/system/cpu/cpu0/cache/index*/{level,size}`, sizes like `32768K`); `None`
/// elsewhere or when unreadable.
fn last_level_cache_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    let read = |path: std::path::PathBuf| std::fs::read_to_string(path).ok();
    dir.filter_map(|entry| {
        let path = entry.ok()?.path();
        let level: u32 = read(path.join("level"))?.trim().parse().ok()?;
        Some((level, parse_cache_size(&read(path.join("size"))?)?))
    })
    .max()
    .map(|(_, bytes)| bytes)
}

/// `32768K`, `1M` or `512` (bytes) as bytes.
fn parse_cache_size(text: &str) -> Option<usize> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((at, _)) => text.split_at(at),
        None => (text, ""),
    };
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    digits.parse::<usize>().ok()?.checked_mul(scale)
}

/// Keep the first-stage estimate `d` of one vector of a filter's sparse list, `slot` =
/// (anchor, squared distance to the query, position): into the pool where it beats the
/// threshold, and with the automatic pool (`keep_all`) as a list of one vector at its
/// position (`scratch.scanned`), so that neither the pool nor the pass beyond it reads the
/// slots of the vectors the filter leaves out.
#[inline]
fn keep_estimate(
    scratch: &mut Scratch,
    (anchor, anchor_dist, position): (u32, f32, u32),
    d: f32,
    pool_size: usize,
    keep_all: bool,
) {
    if keep_all {
        let at = scratch.dists.len() as u32;
        scratch.scanned.push((anchor, anchor_dist, position, at));
        scratch.dists.push(d);
    }
    if d < scratch.worst {
        scratch
            .pool
            .push(Candidate::new(d, position, anchor, anchor_dist));
        if scratch.pool.len() == 2 * pool_size {
            scratch.worst = shrink_pool(&mut scratch.pool, pool_size);
        }
    }
}

/// How a list is scanned under a filter ([`Index::filtered_scan`]), by the share of it the
/// filter allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FilteredScan {
    /// At most one vector in [`ALONE_SHARE`] (and at least one): each allowed vector is
    /// taken alone, wherever it is in the list ([`Index::score_alone`]).
    Alone,
    /// At most one in [`BY_BLOCK_SHARE`]: block by block, a block's allowed vectors set
    /// aside alone where it holds few (with a fast scan into [`Index::score_loose`]'s blocks,
    /// else scored by [`Index::sparse_block`]), the other blocks scanned whole.
    ByBlock,
    /// More: scanned whole, as unfiltered, then the excluded vectors' estimates set to +∞.
    /// Such a list seldom holds a block sparse enough to score alone (where a random quarter
    /// is allowed, one block in a thousand).
    Whole,
}

/// A list of which a filter allows at most one vector in this many (about one per block of 32
/// or fewer) has its allowed vectors taken one by one, without a walk over its blocks
/// ([`FilteredScan::Alone`]).
const ALONE_SHARE: usize = 32;

/// A list of which a filter allows at most one vector in this many is scanned block by block
/// ([`FilteredScan::ByBlock`]).
const BY_BLOCK_SHARE: usize = 4;

/// At most this many allowed vectors' codes of a list scanned block by block under a filter
/// are prefetched before it is scanned ([`Index::prefetch_allowed`]).
const ALLOWED_PREFETCH: usize = 8;

/// At most this many code bytes of a list are prefetched before it is scanned (whole fast-scan
/// blocks, at least one): past them the hardware prefetcher has found the stream.
const LIST_PREFETCH_BYTES: usize = 4096;

/// With a filter, a fast-scan block of 32 vectors that holds at most this many allowed vectors
/// is not scanned: they are copied into blocks of such vectors ([`Index::score_loose`]), to be
/// scored with the same estimate at a 32nd of a block's scan each. A narrow filter's blocks
/// mostly hold one allowed vector or none, so its search scores little more than its allowed
/// vectors. (Up to session 70 such vectors were scored with the full code, which cost about a
/// third of a block's scan with 1-bit codes and more with more bits; this bound was measured
/// then, session 66, and is kept.)
const FAST_SCAN_ALONE: u32 = 1;

/// [`FAST_SCAN_ALONE`] for codecs without a fast scan, whose list scan scores each code as
/// scoring it alone does, at the same cost but for a per-call setup (per-anchor scales: about
/// one code's work): scoring up to a quarter of a block alone costs less than its scan.
const SCAN_ALONE: u32 = 8;

/// Hint the CPU to bring `items` into cache (`prefetcht0` on x86-64, `prfm pldl1keep` on
/// aarch64; nothing elsewhere): one hint per 64 bytes and one at the last byte, so that every
/// 64-byte cache line the slice touches gets one (a 54-byte code that starts 40 bytes into a
/// line ends in the next, where its factors are).
#[inline]
fn prefetch<T>(items: &[T]) {
    let (start, len) = (items.as_ptr() as *const u8, std::mem::size_of_val(items));
    let offsets = (0..len).step_by(64).chain(len.checked_sub(1));
    #[cfg(target_arch = "x86_64")]
    for offset in offsets {
        // SAFETY: offset < len, so the pointer stays within the live slice; prefetching is a
        // hint that never faults and is not a read of the memory.
        unsafe {
            std::arch::x86_64::_mm_prefetch(
                start.add(offset) as *const i8,
                std::arch::x86_64::_MM_HINT_T0,
            )
        };
    }
    #[cfg(target_arch = "aarch64")]
    for offset in offsets {
        // SAFETY: offset < len, so the pointer stays within the live slice; PRFM is a hint: it
        // never faults and writes nothing.
        unsafe {
            std::arch::asm!(
                "prfm pldl1keep, [{0}]",
                in(reg) start.add(offset),
                options(nostack, readonly, preserves_flags)
            )
        };
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = (start, offsets);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_parse_as_linux_writes_them() {
        assert_eq!(parse_cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_cache_size("1M"), Some(1 << 20));
        assert_eq!(parse_cache_size("2G"), Some(2 << 30));
        assert_eq!(parse_cache_size("512"), Some(512));
        for bad in ["", "K", "12Q", "-1K", "1.5M"] {
            assert_eq!(parse_cache_size(bad), None, "{bad:?}");
        }
        // Wherever Linux reports the caches, the last level is at least as large as a level-1
        // data cache (32 KiB or more on any CPU VLC targets).
        if let Some(bytes) = last_level_cache_bytes() {
            assert!(bytes >= 32 << 10, "last-level cache of {bytes} bytes");
        }
    }
}
