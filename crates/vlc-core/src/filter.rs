//! Filtered search: which vectors a search may return ([`IdFilter`], made by
//! [`Index::id_filter`] and passed to [`Index::search_filtered`] or
//! [`Index::search_batch_filtered`]).
//!
//! A filtered search takes the lists nearest the query that hold an allowed vector (lists
//! without one are passed over) until they hold `nprobe` lists' worth of allowed vectors: a
//! list counts as the share of its vectors the filter allows (1 for a list wholly allowed,
//! 0.1 where a tenth is; in fixed point, [`SHARE_ONE`] for 1, rounded up, and added in
//! integers, so that every backend, the GPUs' included, cuts exactly where the CPU does),
//! so a query scores about as many allowed candidates as an
//! unfiltered search scores candidates, whatever the filter's share, and a filter that
//! allows every vector probes `nprobe` lists as an unfiltered search does. A narrow filter
//! thus takes more lists (at most every list holding an allowed vector), and costs more
//! time. Only the anchors of the lists that hold an allowed vector are ranked (the filter
//! keeps which they are), so a narrow filter's queries neither measure nor sort every
//! anchor to pick the few lists they may probe; where a query takes most of those lists
//! anyway (a narrow filter's), one query alone sorts them only as far as its cut
//! (`Index::filtered_probes_in_order`). Only the allowed vectors enter the
//! candidate pool. With a fast-scan codec, a block of 32 vectors that holds no allowed
//! vector is passed over, and one that holds a single one has it copied into a block of
//! such vectors from wherever they lie (session 71), scored as a list's block is, at a
//! 32nd of a block's scan each; so a narrow filter, whose blocks mostly hold one or none,
//! scores little more than its allowed vectors. A list of which the filter allows at most
//! one vector in 32 is not walked block by block: its allowed vectors, found from the
//! filter's bits, are copied so too. From a filter's second search on (or the first of a
//! batch of several queries), their codes are read from the filter's own copy, gathered list
//! by list, rather than at scattered places of the index (`code_size` bytes per such vector,
//! kept with the filter: at most a 32nd of the index's codes), and their estimates go
//! straight into the candidate pool, no slot written or tested for the vectors left out.
//! Every allowed vector thus gets the estimate an unfiltered scan gives it, and with every
//! list probed the results are those of the index with every other vector removed (the same
//! anchors and codes) at the same fixed pool; codecs without a fast scan score a block's
//! few allowed vectors with the estimate their scan gives.

use crate::amx::PackedAnchors;
use crate::index::Index;
use crate::search::FilteredScan;
use rayon::prelude::*;
use std::sync::{Arc, OnceLock};

/// The vectors of one [`Index`] that a search may return, by their positions in its inverted
/// lists. Made by [`Index::id_filter`] for that index only (a search of another index, or of
/// the same one after an add or a remove, which makes a new [`Index`], is refused). The first
/// filter of an index value reads every id of the index, so a filter used by many searches is
/// best made once; narrow ones made later look up only their own ids ([`Index::id_filter`]).
#[derive(Clone, Debug)]
pub struct IdFilter {
    /// [`Index::instance`] of the index the filter was made for.
    instance: u64,
    /// [`IdFilter::serial`].
    serial: u64,
    /// One bit per stored vector, set where it may be returned: bit `p % 64` of word `p / 64`
    /// for list position `p`. Layout: (⌈num_vectors / 64⌉,).
    positions: Vec<u64>,
    /// Allowed vectors in each list. Layout: (num_anchors,).
    list_counts: Vec<u32>,
    /// Lists holding no allowed vector.
    empty_lists: usize,
    /// The lists' shares of allowed vectors (allowed / list size), added up.
    share_sum: f64,
    /// Each list's share of allowed vectors in fixed point ([`list_share`]). Layout:
    /// (num_anchors,).
    list_shares: Vec<u32>,
    /// Allowed vectors in all.
    allowed: usize,
    /// The lists that hold an allowed vector, ascending, where some list holds none (`None`
    /// where every list holds one): the only anchors a filtered search ranks, so that a narrow
    /// filter's queries neither measure nor sort every anchor to pick the few lists they may
    /// probe (at 0.1% of the dev set, 61 of 1,024). Layout: (lists_with_allowed,).
    ranked_lists: Option<Vec<u32>>,
    /// The anchors of `ranked_lists` packed for the CPU's integer kernels where the index's
    /// anchors pack (their rows of the index's packing, so their products are the same): made
    /// at the first search that ranks on them ([`Index::filter_packing`]).
    packing: OnceLock<Option<Arc<PackedAnchors>>>,
    /// The allowed vectors' list positions, list by list, for device searches
    /// ([`IdFilter::allowed_by_list`]): made at the first call.
    by_list: OnceLock<AllowedByList>,
    /// The codes of the allowed vectors of the lists a CPU search takes one by one
    /// ([`Index::gather_for_search`]): gathered at the filter's second search, or its first
    /// of several queries.
    gathered: OnceLock<GatheredCodes>,
    /// Set at the filter's first CPU search.
    searched: OnceLock<()>,
}

/// The primary codes of a filter's allowed vectors in the lists that a CPU search scores one
/// by one ([`FilteredScan::Alone`]: at most one vector in 32 allowed), copied list by list
/// into one buffer. Such a list's allowed vectors are few and spread over it, each code a
/// cache miss (and on large indexes a TLB miss) where it lies in the index; from here a
/// search reads them in one run, from a buffer small enough to stay in cache from one query
/// to the next (at most a 32nd of the index's codes). Their positions are the filter's
/// ([`IdFilter::allowed_by_list`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct GatheredCodes {
    /// List `a`'s codes are entries `starts[a]..starts[a + 1]`, one per allowed vector in the
    /// order of its positions in [`AllowedByList`] (none for a list not scored one by one).
    /// Layout: (num_anchors + 1,).
    starts: Vec<u32>,
    /// Each entry's primary code. Layout: (entries, code_size), row-major.
    codes: Vec<u8>,
}

impl GatheredCodes {
    /// List `list`'s codes (of `code_size` bytes each, the first its first allowed vector's),
    /// and the allowed vectors' list positions (`by_list`'s, the filter's).
    #[inline]
    pub(crate) fn list<'a>(
        &'a self,
        list: usize,
        code_size: usize,
        by_list: &'a AllowedByList,
    ) -> (&'a [u8], &'a [u32]) {
        let (first, last) = (self.starts[list] as usize, self.starts[list + 1] as usize);
        let positions =
            &by_list.positions[by_list.starts[list] as usize..by_list.starts[list + 1] as usize];
        debug_assert_eq!(positions.len(), last - first);
        (&self.codes[first * code_size..last * code_size], positions)
    }
}

/// The allowed vectors of an [`IdFilter`] list by list ([`IdFilter::allowed_by_list`]).
#[derive(Clone, Debug, Default)]
pub struct AllowedByList {
    /// List `a`'s allowed vectors are entries `starts[a]..starts[a + 1]` of `positions`.
    /// Layout: (num_anchors + 1,).
    pub starts: Vec<u32>,
    /// Each list's share of allowed vectors in fixed point ([`list_share`]): a filtered
    /// search takes lists in order until these, added in integers, reach
    /// `nprobe · SHARE_ONE`. Layout: (num_anchors,).
    pub shares: Vec<u32>,
    /// The list positions of the allowed vectors, ascending (so list by list). Layout:
    /// (allowed,).
    pub positions: Vec<u32>,
}

/// A list's whole share of allowed vectors in fixed point ([`list_share`]).
pub const SHARE_ONE: u32 = 1 << 16;

/// A list's share of allowed vectors, `allowed / size`, in units of 1 / [`SHARE_ONE`] and
/// rounded up: [`SHARE_ONE`] for a list wholly allowed, at least 1 for a list that holds one,
/// 0 for a list that holds none. Integers, so that the sums that cut a filtered search's
/// lists are the same on every backend (WGSL has no f64).
pub fn list_share(allowed: u32, size: u64) -> u32 {
    if allowed == 0 {
        return 0;
    }
    (allowed as u64 * SHARE_ONE as u64).div_ceil(size.max(1)) as u32
}

/// A filter of at most one vector in this many of the index looks its ids up in the map of
/// each id's position ([`Index::id_filter`]); a broader one reads every id of the index, on all
/// threads, which costs less than as many lookups at random places of the map.
const LOOKUP_MAX_SHARE: usize = 32;

/// The map of each id's position is made only where the index's ids leave at most this many
/// ids' room per vector (ids given by the user may be spread over all of `u32`).
const MAP_MAX_SPACE: usize = 4;

/// Positions whose ids one task of [`Index::id_filter`] reads (a multiple of 64, so that each
/// task writes whole words).
const POSITIONS_PER_TASK: usize = 64 * 1024;

/// The next [`IdFilter::serial`].
static NEXT_SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl IdFilter {
    /// A number no other filter made in this process has (a clone keeps it, as it keeps
    /// what the filter allows): a device copy of an index keeps the filter it last uploaded
    /// under it, so that searches with the same filter upload it once.
    pub fn serial(&self) -> u64 {
        self.serial
    }

    /// How many of the index's vectors the filter allows.
    pub fn len(&self) -> usize {
        self.allowed
    }

    /// Whether the filter allows no vector (a search then returns padding only).
    pub fn is_empty(&self) -> bool {
        self.allowed == 0
    }

    /// The allowed vectors' list positions (the order of [`Index::device_view`]'s codes and
    /// ids), list by list, so that a device scans only them; made at the first call and kept
    /// with the filter (4 bytes per allowed vector, 4 per list). For indexes of at most 2^32
    /// vectors, as device searches take.
    pub fn allowed_by_list(&self) -> &AllowedByList {
        self.by_list.get_or_init(|| {
            let mut starts = Vec::with_capacity(self.list_counts.len() + 1);
            starts.push(0u32);
            let mut total = 0u32;
            for &count in &self.list_counts {
                total += count;
                starts.push(total);
            }
            let mut positions = Vec::with_capacity(self.allowed);
            for (w, &word) in self.positions.iter().enumerate() {
                let mut bits = word;
                while bits != 0 {
                    positions.push((64 * w) as u32 + bits.trailing_zeros());
                    bits &= bits - 1;
                }
            }
            AllowedByList {
                starts,
                positions,
                shares: self.list_shares.clone(),
            }
        })
    }

    /// Allowed vectors in list `anchor`.
    #[inline]
    pub(crate) fn list_count(&self, anchor: usize) -> usize {
        self.list_counts[anchor] as usize
    }

    /// Lists that hold an allowed vector.
    pub(crate) fn lists_with_allowed(&self) -> usize {
        self.list_counts.len() - self.empty_lists
    }

    /// How many of the lists that hold an allowed vector a query ranks first to find its
    /// `nprobe` lists' worth (see the module's doc): half again as many as lists of the
    /// filter's mean share would take, and a few more; a query whose nearest lists hold less
    /// than that ranks them all.
    pub(crate) fn lists_to_rank(&self, nprobe: usize) -> usize {
        let with = self.lists_with_allowed();
        if with == 0 {
            return 0;
        }
        ((1.5 * nprobe as f64 / self.mean_share()).ceil() as usize + 4).min(with)
    }

    /// The mean share of allowed vectors ([`list_share`], in lists) of the lists that hold
    /// one (0 where none does).
    fn mean_share(&self) -> f64 {
        self.share_sum / self.lists_with_allowed().max(1) as f64
    }

    /// How many lists of the filter's mean share make `nprobe` lists' worth, and a few more
    /// (at least 1).
    pub(crate) fn lists_at_mean_share(&self, nprobe: usize) -> usize {
        let mean_share = self.mean_share().max(f64::MIN_POSITIVE);
        (nprobe as f64 / mean_share).ceil().min(u32::MAX as f64) as usize + 4
    }

    /// The lists a filtered search ranks where not every list holds an allowed vector
    /// (ascending); `None`: every list.
    pub(crate) fn ranked_lists(&self) -> Option<&[u32]> {
        self.ranked_lists.as_deref()
    }

    /// Whether the filter was made for `index` (this very value of it).
    pub(crate) fn made_for(&self, index: &Index) -> bool {
        self.instance == index.instance
    }

    /// The positions' bits from `start` on, as many as `count` (≤ 32), in the low bits.
    #[inline]
    pub(crate) fn bits(&self, start: usize, count: usize) -> u32 {
        debug_assert!(count <= 32);
        self.bits64(start, count) as u32
    }

    /// The allowed list positions in `lo..hi`, ascending.
    #[inline]
    pub(crate) fn allowed_in(&self, lo: usize, hi: usize) -> impl Iterator<Item = usize> + '_ {
        (lo..hi).step_by(64).flat_map(move |start| {
            let mut bits = self.bits64(start, 64.min(hi - start));
            std::iter::from_fn(move || {
                let p = start + bits.trailing_zeros() as usize;
                bits &= bits.wrapping_sub(1);
                (p < start + 64).then_some(p)
            })
        })
    }

    /// The codes gathered for CPU searches ([`Index::gather_for_search`]), once gathered.
    #[inline]
    pub(crate) fn gathered(&self) -> Option<&GatheredCodes> {
        self.gathered.get()
    }

    /// [`IdFilter::bits`] for up to 64 positions.
    #[inline]
    pub(crate) fn bits64(&self, start: usize, count: usize) -> u64 {
        debug_assert!(count <= 64);
        let (word, shift) = (start / 64, start % 64);
        let low = self.positions[word] >> shift;
        let bits = match self.positions.get(word + 1) {
            Some(&next) if shift > 0 => low | (next << (64 - shift)),
            _ => low,
        };
        bits & u64::MAX.checked_shr(64 - count as u32).unwrap_or(0)
    }

    /// Sets the first-stage estimates `dists` of the vectors at positions `start..` that the
    /// filter leaves out to +∞, so that no candidate pool or later pass takes them. Kept out
    /// of line: inlined into the list scan, it slowed unfiltered searches.
    #[inline(never)]
    pub(crate) fn exclude(&self, start: usize, dists: &mut [f32]) {
        // A select per slot rather than a store per bit left out: a list scanned whole under
        // a narrow filter leaves out most of each block.
        for (c, chunk) in dists.chunks_mut(32).enumerate() {
            let kept = self.bits(start + 32 * c, chunk.len());
            for (j, d) in chunk.iter_mut().enumerate() {
                *d = if kept >> j & 1 != 0 {
                    *d
                } else {
                    f32::INFINITY
                };
            }
        }
    }
}

impl Index {
    /// A filter that lets searches of this index return only the vectors with these ids
    /// ([`Index::search_filtered`], [`Index::search_batch_filtered`]). Ids the index does not
    /// hold (removed, or never given) are ignored, and so are repeats. Making one reads every
    /// id of the index once, on all threads of the current rayon pool, except for narrow
    /// filters (at most one vector in 32) from the second on: the second makes a map of each
    /// id's position (4 bytes per id, kept with this index value), in which it and every later
    /// one look up their own ids only. So a server that makes a filter per request (one user's
    /// documents) pays for the ids it names, not for the index.
    pub fn id_filter(&self, ids: &[u32]) -> IdFilter {
        let map = (ids.len() * LOOKUP_MAX_SHARE <= self.num_vectors)
            .then(|| {
                let made = self
                    .narrow_filters_made
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.id_positions_for_filters(made)
            })
            .flatten();
        let (positions, list_counts) = match map {
            Some(map) => self.filter_by_map(ids, map),
            None => self.filter_by_reading(ids),
        };
        let offsets = &self.list_offsets;
        let share_sum = list_counts
            .iter()
            .enumerate()
            .filter(|&(_, &c)| c > 0)
            .map(|(a, &c)| c as f64 / (offsets[a + 1] - offsets[a]) as f64)
            .sum();
        let list_shares = list_counts
            .iter()
            .enumerate()
            .map(|(a, &c)| list_share(c, offsets[a + 1] - offsets[a]))
            .collect();
        let empty_lists = list_counts.iter().filter(|&&c| c == 0).count();
        let ranked_lists = (empty_lists > 0).then(|| {
            (0..list_counts.len() as u32)
                .filter(|&a| list_counts[a as usize] > 0)
                .collect()
        });
        IdFilter {
            instance: self.instance,
            serial: NEXT_SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            share_sum,
            list_shares,
            empty_lists,
            allowed: list_counts.iter().map(|&c| c as usize).sum(),
            positions,
            list_counts,
            ranked_lists,
            packing: OnceLock::new(),
            by_list: OnceLock::new(),
            gathered: OnceLock::new(),
            searched: OnceLock::new(),
        }
    }

    /// The map of each id's position ([`Index::id_positions`]) for the narrow filter made
    /// after `made` others: made at the second (a filter made once reads the ids either way),
    /// kept from then on. `None` before, where ids are spread far beyond the index's size
    /// (more than [`MAP_MAX_SPACE`] ids' room per vector: the map takes 4 bytes per id), and
    /// where a position would not fit its `u32`.
    fn id_positions_for_filters(&self, made: usize) -> Option<&[u32]> {
        if let Some(map) = self.id_positions.get() {
            return Some(map);
        }
        let space = self.id_space();
        // (Positions are stored as u32, u32::MAX meaning none.)
        let too_many = self.num_vectors >= u32::MAX as usize;
        if made == 0 || too_many || space > MAP_MAX_SPACE * self.num_vectors + 64 {
            return None;
        }
        Some(self.id_positions.get_or_init(|| {
            let ids = self.ids.to_u32();
            let mut map = vec![u32::MAX; space];
            for (p, &id) in ids.iter().enumerate() {
                map[id as usize] = p as u32;
            }
            map
        }))
    }

    /// One past the largest id the index holds (0 for none), found once per index value.
    fn id_space(&self) -> usize {
        *self.id_space.get_or_init(|| {
            self.ids
                .max_id(&self.list_offsets)
                .map_or(0, |m| m as usize + 1)
        })
    }

    /// A filter's bitmap and per-list counts ([`IdFilter`]'s `positions` and `list_counts`)
    /// from the map of each id's position.
    fn filter_by_map(&self, ids: &[u32], map: &[u32]) -> (Vec<u64>, Vec<u32>) {
        let mut positions = vec![0u64; self.num_vectors.div_ceil(64)];
        let mut list_counts = vec![0u32; self.num_anchors()];
        let offsets = &self.list_offsets;
        for &id in ids {
            let p = match map.get(id as usize) {
                Some(&p) if p != u32::MAX => p as usize,
                _ => continue,
            };
            let (word, bit) = (p / 64, 1u64 << (p % 64));
            if positions[word] & bit == 0 {
                positions[word] |= bit;
                list_counts[offsets.partition_point(|&o| o as usize <= p) - 1] += 1;
            }
        }
        (positions, list_counts)
    }

    /// A filter's bitmap and per-list counts ([`IdFilter`]'s `positions` and `list_counts`)
    /// by reading every id of the index, on all threads of the current rayon pool.
    fn filter_by_reading(&self, ids: &[u32]) -> (Vec<u64>, Vec<u32>) {
        // The ids asked for that the index could hold, as bits.
        let space = self.id_space();
        let mut wanted = vec![0u64; space.div_ceil(64)];
        for &id in ids.iter().filter(|&&id| (id as usize) < space) {
            wanted[id as usize / 64] |= 1 << (id % 64);
        }
        let is_wanted = |id: usize| wanted[id / 64] >> (id % 64) & 1 == 1;
        let n = self.num_vectors;
        let offsets = &self.list_offsets;
        let mut positions = vec![0u64; n.div_ceil(64)];
        positions
            .par_chunks_mut(POSITIONS_PER_TASK / 64)
            .enumerate()
            .for_each(|(t, words)| {
                let start = t * POSITIONS_PER_TASK;
                let end = (start + 64 * words.len()).min(n);
                // The list holding `start`: the last whose first position is at most it.
                let mut list = offsets.partition_point(|&o| o as usize <= start) - 1;
                for p in start..end {
                    while offsets[list + 1] as usize <= p {
                        list += 1;
                    }
                    if is_wanted(self.ids.get_in_list(list, p) as usize) {
                        words[(p - start) / 64] |= 1 << (p % 64);
                    }
                }
            });
        let list_counts = (0..self.num_anchors())
            .into_par_iter()
            .map(|a| count_ones_in(&positions, offsets[a] as usize, offsets[a + 1] as usize))
            .collect();
        (positions, list_counts)
    }

    /// The rows of `lists`' anchors. Layout: (lists.len(), dim), row-major.
    pub(crate) fn anchors_of(&self, lists: &[u32]) -> Vec<f32> {
        let dim = self.dim;
        let mut anchors = Vec::with_capacity(lists.len() * dim);
        for &a in lists {
            let a = a as usize;
            anchors.extend_from_slice(&self.anchors[a * dim..(a + 1) * dim]);
        }
        anchors
    }

    /// Before a CPU search of `queries` queries with `filter`: gather the codes of its
    /// allowed vectors in the lists scored one by one ([`GatheredCodes`]) where the filter is
    /// searched again (its second search, or a search of several queries), so that a filter
    /// made for one query does not pay for the copy; kept with the filter.
    pub(crate) fn gather_for_search(&self, filter: &IdFilter, queries: usize) {
        let searched_before = filter.searched.set(()).is_err();
        // (Positions are kept as u32.)
        let too_many = self.num_vectors > u32::MAX as usize;
        if too_many || filter.gathered.get().is_some() || (queries < 2 && !searched_before) {
            return;
        }
        let by_list = filter.allowed_by_list();
        filter.gathered.get_or_init(|| {
            let cs = crate::codec::ResidualCodec::code_size(&self.codec);
            let mut gathered = GatheredCodes {
                starts: Vec::with_capacity(self.num_anchors() + 1),
                ..GatheredCodes::default()
            };
            gathered.starts.push(0);
            // Each list's allowed positions, for the lists scored one by one.
            let mut lists: Vec<&[u32]> = Vec::new();
            let mut entries = 0u32;
            for a in 0..self.num_anchors() {
                if self.filtered_scan(a as u32, filter) == FilteredScan::Alone {
                    let positions = &by_list.positions
                        [by_list.starts[a] as usize..by_list.starts[a + 1] as usize];
                    lists.push(positions);
                    entries += positions.len() as u32;
                }
                gathered.starts.push(entries);
            }
            // Copied list by list on all threads: the codes lie at scattered places.
            gathered.codes = vec![0u8; entries as usize * cs];
            let mut rest = gathered.codes.as_mut_slice();
            let mut tasks = Vec::with_capacity(lists.len());
            for positions in lists {
                let (out, tail) = rest.split_at_mut(positions.len() * cs);
                tasks.push((out, positions));
                rest = tail;
            }
            tasks.into_par_iter().for_each(|(out, positions)| {
                for (o, &p) in out.chunks_exact_mut(cs.max(1)).zip(positions) {
                    let p = p as usize;
                    o.copy_from_slice(&self.codes[p * cs..(p + 1) * cs]);
                }
            });
            gathered
        });
    }

    /// The packing of `filter`'s ranked lists' anchors ([`IdFilter::ranked_lists`]) for the
    /// integer kernels, where the index's anchors pack; made at the first call.
    pub(crate) fn filter_packing<'a>(&self, filter: &'a IdFilter) -> Option<&'a PackedAnchors> {
        let lists = filter.ranked_lists()?;
        filter
            .packing
            .get_or_init(|| Some(Arc::new(self.stored_packing()?.select_rows(lists))))
            .as_deref()
    }

    /// With a filter, how many of `ranked` (anchor, distance), the nearest lists that hold an
    /// allowed vector, nearest first, a query probes: lists in order until their shares of
    /// allowed vectors ([`list_share`], added in integers) reach `nprobe` lists' worth (see
    /// [`crate::filter`]), or all of them where `complete` (they are every list holding one).
    /// `None` where they run out first and more lists could follow (rank them all).
    pub(crate) fn filtered_probe_count(
        &self,
        filter: &IdFilter,
        ranked: &[(u32, f32)],
        nprobe: usize,
        complete: bool,
    ) -> Option<usize> {
        let target = nprobe as u64 * SHARE_ONE as u64;
        let mut worth = 0u64;
        for (j, &(a, _)) in ranked.iter().enumerate() {
            if worth >= target {
                return Some(j);
            }
            worth += filter.list_shares[a as usize] as u64;
        }
        (worth >= target || complete).then_some(ranked.len())
    }

    /// A narrow filter's probes, where a query ranks every list that holds an allowed
    /// vector at once: `dists` holds each such list's squared distance from the query (entry
    /// `j`: list `j`, or [`IdFilter::ranked_lists`]`[j]`); `keys` is left with their order
    /// keys ([`order_key`](crate::linalg::order_key)), nearest first as far as the cut, and
    /// the number of lists to probe is returned: the count [`Index::filtered_probe_count`]
    /// gives for all of them sorted, with the same lists in the same order. Only that far
    /// are they sorted: the nearest of them about as many as `nprobe` lists' worth takes at
    /// the filter's mean share, then further runs while the cut lies beyond. (A narrow
    /// filter ranks thousands of lists, and sorting them all took a tenth of a query's time.)
    pub(crate) fn filtered_probes_in_order(
        &self,
        filter: &IdFilter,
        dists: &[f32],
        nprobe: usize,
        keys: &mut Vec<u64>,
    ) -> usize {
        use crate::linalg::{key_id, order_key};
        keys.clear();
        keys.extend(
            dists
                .iter()
                .enumerate()
                .map(|(j, &d)| order_key(d, j as u32)),
        );
        let lists = filter.ranked_lists();
        let share = |key: u64| {
            let j = key_id(key) as usize;
            filter.list_shares[lists.map_or(j, |lists| lists[j] as usize)] as u64
        };
        let target = nprobe as u64 * SHARE_ONE as u64;
        let n = keys.len();
        let (mut sorted, mut worth) = (0, 0u64);
        let mut run = filter.lists_at_mean_share(nprobe);
        while sorted < n {
            let end = (sorted + run).min(n);
            if end < n {
                keys[sorted..].select_nth_unstable(end - sorted - 1);
            }
            keys[sorted..end].sort_unstable();
            for (j, &key) in keys[..end].iter().enumerate().skip(sorted) {
                if worth >= target {
                    return j;
                }
                worth += share(key);
            }
            sorted = end;
            run = (run / 4).max(16);
        }
        n
    }

    /// An error unless `filter` was made for this index.
    pub(crate) fn check_filter(&self, filter: &IdFilter) -> crate::Result<()> {
        if filter.made_for(self) {
            Ok(())
        } else {
            Err(crate::VlcError::param(
                "filter",
                "this filter was made for another index, or for this one before an add or a \
                 remove (each makes a new index): make it again for this index",
            ))
        }
    }
}

/// Set bits of `words` at positions `start..end`.
fn count_ones_in(words: &[u64], start: usize, end: usize) -> u32 {
    if start >= end {
        return 0;
    }
    let (first, last) = (start / 64, (end - 1) / 64);
    let low_mask = u64::MAX << (start % 64);
    let high_mask = u64::MAX >> (63 - (end - 1) % 64);
    if first == last {
        return (words[first] & low_mask & high_mask).count_ones();
    }
    (words[first] & low_mask).count_ones()
        + words[first + 1..last]
            .iter()
            .map(|w| w.count_ones())
            .sum::<u32>()
        + (words[last] & high_mask).count_ones()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::{clustered, queries_near};
    use crate::{BuildParams, CodecKind, CpuBackend, SearchParams};

    /// The ids of the positions that `pick(list, block, slots)` picks, block by block of 32
    /// positions in each list (`slots`: the block's positions, fewer in a list's last block):
    /// a filter whose make-up in every block is known.
    fn ids_by_block(
        index: &Index,
        mut pick: impl FnMut(usize, usize, usize) -> Vec<usize>,
    ) -> Vec<u32> {
        let mut ids = Vec::new();
        for list in 0..index.num_anchors() {
            let (lo, hi) = (
                index.list_offsets[list] as usize,
                index.list_offsets[list + 1] as usize,
            );
            for (b, start) in (lo..hi).step_by(32).enumerate() {
                for j in pick(list, b, (hi - start).min(32)) {
                    ids.push(index.ids.get_in_list(list, start + j));
                }
            }
        }
        ids.sort_unstable();
        ids
    }

    /// `index` with every vector but those of `ids` (ascending) removed.
    fn allowed_only(index: &Index, ids: &[u32]) -> Index {
        let others: Vec<u32> = (0..index.next_id())
            .filter(|i| ids.binary_search(i).is_err())
            .collect();
        index.remove_ids(&others).unwrap().0
    }

    /// One allowed vector in two blocks of three, at a random slot.
    fn sparse_ids(index: &Index) -> Vec<u32> {
        let mut rng = crate::Rng::new(13);
        ids_by_block(index, |_, _, slots| {
            let j = rng.next_u64() as usize % slots;
            if rng.next_u64().is_multiple_of(3) {
                vec![]
            } else {
                vec![j]
            }
        })
    }

    /// Whether a list is scanned whole, block by block or its allowed vectors taken one by one
    /// (sparse lists and blocks: their codes copied into blocks of their own), each allowed
    /// vector gets the estimate an unfiltered fast scan gives it: with every list probed, a
    /// filtered search gives, bit for bit, the results of the index of the allowed vectors
    /// alone, whatever the pool (a fixed one, so that the order in which candidates enter it
    /// does not matter), and only allowed vectors.
    #[test]
    fn filtered_fast_scans_give_the_results_of_the_allowed_vectors_alone() {
        let (dim, n) = (32, 4000);
        let data = clustered(n, dim, 25, 0.6, 11);
        let queries = queries_near(&data, dim, 40, 0.4, 12);
        for codec in [CodecKind::RaBitQ1, CodecKind::RaBitQ3, CodecKind::PcaRaBitQ] {
            let params = BuildParams::default()
                .with_codec(codec)
                .with_num_anchors(40);
            let index = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {})
                .unwrap()
                .0;
            assert!(index.fastscan().is_some(), "{codec:?} scans blocks");
            let sparse = sparse_ids(&index);
            // Blocks alternately sparse (one allowed) and denser (every eighth slot): lists
            // scanned block by block.
            let mixed = ids_by_block(&index, |list, b, slots| {
                if (list + b) % 2 == 0 {
                    vec![slots / 2]
                } else {
                    (0..slots).step_by(8).collect()
                }
            });
            // All but one slot of each block: lists scanned whole, then the exclusion.
            let most = ids_by_block(&index, |_, b, slots| {
                (0..slots).filter(|&j| j != b % slots).collect()
            });
            let modes = [
                FilteredScan::Alone,
                FilteredScan::ByBlock,
                FilteredScan::Whole,
            ];
            for (ids, mode) in [(&sparse, modes[0]), (&mixed, modes[1]), (&most, modes[2])] {
                let filter = index.id_filter(ids);
                let lists = (0..index.num_anchors() as u32)
                    .filter(|&a| index.filtered_scan(a, &filter) == mode)
                    .count();
                assert!(lists > 0, "{codec:?}: no list scanned as {mode:?}");
            }
            for (ids, pool) in [(&sparse, 20), (&mixed, 20), (&most, 20), (&sparse, 0)] {
                let filter = index.id_filter(ids);
                let kept = allowed_only(&index, ids);
                let sp = SearchParams {
                    k: 10,
                    nprobe: index.num_anchors(),
                    rerank: if pool == 0 { ids.len() } else { pool },
                    probe_margin: None,
                };
                let expected = kept.search_batch(&queries, &sp, &CpuBackend).unwrap();
                let got = index
                    .search_batch_filtered(&queries, &sp, &CpuBackend, &filter)
                    .unwrap();
                assert_eq!(
                    got,
                    expected,
                    "{codec:?}, {} allowed, pool {}",
                    ids.len(),
                    sp.rerank
                );
                for (r, q) in queries.chunks(dim).enumerate() {
                    let hits = index.search_filtered(q, &sp, &filter).unwrap();
                    let ids: Vec<i64> = hits.iter().map(|h| h.id as i64).collect();
                    assert_eq!(ids, expected.ids[r * 10..][..10], "{codec:?}, query {r}");
                }
            }
        }
    }

    /// A list that allows at most one vector in 32 has its allowed vectors scored one by one
    /// wherever they lie, several in one block included: from the index's codes at a
    /// filter's first lone search, from the filter's copy of them at its second (and at a
    /// batch's first), with the same results either way, those of the index of the allowed
    /// vectors alone with the same pool (every list probed).
    #[test]
    fn sparse_lists_score_their_allowed_vectors_alone_before_and_after_gathering() {
        let (dim, n) = (32, 8000);
        let data = clustered(n, dim, 20, 0.6, 31);
        let queries = queries_near(&data, dim, 20, 0.4, 32);
        for codec in [
            CodecKind::RaBitQ1,
            CodecKind::RaBitQ3,
            CodecKind::Sq8,
            CodecKind::AnchorOnly,
        ] {
            let params = BuildParams::default()
                .with_codec(codec)
                .with_num_anchors(20);
            let index = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {})
                .unwrap()
                .0;
            // Three allowed vectors in the first block of each list of at least 96.
            let size = |a: usize| index.list_offsets[a + 1] - index.list_offsets[a];
            let ids = ids_by_block(&index, |list, b, _| {
                if b == 0 && size(list) >= 96 {
                    vec![3, 4, 17]
                } else {
                    vec![]
                }
            });
            let filter = index.id_filter(&ids);
            for a in 0..index.num_anchors() {
                let alone = index.filtered_scan(a as u32, &filter) == FilteredScan::Alone;
                assert_eq!(alone, filter.list_count(a) > 0, "{codec:?}, list {a}");
            }
            let kept = allowed_only(&index, &ids);
            let sp = SearchParams {
                k: 10,
                nprobe: index.num_anchors(),
                rerank: 20,
                probe_margin: None,
            };
            let expected = kept.search_batch(&queries, &sp, &CpuBackend).unwrap();
            for (r, q) in queries.chunks(dim).enumerate() {
                let filter = filter.clone();
                let first = index.search_filtered(q, &sp, &filter).unwrap();
                assert!(
                    filter.gathered().is_none(),
                    "{codec:?}: gathered for one query"
                );
                let second = index.search_filtered(q, &sp, &filter).unwrap();
                assert!(
                    filter.gathered().is_some(),
                    "{codec:?}: not gathered when reused"
                );
                assert_eq!(first, second, "{codec:?}, query {r}");
                let ids: Vec<i64> = first.iter().map(|h| h.id as i64).collect();
                assert_eq!(ids, expected.ids[r * 10..][..10], "{codec:?}, query {r}");
            }
            let fresh = filter.clone();
            let got = index
                .search_batch_filtered(&queries, &sp, &CpuBackend, &fresh)
                .unwrap();
            assert!(fresh.gathered().is_some(), "{codec:?}: a batch gathers");
            assert_eq!(got, expected, "{codec:?}, batch");
        }
    }

    /// Codecs without a fast scan score a block's one allowed vector alone with the estimate
    /// their list scan gives it, and scan runs of fuller blocks in one call: with every list
    /// probed, the results are bit for bit those of the index of the allowed vectors alone,
    /// whatever the pool, with sparse, mixed and full blocks (per-anchor scales included).
    #[test]
    fn sparse_blocks_of_codecs_without_a_fast_scan_score_as_their_scan() {
        let (dim, n) = (24, 3000);
        let data = clustered(n, dim, 25, 0.6, 21);
        let queries = queries_near(&data, dim, 30, 0.4, 22);
        for (codec, jacobian) in [
            (CodecKind::Sq8, false),
            (CodecKind::Sq4, true),
            (CodecKind::F16, false),
        ] {
            let mut params = BuildParams::default()
                .with_codec(codec)
                .with_num_anchors(30);
            params.codec_params.jacobian = jacobian;
            let index = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {})
                .unwrap()
                .0;
            assert!(index.fastscan().is_none(), "{codec:?}");
            let mut rng = crate::Rng::new(23);
            // Blocks with no allowed vector, one, or all but the first: runs of each.
            let ids = ids_by_block(&index, |_, _, slots| match rng.next_u64() % 4 {
                0 => vec![],
                1 => vec![rng.next_u64() as usize % slots],
                _ => (1..slots).collect(),
            });
            let filter = index.id_filter(&ids);
            let kept = allowed_only(&index, &ids);
            for rerank in [0, 20] {
                let sp = SearchParams {
                    k: 10,
                    nprobe: index.num_anchors(),
                    rerank,
                    probe_margin: None,
                };
                let expected = kept.search_batch(&queries, &sp, &CpuBackend).unwrap();
                let got = index
                    .search_batch_filtered(&queries, &sp, &CpuBackend, &filter)
                    .unwrap();
                assert_eq!(got, expected, "{codec:?}, pool {rerank}");
            }
        }
    }

    /// A narrow filter's probes sorted only as far as the cut are the lists, in the order,
    /// that sorting all of them and cutting gives: with ties among the distances, a cut in
    /// the first run, in a later one and none (too little allowed), with every list or only
    /// some of them holding an allowed vector.
    #[test]
    fn probes_sorted_to_the_cut_are_those_of_a_full_sort() {
        let (dim, n, num_anchors) = (8, 6000, 200);
        let data = clustered(n, dim, 40, 0.5, 5);
        let params = BuildParams::default().with_num_anchors(num_anchors);
        let index = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {})
            .unwrap()
            .0;
        let mut rng = crate::Rng::new(21);
        // Cuts within the first run, beyond it, and none (every list taken).
        let (mut within, mut beyond, mut all) = (0, 0, 0);
        for share in [1.0, 0.3, 0.05, 0.01, 0.002] {
            let ids: Vec<u32> = (0..n as u32).filter(|_| rng.next_f64() < share).collect();
            let filter = index.id_filter(&ids);
            let lists: Vec<u32> = match filter.ranked_lists() {
                Some(lists) => lists.to_vec(),
                None => (0..num_anchors as u32).collect(),
            };
            for trial in 0..20 {
                // Few distinct distances in some trials, so ties are common.
                let levels = if trial % 2 == 0 { 7 } else { 1 << 20 };
                let dists: Vec<f32> = lists
                    .iter()
                    .map(|_| rng.below(levels) as f32 * 0.25)
                    .collect();
                let mut by_key: Vec<(f32, u32)> = dists
                    .iter()
                    .enumerate()
                    .map(|(j, &d)| (d, j as u32))
                    .collect();
                by_key.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                let ranked: Vec<(u32, f32)> = by_key
                    .iter()
                    .map(|&(d, j)| (lists[j as usize], d))
                    .collect();
                for nprobe in [1, 3, 16, 64, 400] {
                    let want = index
                        .filtered_probe_count(&filter, &ranked, nprobe, true)
                        .unwrap();
                    let mut keys = Vec::new();
                    let count = index.filtered_probes_in_order(&filter, &dists, nprobe, &mut keys);
                    assert_eq!(count, want, "share {share}, nprobe {nprobe}");
                    if count == lists.len() {
                        all += 1;
                    } else if count <= filter.lists_at_mean_share(nprobe) {
                        within += 1;
                    } else {
                        beyond += 1;
                    }
                    let got: Vec<(u32, f32)> = keys[..count]
                        .iter()
                        .map(|&k| {
                            let j = crate::linalg::key_id(k) as usize;
                            (lists[j], crate::linalg::key_dist(k))
                        })
                        .collect();
                    assert_eq!(got, ranked[..count], "share {share}, nprobe {nprobe}");
                }
            }
        }
        assert!(
            within > 0 && beyond > 0 && all > 0,
            "{within} cuts in the first run, {beyond} beyond, {all} taking every list"
        );
    }

    #[test]
    fn list_shares_are_fixed_point_quotients_rounded_up() {
        assert_eq!(list_share(0, 10), 0);
        assert_eq!(list_share(10, 10), SHARE_ONE);
        assert_eq!(list_share(1, 2), SHARE_ONE / 2);
        // 1/3 rounds up, and a list of more than 2^16 vectors holding one still counts.
        assert_eq!(list_share(1, 3), SHARE_ONE / 3 + 1);
        assert_eq!(list_share(1, 1 << 20), 1);
        assert_eq!(list_share(u32::MAX, u32::MAX as u64), SHARE_ONE);

        let (dim, n) = (16, 3000);
        let data = clustered(n, dim, 20, 0.5, 33);
        let index = Index::build(
            &data,
            dim,
            &BuildParams::default().with_num_anchors(30),
            &CpuBackend,
            &mut |_| {},
        )
        .unwrap()
        .0;
        // Every vector allowed: whole lists, so a filtered search takes nprobe of them, as an
        // unfiltered one does.
        let all = index.id_filter(&(0..n as u32).collect::<Vec<_>>());
        assert!(all.list_shares.iter().all(|&s| s == SHARE_ONE));
        let ranked: Vec<(u32, f32)> = (0..30).map(|a| (a, a as f32)).collect();
        for nprobe in [1, 7, 30] {
            let count = index.filtered_probe_count(&all, &ranked, nprobe, false);
            assert_eq!(count, Some(nprobe));
        }
        // Every other vector: each list's share is about a half, so about twice as many lists.
        let half = index.id_filter(&(0..n as u32).step_by(2).collect::<Vec<_>>());
        for (a, &share) in half.list_shares.iter().enumerate() {
            let size = index.list_offsets[a + 1] - index.list_offsets[a];
            assert_eq!(
                share,
                list_share(half.list_count(a) as u32, size),
                "list {a}"
            );
        }
        let count = index
            .filtered_probe_count(&half, &ranked, 5, false)
            .unwrap();
        let worth: u64 = ranked[..count]
            .iter()
            .map(|&(a, _)| u64::from(half.list_shares[a as usize]))
            .sum();
        let before = worth - u64::from(half.list_shares[ranked[count - 1].0 as usize]);
        assert!(worth >= 5 * u64::from(SHARE_ONE) && before < 5 * u64::from(SHARE_ONE));
        assert!(
            (8..=12).contains(&count),
            "{count} lists for 5 lists' worth"
        );
        // Too little in the lists given: more could follow, unless they are every list.
        assert_eq!(
            index.filtered_probe_count(&half, &ranked[..3], 5, false),
            None
        );
        assert_eq!(
            index.filtered_probe_count(&half, &ranked[..3], 5, true),
            Some(3)
        );
    }

    /// A device's view of a filter: list by list, the positions of exactly the allowed ids;
    /// and its probes are the CPU batch's lists, each holding an allowed vector.
    #[test]
    fn the_allowed_vectors_list_by_list_are_the_filters() {
        let (dim, n) = (16, 3000);
        let data = clustered(n, dim, 20, 0.5, 31);
        let queries = queries_near(&data, dim, 50, 0.4, 32);
        let params = BuildParams::default().with_num_anchors(30);
        let index = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {})
            .unwrap()
            .0;
        let ids: Vec<u32> = (0..n as u32).filter(|i| i % 13 == 4).collect();
        let filter = index.id_filter(&ids);
        let by_list = filter.allowed_by_list();
        assert_eq!(by_list.starts.len(), index.num_anchors() + 1);
        assert_eq!(by_list.positions.len(), ids.len());
        let mut seen = Vec::new();
        for list in 0..index.num_anchors() {
            let (lo, hi) = (index.list_offsets[list], index.list_offsets[list + 1]);
            let range = by_list.starts[list] as usize..by_list.starts[list + 1] as usize;
            assert_eq!(range.len(), filter.list_count(list), "list {list}");
            for &position in &by_list.positions[range] {
                assert!((lo..hi).contains(&u64::from(position)), "list {list}");
                seen.push(index.ids.get_in_list(list, position as usize));
            }
        }
        seen.sort_unstable();
        assert_eq!(seen, ids);
        let sp = SearchParams {
            k: 10,
            nprobe: 4,
            rerank: 0,
            probe_margin: None,
        };
        let probes = index.device_filter(&queries, &sp, &filter).unwrap();
        assert_eq!(probes.probe_offsets.len(), 51);
        assert_eq!(probes.allowed_count, ids.len());
        for q in 0..50 {
            let row = probes.probe_offsets[q] as usize..probes.probe_offsets[q + 1] as usize;
            assert!(row.len() <= probes.max_probes && !row.is_empty());
            let dists = &probes.probe_distances[row.clone()];
            assert!(
                dists.windows(2).all(|w| w[0] <= w[1]),
                "query {q}: nearest first"
            );
            for &a in &probes.probe_anchors[row] {
                assert!(filter.list_count(a as usize) > 0, "query {q}: list {a}");
            }
        }
        // The CPU's filtered batch returns only vectors of those lists.
        let in_list_order = index.ids.to_u32();
        let found = index
            .search_batch_filtered(&queries, &sp, &CpuBackend, &filter)
            .unwrap();
        for (q, row) in found.ids.chunks(10).enumerate() {
            let lists = &probes.probe_anchors
                [probes.probe_offsets[q] as usize..probes.probe_offsets[q + 1] as usize];
            for &id in row.iter().filter(|&&id| id >= 0) {
                let position = in_list_order
                    .iter()
                    .position(|&i| i64::from(i) == id)
                    .expect("a stored id");
                let list = index
                    .list_offsets
                    .partition_point(|&o| o <= position as u64)
                    - 1;
                assert!(lists.contains(&(list as u32)), "query {q}: id {id}");
            }
        }
        let other = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {})
            .unwrap()
            .0;
        assert!(other.device_filter(&queries, &sp, &filter).is_err());
    }

    /// With a refine tier, a filter's sparse blocks are scored by the fast scan too: a pool of
    /// twice k, taken by the 1-bit code and rescored by SQ8, finds most of the exact 10
    /// nearest allowed vectors (a pool of 20 of the 93 allowed taken at random would find
    /// about a fifth).
    #[test]
    fn sparse_blocks_are_scored_with_a_refine_tier_too() {
        let (dim, n) = (32, 4000);
        let data = clustered(n, dim, 25, 0.6, 11);
        let queries = queries_near(&data, dim, 40, 0.4, 12);
        let params = BuildParams::default()
            .with_codec(CodecKind::RaBitQ1)
            .with_refine(Some(CodecKind::Sq8))
            .with_num_anchors(40);
        let index = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {})
            .unwrap()
            .0;
        let ids = sparse_ids(&index);
        let subset: Vec<f32> = ids
            .iter()
            .flat_map(|&i| data[i as usize * dim..][..dim].iter().copied())
            .collect();
        let truth = crate::exact_knn(&subset, &queries, dim, 10).unwrap();
        let sp = SearchParams {
            k: 10,
            nprobe: index.num_anchors(),
            rerank: 20,
            probe_margin: None,
        };
        let got = index
            .search_batch_filtered(&queries, &sp, &CpuBackend, &index.id_filter(&ids))
            .unwrap();
        let found: usize = got
            .ids
            .chunks(10)
            .zip(truth.chunks(10))
            .map(|(g, t)| {
                t.iter()
                    .filter(|&&row| g.contains(&(ids[row as usize] as i64)))
                    .count()
            })
            .sum();
        let recall = found as f64 / truth.len() as f64;
        assert!(recall > 0.8, "recall@10 {recall} of {} allowed", ids.len());
    }

    /// The fields of two filters that say what they allow.
    fn same_filter(a: &IdFilter, b: &IdFilter, what: &str) {
        assert_eq!(a.positions, b.positions, "{what}");
        assert_eq!(a.list_counts, b.list_counts, "{what}");
        assert_eq!(a.share_sum.to_bits(), b.share_sum.to_bits(), "{what}");
        assert_eq!(a.list_shares, b.list_shares, "{what}");
        assert_eq!(
            (a.empty_lists, a.allowed),
            (b.empty_lists, b.allowed),
            "{what}"
        );
        assert_eq!(a.ranked_lists, b.ranked_lists, "{what}");
    }

    /// Narrow filters from the second on look their ids up in the map of each id's position,
    /// and allow exactly what reading every id gives: ids in any order, repeated, removed or
    /// never given. Broad filters keep reading and make no map.
    #[test]
    fn filters_looked_up_in_the_map_of_positions_allow_what_reading_the_ids_does() {
        let dim = 8;
        let data = clustered(4000, dim, 20, 0.5, 3);
        let params = BuildParams::default()
            .with_codec(CodecKind::Sq8)
            .with_num_anchors(40);
        let built = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {})
            .unwrap()
            .0;
        // Ids 0..3000 only, from 100 on every third removed: the id space has holes.
        let removed: Vec<u32> = (100..4000).filter(|i| i % 3 == 0 || *i >= 3000).collect();
        let index = built.remove_ids(&removed).unwrap().0;
        let n = index.num_vectors;
        let mut rng = crate::Rng::new(21);
        let mut random = |count: usize| -> Vec<u32> {
            (0..count).map(|_| (rng.next_u64() % 5000) as u32).collect()
        };
        let broad: Vec<u32> = (0..4000).step_by(2).collect();
        let read = index.id_filter(&broad);
        assert!(
            index.id_positions.get().is_none(),
            "a broad filter made a map"
        );
        let narrow: Vec<Vec<u32>> = vec![
            random(40),
            vec![3, 3, 99, 100, 102, 2999, 3000, 3999, 4000, u32::MAX, 7, 5],
            (0..n as u32 / 32).rev().collect(),
            Vec::new(),
            random(n / 32),
        ];
        for (i, ids) in narrow.iter().enumerate() {
            assert!(ids.len() * LOOKUP_MAX_SHARE <= n);
            let (positions, list_counts) = index.filter_by_reading(ids);
            let filter = index.id_filter(ids);
            assert_eq!(index.id_positions.get().is_some(), i > 0, "filter {i}");
            assert_eq!(
                (filter.positions, filter.list_counts),
                (positions, list_counts),
                "{i}"
            );
        }
        // Broad filters read the ids even with the map there.
        same_filter(&index.id_filter(&broad), &read, "broad");
        let map = index.id_positions.get().unwrap();
        assert_eq!(map.len(), 3000);
        assert_eq!(map.iter().filter(|&&p| p != u32::MAX).count(), n);
        let first = index.filter_by_reading(&narrow[0]);
        assert_eq!(index.filter_by_map(&narrow[0], map), first);
        // A filter made by reading and one looked up agree in every field.
        let fresh = built.remove_ids(&removed).unwrap().0;
        let by_reading = fresh.id_filter(&narrow[1]);
        assert!(fresh.id_positions.get().is_none());
        same_filter(
            &index.id_filter(&narrow[1]),
            &by_reading,
            "reading and looking up",
        );
        // Ids spread far beyond the vectors (one in ten kept): no map, filters read.
        let thinned: Vec<u32> = (0..4000).filter(|i| i % 10 != 0).collect();
        let sparse = built.remove_ids(&thinned).unwrap().0;
        let ids: Vec<u32> = (0..4000).step_by(470).collect();
        let first = sparse.id_filter(&ids);
        let second = sparse.id_filter(&ids);
        assert!(
            sparse.id_positions.get().is_none(),
            "a map of ten ids' room per vector"
        );
        same_filter(&first, &second, "spread ids");
        assert_eq!(first.len(), ids.iter().filter(|&&i| i % 10 == 0).count());
    }

    #[test]
    fn counts_and_bits_of_ranges_match_one_bit_at_a_time() {
        let mut rng = crate::Rng::new(3);
        let words: Vec<u64> = (0..5).map(|_| rng.next_u64()).collect();
        let bit = |p: usize| (words[p / 64] >> (p % 64) & 1) as u32;
        for start in 0..320 {
            for end in start..=320 {
                let expected: u32 = (start..end).map(bit).sum();
                assert_eq!(
                    count_ones_in(&words, start, end),
                    expected,
                    "{start}..{end}"
                );
            }
        }
        let filter = IdFilter {
            instance: 0,
            serial: 0,
            positions: words.clone(),
            list_counts: Vec::new(),
            empty_lists: 0,
            share_sum: 0.0,
            list_shares: Vec::new(),
            allowed: 0,
            ranked_lists: None,
            packing: OnceLock::new(),
            by_list: OnceLock::new(),
            gathered: OnceLock::new(),
            searched: OnceLock::new(),
        };
        for start in 0..320 {
            for count in 0..=32.min(320 - start) {
                let expected = (0..count).fold(0u32, |m, j| m | bit(start + j) << j);
                assert_eq!(filter.bits(start, count), expected, "{start}+{count}");
            }
            for count in 0..=64.min(320 - start) {
                let expected = (0..count).fold(0u64, |m, j| m | (bit(start + j) as u64) << j);
                assert_eq!(filter.bits64(start, count), expected, "{start}+{count}");
            }
            for end in (start..=320).step_by(7) {
                let got: Vec<usize> = filter.allowed_in(start, end).collect();
                let expected: Vec<usize> = (start..end).filter(|&p| bit(p) == 1).collect();
                assert_eq!(got, expected, "{start}..{end}");
            }
            let len = 37.min(320 - start);
            let mut dists = vec![1.0f32; len];
            filter.exclude(start, &mut dists);
            for (j, d) in dists.iter().enumerate() {
                assert_eq!(*d == 1.0, bit(start + j) == 1, "{start}+{j}");
            }
        }
    }
}
