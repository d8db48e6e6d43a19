"""The faiss backends (tfdml.search.backends): exact flat search equals TensorFlow's,
approximate HNSW / IVF search against exact search, their parameters and settings."""

import numpy as np
import pytest

from tfdml.search import Index


@pytest.mark.parametrize("distance", ["euclidean", "cosine"])
def test_faiss_backend_gives_the_same_top_k(search_data, distance):
    _faiss()
    gallery, queries = search_data.clustered(seed=11)
    ids = np.array([f"e{i}" for i in range(len(gallery))])
    ref = Index(distance).add(gallery, ids)
    fast = Index(distance, backend="faiss").add(gallery, ids)
    for step in range(2):  # again after remove + add: the faiss index is rebuilt
        want, want_d = ref.search(queries, k=6)
        got, got_d = fast.search(queries, k=6)
        np.testing.assert_array_equal(got, want)  # no ties in this data
        np.testing.assert_allclose(got_d, want_d, atol=1e-4)
        for index in (ref, fast):
            index.remove(ids[30 * step: 30 * step + 30]).add(
                gallery[:5] + 0.5, [f"n{step}-{j}" for j in range(5)])


def test_faiss_backend_without_faiss_says_how_to_install_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss now raises ImportError
    with pytest.raises(ValueError, match="pip install faiss-cpu.*backend='tensorflow'"):
        Index(backend="faiss")
    with pytest.raises(ValueError, match="Unknown index backend 'annoy'"):
        Index(backend="annoy")


def _faiss():
    """faiss with one OpenMP thread (deterministic builds), or a skip that says why."""
    faiss = pytest.importorskip(
        "faiss", reason="faiss is not installed: pip install faiss-cpu (in the test extra)")
    faiss.omp_set_num_threads(1)
    return faiss


def _blobs(seed=3, classes=40, per=50, q=100, dim=32, spread=1.0):
    """Overlapping clusters (spread 1: centres as far apart as the points scatter)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((classes, dim)) * spread
    g = centres.repeat(per, axis=0) + rng.standard_normal((classes * per, dim))
    qs = centres[rng.integers(0, classes, q)] + rng.standard_normal((q, dim))
    return g.astype(np.float32), qs.astype(np.float32)


# Small search widths, so that the search is really approximate on 2000 entries
# (faiss 1.15.1: recall@10 0.95-0.97 on _blobs(); wider searches give 0.99-1.0).
_APPROX = {"hnsw": {"hnsw_m": 8, "ef_search": 16}, "ivf": {"nlist": 40, "nprobe": 2}}


@pytest.mark.parametrize("distance", ["euclidean", "cosine"])
@pytest.mark.parametrize("approximate", ["hnsw", "ivf"])
def test_approximate_search_recall_at_10_against_exact(distance, approximate):
    _faiss()
    gallery, queries = _blobs()
    ids = np.array([f"e{i}" for i in range(len(gallery))])
    exact = Index(distance).add(gallery, ids)
    want, _ = exact.search(queries, k=10)
    index = Index(distance, backend="faiss", approximate=approximate,
                  **_APPROX[approximate]).add(gallery, ids)
    got, got_d = index.search(queries, k=10)
    assert got.shape == want.shape == (100, 10) and got_d.dtype == np.float32
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, want)])
    assert recall >= 0.9, recall
    # The distances are the true distances of the ids returned, nearest first.
    pos = {k: i for i, k in enumerate(ids.tolist())}
    g = gallery[[[pos[k] for k in row] for row in got]]
    if distance == "euclidean":
        ref = np.linalg.norm(g - queries[:, None], axis=-1)
    else:
        gn = g / np.linalg.norm(g, axis=-1, keepdims=True)
        qn = queries / np.linalg.norm(queries, axis=-1, keepdims=True)
        ref = 1 - np.einsum("qkd,qd->qk", gn, qn)
    np.testing.assert_allclose(got_d, ref, atol=1e-4)
    assert (np.diff(got_d, axis=1) >= 0).all()
    # match() works as with exact search.
    _, _, is_match = index.match(queries, threshold=float(np.median(got_d)), k=10)
    assert is_match.shape == (100, 10) and 0 < is_match.mean() < 1
    # Deterministic: a second build gives the same answer.
    again = Index(distance, backend="faiss", approximate=approximate,
                  **_APPROX[approximate]).add(gallery, ids)
    got2, got2_d = again.search(queries, k=10)
    np.testing.assert_array_equal(got2, got)
    np.testing.assert_array_equal(got2_d, got_d)


@pytest.mark.parametrize("approximate", ["hnsw", "ivf"])
def test_approximate_defaults_are_exact_on_small_clustered_data(approximate):
    _faiss()
    gallery, queries = _blobs(seed=4, spread=3.0)  # well separated clusters
    ids = np.arange(len(gallery), dtype=np.int64) * 5 + 2**40
    want, _ = Index().add(gallery, ids).search(queries, k=10)
    index = Index(backend="faiss", approximate=approximate).add(gallery, ids)
    got, _ = index.search(queries, k=10)
    assert got.dtype == np.int64
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, want)]) >= 0.99
    # remove + add rebuild the structure; removed ids never come back.
    index.remove(ids[:1000])
    got, _ = index.search(queries, k=10)
    assert not np.isin(got, ids[:1000]).any()


def test_hnsw_returns_k_entries_when_the_graph_finds_fewer():
    _faiss()
    rng = np.random.default_rng(0)
    gallery = rng.standard_normal((300, 8)).astype(np.float32)
    ids = np.arange(300, dtype=np.int64)
    index = Index(backend="faiss", approximate="hnsw", hnsw_m=2, ef_construction=2,
                  ef_search=1).add(gallery, ids)  # a sparse graph: some queries find < 300
    got, got_d = index.search(gallery[:50], k=300)
    assert np.isfinite(got_d).all() and got_d.max() < 20
    assert all(len(set(row)) == 300 for row in got.tolist())


@pytest.mark.parametrize("approximate, narrow, wide", [
    ("hnsw", {"hnsw_m": 8, "ef_search": 16}, {"hnsw_m": 8, "ef_search": 64}),
    ("ivf", {"nlist": 40, "nprobe": 1}, {"nlist": 40, "nprobe": 8}),
])
def test_wider_approximate_search_has_higher_recall(approximate, narrow, wide):
    _faiss()
    gallery, queries = _blobs(seed=7)
    ids = np.arange(len(gallery), dtype=np.int64)
    want, _ = Index().add(gallery, ids).search(queries, k=10)

    def recall(params):
        got, _ = Index(backend="faiss", approximate=approximate, **params).add(
            gallery, ids).search(queries, k=10)
        return np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, want)])

    assert recall(narrow) < recall(wide)
    assert recall(wide) >= 0.98
    # The same, widening an index already built.
    index = Index(backend="faiss", approximate=approximate, **narrow).add(gallery, ids)
    index.search(queries, k=10)
    built = index._backend.structure
    width = {k: v for k, v in wide.items() if k in ("ef_search", "nprobe")}
    got, _ = index.set_search_width(**width).search(queries, k=10)
    assert index._backend.structure is built
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, want)]) == recall(wide)
    with pytest.raises(ValueError, match="do not apply to approximate="):
        index.set_search_width(**{("nprobe" if approximate == "hnsw" else "ef_search"): 4})


def test_ivf_returns_k_entries_when_the_visited_cells_hold_fewer():
    _faiss()
    gallery, queries = _blobs(seed=5, classes=10, per=10, q=8, spread=3.0)
    ids = np.arange(100, dtype=np.int64)
    index = Index(backend="faiss", approximate="ivf", nlist=10, nprobe=1).add(gallery, ids)
    got, got_d = index.search(queries, k=60)  # one cell holds ~10: searched again over all
    assert got.shape == (8, 60) and np.isfinite(got_d).all()
    assert all(len(set(row)) == 60 for row in got.tolist())
    want, _ = Index().add(gallery, ids).search(queries, k=60)
    np.testing.assert_array_equal(np.sort(got, axis=1), np.sort(want, axis=1))


@pytest.mark.parametrize("approximate", ["hnsw", "ivf"])
def test_approximate_save_load_keeps_the_settings(tmp_path, approximate):
    from tfdml import search

    _faiss()
    gallery, queries = _blobs(seed=6)
    ids = np.array([f"e{i}" for i in range(len(gallery))])
    index = Index("cosine", backend="faiss", approximate=approximate,
                  **_APPROX[approximate]).add(gallery, ids, labels=np.arange(2000) // 50)
    path = index.save(tmp_path / "i.npz")
    back = Index.load(path)
    assert back.search_settings == index.search_settings
    assert back.search_settings["approximate"] == approximate
    assert back.backend == "faiss" and back.approximate == approximate
    for a, b in zip(back.search(queries, k=10), index.search(queries, k=10)):
        np.testing.assert_array_equal(a, b)
    exact = Index.load(path, backend="tensorflow")
    assert exact.approximate is None and exact.backend == "tensorflow"
    text = search.describe(path)
    assert f"search: faiss approximate {approximate}" in text
    assert ("hnsw_m=8" if approximate == "hnsw" else "nprobe=2") in text


@pytest.mark.parametrize("kwargs, message", [
    ({"backend": "faiss", "approximate": "lsh"}, "Unknown approximate search 'lsh'"),
    ({"approximate": "hnsw"}, "needs backend='faiss'"),
    ({"backend": "faiss", "nprobe": 4}, "nprobe only apply to approximate search"),
    ({"backend": "faiss", "approximate": "hnsw", "nprobe": 4},
     "nprobe do not apply to approximate='hnsw'; its parameters are hnsw_m"),
    ({"backend": "faiss", "approximate": "ivf", "ef_search": 4},
     "ef_search do not apply to approximate='ivf'"),
    ({"backend": "faiss", "approximate": "ivf", "nlist": 0}, "nlist must be a positive integer"),
    ({"backend": "faiss", "approximate": "ivf", "nprobe": 2.5},
     "nprobe must be a positive integer"),
    ({"backend": "faiss", "approximate": "hnsw", "ef_search": True},
     "ef_search must be a positive integer"),
    ({"backend": "faiss", "approximate": "hnsw", "hnsw_m": 1}, "hnsw_m must be at least 2"),
])
def test_approximate_bad_parameters_are_value_errors(kwargs, message):
    if kwargs.get("backend") == "faiss":
        _faiss()
    with pytest.raises(ValueError, match=message):
        Index(**kwargs)
