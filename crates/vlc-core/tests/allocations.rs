//! Search allocates nothing per query once its thread has searched before: `Index::search`
//! allocates only the neighbours it returns, a small batch only its result rows, and a large
//! batch per block of queries, not per query. Counted by a global allocator of this test
//! binary's own, per thread, on one rayon thread so that every search runs where the last one
//! did (and counts there): allocations of other threads, such as the test harness's note that
//! a test has run for over 60 seconds (under qemu), are not the search's.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use vlc::synthetic::{clustered, queries_near};
use vlc::{BuildParams, CodecKind, CpuBackend, Index, Metric, SearchParams};

/// The system allocator, counting allocations and reallocations of each thread.
struct Counting;

thread_local! {
    /// This thread's allocations and reallocations (a constant initialiser and no destructor,
    /// so reading or writing it allocates nothing).
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

/// One more allocation on this thread.
fn count() {
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every call is passed on to the system allocator unchanged; the counter is the
// calling thread's own.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's guarantees for `layout` are passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from the system allocator, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as for `dealloc`, and the caller's guarantees for `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by this thread while `f` runs (on the test's one-thread pool, all of the
/// search's: its parallel parts run on that thread too).
fn allocations<R>(f: impl FnOnce() -> R) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    std::hint::black_box(f());
    ALLOCATIONS.with(Cell::get) - before
}

#[test]
fn search_allocates_per_call_not_per_query() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let dim = 64;
    let data = clustered(12_000, dim, 150, 0.6, 3);
    // Far from the origin: the index keeps a centre and prepares every query.
    let offset: Vec<f32> = data.iter().map(|v| v + 40.0).collect();
    let queries = queries_near(&data, dim, 4096, 0.3, 4);
    let offset_queries: Vec<f32> = queries.iter().map(|v| v + 40.0).collect();
    // (codec, refine, metric, anchors, data, queries): 256 anchors rank on an integer kernel
    // where one runs here, 32 on f32 dot products.
    let cases = [
        (CodecKind::PcaRaBitQ, None, Metric::L2, 256, &data, &queries),
        (
            CodecKind::RaBitQ1,
            Some(CodecKind::Sq8),
            Metric::Cosine,
            32,
            &data,
            &queries,
        ),
        (
            CodecKind::Sq8,
            None,
            Metric::L2,
            64,
            &offset,
            &offset_queries,
        ),
    ];
    pool.install(|| {
        for (codec, refine, metric, anchors, data, queries) in cases {
            let build = BuildParams::default()
                .with_codec(codec)
                .with_refine(refine)
                .with_metric(metric)
                .with_num_anchors(anchors);
            let (index, _) = Index::build(data, dim, &build, &CpuBackend, &mut |_| {}).unwrap();
            let case = format!("{codec} + {refine:?}, {metric:?}, {anchors} anchors");
            if codec == CodecKind::Sq8 {
                assert!(index.centre().is_some(), "{case}: no centre");
            }
            for probe_margin in [None, Some(1.0)] {
                let params = SearchParams {
                    k: 10,
                    nprobe: 12,
                    rerank: 0,
                    probe_margin,
                };
                let batch = |n: usize| {
                    index
                        .search_batch(&queries[..n * dim], &params, &CpuBackend)
                        .unwrap()
                };
                // The first searches grow the thread's buffers.
                for n in [1, 15, 2048, 4096] {
                    batch(n);
                }
                for q in queries.chunks(dim).take(20) {
                    index.search(q, &params).unwrap();
                }
                for (i, q) in queries.chunks(dim).take(50).enumerate() {
                    let n = allocations(|| index.search(q, &params).unwrap());
                    assert_eq!(
                        n, 1,
                        "{case}, margin {probe_margin:?}: Index::search of query {i} made {n} \
                         allocations, not only the neighbours it returns"
                    );
                }
                let one = allocations(|| batch(1));
                let fifteen = allocations(|| batch(15));
                assert_eq!(
                    one, fifteen,
                    "{case}, margin {probe_margin:?}: a batch of 15 queries made {fifteen} \
                     allocations, one of 1 query {one}"
                );
                let half = allocations(|| batch(2048));
                let full = allocations(|| batch(4096));
                assert!(
                    full.saturating_sub(half) <= 2048 / 8,
                    "{case}, margin {probe_margin:?}: 4,096 queries made {full} allocations, \
                     2,048 made {half}: more than one for every 8 queries"
                );
                eprintln!(
                    "{case}, margin {probe_margin:?}: Index::search 1 allocation; batches of \
                     1 and 15 queries {one}; 2,048 queries {half}, 4,096 {full}"
                );
            }
        }
    });
}
