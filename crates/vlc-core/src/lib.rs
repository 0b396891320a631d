//! # VLC: Vector-Lattice Compression
//!
//! Turns a collection of embedding vectors into a small, searchable index:
//!
//! * **anchors** learned by annealed k-means ([`train`]),
//! * **residual codes** per vector at a footprint you pick ([`codec`]: anchor-only, 8-bit,
//!   4-bit, 1-bit RaBitQ-style, optionally reranked by a finer tier),
//! * **inverted-list search**: rank anchors, scan `nprobe` lists, rerank, top-k ([`search`]),
//! * a checksummed, mmap-able **file format** ([`format`](mod@format)).
//!
//! Compute goes through a [`Backend`]; [`CpuBackend`] is the reference.
//!
//! ```
//! use vlc::{BuildParams, CodecKind, CpuBackend, Index, SearchParams};
//! let dim = 32;
//! let mut rng = vlc::Rng::new(7);
//! let data: Vec<f32> = (0..3000 * dim).map(|_| rng.normal() as f32).collect();
//! let params = BuildParams::default().with_codec(CodecKind::RaBitQ1).with_refine(Some(CodecKind::Sq8));
//! let (index, report) = Index::build(&data, dim, &params, &CpuBackend, &mut |_| {})?;
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("demo.vlc");
//! index.save(&path)?;
//! let mapped = Index::view(&path)?; // zero-copy
//! let hits = mapped.search(&data[..dim], &SearchParams { k: 5, nprobe: 8, rerank: 50, probe_margin: None })?;
//! assert_eq!(hits[0].id, 0);
//! assert!(report.train.iterations >= 1);
//! # Ok::<(), vlc::VlcError>(())
//! ```

pub mod amx;
pub mod anchor_store;
pub mod backend;
mod bounds;
pub mod codec;
pub mod conformance;
pub mod device_view;
pub mod error;
pub mod eval;
pub mod fastscan;
pub mod filter;
pub mod format;
pub mod ids;
pub mod index;
pub mod io;
pub mod linalg;
mod pages;
pub mod rng;
pub mod rotation;
pub mod search;
pub mod simd;
pub mod synthetic;
pub mod train;
pub mod vectors;

pub use anchor_store::AnchorPrecision;
pub use backend::{Backend, CpuBackend};
pub use codec::{Codec, CodecKind, CodecParams};
pub use error::{Result, VlcError};
pub use filter::{list_share, AllowedByList, IdFilter, SHARE_ONE};
pub use index::{AddReport, BuildEvent, BuildParams, BuildReport, Index, Metric, RemoveReport};
pub use rng::Rng;
pub use search::{Neighbor, SearchParams, SearchResults};
pub use train::{TrainParams, TrainReport};
pub use vectors::{SliceSource, VectorSource};

/// Exact k nearest neighbours by squared L2, for ground truth and tests: `base`: (n, dim),
/// `queries`: (m, dim), both row-major; returns the rows of `base`, nearest first, ties to the
/// smaller row. Layout: (m, k), row-major. `k` must be at most n. The in-memory form of
/// [`eval::ground_truth`] (which reads its base set a block at a time and returns distances).
pub fn exact_knn(base: &[f32], queries: &[f32], dim: usize, k: usize) -> Result<Vec<u32>> {
    let source = SliceSource::new(base, dim)?;
    if k > source.num_rows() {
        return Err(VlcError::param(
            "k",
            format!("must be in 1..={}, got {k}", source.num_rows()),
        ));
    }
    let truth = eval::ground_truth(&source, queries, k, Metric::L2, &CpuBackend, &mut |_| {})?;
    Ok(truth.ids)
}
