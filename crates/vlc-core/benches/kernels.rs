//! Hot-path kernels, scalar reference vs the SIMD variant picked at run time, anchor ranking,
//! and id lookup. `cargo bench -p vlc-core --bench kernels`.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use vlc::fastscan::{
    block_dists, block_dists_scalar, block_dists_segmented, block_dists_segmented_scalar,
    block_sums, block_sums_scalar, Affine, BLOCK,
};
use vlc::simd::{
    bit_sum_scalar, dot_u4, dot_u4_scalar, dot_u8, dot_u8_scalar, level, weighted_bit_sums, BitTerm,
};
use vlc::{Backend, CpuBackend, Rng};

fn scan_kernels(c: &mut Criterion) {
    let mut rng = Rng::new(1);
    let mut g = c.benchmark_group(format!("scan ({:?} detected)", level()));
    for dim in [384usize, 768] {
        let pairs = dim / 8;
        let codes: Vec<u8> = (0..pairs * BLOCK).map(|_| rng.below(256) as u8).collect();
        let lut: Vec<u8> = (0..pairs * 32).map(|_| rng.below(128) as u8).collect();
        let mut out = [0u32; BLOCK];
        g.throughput(Throughput::Elements(BLOCK as u64));
        g.bench_with_input(
            BenchmarkId::new("fastscan block, simd", dim),
            &dim,
            |b, _| b.iter(|| block_sums(black_box(&codes), black_box(&lut), &mut out)),
        );
        g.bench_with_input(
            BenchmarkId::new("fastscan block, scalar", dim),
            &dim,
            |b, _| b.iter(|| block_sums_scalar(black_box(&codes), black_box(&lut), &mut out)),
        );
        let (f1, f2): (Vec<f32>, Vec<f32>) = (0..BLOCK)
            .map(|_| (rng.normal() as f32, rng.normal() as f32))
            .unzip();
        let affine = Affine {
            a: 0.01,
            b: -0.5,
            base: 1.0,
        };
        let mut dists = [0f32; BLOCK];
        g.bench_with_input(
            BenchmarkId::new("fastscan block to distances, simd", dim),
            &dim,
            |b, _| {
                b.iter(|| {
                    block_dists(
                        black_box(&codes),
                        black_box(&lut),
                        &f1,
                        &f2,
                        affine,
                        &mut dists,
                    )
                })
            },
        );
        g.bench_with_input(
            BenchmarkId::new("fastscan block to distances, scalar", dim),
            &dim,
            |b, _| {
                b.iter(|| {
                    block_dists_scalar(
                        black_box(&codes),
                        black_box(&lut),
                        &f1,
                        &f2,
                        affine,
                        &mut dists,
                    )
                })
            },
        );
        // The same bytes in three segments with a quantisation step each (pcaq with wide
        // axes): a tenth, a third and the rest of the bytes.
        let bounds = [0, pairs / 10, pairs / 3, pairs];
        let steps = [1.0f32, 0.1, 0.01];
        type Segmented = fn(&[u8], &[u8], (&[usize], &[f32]), &[f32], &[f32], Affine, &mut [f32]);
        let kernels: [(&str, Segmented); 2] = [
            ("simd", block_dists_segmented),
            ("scalar", block_dists_segmented_scalar),
        ];
        for (label, kernel) in kernels {
            g.bench_with_input(
                BenchmarkId::new(
                    format!("fastscan block to distances, 3 segments, {label}"),
                    dim,
                ),
                &dim,
                |b, _| {
                    b.iter(|| {
                        kernel(
                            black_box(&codes),
                            black_box(&lut),
                            (&bounds, &steps),
                            &f1,
                            &f2,
                            affine,
                            &mut dists,
                        )
                    })
                },
            );
        }
        let w: Vec<f32> = (0..dim).map(|_| rng.normal() as f32).collect();
        let q: Vec<u8> = (0..dim).map(|_| rng.below(256) as u8).collect();
        g.throughput(Throughput::Elements(1));
        g.bench_with_input(BenchmarkId::new("sq8 dot, simd", dim), &dim, |b, _| {
            b.iter(|| dot_u8(black_box(&w), black_box(&q)))
        });
        g.bench_with_input(BenchmarkId::new("sq8 dot, scalar", dim), &dim, |b, _| {
            b.iter(|| dot_u8_scalar(black_box(&w), black_box(&q)))
        });
        // One `sq4` code: two 4-bit levels a byte.
        let nibbles: Vec<u8> = (0..dim.div_ceil(2)).map(|_| rng.below(256) as u8).collect();
        g.bench_with_input(BenchmarkId::new("sq4 dot, simd", dim), &dim, |b, _| {
            b.iter(|| dot_u4(black_box(&w), black_box(&nibbles)))
        });
        g.bench_with_input(BenchmarkId::new("sq4 dot, scalar", dim), &dim, |b, _| {
            b.iter(|| dot_u4_scalar(black_box(&w), black_box(&nibbles)))
        });
        // The second stage's rescoring of one candidate of a 4-bit code: four bit planes of
        // `dim` bits, each weighted by its query values and a power of two.
        let planes: Vec<Vec<u8>> = (0..4)
            .map(|_| (0..dim / 8).map(|_| rng.below(256) as u8).collect())
            .collect();
        let terms: Vec<BitTerm> = planes
            .iter()
            .enumerate()
            .map(|(p, bits)| BitTerm {
                weights: &w,
                bits,
                scale: (1u32 << p) as f32,
            })
            .collect();
        g.bench_with_input(
            BenchmarkId::new("4 bit planes, weighted sums, simd", dim),
            &dim,
            |b, _| b.iter(|| weighted_bit_sums(black_box(&terms))),
        );
        g.bench_with_input(
            BenchmarkId::new("4 bit planes, weighted sums, scalar", dim),
            &dim,
            |b, _| {
                b.iter(|| {
                    black_box(&terms)
                        .iter()
                        .map(|t| t.scale * bit_sum_scalar(t.weights, t.bits))
                        .sum::<f32>()
                })
            },
        );
    }
    g.finish();
}

fn anchor_ranking(c: &mut Criterion) {
    let mut rng = Rng::new(2);
    let dim = 384;
    let anchors: Vec<f32> = (0..1024 * dim).map(|_| rng.normal() as f32).collect();
    let queries: Vec<f32> = (0..256 * dim).map(|_| rng.normal() as f32).collect();
    let mut g = c.benchmark_group("anchor ranking, 1024 anchors x 384");
    g.throughput(Throughput::Elements(256));
    g.bench_function("256 queries, nprobe 64, f32 anchors (GEMM form)", |b| {
        b.iter(|| {
            CpuBackend
                .nearest_anchors(black_box(&queries), &anchors, dim, 64)
                .unwrap()
        })
    });
    // What an index holds by default: 8-bit anchors, which rank on AMX tiles, AVX-512 VNNI or
    // AVX-VNNI where the CPU has them, or in two passes on AVX2 (VLC_NO_AMX=1 VLC_NO_VNNI=1
    // VLC_NO_AVX2_INT8=1 give the GEMM path for comparison).
    let int8 = vlc::anchor_store::StoredAnchors::encode(&anchors, dim, vlc::AnchorPrecision::Int8)
        .decode(dim);
    let kernel = match vlc::amx::kernel() {
        Some(vlc::amx::Kernel::Amx) => "AMX",
        Some(vlc::amx::Kernel::Vnni) => "AVX-512 VNNI",
        Some(vlc::amx::Kernel::AvxVnni) => "AVX-VNNI",
        // On AVX2 without VNNI a batch ranks in two passes when it picks at most 1/16 of
        // the anchors (64 of 1,024 here). (A wildcard, so that bench/kernels_ab.sh builds
        // this file against libraries without it.)
        _ if vlc::amx::few_rows_kernel().is_some() => "AVX2 two passes, no AMX or VNNI",
        _ => "GEMM form, no integer kernel",
    };
    let name = format!("256 queries, nprobe 64, 8-bit anchors ({kernel})");
    g.bench_function(&name, |b| {
        b.iter(|| {
            CpuBackend
                .nearest_anchors(black_box(&queries), &int8, dim, 64)
                .unwrap()
        })
    });
    // Real embeddings (the repo's sample of the dev set's MiniLM vectors, the one `vlc demo`
    // uses): 1,024 of its documents as anchors and its 200 queries (short synopses), at
    // nprobe 8, the share of a search at few probes that the anchor ranking takes. Random
    // vectors are about equally far from every anchor, which leaves the two-pass ranking the
    // most anchors to measure twice; real ones are not.
    // From the crate (as `cargo bench` runs it) or from the repo's root (a copied executable).
    let dir = [
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/sample"),
        std::path::PathBuf::from("data/sample"),
    ]
    .into_iter()
    .find(|d| d.join("base.npy").exists())
    .expect("the repo's data/sample, from the crate or the repo's root");
    let sample = |name: &str| vlc::io::read_npy_f32(&dir.join(name)).expect("data/sample");
    let (base, real_queries) = (sample("base.npy"), sample("queries.npy"));
    assert_eq!((base.cols, real_queries.cols), (dim, dim));
    let real_anchors = &base.data[..1024 * dim];
    let real_int8 =
        vlc::anchor_store::StoredAnchors::encode(real_anchors, dim, vlc::AnchorPrecision::Int8)
            .decode(dim);
    g.throughput(Throughput::Elements(real_queries.rows as u64));
    g.bench_function("200 real queries, nprobe 8, f32 anchors (GEMM form)", |b| {
        b.iter(|| {
            CpuBackend
                .nearest_anchors(black_box(&real_queries.data), real_anchors, dim, 8)
                .unwrap()
        })
    });
    let name = format!("200 real queries, nprobe 8, 8-bit anchors ({kernel})");
    g.bench_function(&name, |b| {
        b.iter(|| {
            CpuBackend
                .nearest_anchors(black_box(&real_queries.data), &real_int8, dim, 8)
                .unwrap()
        })
    });
    g.finish();
    // Many anchors (a build of 10^7 to 10^8 vectors gets 16,384 to 32,768), or a block of base
    // rows as `vlc groundtruth` ranks them: the f32 GEMM ranks a block of anchors per call.
    let many: Vec<f32> = (0..16384 * dim).map(|_| rng.normal() as f32).collect();
    let points: Vec<f32> = (0..1024 * dim).map(|_| rng.normal() as f32).collect();
    let mut g = c.benchmark_group("anchor ranking, 16384 anchors x 384");
    g.sample_size(10);
    g.throughput(Throughput::Elements(1024));
    for picks in [1, 133] {
        g.bench_function(format!("1024 points, {picks} picks, f32 anchors"), |b| {
            b.iter(|| {
                CpuBackend
                    .nearest_anchors(black_box(&points), &many, dim, picks)
                    .unwrap()
            })
        });
    }
    g.finish();
}

/// `pcaq`'s query rotation: a block of 256 queries times the (dim, dim) basis, the per-query
/// cost that does not shrink with nprobe (a large share of a query at 768-d and above).
fn query_rotation(c: &mut Criterion) {
    let mut rng = Rng::new(3);
    let mut g = c.benchmark_group("query rotation, 256 queries");
    g.throughput(Throughput::Elements(256));
    for dim in [384usize, 768, 1536] {
        let basis: Vec<f32> = (0..dim * dim).map(|_| rng.normal() as f32).collect();
        let queries: Vec<f32> = (0..256 * dim).map(|_| rng.normal() as f32).collect();
        let mut out = vec![0f32; 256 * dim];
        g.bench_function(BenchmarkId::new("gemm_nt", dim), |b| {
            b.iter(|| vlc::linalg::gemm_nt(black_box(&queries), 256, &basis, dim, dim, &mut out))
        });
    }
    g.finish();
}

/// `pcaq`'s rotation of one query (a search call of one query): the (dim, dim) basis times
/// one vector, by [`vlc::simd::matrix_vector`]'s scalar reference (one dot product per row,
/// as `rotate_query` did before session 54) and by this CPU's kernel (rows side by side).
fn one_query_rotation(c: &mut Criterion) {
    let mut rng = Rng::new(3);
    let mut g = c.benchmark_group("query rotation, 1 query");
    for dim in [384usize, 768, 1536] {
        let basis: Vec<f32> = (0..dim * dim).map(|_| rng.normal() as f32).collect();
        let query: Vec<f32> = (0..dim).map(|_| rng.normal() as f32).collect();
        let mut out = vec![0f32; dim];
        g.bench_function(BenchmarkId::new("matrix_vector scalar", dim), |b| {
            b.iter(|| vlc::simd::matrix_vector_scalar(&basis, dim, black_box(&query), &mut out))
        });
        g.bench_function(BenchmarkId::new("matrix_vector", dim), |b| {
            b.iter(|| vlc::simd::matrix_vector(&basis, dim, black_box(&query), &mut out))
        });
    }
    g.finish();
}

/// Looking up the ids of a search's results: 1,000 random list positions of 60,000 ids in
/// 1,024 lists (the dev set's shape) and of 1,000,000 in 4,096, packed at the largest id's
/// width against Elias-Fano per list.
fn id_lookup(c: &mut Criterion) {
    let mut rng = Rng::new(4);
    let mut g = c.benchmark_group("id lookup, 1000 positions");
    g.throughput(Throughput::Elements(1000));
    for (num, lists) in [(60_000usize, 1024usize), (1_000_000, 4096)] {
        // Random list sizes around num / lists, ids assigned to lists at random, ascending.
        let assignment: Vec<usize> = (0..num).map(|_| rng.below(lists)).collect();
        let mut members: Vec<Vec<u32>> = vec![Vec::new(); lists];
        for (id, &l) in assignment.iter().enumerate() {
            members[l].push(id as u32);
        }
        let mut offsets = vec![0u64];
        for m in &members {
            offsets.push(offsets.last().unwrap() + m.len() as u64);
        }
        let ids: Vec<u32> = members.concat();
        let positions: Vec<usize> = (0..1000).map(|_| rng.below(num)).collect();
        let packed = vlc::ids::Ids::packed(&ids);
        let per_list = vlc::ids::Ids::for_lists(&ids, &offsets);
        assert!(matches!(per_list, vlc::ids::Ids::PerList(_)));
        for (name, store) in [("packed", &packed), ("Elias-Fano per list", &per_list)] {
            g.bench_function(BenchmarkId::new(name, format!("{num} in {lists}")), |b| {
                b.iter(|| {
                    positions
                        .iter()
                        .map(|&p| store.get(black_box(p)) as u64)
                        .sum::<u64>()
                })
            });
        }
    }
    g.finish();
}

/// Encoding, where a build spends most of its time at high rates: 1,024 vectors of 384
/// dimensions with a falling spectrum (as text embeddings' principal axes have) around 16
/// anchors, in one block (one thread). Most of `pcaq`'s and `rabitqB`'s cost is choosing each
/// vector's levels (`codec::levels`).
fn encoding(c: &mut Criterion) {
    use vlc::codec::ResidualCodec;
    let dim = 384;
    let mut points = vlc::synthetic::clustered(4096 + 1024, dim, 16, 0.5, 5);
    for row in points.chunks_exact_mut(dim) {
        for (d, x) in row.iter_mut().enumerate() {
            *x *= 0.1 + (-(d as f32) / 64.0).exp();
        }
    }
    let anchors = points[..16 * dim].to_vec();
    let assignment = CpuBackend
        .nearest_anchors(&points, &anchors, dim, 1)
        .unwrap()
        .ids;
    let (train, block) = points.split_at(4096 * dim);
    let mut g = c.benchmark_group("encode, 1024 vectors x 384");
    g.sample_size(10);
    g.throughput(Throughput::Elements(1024));
    for (kind, bits) in [
        (vlc::CodecKind::PcaRaBitQ, 1.0),
        (vlc::CodecKind::PcaRaBitQ, 5.0),
        (vlc::CodecKind::RaBitQ4, 0.0),
    ] {
        let params = vlc::CodecParams {
            bits,
            ..Default::default()
        };
        let codec =
            vlc::Codec::train(kind, &params, train, &anchors, &assignment[..4096], dim).unwrap();
        let mut out = vec![0u8; 1024 * codec.code_size()];
        let name = if bits > 0.0 {
            format!("{}{bits}", kind.name())
        } else {
            kind.name().to_string()
        };
        g.bench_function(name, |b| {
            b.iter(|| codec.encode(black_box(block), &anchors, &assignment[4096..], &mut out))
        });
    }
    g.finish();
}

/// `search_batch` on a batch of one query and of 8, the way an application asks as its users
/// do: 20,000 clustered 384-d vectors in 256 lists, `pcaq1`, nprobe 16; and one query against
/// 4,096 lists.
fn small_batches(c: &mut Criterion) {
    let dim = 384;
    let data = vlc::synthetic::clustered(20_000, dim, 200, 0.5, 5);
    let params = vlc::BuildParams::default()
        .with_codec(vlc::CodecKind::PcaRaBitQ)
        .with_num_anchors(256);
    let (index, _) = vlc::Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
    index.prepare_search();
    let search = vlc::SearchParams {
        k: 10,
        nprobe: 16,
        ..Default::default()
    };
    let mut g = c.benchmark_group("search_batch, pcaq1, 20000 x 384 in 256 lists");
    for queries in [1usize, 8] {
        g.throughput(Throughput::Elements(queries as u64));
        let batch = &data[..queries * dim];
        g.bench_function(format!("{queries} queries per call"), |b| {
            b.iter(|| {
                index
                    .search_batch(black_box(batch), &search, &CpuBackend)
                    .unwrap()
            })
        });
    }
    // As a service answering its users sees queries: one per call, a millisecond apart, so
    // that the caches have cooled and the pool's threads gone to sleep in between. Only the
    // calls are timed; 200 different queries in turn. The sleeps make the wall time about
    // ten times the time measured, so this case measures for 0.5 s.
    g.throughput(Throughput::Elements(1));
    g.sample_size(20);
    g.warm_up_time(std::time::Duration::from_millis(200));
    g.measurement_time(std::time::Duration::from_millis(500));
    g.bench_function("1 query per call, 1 ms apart", |b| {
        b.iter_custom(|iterations| {
            let mut total = std::time::Duration::ZERO;
            for i in 0..iterations as usize {
                std::thread::sleep(std::time::Duration::from_millis(1));
                let q = &data[(i % 200) * dim..(i % 200 + 1) * dim];
                let start = std::time::Instant::now();
                black_box(index.search_batch(q, &search, &CpuBackend).unwrap());
                total += start.elapsed();
            }
            total
        })
    });
    g.finish();
    // One query per call against many anchors: the anchor ranking reads every anchor, and
    // past the caches it waits on memory (8-bit anchors on the integer kernels, a quarter of
    // f32's bytes, where one runs). 40,000 vectors in 4,096 lists, the automatic count from
    // about a million vectors; three training iterations keep the set-up short.
    let data = vlc::synthetic::clustered(40_000, dim, 400, 0.5, 6);
    let mut params = vlc::BuildParams::default()
        .with_codec(vlc::CodecKind::PcaRaBitQ)
        .with_num_anchors(4096);
    params.train.max_iterations = 3;
    let (index, _) = vlc::Index::build(&data, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
    index.prepare_search();
    let mut g = c.benchmark_group("search_batch, pcaq1, 40000 x 384 in 4096 lists");
    g.throughput(Throughput::Elements(1));
    g.bench_function("1 query per call", |b| {
        b.iter(|| {
            index
                .search_batch(black_box(&data[..dim]), &search, &CpuBackend)
                .unwrap()
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    scan_kernels,
    anchor_ranking,
    query_rotation,
    one_query_rotation,
    id_lookup,
    encoding,
    small_batches
);
criterion_main!(benches);
