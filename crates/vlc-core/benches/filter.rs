//! Making a filter (`Index::id_filter`) of a 1,000,000-vector index: the first filter of an
//! index value reads every id; a narrow one (at most one vector in 32) from the second on
//! looks its own ids up in the map of each id's position that the second makes.
//! `cargo bench -p vlc-core --bench filter`.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use vlc::synthetic::clustered;
use vlc::{BuildParams, CodecKind, CpuBackend, Index, Rng};

fn filters(c: &mut Criterion) {
    let (n, dim) = (1_000_000, 16);
    let data = clustered(n, dim, 200, 0.5, 7);
    let params = BuildParams::default()
        .with_codec(CodecKind::Sq4)
        .with_num_anchors(1024);
    let index = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {})
        .unwrap()
        .0;
    drop(data);
    let bytes = vlc::format::to_bytes(&index);
    let mut rng = Rng::new(3);
    let mut g = c.benchmark_group("id_filter of 1,000,000 vectors");
    g.sample_size(20);
    for count in [1_000usize, 10_000] {
        let ids: Vec<u32> = (0..count).map(|_| rng.below(n) as u32).collect();
        g.bench_function(format!("first filter, {count} ids"), |b| {
            b.iter_batched_ref(
                || Index::from_bytes(&bytes).unwrap(),
                |index| index.id_filter(&ids),
                BatchSize::PerIteration,
            )
        });
        // The second narrow filter makes the map; the ones after it are timed.
        index.id_filter(&ids);
        index.id_filter(&ids);
        g.bench_function(format!("later filter, {count} ids"), |b| {
            b.iter(|| index.id_filter(&ids))
        });
    }
    g.finish();
}

criterion_group!(benches, filters);
criterion_main!(benches);
