"""Chunked exact kNN (tfdml.metrics.knn) against NumPy brute force."""

import numpy as np
import pytest

from tfdml.metrics import knn as knn_mod
from tfdml.metrics.knn import knn


def brute_knn(query, gallery, k, distance, leave_one_out):
    q = query.astype(np.float64)
    g = gallery.astype(np.float64)
    if distance == "cosine":
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
        g = g / np.linalg.norm(g, axis=1, keepdims=True)
        values = q @ g.T
        key = -values
    else:
        values = np.sum((q[:, None] - g[None]) ** 2, axis=-1)
        if distance == "euclidean":
            values = np.sqrt(values)
        key = values.copy()
    if leave_one_out:
        np.fill_diagonal(key, np.inf)
    order = np.argsort(key, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(values, order, axis=1)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(1)
    return rng.standard_normal((57, 6)).astype(np.float32), rng.standard_normal((41, 6)).astype(
        np.float32)


@pytest.mark.parametrize("distance", ["euclidean", "squared_euclidean", "cosine"])
@pytest.mark.parametrize("loo", [True, False])
def test_knn_matches_brute_force_and_chunking(data, distance, loo):
    query, gallery = data
    gallery_arg = None if loo else gallery
    ref_i, ref_v = brute_knn(query, query if loo else gallery, 9, distance, loo)
    for chunk in (None, 1, 7, 1000):
        idx, val = knn(query, gallery_arg, k=9, distance=distance, chunk_size=chunk)
        np.testing.assert_array_equal(idx, ref_i)
        np.testing.assert_allclose(val, ref_v, rtol=1e-4, atol=1e-4)


def test_leave_one_out_removes_self_by_index_not_by_value():
    x = np.array([[0.0, 0.0], [0.0, 0.0], [5.0, 5.0]], np.float32)  # rows 0 and 1 coincide
    idx, val = knn(x, k=1)
    np.testing.assert_array_equal(idx[:, 0], [1, 0, 0])
    np.testing.assert_allclose(val[:2, 0], [0.0, 0.0])


def test_k_larger_than_gallery_is_capped():
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    idx, _ = knn(x, k=100)
    assert idx.shape == (5, 4)  # leave-one-out: 4 others
    for i in range(5):
        assert sorted(idx[i]) == [j for j in range(5) if j != i]
    idx, _ = knn(x[:2], x, k=100)
    assert idx.shape == (2, 5)


def test_ties_lower_index_first():
    x = np.ones((4, 3), np.float32)
    idx, _ = knn(x, k=3, chunk_size=2)
    np.testing.assert_array_equal(idx, [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.zeros(5, np.float32), "rank-2"),
        (np.array([[0.0, np.nan]], np.float32), "NaN"),
        (np.zeros((0, 3), np.float32), "empty"),
    ],
)
def test_bad_embeddings(bad, match):
    with pytest.raises(ValueError, match=match):
        knn(bad, k=1)


def test_bad_arguments():
    x = np.zeros((3, 2), np.float32)
    with pytest.raises(ValueError, match="distance"):
        knn(x, k=1, distance="manhattan")
    with pytest.raises(ValueError, match="dimensions differ"):
        knn(x, np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="chunk_size"):
        knn(x, chunk_size=0)
    with pytest.raises(ValueError, match="k must"):
        knn(x, k=0)


def test_auto_chunk_bounds_memory():
    assert knn_mod.chunk_size_for(60_000) * 60_000 <= knn_mod.DEFAULT_CHUNK_ELEMENTS
    assert knn_mod.chunk_size_for(10) == 4096


def test_query_index_excludes_picked_queries_from_their_results(data):
    x, _ = data
    picked = np.array([3, 40, 7])
    idx, val = knn(x[picked], x, k=5, query_index=picked)
    ref_i, ref_v = knn(x, k=5)
    np.testing.assert_array_equal(idx, ref_i[picked])
    np.testing.assert_allclose(val, ref_v[picked], rtol=1e-5, atol=1e-5)


def _near_duplicates(spread, n=64, dim=128, seed=0):
    rng = np.random.default_rng(seed)
    centre = rng.normal(size=dim)
    step = rng.normal(size=(n, dim))
    x = centre / np.linalg.norm(centre) + spread * step / np.linalg.norm(step, axis=1, keepdims=True)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("loo", [True, False])
def test_near_duplicate_distances_are_accurate(loo):
    """Unit vectors within 1e-4 of one point: the expansion around the origin returns 0 or noise.

    knn centres the data once on the gallery mean; the bound is the one of
    tfdml.distances.pairwise_squared_euclidean (float32 unit roundoff 2^-24,
    worst case over summation orders), with a factor 2 to spare.
    """
    x = _near_duplicates(1e-4)
    query, gallery = (x, None) if loo else (x[:16], x[16:])
    g = x if loo else gallery
    idx, val = knn(query, gallery, k=5, distance="euclidean", chunk_size=7)
    q64, g64 = query.astype(np.float64), g.astype(np.float64)
    c = g64.mean(axis=0)
    want = np.linalg.norm(q64[:, None] - g64[idx], axis=-1)
    spread = (np.linalg.norm(q64 - c, axis=1)[:, None] ** 2 + np.linalg.norm(g64[idx] - c, axis=-1) ** 2)
    bound = (2 * 128 + 3) * 2.0**-24 * spread / want**2 + 3 * 2.0**-24
    ratio = np.abs(val - want) / want / bound
    assert np.all(ratio <= 2), f"relative error up to {ratio.max():.3g} × the bound"
    ref_i, ref_v = brute_knn(query, g, 5, "euclidean", loo)
    np.testing.assert_allclose(val, ref_v, rtol=1e-3)  # the 5 nearest, not 5 others


def test_ranking_frame_centres_and_puts_cosine_on_the_sphere():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 3)).astype(np.float32) + 100
    q, g = knn_mod.ranking_frame(x, x)
    assert q is g and g.dtype == np.float32
    np.testing.assert_allclose(g.mean(axis=0), 0, atol=1e-4)
    np.testing.assert_allclose(g, x - x.mean(axis=0), atol=1e-4)
    q, g = knn_mod.ranking_frame(x, x[:2], "cosine")
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    np.testing.assert_allclose(q, unit - unit[:2].mean(axis=0), atol=1e-6)
    bad = x.copy()
    bad[0, 1] = np.nan
    _, g = knn_mod.ranking_frame(x[:3], bad)
    np.testing.assert_allclose(g[1:], x[1:] - x[1:].mean(axis=0), atol=1e-4)  # NaN row left out


def test_to_sphere_keeps_unit_rows_bit_for_bit():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(50, 128)).astype(np.float32)
    unit = (x / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)).astype(np.float32)
    np.testing.assert_array_equal(knn_mod.to_sphere(unit).numpy(), unit)
    far = knn_mod.to_sphere(3 * unit).numpy()
    np.testing.assert_allclose(np.linalg.norm(far, axis=1), 1, atol=1e-6)
    assert knn_mod.unit_tolerance(128) == 128 * 2.0**-24 and knn_mod.unit_tolerance(2) == 1e-6


def test_cosine_refuses_zero_rows():
    x = np.eye(4, dtype=np.float32)
    x[2] = 0
    with pytest.raises(ValueError, match=r"row\(s\) \[2\] are all zeros.*euclidean"):
        knn(x, k=1, distance="cosine")
    knn(x, k=1, distance="euclidean")  # fine: the origin is a point like any other


def _unit_with_duplicates(n=300, dim=16, seed=0):
    """L2-normalised float32 rows (as a model outputs), a third of them exact duplicates."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim)).astype(np.float32)
    x = (x / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)).astype(np.float32)
    copies = rng.integers(0, n, n // 3)
    x[rng.permutation(n)[: n // 3]] = x[copies]
    return x


@pytest.mark.parametrize("loo", [True, False])
def test_unit_vectors_rank_the_same_by_cosine_and_euclidean_ties_by_index(loo):
    """On unit vectors cos = 1 - d²/2, so the neighbour order must not depend
    on which one is named, exact duplicates included; equal scores come lower index first."""
    x = _unit_with_duplicates()
    query, gallery = (x, None) if loo else (x[:100], x[100:])
    orders = {d: knn(query, gallery, k=12, distance=d, chunk_size=37)
              for d in ("euclidean", "squared_euclidean", "cosine")}
    np.testing.assert_array_equal(orders["euclidean"][0], orders["cosine"][0])
    np.testing.assert_array_equal(orders["euclidean"][0], orders["squared_euclidean"][0])
    idx, cos = orders["cosine"]
    d = orders["euclidean"][1]
    np.testing.assert_allclose(cos, 1 - d.astype(np.float64) ** 2 / 2, atol=1e-6)
    g = x if loo else gallery
    # Every exact duplicate of a query is found first, in increasing index order.
    for i in range(idx.shape[0]):
        dup = [j for j in np.flatnonzero(np.all(g == query[i], axis=1)) if not (loo and j == i)]
        assert list(idx[i, : len(dup)]) == dup[:12]
        np.testing.assert_allclose(d[i, : len(dup)], 0.0, atol=1e-6)
    ref_i, ref_v = brute_knn(query, g, 12, "cosine", loo)
    np.testing.assert_allclose(cos, ref_v, atol=1e-6)  # the 12 nearest, not 12 others


@pytest.mark.parametrize("distance", ["euclidean", "squared_euclidean", "cosine"])
def test_a_prepared_gallery_gives_exactly_the_array_results(distance):
    """Index.search prepares its gallery once (knn.PreparedGallery): the same ops on the same
    numbers, so indices and distances are equal bit for bit, with query_index and chunks too."""
    rng = np.random.default_rng(7)
    gallery = (rng.normal(size=(300, 16)) + 3.0).astype(np.float32)  # off-centre: the frame matters
    gallery[150:160] = gallery[:10]  # duplicates: ties by lower index
    query = rng.normal(size=(37, 16)).astype(np.float32) + 3.0
    prepared = knn_mod.PreparedGallery(gallery, distance)
    for kwargs in ({}, {"chunk_size": 5}, {"query_index": rng.integers(-1, 300, 37)}):
        want_i, want_v = knn(query, gallery, k=12, distance=distance, **kwargs)
        got_i, got_v = knn(query, prepared, k=12, distance=distance, **kwargs)
        np.testing.assert_array_equal(got_i, want_i)
        np.testing.assert_array_equal(got_v, want_v)
    order, values = brute_knn(query, gallery, 12, distance, leave_one_out=False)
    got_i, got_v = knn(query, prepared, k=12, distance=distance)
    np.testing.assert_array_equal(got_i, order)
    np.testing.assert_allclose(got_v, values, rtol=1e-5, atol=1e-5)


def test_a_prepared_gallery_is_for_its_own_distance():
    prepared = knn_mod.PreparedGallery(np.eye(3, dtype=np.float32), "cosine")
    with pytest.raises(ValueError, match="prepared for 'cosine'.*distance='euclidean'"):
        knn(np.eye(3, dtype=np.float32), prepared, k=1, distance="euclidean")
    with pytest.raises(ValueError, match="dimensions differ"):
        knn(np.ones((2, 4), np.float32), prepared, k=1, distance="cosine")
