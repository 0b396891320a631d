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
pub mod codec;
pub mod conformance;
pub mod device_view;
pub mod error;
pub mod eval;
pub mod fastscan;
pub mod format;
pub mod ids;
pub mod index;
pub mod io;
pub mod linalg;
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
pub use index::{AddReport, BuildEvent, BuildParams, BuildReport, Index, Metric, RemoveReport};
pub use rng::Rng;
pub use search::{Neighbor, SearchParams, SearchResults};
pub use train::{TrainParams, TrainReport};
pub use vectors::{SliceSource, VectorSource};

/// Exact k nearest neighbours by squared L2 (brute force, GEMM form), for ground truth and
/// tests. `base`: (n, dim), `queries`: (m, dim); returns ids (m, k), row-major. Both are
/// translated by the base's mean first: the GEMM form `‖q‖² − 2⟨q, x⟩ + ‖x‖²` loses digits
/// with the norms, and a translation changes no distance.
pub fn exact_knn(base: &[f32], queries: &[f32], dim: usize, k: usize) -> Result<Vec<u32>> {
    if dim == 0 || base.len() < dim || !base.len().is_multiple_of(dim) {
        // The backend reports what is wrong.
        return Ok(CpuBackend.nearest_anchors(queries, base, dim, k)?.ids);
    }
    let mean: Vec<f32> = vectors::column_means(base, dim)
        .iter()
        .map(|&s| s as f32)
        .collect();
    let centred = |rows: &[f32]| vectors::prepare_rows(rows, dim, false, Some(&mean)).into_owned();
    Ok(CpuBackend
        .nearest_anchors(&centred(queries), &centred(base), dim, k)?
        .ids)
}
