"""Tests of the Python package `vlc_index`, run against an installed wheel:

    pip install maturin pytest
    maturin build --release -m crates/vlc-python/Cargo.toml -o target/wheels
    pip install --force-reinstall target/wheels/vlc_index-*.whl
    python3 -m pytest crates/vlc-python/tests
"""

import copy as copy_module
import os
import pickle
import threading

import numpy as np
import pytest

import vlc_index as vlc

DIM = 48


def clustered(n, dim=DIM, clusters=40, seed=0):
    """`n` vectors around `clusters` centres (float32), and 100 queries near the same centres."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim)) * 3
    base = centres[rng.integers(0, clusters, n)] + rng.normal(size=(n, dim))
    queries = centres[rng.integers(0, clusters, 100)] + rng.normal(size=(100, dim))
    return base.astype(np.float32), queries.astype(np.float32)


@pytest.fixture(scope="module")
def data():
    return clustered(4000)


@pytest.fixture(scope="module")
def truth(data):
    base, queries = data
    return vlc.exact_knn(base, queries, 10)


def test_exact_knn_matches_numpy(data):
    base, queries = data
    ids = vlc.exact_knn(base, queries[:20], 5, threads=1)
    d = ((queries[:20, None, :] - base[None, :, :]) ** 2).sum(-1)
    expected = np.argsort(d, axis=1, kind="stable")[:, :5]
    assert ids.shape == (20, 5) and ids.dtype == np.int64
    # Ties aside (none in random data), the same neighbours in the same order.
    assert (ids == expected).mean() > 0.99


@pytest.mark.parametrize("codec", ["sq8", "rabitq1", "pcaq2"])
def test_build_and_search_reach_high_recall(data, truth, codec):
    base, queries = data
    index = vlc.build(base, codec=codec, backend="cpu", anchors=32)
    assert len(index) == len(base) and index.dim == DIM
    ids, dist = index.search(queries, k=10, nprobe=32)
    assert ids.shape == (100, 10) and ids.dtype == np.int64 and dist.dtype == np.float32
    assert np.all(np.diff(dist, axis=1) >= 0), "distances are sorted nearest first"
    # Every list probed: what is left is the code's error (isotropic noise in 48 dimensions
    # is hard for 1 and 2 bits per dimension: these builds measure 0.986, 0.481 and 0.653).
    floor = {"sq8": 0.95, "rabitq1": 0.4, "pcaq2": 0.55}[codec]
    assert vlc.recall(ids, truth, 10) >= floor
    # Fewer lists find no more.
    few, _ = index.search(queries, k=10, nprobe=1)
    assert vlc.recall(few, truth, 10) <= vlc.recall(ids, truth, 10)


def test_byte_budget_is_filled(data):
    base, _ = data
    index = vlc.build(base, bytes_per_vector=40, backend="cpu", anchors=32)
    info = index.info()
    assert info["codec"] == "pcaq"
    assert 30 < info["bytes_per_vector"] <= 40
    assert "40 bytes" not in repr(index)  # the repr reports the measured size
    assert f"{info['bytes_per_vector']:.1f} bytes/vector" in repr(index)


def test_save_load_and_mmap_give_the_same_results(data, tmp_path):
    base, queries = data
    index = vlc.build(base, codec="rabitq2", refine="sq8", backend="cpu", anchors=32, seed=7)
    path = tmp_path / "a.vlc"
    index.save(path)
    ids, dist = index.search(queries, k=5, nprobe=8)
    for mmap in (False, True):
        again = vlc.load(path, mmap=mmap)
        ids2, dist2 = again.search(queries, k=5, nprobe=8)
        assert (ids2 == ids).all() and np.array_equal(dist2, dist)
        assert again.info()["refine"] == "sq8"


def test_bytes_and_pickle_round_trip(data, tmp_path):
    base, queries = data
    index = vlc.build(base[:2000], codec="rabitq1", refine="sq8", backend="cpu", anchors=16)
    index.remove([5, 6])
    index.save(tmp_path / "i.vlc")
    blob = index.to_bytes()
    assert blob == (tmp_path / "i.vlc").read_bytes()
    expected = index.search(queries, k=10, nprobe=8)
    mapped = vlc.load(tmp_path / "i.vlc", mmap=True)
    for copy in (vlc.from_bytes(blob), vlc.from_bytes(bytearray(blob)),
                 pickle.loads(pickle.dumps(index)), pickle.loads(pickle.dumps(mapped)),
                 copy_module.deepcopy(index)):
        assert len(copy) == 1998
        got = copy.search(queries, k=10, nprobe=8)
        assert (got[0] == expected[0]).all() and (got[1] == expected[1]).all()
        assert copy.add(base[:1])[0] == 2000
    assert len(index) == 1998  # the copies are independent
    with pytest.raises(vlc.VlcError):
        vlc.from_bytes(blob[:-1])
    with pytest.raises(vlc.VlcError):
        vlc.from_bytes(b"not an index")


def test_lock_makes_concurrent_changes_take_turns(data, tmp_path):
    base, _ = data
    path = tmp_path / "i.vlc"
    vlc.build(base[:1000], codec="sq8", backend="cpu", anchors=8).save(path)
    link = tmp_path / "link.vlc"
    link.symlink_to(path)

    def add(rows):
        with vlc.lock(link):  # the same lock through a link
            index = vlc.load(path)
            index.add(rows)
            index.save(path)

    held = vlc.lock(path)
    assert held.held and held.path == os.fspath(path) + ".lock"
    workers = [threading.Thread(target=add, args=(base[i : i + 100],)) for i in (1000, 1100, 1200)]
    for w in workers:
        w.start()
    workers[0].join(timeout=0.3)
    assert workers[0].is_alive(), "a change went ahead while the lock was held"
    assert len(vlc.load(path)) == 1000
    held.release()
    held.release()
    assert not held.held and held.path is None
    for w in workers:
        w.join()
    assert len(vlc.load(path)) == 1300  # no change lost
    assert (tmp_path / "i.vlc.lock").exists()


def test_same_seed_same_index(data):
    base, queries = data
    # The files differ only in the build report's timings (and so by a few bytes of
    # metadata); the index itself is the same.
    a, b, c = (vlc.build(base[:1500], codec="pcaq1", backend="cpu", seed=s) for s in (3, 3, 4))
    (ids_a, dist_a), (ids_b, dist_b), (ids_c, dist_c) = (
        i.search(queries, k=10, nprobe=4) for i in (a, b, c)
    )
    assert (ids_a == ids_b).all() and np.array_equal(dist_a, dist_b)
    sizes = ("file_bytes", "bytes_per_vector")
    assert {k: v for k, v in a.info().items() if k not in sizes} == {
        k: v for k, v in b.info().items() if k not in sizes
    }
    assert not np.array_equal(dist_a, dist_c), "another seed trains other anchors"


def test_inputs_of_other_dtypes_and_shapes(data, tmp_path):
    base, queries = data
    index = vlc.build(base.astype(np.float64), codec="sq8", backend="cpu", anchors=16)
    one_ids, one_dist = index.search(queries[0].astype(np.float16).astype(np.float64), k=3)
    assert one_ids.shape == (1, 3)
    many_ids, _ = index.search(queries[:4].tolist(), k=3)
    assert many_ids.shape == (4, 3)
    # A file path is read a block at a time; the same rows give the same index.
    np.save(tmp_path / "base.npy", base)
    from_file = vlc.build(tmp_path / "base.npy", codec="sq8", backend="cpu", anchors=16)
    from_array = vlc.build(base, codec="sq8", backend="cpu", anchors=16)
    a, _ = from_file.search(queries, k=5)
    b, _ = from_array.search(queries, k=5)
    assert (a == b).all()


def test_cosine_metric_distances(data):
    base, queries = data
    index = vlc.build(base, codec="f32", metric="cosine", backend="cpu", anchors=16)
    ids, dist = index.search(queries[:10], k=1, nprobe=16)
    b = base / np.linalg.norm(base, axis=1, keepdims=True)
    q = queries[:10] / np.linalg.norm(queries[:10], axis=1, keepdims=True)
    expected = 2 - 2 * (q * b[ids[:, 0]]).sum(1)
    assert np.allclose(dist[:, 0], expected, atol=1e-4)


def test_add_and_remove(data):
    base, queries = data
    index = vlc.build(base[:3000], codec="sq8", backend="cpu", anchors=32)
    new_ids = index.add(base[3000:3100])
    assert list(new_ids) == list(range(3000, 3100)) and len(index) == 3100
    # An added vector is found as its own nearest neighbour, under its new id.
    ids, _ = index.search(base[3050], k=1, nprobe=32)
    assert ids[0, 0] == 3050
    assert index.remove([3050, 3051, 12]) == 3
    assert len(index) == 3097
    ids, _ = index.search(base[[3050, 12]], k=10, nprobe=32)
    assert 3050 not in ids and 12 not in ids
    # Ids are not given again after removal.
    assert index.add(base[:1])[0] == 3100


def test_filtered_search_returns_only_allowed_vectors(data):
    base, queries = data
    index = vlc.build(base, codec="rabitq1", refine="f32", anchors=32)
    allowed = np.arange(0, len(base), 7)
    # Every list probed and every candidate rescored in f32: the exact neighbours among the
    # allowed vectors.
    ids, distances = index.search(queries, k=10, nprobe=32, rerank=len(base), allowed=allowed)
    exact = allowed[vlc.exact_knn(base[allowed], queries, 10)]
    np.testing.assert_array_equal(ids, exact)
    # An IdFilter made once gives the same, one query or many, and from a list of ids.
    f = index.filter(allowed)
    assert len(f) == len(allowed)
    again, _ = index.search(queries, k=10, nprobe=32, rerank=len(base), allowed=f)
    np.testing.assert_array_equal(again, ids)
    one, _ = index.search(queries[3], k=10, nprobe=32, rerank=len(base), allowed=list(allowed))
    np.testing.assert_array_equal(one[0], ids[3])
    # A selective filter is found with one probe: lists without an allowed vector are passed over.
    few = np.array([5, 900, 2500])
    hits, _ = index.search(queries, k=3, nprobe=1, allowed=few)
    assert set(hits.ravel()) <= {5, 900, 2500, -1}
    assert (hits[:, 0] >= 0).all()
    # Ids the index does not hold are ignored; nothing allowed gives padding only.
    assert len(index.filter([1, 1, 10**6])) == 1
    empty, dist = index.search(queries, k=4, allowed=[])
    assert (empty == -1).all() and np.isinf(dist).all()
    # A filter serves the index state it was made for.
    index.remove([0])
    with pytest.raises(vlc.VlcError, match="filter was made for another index"):
        index.search(queries, k=10, allowed=f)
    other = vlc.build(base, codec="sq8", anchors=16)
    with pytest.raises(vlc.VlcError, match="filter was made for another index"):
        other.search(queries, k=10, allowed=index.filter(allowed))
    with pytest.raises(TypeError, match="`ids`"):
        index.filter([1.5])
    with pytest.raises(vlc.VlcError, match="between 0 and 2"):
        index.search(queries, k=10, allowed=[-1])


def test_k_above_the_vector_count_pads():
    base, queries = clustered(30, clusters=3)
    index = vlc.build(base, codec="sq8", backend="cpu", anchors=2)
    ids, dist = index.search(queries[:2], k=40, nprobe=2)
    assert ids.shape == (2, 40)
    assert (ids[:, 30:] == -1).all() and np.isinf(dist[:, 30:]).all()
    assert sorted(ids[0, :30]) == list(range(30))


def test_threads_and_concurrent_searches(data, truth):
    base, queries = data
    index = vlc.build(base, codec="rabitq1", backend="cpu", anchors=32, threads=1)
    expected, _ = index.search(queries, k=10, threads=1)
    results = [None] * 4

    def run(slot):
        results[slot] = index.search(queries, k=10)[0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all((r == expected).all() for r in results)


# Bad input: a clear error naming what is wrong, nothing half-written.


def test_non_finite_values_are_named(data):
    base, queries = data
    bad = base.copy()
    bad[17, 5] = np.nan
    with pytest.raises(vlc.VlcError, match="row 17, column 5"):
        vlc.build(bad, backend="cpu")
    index = vlc.build(base[:500], codec="sq8", backend="cpu", anchors=8)
    q = queries[:3].copy()
    q[1, 2] = np.inf
    with pytest.raises(vlc.VlcError, match="non-finite"):
        index.search(q)


def test_vectors_beyond_f32_distances_are_named(data):
    # Squared lengths past about 2.1e37 could overflow f32 distances; a set whose spread is
    # subnormal in f32 would lose their precision.
    base, queries = data
    big = base[:500].copy()
    big[40] *= 1e19
    with pytest.raises(vlc.VlcError, match="too large.*row 40"):
        vlc.build(big, backend="cpu", anchors=8)
    with pytest.raises(vlc.VlcError, match="too close together"):
        vlc.build(base[:500] * np.float32(1e-22), backend="cpu", anchors=8)
    index = vlc.build(base[:500], codec="sq8", backend="cpu", anchors=8)
    q = queries[:3].copy()
    q[1] *= 1e19
    with pytest.raises(vlc.VlcError, match="too large.*row 1"):
        index.search(q)
    assert len(index) == 500


def test_zero_vectors_under_cosine_are_named(data):
    base, queries = data
    bad = base[:500].copy()
    bad[31] = 0
    with pytest.raises(vlc.VlcError, match="zero vector.*row 31"):
        vlc.build(bad, metric="cosine", backend="cpu", anchors=8)
    index = vlc.build(base[:500], codec="sq8", metric="cosine", backend="cpu", anchors=8)
    q = queries[:3].copy()
    q[2] = 0
    with pytest.raises(vlc.VlcError, match="zero vector.*row 2"):
        index.search(q)
    with pytest.raises(vlc.VlcError, match="zero vector.*row 31"):
        index.add(bad)
    assert len(index) == 500


def test_wrong_dimensions_and_parameters(data):
    base, queries = data
    index = vlc.build(base[:500], codec="sq8", backend="cpu", anchors=8)
    with pytest.raises(vlc.VlcError, match="expected 48, got 47"):
        index.search(queries[:, :47])
    with pytest.raises(vlc.VlcError, match="expected 48, got 10"):
        index.add(np.zeros((2, 10), np.float32))
    with pytest.raises(vlc.VlcError, match="`k`"):
        index.search(queries, k=0)
    with pytest.raises(vlc.VlcError, match="nprobe"):
        index.search(queries, nprobe=0)
    with pytest.raises(vlc.VlcError, match="unknown codec `pq8`"):
        vlc.build(base, codec="pq8", backend="cpu")
    with pytest.raises(vlc.VlcError, match="bytes_per_vector"):
        vlc.build(base, codec="rabitq1", bytes_per_vector=64, backend="cpu")
    with pytest.raises(vlc.VlcError, match="refine"):
        vlc.build(base, refine="rabitq1", backend="cpu")
    with pytest.raises(vlc.VlcError, match="anchors"):
        vlc.build(base, anchors=0, backend="cpu")
    with pytest.raises(vlc.VlcError, match="backend"):
        vlc.build(base, backend="tpu")
    with pytest.raises(vlc.VlcError, match="threads"):
        vlc.build(base, backend="cpu", threads=0)
    with pytest.raises(vlc.VlcError, match="empty"):
        vlc.build(np.zeros((0, 8), np.float32), backend="cpu")
    with pytest.raises(vlc.VlcError, match="shape"):
        vlc.build(np.zeros((2, 3, 4), np.float32), backend="cpu")
    with pytest.raises(vlc.VlcError, match="cannot be read"):
        vlc.build([[1.0, "a"]], backend="cpu")
    with pytest.raises(vlc.VlcError, match="ids"):
        index.remove([-1])


def test_counts_and_ids_must_be_integers(data):
    # int() would take 2.5 as k = 2, remove id 1 for an id of 1.7, and read a boolean mask
    # as ids 0 and 1.
    base, queries = data
    index = vlc.build(base[:500], codec="sq8", backend="cpu", anchors=8)
    for bad in (dict(k=2.5), dict(nprobe=3.0), dict(rerank=1.5), dict(k=True), dict(k="10")):
        with pytest.raises(TypeError, match="must be an integer"):
            index.search(queries[:2], **bad)
    with pytest.raises(TypeError, match="`ids` must be integers"):
        index.remove([1.7])
    with pytest.raises(TypeError, match="boolean"):
        index.remove(np.arange(500) < 2)
    with pytest.raises(TypeError, match="`anchors` must be an integer"):
        vlc.build(base[:500], anchors=8.0, backend="cpu")
    with pytest.raises(TypeError, match="`k` must be an integer"):
        vlc.exact_knn(base, queries, k=1.5)
    assert len(index) == 500
    # NumPy integers of any width, and Python ints in any sequence, are ids and counts.
    ids, _ = index.search(queries[:2], k=np.int64(3), nprobe=np.uint8(4))
    assert ids.shape == (2, 3)
    assert index.remove(np.array([1, 2], dtype=np.int32)) == 2
    assert index.remove(np.array([3], dtype=np.uint64)) == 1
    assert index.remove((4, np.int16(5))) == 2
    assert index.remove([]) == 0
    assert len(index) == 495


def test_bad_files_fail_cleanly_and_keep_the_good_one(data, tmp_path):
    base, queries = data
    with pytest.raises(OSError):
        vlc.load(tmp_path / "missing.vlc")
    foreign = tmp_path / "foreign.vlc"
    foreign.write_bytes(b"PK\x03\x04 not an index at all" * 10)
    with pytest.raises(vlc.VlcError, match="not a VLC index"):
        vlc.load(foreign)
    good = tmp_path / "good.vlc"
    index = vlc.build(base[:800], codec="sq8", backend="cpu", anchors=8)
    index.save(good)
    whole = good.read_bytes()
    truncated = tmp_path / "truncated.vlc"
    truncated.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(vlc.VlcError, match="truncated|corrupt"):
        vlc.load(truncated)
    # A failed save (its directory does not exist) leaves nothing behind, and a save over a
    # good file replaces it only with a whole one.
    with pytest.raises(OSError):
        index.save(tmp_path / "no" / "such" / "dir.vlc")
    vlc.build(base[:900], codec="sq4", backend="cpu", anchors=8).save(good)
    assert vlc.load(good).info()["codec"] == "sq4"
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".") or p.endswith(".tmp")]


def test_errors_are_value_errors_named_vlc_error(data):
    base, _ = data
    with pytest.raises(ValueError) as caught:
        vlc.build(base, max_iterations=0, backend="cpu")
    assert type(caught.value) is vlc.VlcError
    assert type(caught.value).__name__ == "VlcError"
    assert type(caught.value).__module__ == "vlc_index"
    assert "`max_iterations`" in str(caught.value)


def test_recall_helper():
    truth = np.array([[1, 2, 3], [4, 5, 6]])
    assert vlc.recall(np.array([[3, 2, 9], [-1, -1, -1]]), truth, 3) == pytest.approx(2 / 6)
    with pytest.raises(vlc.VlcError):
        vlc.recall(truth, truth, 4)


def gpu_or_skip(index, queries, backend, **search):
    """Search on `backend`, or skip (saying so) where this machine has no such device."""
    try:
        return index.search(queries, backend=backend, **search)
    except vlc.VlcError as e:
        message = str(e)
        # The error names the backend and why it cannot run: no driver, library or adapter.
        assert backend in message, message
        pytest.skip(f"SKIPPED: no {backend} device here ({message})")


@pytest.mark.parametrize("backend", ["wgpu", "cuda"])
@pytest.mark.parametrize("codec", ["pcaq2", "rabitq1"])
def test_gpu_search_matches_the_cpu(data, truth, backend, codec):
    base, queries = data
    index = vlc.build(base, codec=codec, refine="sq8", backend="cpu", anchors=32, seed=3)
    # Both with the automatic candidate pool (rerank 0, the default).
    cpu_ids, cpu_dist = index.search(queries, k=10, nprobe=8)
    assert index.search_backend == "cpu" and index.info()["device_copy"] is None
    ids, dist = gpu_or_skip(index, queries, backend, k=10, nprobe=8)
    assert index.search_backend == backend
    assert index.info()["device_copy"].startswith(backend + " (")
    assert ids.shape == cpu_ids.shape and ids.dtype == np.int64 and dist.dtype == np.float32
    # The CPU's fast scan rounds its lookup tables and the GPUs' do not, so near-ties may
    # swap; the neighbours and their distances agree otherwise.
    assert (ids == cpu_ids).mean() > 0.95
    same = ids == cpu_ids
    np.testing.assert_allclose(dist[same], cpu_dist[same], rtol=1e-3, atol=1e-3)
    assert abs(vlc.recall(ids, truth, 10) - vlc.recall(cpu_ids, truth, 10)) < 0.02
    # The copy is kept for the next search, and one query works too.
    one, _ = index.search(queries[0], k=10, nprobe=8, backend=backend)
    assert (one[0] == ids[0]).mean() > 0.9
    # Adding vectors drops the copy; the next GPU search sees them.
    new = index.add(queries[:5] + 0.001)
    assert index.info()["device_copy"] is None
    found, _ = index.search(queries[:5], k=1, nprobe=32, backend=backend)
    assert list(found[:, 0]) == list(new)
    assert index.release_device() is True and index.release_device() is False
    assert index.info()["device_copy"] is None


@pytest.mark.parametrize("backend", ["wgpu", "cuda"])
def test_gpu_filtered_search_matches_the_cpu(data, backend):
    base, queries = data
    index = vlc.build(base, codec="rabitq1", refine="sq8", backend="cpu", anchors=32, seed=3)
    # A spread filter, and a few vectors (most lists hold none of them).
    for allowed in (np.arange(0, len(base), 9), np.array([5, 900, 2500])):
        cpu_ids, cpu_dist = index.search(queries, k=10, nprobe=8, allowed=allowed)
        ids, dist = gpu_or_skip(index, queries, backend, k=10, nprobe=8, allowed=allowed)
        assert index.search_backend == backend
        # Only allowed vectors, as many per row as the CPU finds in the same lists, and the
        # same neighbours up to near-ties.
        assert np.isin(ids[ids >= 0], allowed).all()
        np.testing.assert_array_equal((ids >= 0).sum(axis=1), (cpu_ids >= 0).sum(axis=1))
        assert (ids == cpu_ids).mean() > 0.95
        same = (ids == cpu_ids) & (ids >= 0)
        np.testing.assert_allclose(dist[same], cpu_dist[same], rtol=1e-3, atol=1e-3)
    # A filter made before the index changed is refused on the GPU as on the CPU.
    f = index.filter(np.arange(0, len(base), 9))
    index.remove([0])
    with pytest.raises(vlc.VlcError, match="filter was made for another index"):
        index.search(queries, k=10, allowed=f, backend=backend)


def test_auto_search_says_where_it_ran(data):
    base, queries = data
    index = vlc.build(base, codec="sq8", backend="cpu", anchors=32)
    cpu_ids, _ = index.search(queries, k=10, nprobe=8)
    ids, _ = index.search(queries, k=10, nprobe=8, backend="auto")
    info = index.info()
    assert index.search_backend in ("cpu", "cuda", "wgpu")
    if index.search_backend == "cpu":
        # No GPU (software renderers are skipped): the reason is kept, and the results are
        # the CPU's own.
        assert info["auto_search_on_cpu"] and info["device_copy"] is None
        assert np.array_equal(ids, cpu_ids)
    else:
        assert info["device_copy"].startswith(index.search_backend)
        assert (ids == cpu_ids).mean() > 0.95
    with pytest.raises(vlc.VlcError, match="backend"):
        index.search(queries, backend="tpu")
