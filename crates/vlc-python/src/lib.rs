//! The native half of the Python package `vlc_index`: a thin layer over `vlc-core`'s [`Index`].
//!
//! The Python half (`python/vlc_index/__init__.py`) turns what users pass (any array-like,
//! any float dtype, one query or many) into C-contiguous `float32` arrays and allocates the
//! result arrays; this module reads and writes them in place through the buffer protocol, with
//! the interpreter released (other Python threads run during a build or a search). Errors of
//! the library become `vlc_index.VlcError` (a `ValueError`), or `OSError` for I/O.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use vlc::{
    AnchorPrecision, Backend, BuildEvent, BuildParams, CpuBackend, Index, Metric, SearchParams,
    SliceSource, VlcError as CoreError,
};

pyo3::create_exception!(
    vlc_index,
    VlcError,
    PyValueError,
    "An input, parameter or index file VLC cannot use; the message names what is wrong."
);

/// A library error as a Python exception: I/O failures as `OSError`, the rest as `VlcError`.
fn py_err(error: CoreError) -> PyErr {
    match error {
        CoreError::Io { .. } => PyOSError::new_err(error.to_string()),
        other => VlcError::new_err(other.to_string()),
    }
}

fn param_err(name: &'static str, reason: impl Into<String>) -> PyErr {
    py_err(CoreError::param(name, reason))
}

/// The rows of a C-contiguous float32 buffer of shape (rows, dim), read in place.
struct Rows<'a> {
    buffer: &'a PyBuffer<f32>,
    rows: usize,
    dim: usize,
}

impl<'a> Rows<'a> {
    fn new(buffer: &'a PyBuffer<f32>, what: &str) -> PyResult<Self> {
        let shape = buffer.shape();
        if shape.len() != 2 || !buffer.is_c_contiguous() {
            return Err(VlcError::new_err(format!(
                "{what}: expected a C-contiguous float32 array of shape (rows, dim), got {} dimension(s)",
                shape.len()
            )));
        }
        Ok(Rows {
            buffer,
            rows: shape[0],
            dim: shape[1],
        })
    }

    /// The values, (rows, dim) row-major.
    ///
    /// The slice must not outlive the buffer, which holds the exporting object (and its
    /// memory) alive; callers use it within the call that received the buffer.
    fn values(&self) -> &'a [f32] {
        match self.buffer.as_slice_ptr() {
            // SAFETY: the buffer is C-contiguous (checked in `new`) and holds `rows · dim`
            // f32 values at this pointer for as long as `self.buffer` lives, which outlives
            // every use of the slice (it is borrowed for 'a). The values are only read; a
            // Python thread writing to the array meanwhile would give unspecified values (as
            // any NumPy operation that releases the interpreter), never unsafety of Rust's.
            Some(ptr) => unsafe { &*ptr.as_ptr() },
            None => &[],
        }
    }
}

/// Copies `values` into `buffer`, which must be writable, C-contiguous and as long.
fn write_into<T: pyo3::buffer::Element + Copy>(
    py: Python<'_>,
    buffer: &PyBuffer<T>,
    values: &[T],
    what: &str,
) -> PyResult<()> {
    if buffer.readonly() || !buffer.is_c_contiguous() || buffer.item_count() != values.len() {
        return Err(VlcError::new_err(format!(
            "{what}: expected a writable C-contiguous array of {} values",
            values.len()
        )));
    }
    buffer.copy_from_slice(py, values)
}

/// Pools of a given number of threads, made on first use and kept: starting threads on every
/// call cost more than a one-query search.
static POOLS: Mutex<Vec<(usize, Arc<rayon::ThreadPool>)>> = Mutex::new(Vec::new());

/// Runs `f` on a pool of `threads` threads, or the global pool (every core) for `None`.
fn with_threads<R: Send>(threads: Option<usize>, f: impl FnOnce() -> R + Send) -> PyResult<R> {
    let n = match threads {
        None => return Ok(f()),
        Some(0) => return Err(param_err("threads", "must be at least 1")),
        Some(n) => n,
    };
    let pool = {
        let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
        match pools.iter().find(|(size, _)| *size == n) {
            Some((_, pool)) => pool.clone(),
            None => {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .build()
                    .map_err(|e| param_err("threads", e.to_string()))?;
                pools.push((n, Arc::new(pool)));
                pools[pools.len() - 1].1.clone()
            }
        }
    };
    Ok(pool.install(f))
}

/// Opens the backend named `choice`: `cpu`, `cuda`, `wgpu`, or `auto` (CUDA, then a hardware
/// WGPU adapter, else the CPU). Returns the backend and, for `auto` on the CPU, why no GPU.
fn open_backend(choice: &str) -> PyResult<(Box<dyn Backend>, Option<String>)> {
    match choice.to_ascii_lowercase().as_str() {
        "cpu" => Ok((Box::new(CpuBackend), None)),
        "cuda" => open_cuda().map(|b| (b, None)).map_err(py_err),
        "wgpu" => open_wgpu(true).map(|b| (b, None)).map_err(py_err),
        "auto" => match open_cuda().or_else(|c| {
            open_wgpu(false).map_err(|w| CoreError::Backend {
                backend: "auto".into(),
                reason: format!("{c}; {w}"),
            })
        }) {
            Ok(b) => Ok((b, None)),
            Err(e) => Ok((Box::new(CpuBackend), Some(e.to_string()))),
        },
        other => Err(param_err(
            "backend",
            format!("unknown backend `{other}` (expected auto, cpu, cuda or wgpu)"),
        )),
    }
}

#[cfg(not(all(feature = "cuda", feature = "wgpu")))]
fn not_built(backend: &str, feature: &str) -> CoreError {
    CoreError::Backend {
        backend: backend.into(),
        reason: format!("this vlc_index was built without the `{feature}` feature"),
    }
}

#[cfg(feature = "cuda")]
fn open_cuda() -> vlc::Result<Box<dyn Backend>> {
    Ok(Box::new(vlc_cuda::CudaBackend::new(0)?))
}
#[cfg(not(feature = "cuda"))]
fn open_cuda() -> vlc::Result<Box<dyn Backend>> {
    Err(not_built("cuda", "cuda"))
}
#[cfg(feature = "wgpu")]
fn open_wgpu(allow_software: bool) -> vlc::Result<Box<dyn Backend>> {
    Ok(Box::new(if allow_software {
        vlc_wgpu::WgpuBackend::new()?
    } else {
        vlc_wgpu::WgpuBackend::new_hardware()?
    }))
}
#[cfg(not(feature = "wgpu"))]
fn open_wgpu(_allow_software: bool) -> vlc::Result<Box<dyn Backend>> {
    Err(not_built("wgpu", "wgpu"))
}

/// Prints a build's stages and training iterations to stderr.
fn print_event(event: &BuildEvent) {
    match event {
        BuildEvent::Stage { name, total } if *total > 0 => {
            eprintln!("vlc_index: {name} ({total})")
        }
        BuildEvent::Stage { name, .. } => eprintln!("vlc_index: {name}"),
        BuildEvent::Iteration(stats) => eprintln!(
            "vlc_index:   iteration {}/{}: energy {:.6}, churn {:.4}",
            stats.iteration, stats.max_iterations, stats.energy, stats.churn
        ),
        BuildEvent::Advance { .. } => {}
    }
}

/// A copy of an index on a GPU, with the backend it lives on.
struct DeviceCopy {
    search: DeviceSearch,
    /// `cuda (device name)` or `wgpu (adapter name)`.
    description: String,
}

/// The GPU index and the backend it borrows. The index is declared first so that it drops
/// before the backend; the backend sits in an `Arc`, whose contents never move.
enum DeviceSearch {
    #[cfg(feature = "cuda")]
    Cuda {
        index: Box<vlc_cuda::CudaIndex<'static>>,
        _backend: Arc<vlc_cuda::CudaBackend>,
    },
    #[cfg(feature = "wgpu")]
    Wgpu {
        index: Box<vlc_wgpu::WgpuIndex<'static>>,
        _backend: Arc<vlc_wgpu::WgpuBackend>,
    },
}

/// Extends a borrow of the backend in `arc` to `'static`, for a GPU index kept beside it.
///
/// # Safety
/// The reference must not outlive `arc`'s last clone: the caller stores both in one
/// [`DeviceSearch`] variant, the index field before the `Arc` (so it drops first), and never
/// hands the `'static` reference out.
#[cfg(any(feature = "cuda", feature = "wgpu"))]
unsafe fn extend<T>(arc: &Arc<T>) -> &'static T {
    // SAFETY: an `Arc`'s contents stay at one address until its last clone drops, which the
    // caller guarantees happens only after every use of the returned reference.
    unsafe { &*Arc::as_ptr(arc) }
}

impl DeviceCopy {
    /// Copy `index` to the first CUDA device.
    #[cfg(feature = "cuda")]
    fn cuda(index: &Index) -> vlc::Result<Self> {
        let backend = Arc::new(vlc_cuda::CudaBackend::new(0)?);
        let description = format!("cuda ({})", backend.device_name());
        // SAFETY: `_backend` holds the Arc beside the index that borrows it, and drops after it.
        let gpu = vlc_cuda::CudaIndex::new(unsafe { extend(&backend) }, index)?;
        Ok(DeviceCopy {
            search: DeviceSearch::Cuda {
                index: Box::new(gpu),
                _backend: backend,
            },
            description,
        })
    }
    #[cfg(not(feature = "cuda"))]
    fn cuda(_index: &Index) -> vlc::Result<Self> {
        Err(not_built("cuda", "cuda"))
    }

    /// Copy `index` to a WGPU adapter (software renderers too unless `hardware_only`).
    #[cfg(feature = "wgpu")]
    fn wgpu(index: &Index, hardware_only: bool) -> vlc::Result<Self> {
        let backend = Arc::new(if hardware_only {
            vlc_wgpu::WgpuBackend::new_hardware()?
        } else {
            vlc_wgpu::WgpuBackend::new()?
        });
        let description = format!("wgpu ({})", backend.adapter_name());
        // SAFETY: `_backend` holds the Arc beside the index that borrows it, and drops after it.
        let gpu = vlc_wgpu::WgpuIndex::new(unsafe { extend(&backend) }, index)?;
        Ok(DeviceCopy {
            search: DeviceSearch::Wgpu {
                index: Box::new(gpu),
                _backend: backend,
            },
            description,
        })
    }
    #[cfg(not(feature = "wgpu"))]
    fn wgpu(_index: &Index, _hardware_only: bool) -> vlc::Result<Self> {
        Err(not_built("wgpu", "wgpu"))
    }

    /// `cuda` or `wgpu`.
    fn kind(&self) -> &'static str {
        match self.search {
            #[cfg(feature = "cuda")]
            DeviceSearch::Cuda { .. } => "cuda",
            #[cfg(feature = "wgpu")]
            DeviceSearch::Wgpu { .. } => "wgpu",
        }
    }

    /// A batch search on the copy; with `filter`, of the index it was copied from and a filter
    /// made for that index, only the vectors it allows.
    fn search(
        &self,
        queries: &[f32],
        params: &SearchParams,
        filter: Option<(&Index, &vlc::IdFilter)>,
    ) -> vlc::Result<vlc::SearchResults> {
        match (&self.search, filter) {
            #[cfg(feature = "cuda")]
            (DeviceSearch::Cuda { index, .. }, None) => index.search_batch(queries, params),
            #[cfg(feature = "cuda")]
            (DeviceSearch::Cuda { index, .. }, Some((cpu, filter))) => {
                index.search_batch_filtered(cpu, queries, params, filter)
            }
            #[cfg(feature = "wgpu")]
            (DeviceSearch::Wgpu { index, .. }, None) => index.search_batch(queries, params),
            #[cfg(feature = "wgpu")]
            (DeviceSearch::Wgpu { index, .. }, Some((cpu, filter))) => {
                index.search_batch_filtered(cpu, queries, params, filter)
            }
        }
    }
}

/// Where `backend="auto"` searches run, decided on the first such search.
enum Placement {
    Device(Arc<DeviceCopy>),
    /// The CPU, and why no GPU.
    Cpu(String),
}

/// An index and its GPU copy, if a search made one. Changing the index drops the copy.
struct State {
    index: Index,
    device: Mutex<Option<Placement>>,
}

impl State {
    /// The GPU copy a search on `choice` (`cuda`, `wgpu` or `auto`) uses, made on first use;
    /// None when `auto` settles on the CPU. A copy on another backend than `choice` names is
    /// replaced.
    fn device_for(&self, choice: &str) -> vlc::Result<Option<Arc<DeviceCopy>>> {
        let mut slot = self.device.lock().unwrap_or_else(|e| e.into_inner());
        match (&*slot, choice) {
            (Some(Placement::Device(copy)), "auto") => return Ok(Some(copy.clone())),
            (Some(Placement::Device(copy)), _) if copy.kind() == choice => {
                return Ok(Some(copy.clone()))
            }
            (Some(Placement::Cpu(_)), "auto") => return Ok(None),
            _ => {}
        }
        // Free the old copy's device memory before making the new one.
        *slot = None;
        if let Some(kind) = self.index.device_unsupported_codec() {
            let reason = format!("GPU search does not support the {kind} codec yet");
            if choice == "auto" {
                *slot = Some(Placement::Cpu(reason));
                return Ok(None);
            }
            return Err(CoreError::Backend {
                backend: choice.into(),
                reason,
            });
        }
        let made = match choice {
            "cuda" => DeviceCopy::cuda(&self.index)?,
            "wgpu" => DeviceCopy::wgpu(&self.index, false)?,
            _ => match auto_device_copy(&self.index) {
                Ok(copy) => copy,
                Err(reason) => {
                    *slot = Some(Placement::Cpu(reason));
                    return Ok(None);
                }
            },
        };
        let made = Arc::new(made);
        *slot = Some(Placement::Device(made.clone()));
        Ok(Some(made))
    }
}

/// `auto`'s order for search: CUDA when a device is present, then a hardware WGPU adapter;
/// the error says why neither.
fn auto_device_copy(index: &Index) -> Result<DeviceCopy, String> {
    #[cfg(feature = "cuda")]
    let cuda_failed = if vlc_cuda::device_available() {
        match DeviceCopy::cuda(index) {
            Ok(copy) => return Ok(copy),
            Err(e) => e.to_string(),
        }
    } else {
        "no CUDA device".to_string()
    };
    #[cfg(not(feature = "cuda"))]
    let cuda_failed = "built without the `cuda` feature".to_string();
    DeviceCopy::wgpu(index, true).map_err(|e| format!("{cuda_failed}; {e}"))
}

/// A VLC index (see `vlc_index.Index` for the documented Python API).
#[pyclass(name = "NativeIndex", module = "vlc_index._native", frozen)]
struct NativeIndex {
    inner: RwLock<State>,
}

impl NativeIndex {
    fn wrap(index: Index) -> Self {
        NativeIndex {
            inner: RwLock::new(State {
                index,
                device: Mutex::new(None),
            }),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl NativeIndex {
    /// Build from a float32 array (rows, dim) or, when `path` is given instead, from a vector
    /// file read a block at a time. Returns (index, backend name, why-no-GPU or None).
    #[staticmethod]
    #[pyo3(signature = (vectors, path, codec, bytes_per_vector, refine, metric, anchors,
        anchor_precision, seed, max_iterations, backend, threads, verbose))]
    #[allow(clippy::too_many_arguments)]
    fn build(
        py: Python<'_>,
        vectors: Option<PyBuffer<f32>>,
        path: Option<PathBuf>,
        codec: Option<&str>,
        bytes_per_vector: Option<f64>,
        refine: Option<&str>,
        metric: &str,
        anchors: Option<usize>,
        anchor_precision: &str,
        seed: u64,
        max_iterations: Option<usize>,
        backend: &str,
        threads: Option<usize>,
        verbose: bool,
    ) -> PyResult<(NativeIndex, String, Option<String>)> {
        let metric: Metric = metric.parse().map_err(py_err)?;
        let precision: AnchorPrecision = anchor_precision.parse().map_err(py_err)?;
        let mut params = BuildParams::from_choices(codec, bytes_per_vector, refine)
            .map_err(py_err)?
            .with_metric(metric)
            .with_seed(seed);
        match anchors {
            Some(0) => return Err(param_err("anchors", "must be at least 1")),
            Some(n) => params.train.num_anchors = n,
            None => {}
        }
        if let Some(iterations) = max_iterations {
            params.train.max_iterations = iterations;
        }
        params.anchor_precision = precision;
        let (backend, fallback) = open_backend(backend)?;
        let backend_name = backend.name().to_string();
        let mut progress = |event: &BuildEvent| {
            if verbose {
                print_event(event)
            }
        };
        let built = match (&vectors, path) {
            (Some(buffer), None) => {
                let rows = Rows::new(buffer, "vectors")?;
                let (values, dim) = (rows.values(), rows.dim);
                py.detach(|| {
                    with_threads(threads, || {
                        let source = SliceSource::new(values, dim)?;
                        Index::build_from(&source, &params, backend.as_ref(), &mut progress)
                    })
                })?
            }
            (None, Some(path)) => py.detach(|| {
                with_threads(threads, || {
                    let source = vlc::io::VectorFile::open(&path, None)?;
                    Index::build_from(&source, &params, backend.as_ref(), &mut progress)
                })
            })?,
            _ => return Err(param_err("vectors", "give an array or a file path")),
        };
        let (index, _report) = built.map_err(py_err)?;
        Ok((NativeIndex::wrap(index), backend_name, fallback))
    }

    /// Read an index file: into memory, or as a read-only memory map with `mmap`.
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf, mmap: bool) -> PyResult<NativeIndex> {
        let index = py
            .detach(|| {
                if mmap {
                    Index::view(&path)
                } else {
                    Index::load(&path)
                }
            })
            .map_err(py_err)?;
        Ok(NativeIndex::wrap(index))
    }

    /// Write the index atomically (an existing file is only replaced by a complete one).
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(|| self.read().index.save(&path)).map_err(py_err)
    }

    /// The bytes of the index file `save` writes (for pickling, or to keep an index elsewhere
    /// than in a file).
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let bytes = py.detach(|| vlc::format::to_bytes(&self.read().index));
        PyBytes::new(py, &bytes)
    }

    /// An index from the bytes of an index file, every checksum verified (as `load`).
    #[staticmethod]
    fn from_bytes(py: Python<'_>, data: &[u8]) -> PyResult<NativeIndex> {
        let index = py.detach(|| Index::from_bytes(data)).map_err(py_err)?;
        Ok(NativeIndex::wrap(index))
    }

    /// Search `queries` (rows, dim) into `ids` (int64) and `distances` (float32), each
    /// (rows, k), C-contiguous, allocated by the caller. `backend`: `cpu`, `cuda`, `wgpu` or
    /// `auto` (a GPU copy of the index is made on the first such search and kept until the
    /// index changes). Returns where the search ran: `cpu`, `cuda` or `wgpu`. `filter`: only
    /// the vectors it allows are returned (`id_filter`; on a GPU too).
    #[pyo3(signature = (queries, k, nprobe, rerank, probe_margin, threads, backend, ids, distances, filter=None))]
    #[allow(clippy::too_many_arguments)]
    fn search(
        &self,
        py: Python<'_>,
        queries: PyBuffer<f32>,
        k: usize,
        nprobe: usize,
        rerank: usize,
        probe_margin: Option<f32>,
        threads: Option<usize>,
        backend: &str,
        ids: PyBuffer<i64>,
        distances: PyBuffer<f32>,
        filter: Option<PyRef<'_, NativeFilter>>,
    ) -> PyResult<&'static str> {
        let rows = Rows::new(&queries, "queries")?;
        let values = rows.values();
        let params = SearchParams {
            k,
            nprobe,
            rerank,
            probe_margin,
        };
        let choice = backend.to_ascii_lowercase();
        if !matches!(choice.as_str(), "cpu" | "cuda" | "wgpu" | "auto") {
            return Err(param_err(
                "backend",
                format!("unknown backend `{backend}` (expected cpu, cuda, wgpu or auto)"),
            ));
        }
        let filter = filter.as_ref().map(|f| &f.filter);
        let searched = py.detach(|| {
            let state = self.read();
            let device = match choice.as_str() {
                "cpu" => None,
                other => state.device_for(other).map_err(py_err)?,
            };
            let results = match device {
                Some(copy) => with_threads(threads, || {
                    copy.search(values, &params, filter.map(|f| (&state.index, f)))
                })
                .map(|r| r.map(|r| (r, copy.kind()))),
                None => {
                    let search = || match filter {
                        Some(filter) => {
                            state
                                .index
                                .search_batch_filtered(values, &params, &CpuBackend, filter)
                        }
                        None => state.index.search_batch(values, &params, &CpuBackend),
                    };
                    // One query is searched on the calling thread whatever the pool: handing it
                    // to a pool's thread and waiting for it cost more than the search (about
                    // 0.1 ms on a 2-core VM).
                    let results = if rows.rows == 1 {
                        Ok(search())
                    } else {
                        with_threads(threads, search)
                    };
                    results.map(|r| r.map(|r| (r, "cpu")))
                }
            };
            results?.map_err(py_err)
        });
        let (results, ran_on) = searched?;
        write_into(py, &ids, &results.ids, "ids")?;
        write_into(py, &distances, &results.distances, "distances")?;
        Ok(ran_on)
    }

    /// Drop the GPU copy a search made (freeing its device memory); the next GPU search makes
    /// a new one. Returns whether there was one.
    fn release_device(&self, py: Python<'_>) -> bool {
        py.detach(|| {
            let state = self.read();
            let mut slot = state.device.lock().unwrap_or_else(|e| e.into_inner());
            matches!(slot.take(), Some(Placement::Device(_)))
        })
    }

    /// Add rows (encoded against the index's anchors and codecs); returns the first new id.
    #[pyo3(signature = (vectors, threads))]
    fn add(&self, py: Python<'_>, vectors: PyBuffer<f32>, threads: Option<usize>) -> PyResult<u32> {
        let rows = Rows::new(&vectors, "vectors")?;
        let (values, dim) = (rows.values(), rows.dim);
        let added = py.detach(|| {
            with_threads(threads, || {
                let source = SliceSource::new(values, dim)?;
                let mut state = self.write();
                let (bigger, report) = state.index.add_from(&source, &CpuBackend, &mut |_| {})?;
                state.index = bigger;
                *state.device.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
                Ok::<_, CoreError>(report.first_id)
            })
        })?;
        added.map_err(py_err)
    }

    /// A filter of the vectors with these ids (ids the index does not hold are ignored), for
    /// `search`; valid until the index changes (`add`, `remove`).
    /// `ids`: a buffer of uint32 (`np.uint32`), any shape.
    fn id_filter(&self, py: Python<'_>, ids: PyBuffer<u32>) -> PyResult<NativeFilter> {
        let ids = ids.to_vec(py)?;
        Ok(py.detach(|| NativeFilter {
            filter: self.read().index.id_filter(&ids),
        }))
    }

    /// Remove vectors by id (the others keep their codes and ids); returns how many went.
    fn remove(&self, py: Python<'_>, ids: Vec<u32>) -> PyResult<usize> {
        let removed = py.detach(|| {
            let mut state = self.write();
            let (smaller, report) = state.index.remove_ids(&ids)?;
            state.index = smaller;
            *state.device.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
            Ok::<_, CoreError>(report.removed)
        });
        removed.map_err(py_err)
    }

    fn __len__(&self) -> usize {
        self.read().index.len()
    }

    #[getter]
    fn dim(&self) -> usize {
        self.read().index.dim()
    }

    /// What the index holds, as a JSON object (see `Index.info` in Python).
    fn info_json(&self) -> String {
        let state = self.read();
        let index = &state.index;
        let (device, fallback) = match &*state.device.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(Placement::Device(copy)) => (Some(copy.description.clone()), None),
            Some(Placement::Cpu(reason)) => (None, Some(reason.clone())),
            None => (None, None),
        };
        let file_bytes = index.file_size();
        let n = index.len();
        serde_json::json!({
            "vectors": n,
            "dim": index.dim(),
            "metric": index.metric().name(),
            "anchors": index.num_anchors(),
            "anchor_precision": index.anchor_precision().name(),
            "codec": index.codec().name(),
            "pcaq_bits_per_dimension": index.pcaq_widths().map(|w| {
                w.iter().map(|&b| b as f64).sum::<f64>() / index.dim() as f64
            }),
            "refine": index.refine_codec().map(|c| c.name()),
            "code_bytes": index.code_size(),
            "refine_code_bytes": index.refine_code_size(),
            "file_bytes": file_bytes,
            "bytes_per_vector": if n > 0 { file_bytes as f64 / n as f64 } else { 0.0 },
            "energy": index.energy(),
            "ids": index.id_storage(),
            "centred": index.centre().is_some(),
            "next_id": index.next_id(),
            "device_copy": device,
            "auto_search_on_cpu": fallback,
        })
        .to_string()
    }
}

/// Exact nearest neighbours of `queries` among `base` (both float32, (rows, dim)), written
/// into `ids` (int64, (queries, k)).
#[pyfunction]
#[pyo3(signature = (base, queries, k, metric, threads, ids))]
fn exact_knn(
    py: Python<'_>,
    base: PyBuffer<f32>,
    queries: PyBuffer<f32>,
    k: usize,
    metric: &str,
    threads: Option<usize>,
    ids: PyBuffer<i64>,
) -> PyResult<()> {
    let metric: Metric = metric.parse().map_err(py_err)?;
    let (base, queries) = (Rows::new(&base, "base")?, Rows::new(&queries, "queries")?);
    if base.dim != queries.dim {
        return Err(py_err(CoreError::DimensionMismatch {
            what: "queries".into(),
            expected: base.dim,
            actual: queries.dim,
        }));
    }
    if k == 0 || k > base.rows {
        return Err(param_err(
            "k",
            format!("must be in 1..={}, got {k}", base.rows),
        ));
    }
    let (base_values, query_values, dim) = (base.values(), queries.values(), base.dim);
    let truth = py.detach(|| {
        with_threads(threads, || {
            let source = SliceSource::new(base_values, dim)?;
            vlc::eval::ground_truth(&source, query_values, k, metric, &CpuBackend, &mut |_| {})
        })
    })?;
    let truth = truth.map_err(py_err)?;
    let truth: Vec<i64> = truth.ids.iter().map(|&i| i as i64).collect();
    write_into(py, &ids, &truth, "ids")
}

/// A [`vlc::IdFilter`] of one state of an index (`NativeIndex.id_filter`).
#[pyclass(name = "NativeFilter", module = "vlc_index._native", frozen)]
struct NativeFilter {
    filter: vlc::IdFilter,
}

#[pymethods]
impl NativeFilter {
    /// Vectors the filter allows.
    fn __len__(&self) -> usize {
        self.filter.len()
    }
}

/// A held [`vlc::format::IndexLock`]; `release` (or dropping the object) lets it go.
#[pyclass(name = "NativeLock", module = "vlc_index._native", frozen)]
struct NativeLock {
    lock: Mutex<Option<vlc::format::IndexLock>>,
}

#[pymethods]
impl NativeLock {
    /// Let the lock go (again: nothing).
    fn release(&self) {
        self.lock.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// Whether the lock is still held.
    fn held(&self) -> bool {
        self.lock
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// The lock file.
    fn path(&self) -> Option<PathBuf> {
        let lock = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        lock.as_ref().map(|l| l.path().to_path_buf())
    }
}

/// Take the lock of the index file `path` (`INDEX.lock` beside it, the one `vlc add` and `vlc
/// remove` take), waiting with the interpreter released; a signal (Ctrl-C) ends the wait with
/// its exception.
#[pyfunction]
fn lock_index(py: Python<'_>, path: PathBuf) -> PyResult<NativeLock> {
    loop {
        match py.detach(|| vlc::format::IndexLock::acquire(&path, &mut |_| {})) {
            Ok(lock) => {
                return Ok(NativeLock {
                    lock: Mutex::new(Some(lock)),
                })
            }
            Err(CoreError::Io { cause, .. }) if cause.kind() == std::io::ErrorKind::Interrupted => {
                py.check_signals()?
            }
            Err(e) => return Err(py_err(e)),
        }
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeIndex>()?;
    m.add_class::<NativeLock>()?;
    m.add_class::<NativeFilter>()?;
    m.add_function(wrap_pyfunction!(lock_index, m)?)?;
    m.add_function(wrap_pyfunction!(exact_knn, m)?)?;
    m.add("VlcError", m.py().get_type::<VlcError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
