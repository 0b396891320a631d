"""VLC (Vector-Lattice Compression): small, searchable indexes of embedding vectors.

    import numpy as np, vlc_index

    index = vlc_index.build(vectors, bytes_per_vector=64)      # or codec="pcaq1", "rabitq1", ...
    ids, distances = index.search(queries, k=10, nprobe=32)    # (rows, k) int64 / float32
    ids, distances = index.search(queries, k=10, backend="cuda")  # or "wgpu", "auto": a GPU copy
    index.save("memory.vlc")                                   # atomic: never a half-written file
    index = vlc_index.load("memory.vlc")                       # mmap=True: zero-copy view
    index = vlc_index.from_bytes(index.to_bytes())             # the file's bytes; pickle works
    with vlc_index.lock("memory.vlc"): ...                     # the lock `vlc add` takes
    new_ids = index.add(more_vectors)
    ids, distances = index.search(queries, k=10, allowed=user_ids)  # a filter; or index.filter(ids)
    index.remove(new_ids[:3])

The same index files as the `vlc` command line tool. Inputs may be any array-like of any
real dtype (converted to float32), one vector or a batch; the work runs with the interpreter
released, on every core unless `threads` is given. Errors name what is wrong and raise
`vlc_index.VlcError` (a `ValueError`), or `OSError` for files.

The package is named `vlc_index`, not `vlc`, so that it can sit beside `python-vlc` (the
VideoLAN player's bindings, imported as `vlc`).
"""

from __future__ import annotations

import json
import operator
import os
import sys
from typing import Optional, Sequence, Tuple, Union

import numpy as np

from ._native import NativeIndex as _NativeIndex
from ._native import VlcError, __version__
from ._native import exact_knn as _exact_knn
from ._native import lock_index as _lock_index

__all__ = [
    "Index", "IdFilter", "IndexLock", "VlcError", "build", "load", "from_bytes", "lock", "exact_knn", "recall",
    "__version__",
]

PathLike = Union[str, "os.PathLike[str]"]


def _rows(array, what: str, dim: Optional[int] = None) -> np.ndarray:
    """`array` as a C-contiguous float32 matrix (rows, dim); one vector becomes one row."""
    try:
        rows = np.ascontiguousarray(array, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise VlcError(f"{what}: cannot be read as an array of numbers ({e})") from None
    if rows.ndim == 1:
        rows = rows.reshape(1, -1)
    if rows.ndim != 2:
        raise VlcError(f"{what}: expected shape (rows, dim) or (dim,), got {rows.shape}")
    if dim is not None and rows.shape[1] != dim:
        raise VlcError(f"dimension mismatch in {what}: expected {dim}, got {rows.shape[1]}")
    return rows


def _integer(name: str, value) -> int:
    """`value` as a Python int: ints and NumPy integers only. `int(2.5)` would quietly give 2,
    and `int(True)` 1."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"`{name}` must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"`{name}` must be an integer, got {value!r}") from None


def _ids(ids, name: str = "ids") -> np.ndarray:
    """`ids` as a flat array of integers: integer values only. A float id would be truncated to
    another vector's id and a boolean mask read as ids 0 and 1, so both are refused."""
    array = np.asarray(ids)
    if array.size == 0:
        return np.empty(0, dtype=np.int64)
    if array.dtype.kind == "b":
        raise TypeError(f"`{name}` is a boolean array; pass the ids themselves (e.g. np.flatnonzero(mask))")
    if array.dtype.kind not in "iu":
        if array.dtype.kind == "O":
            return np.array([_integer(name, i) for i in array.ravel()], dtype=np.int64)
        raise TypeError(f"`{name}` must be integers, got an array of {array.dtype}")
    return array.ravel()


def _uint32_ids(ids, name: str) -> np.ndarray:
    """`ids` (`_ids`) as a contiguous uint32 array; ids outside 0 to 2^32 - 1 raise `VlcError`."""
    ids = _ids(ids, name)
    if ids.size and (ids.min() < 0 or ids.max() > np.iinfo(np.uint32).max):
        raise VlcError(f"invalid parameter `{name}`: ids are between 0 and 2^32 - 1")
    return np.ascontiguousarray(ids, dtype=np.uint32)


def _quiet_vulkan_layer() -> None:
    # Mesa's Vulkan device-select layer prints "XDG_RUNTIME_DIR is invalid" twice on headless
    # machines when WGPU looks for a GPU; VLC picks its adapter itself.
    os.environ.setdefault("NODEVICE_SELECT", "1")


class Index:
    """A VLC index: anchors, a residual code per vector, ids. Make one with `build` or `load`."""

    def __init__(self, native: _NativeIndex, backend: str = "cpu"):
        self._native = native
        #: The backend the index was built on ("cpu", "cuda" or "wgpu"); "cpu" when loaded.
        self.backend = backend
        #: Where the last search ran ("cpu", "cuda" or "wgpu"); None before the first.
        self.search_backend: Optional[str] = None

    def __len__(self) -> int:
        return len(self._native)

    def __repr__(self) -> str:
        i = self.info()
        code = i["codec"]
        if i["pcaq_bits_per_dimension"] is not None:
            code += f" at {i['pcaq_bits_per_dimension']:.3f} bits/dim"
        if i["refine"]:
            code += f" + {i['refine']}"
        return (
            f"<vlc_index.Index: {i['vectors']} x {i['dim']} ({i['metric']}), "
            f"{i['anchors']} anchors, {code}, {i['bytes_per_vector']:.1f} bytes/vector>"
        )

    def info(self) -> dict:
        """What the index holds: vectors, dim, metric, anchors, codec, file bytes, ...; and
        `device_copy`, the GPU holding a copy for searches (None if none), or
        `auto_search_on_cpu`, why backend="auto" searches stay on the CPU."""
        return json.loads(self._native.info_json())

    @property
    def dim(self) -> int:
        return self._native.dim

    def search(
        self,
        queries,
        k: int = 10,
        nprobe: int = 32,
        rerank: int = 0,
        probe_margin: Optional[float] = None,
        threads: Optional[int] = None,
        backend: str = "cpu",
        allowed=None,
    ) -> Tuple[np.ndarray, np.ndarray]:
        """The k nearest stored vectors of each query, nearest first.

        queries: (rows, dim) or (dim,). nprobe: inverted lists scanned per query (more =
        higher recall, slower; above the anchor count, every list). rerank: candidates the
        second stage rescores (0 = automatic: the 10 k best, and beyond them those within
        the first stage's error of the k-th best, see `vlc search --help`). probe_margin: adaptive probing (see `vlc search
        --help`). backend: "cpu" (default), "cuda", "wgpu" (software adapters included) or
        "auto" (CUDA, then a hardware WGPU adapter, else the CPU). The first GPU search copies
        the index to the device (once; `add` and `remove` drop the copy, `release_device`
        frees it); a GPU pays off on batches of hundreds of queries or more, and returns the
        CPU's results within rounding. `search_backend` then says where the search ran.
        allowed: return only these vectors (a filter, e.g. one user's documents): their ids
        (array-like of integers), or an `IdFilter` from `filter(ids)`, which serves many searches
        (the first filter of an index reads every id of the index; narrow ones, at most one
        vector in 32, look up their own ids from the second on). Each query then probes the nearest lists
        that hold an allowed vector until they hold nprobe lists' worth of them (a list counts
        the share of its vectors allowed), so a narrow filter keeps its recall and takes more
        time (see `vlc search --help`). On a GPU backend the GPU scans only the allowed
        vectors of the lists probed (CUDA ranks the lists itself, WGPU takes them from the CPU).
        Returns (ids int64, distances float32), each (rows, k): estimated squared L2
        distances (for a cosine index, 2 - 2 cos); id -1 and distance inf pad a row when the
        index (or, with `allowed`, the lists probed) holds fewer than k vectors it may return.
        """
        q = _rows(queries, "queries", self.dim)
        k, nprobe = _integer("k", k), _integer("nprobe", nprobe)
        rerank = _integer("rerank", rerank)
        if k < 1:
            raise VlcError(f"invalid parameter `k`: must be at least 1, got {k}")
        ids = np.empty((q.shape[0], k), dtype=np.int64)
        distances = np.empty((q.shape[0], k), dtype=np.float32)
        margin = None if probe_margin is None else float(probe_margin)
        backend = str(backend).lower()
        native_filter = None
        if allowed is not None:
            if not isinstance(allowed, IdFilter):
                allowed = self.filter(allowed)
            native_filter = allowed._native
        if backend in ("auto", "wgpu") and native_filter is None:
            _quiet_vulkan_layer()
        self.search_backend = self._native.search(
            q, k, nprobe, rerank, margin, threads, backend, ids, distances, native_filter
        )
        return ids, distances

    def filter(self, ids) -> "IdFilter":
        """A filter for `search(..., allowed=...)`: only the vectors with these ids (array-like
        of integers) may be returned. Ids the index does not hold are ignored; `len()` of the
        filter counts those it does. Valid until the index changes (`add`, `remove`). The first
        filter of an index reads every id of the index; from the second narrow one (at most one
        vector in 32) on, a map of each id's position (4 bytes per id, kept with the index) lets
        a filter look up its own ids only, so a filter per request costs little."""
        ids = _uint32_ids(ids, "ids")
        return IdFilter(self._native.id_filter(ids), ids.size)

    def release_device(self) -> bool:
        """Free the GPU copy of the index that a search with backend="cuda", "wgpu" or "auto"
        made. Returns whether there was one. (The index itself stays usable.)"""
        return self._native.release_device()

    def add(self, vectors, threads: Optional[int] = None) -> np.ndarray:
        """Add vectors, encoded against the index's anchors and codecs (nothing retrained).
        Returns their new ids (int64)."""
        rows = _rows(vectors, "vectors", self.dim)
        first = self._native.add(rows, threads)
        return np.arange(first, first + rows.shape[0], dtype=np.int64)

    def remove(self, ids: Sequence[int]) -> int:
        """Remove vectors by id (the others keep their codes and ids). Returns how many."""
        ids = _ids(ids)
        if ids.size and (ids.min() < 0 or ids.max() > np.iinfo(np.uint32).max):
            raise VlcError("invalid parameter `ids`: ids are between 0 and 2^32 - 1")
        return self._native.remove([int(i) for i in ids])

    def save(self, path: PathLike) -> None:
        """Write the index file atomically: an existing file is only replaced by a whole one."""
        self._native.save(os.fspath(path))

    def to_bytes(self) -> bytes:
        """The bytes of the index file `save` writes (`from_bytes` reads them back): to keep an
        index in a database or an object store. Pickling an index uses them too, so an index
        can be sent to other processes (`multiprocessing`) or cached; an index opened with
        `mmap=True` arrives in memory."""
        return self._native.to_bytes()

    def __reduce__(self):
        return (from_bytes, (self.to_bytes(),))


def build(
    vectors,
    codec: Optional[str] = None,
    bytes_per_vector: Optional[float] = None,
    refine: Optional[str] = None,
    metric: str = "l2",
    anchors: Optional[int] = None,
    anchor_precision: str = "int8",
    seed: int = 42,
    max_iterations: Optional[int] = None,
    backend: str = "auto",
    threads: Optional[int] = None,
    verbose: bool = False,
) -> Index:
    """Build an index.

    vectors: (rows, dim) array-like, or the path of a .npy / .fvecs / .bvecs file (read a
    block at a time, never whole). codec: "sq8" (default), "sq4", "rabitq1" to "rabitq8",
    "pcaq" + bits per dimension (e.g. "pcaq1", "pcaq0.75"), "anchor-only", "f16", "f32".
    bytes_per_vector: fill this footprint of the whole index instead (pcaq at the largest
    rate that fits). refine: a finer tier to rerank with ("sq8", "sq4", "f16", "f32").
    metric: "l2" or "cosine" (vectors and queries normalised; a zero vector, which has no
    direction, is then an error naming its row). anchors: inverted lists (default about 4 sqrt(n)).
    anchor_precision: "int8", "int4", "f16" or "f32". backend: where anchors are trained:
    "auto" (CUDA, then a hardware WGPU adapter, else the CPU), "cpu", "cuda" or "wgpu".
    verbose: print the stages and training iterations to stderr.
    """
    common = dict(
        codec=codec,
        bytes_per_vector=None if bytes_per_vector is None else float(bytes_per_vector),
        refine=refine,
        metric=metric,
        anchors=None if anchors is None else _integer("anchors", anchors),
        anchor_precision=anchor_precision,
        seed=_integer("seed", seed),
        max_iterations=None if max_iterations is None else _integer("max_iterations", max_iterations),
        backend=backend,
        threads=threads,
        verbose=bool(verbose),
    )
    if str(backend).lower() in ("auto", "wgpu"):
        _quiet_vulkan_layer()
    if isinstance(vectors, (str, os.PathLike)):
        native, used, why = _NativeIndex.build(None, os.fspath(vectors), **common)
    else:
        native, used, why = _NativeIndex.build(_rows(vectors, "vectors"), None, **common)
    if why is not None and verbose:
        print(f"vlc_index: training on the cpu ({why})", file=sys.stderr)
    return Index(native, used)


def load(path: PathLike, mmap: bool = False) -> Index:
    """Open an index file (any format version this build reads), checking every checksum.
    mmap: use the file in place, read-only (zero-copy; the file must not change meanwhile)."""
    return Index(_NativeIndex.load(os.fspath(path), bool(mmap)))


def from_bytes(data) -> Index:
    """An index from the bytes of an index file (`Index.to_bytes`, or a file's contents), every
    checksum verified as `load` does; `data`: bytes or any bytes-like object."""
    return Index(_NativeIndex.from_bytes(data if isinstance(data, bytes) else bytes(data)))


class IdFilter:
    """Which vectors a search may return (`Index.filter`): made for one index as it is, and
    refused by another index, or by this one after an `add` or a `remove`."""

    def __init__(self, native, asked: int):
        self._native = native
        self._asked = asked

    def __len__(self) -> int:
        """Vectors of the index the filter allows."""
        return len(self._native)

    def __repr__(self) -> str:
        return f"<vlc_index.IdFilter allowing {len(self)} of {self._asked} ids given>"


class IndexLock:
    """A held lock on an index file (see `lock`): a context manager, or call `release`."""

    def __init__(self, native):
        self._native = native

    @property
    def path(self) -> Optional[str]:
        """The lock file (`INDEX.lock`), or None once released."""
        p = self._native.path()
        return None if p is None else os.fspath(p)

    @property
    def held(self) -> bool:
        return self._native.held()

    def release(self) -> None:
        """Let the lock go (a second call does nothing)."""
        self._native.release()

    def __enter__(self) -> "IndexLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<vlc_index.IndexLock {self.path!r}>" if self.held else "<vlc_index.IndexLock released>"


def lock(path: PathLike) -> IndexLock:
    """Take the lock of the index file `path`, waiting while another process (a `vlc add` or
    `vlc remove` of that file, or another program's `lock`) holds it, for a read, change and
    save in place that must not lose another writer's change:

        with vlc_index.lock("memory.vlc"):
            index = vlc_index.load("memory.vlc")
            index.add(new_vectors)
            index.save("memory.vlc")

    The lock is `INDEX.lock` beside the file (links followed), created if missing and left in
    place. Searches need no lock (`save` replaces the file by a rename, so a reader keeps the
    index it opened). Ctrl-C ends the wait with KeyboardInterrupt."""
    return IndexLock(_lock_index(os.fspath(path)))


def exact_knn(base, queries, k: int = 10, metric: str = "l2", threads: Optional[int] = None) -> np.ndarray:
    """Exact k nearest neighbours of each query among `base` (ground truth for `recall`)."""
    b = _rows(base, "base")
    q = _rows(queries, "queries", b.shape[1])
    k = _integer("k", k)
    if k < 1:
        raise VlcError(f"invalid parameter `k`: must be at least 1, got {k}")
    ids = np.empty((q.shape[0], k), dtype=np.int64)
    _exact_knn(b, q, k, metric, threads, ids)
    return ids


def recall(found, truth, k: int = 10) -> float:
    """Mean over queries of |found[:, :k] & truth[:, :k]| / k (ids; -1 never matches)."""
    found, truth = np.asarray(found), np.asarray(truth)
    if found.ndim != 2 or truth.ndim != 2 or found.shape[0] != truth.shape[0]:
        raise VlcError("recall: expected two (queries, columns) arrays with the same rows")
    if not (1 <= k <= min(found.shape[1], truth.shape[1])):
        raise VlcError(f"recall@{k} needs at least {k} columns in both arrays")
    hits = sum(
        np.intersect1d(f[f >= 0], t).size for f, t in zip(found[:, :k], truth[:, :k])
    )
    return hits / (found.shape[0] * k)
