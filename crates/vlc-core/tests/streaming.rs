//! Building from a source read a block at a time (`Index::build_from`): the index a file
//! builds is the one its rows build from memory, the build never asks for more than a block of
//! rows at once, and a bad row fails the build, named, wherever it lies.

use std::sync::atomic::{AtomicUsize, Ordering};
use vlc::io::{npy_bytes, NpyType, VectorFile};
use vlc::synthetic::{clustered, queries_near};
use vlc::vectors::read_block_rows;
use vlc::{
    BuildParams, CodecKind, CpuBackend, Index, Metric, Result, SearchParams, VectorSource, VlcError,
};

fn search_all(index: &Index, queries: &[f32], dim: usize) -> Vec<(u32, u32)> {
    let p = SearchParams {
        k: 10,
        nprobe: 8,
        ..Default::default()
    };
    queries
        .chunks(dim)
        .flat_map(|q| index.search(q, &p).unwrap())
        .map(|h| (h.id, h.distance.to_bits()))
        .collect()
}

#[test]
fn a_file_builds_the_index_its_rows_build_from_memory() {
    let dim = 40;
    let data = clustered(3000, dim, 30, 0.5, 3);
    // The file holds f16; the in-memory build gets the same values widened.
    let halves: Vec<half::f16> = data.iter().map(|&v| half::f16::from_f32(v)).collect();
    let widened: Vec<f32> = halves.iter().map(|h| h.to_f32()).collect();
    let bytes: Vec<u8> = halves.iter().flat_map(|h| h.to_le_bytes()).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("base.npy");
    std::fs::write(&path, npy_bytes(NpyType::F16, 3000, dim, &bytes)).unwrap();
    let file = VectorFile::open(&path, None).unwrap();
    assert_eq!((file.rows(), file.cols()), (3000, dim));
    let queries = queries_near(&widened, dim, 40, 0.3, 4);
    let cases = [
        BuildParams::default()
            .with_codec(CodecKind::RaBitQ1)
            .with_refine(Some(CodecKind::Sq8))
            .with_metric(Metric::Cosine),
        BuildParams::default().with_bytes_per_vector(40.0),
        BuildParams::default().with_codec(CodecKind::AnchorOnly),
    ];
    for params in cases {
        let params = params.with_num_anchors(24);
        let (from_file, _) = Index::build_from(&file, &params, &CpuBackend, &mut |_| {}).unwrap();
        let (in_memory, _) =
            Index::build(&widened, dim, &params, &CpuBackend, &mut |_| {}).unwrap();
        assert_eq!(from_file.len(), 3000);
        assert_eq!(
            search_all(&from_file, &queries, dim),
            search_all(&in_memory, &queries, dim),
            "{params:?}"
        );
    }
}

/// Rows made on demand (nothing held), counting what the build asks for.
struct Generated {
    rows: usize,
    dim: usize,
    largest_read: AtomicUsize,
    rows_read: AtomicUsize,
    bad_row: Option<usize>,
}

impl VectorSource for Generated {
    fn num_rows(&self) -> usize {
        self.rows
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn read_rows(&self, start: usize, out: &mut [f32]) -> Result<()> {
        let count = out.len() / self.dim;
        self.largest_read.fetch_max(count, Ordering::Relaxed);
        self.rows_read.fetch_add(count, Ordering::Relaxed);
        for (r, row) in out.chunks_mut(self.dim).enumerate() {
            let i = start + r;
            for (j, v) in row.iter_mut().enumerate() {
                // 16 clusters along the first axes, plus a small per-row wobble.
                let centre = if j == i % 16 { 4.0 } else { 0.0 };
                let wobble = ((i * 7919 + j * 104_729) % 1000) as f32 / 1000.0 - 0.5;
                *v = centre + wobble;
            }
            if self.bad_row == Some(i) {
                row[3] = f32::INFINITY;
            }
        }
        Ok(())
    }
    fn describe(&self) -> String {
        "generated rows".into()
    }
}

#[test]
fn the_build_reads_its_source_a_block_at_a_time() {
    let dim = 1024;
    let block = read_block_rows(dim);
    let rows = block + 1500;
    let source = Generated {
        rows,
        dim,
        largest_read: AtomicUsize::new(0),
        rows_read: AtomicUsize::new(0),
        bad_row: None,
    };
    let mut params = BuildParams::default()
        .with_codec(CodecKind::Sq8)
        .with_num_anchors(16);
    params.train.max_iterations = 3;
    params.codec_training_points = 2000;
    let (index, _) = Index::build_from(&source, &params, &CpuBackend, &mut |_| {}).unwrap();
    assert_eq!(index.len(), rows);
    let largest = source.largest_read.load(Ordering::Relaxed);
    assert!(
        largest <= block && block < rows,
        "largest read {largest} rows of {rows}"
    );
    // Two passes (assign, encode) plus the three samples (centre, anchors, codec).
    let sampled = vlc::vectors::CENTRE_SAMPLE_ROWS.min(rows)
        + 16 * params.train.max_points_per_anchor
        + params.codec_training_points;
    let read = source.rows_read.load(Ordering::Relaxed);
    assert!(read <= 2 * rows + sampled, "{read} rows read for {rows}");
    // Its vectors are found where they are.
    let mut probe = vec![0f32; dim];
    source.read_rows(rows - 1, &mut probe).unwrap();
    let p = SearchParams {
        k: 1,
        nprobe: 4,
        ..Default::default()
    };
    let hit = index.search(&probe, &p).unwrap()[0];
    assert_eq!(
        hit.id as usize % 16,
        (rows - 1) % 16,
        "nearest row in another cluster"
    );
}

#[test]
fn a_bad_row_fails_the_build_naming_it_wherever_it_lies() {
    // A bad row in a sample read before training (the centre's evenly spaced rows, every
    // third here; the anchors' training sample) fails the build there; any other is met by
    // the assignment pass that follows. Row 29,999 is outside both samples here (not a
    // multiple of 3; the anchors' 32 random rows): the error must come from the pass, after
    // more than 29,999 rows were read.
    let rows: usize = 40_000;
    assert_eq!(rows.div_ceil(vlc::vectors::CENTRE_SAMPLE_ROWS), 3);
    for bad in [0, 29_999] {
        let source = Generated {
            rows,
            dim: 8,
            largest_read: AtomicUsize::new(0),
            rows_read: AtomicUsize::new(0),
            bad_row: Some(bad),
        };
        let mut params = BuildParams::default()
            .with_codec(CodecKind::Sq8)
            .with_num_anchors(4);
        params.train.max_points_per_anchor = 8;
        params.codec_training_points = 100;
        match Index::build_from(&source, &params, &CpuBackend, &mut |_| {}) {
            Err(VlcError::NonFinite {
                row, column, what, ..
            }) => {
                assert_eq!((row, column), (bad, 3));
                assert_eq!(what, "generated rows");
                if bad == 29_999 {
                    let read = source.rows_read.load(Ordering::Relaxed);
                    assert!(read > bad, "found after {read} rows: in a training sample");
                }
            }
            other => panic!(
                "row {bad}: expected a NonFinite error, got {:?}",
                other.map(|_| ())
            ),
        }
    }
}
