"""tfdml.search.Index against a NumPy brute-force top-k: ties, add / remove, embedding
with a model, matching to classes, one-query lookup and bad input."""

import numpy as np
import pytest

from tfdml.search import Index


def brute_topk(queries, gallery, k, distance):
    """NumPy reference: float64 distances, ties broken by gallery position (stable sort).

    ``tfdml.metrics.knn`` ranks equal scores lower gallery index first
    (``tf.math.top_k`` is stable), and an Index's gallery is in insertion order.
    """
    q = queries.astype(np.float64)
    g = gallery.astype(np.float64)
    if distance == "cosine":
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
        g = g / np.linalg.norm(g, axis=1, keepdims=True)
        d = 1.0 - q @ g.T
    else:
        d = np.sqrt(np.sum((q[:, None] - g[None]) ** 2, axis=-1))
    order = np.argsort(d, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(d, order, axis=1)


@pytest.mark.parametrize("distance", ["euclidean", "cosine"])
@pytest.mark.parametrize("data", ["random", "clustered"])
def test_search_equals_brute_force(search_data, distance, data):
    gallery, queries = getattr(search_data, data)()
    ids = np.arange(gallery.shape[0], dtype=np.int64) * 7 + 2**40  # not positions
    index = Index(distance, chunk_size=7).add(gallery, ids)  # several chunks
    got_ids, got_d = index.search(queries, k=5)
    order, want_d = brute_topk(queries, gallery, 5, distance)
    np.testing.assert_array_equal(got_ids, ids[order])
    if distance == "cosine":
        np.testing.assert_allclose(got_d, want_d, atol=1e-5)
    else:
        # float32 |q|^2 + |g|^2 - 2 q.g: absolute error in d^2 a few eps * |x|^2
        # (|x| from the gallery mean, which knn subtracts first).
        scale = np.max(np.sum((np.concatenate([gallery, queries]) - gallery.mean(0)) ** 2, 1))
        np.testing.assert_allclose(got_d**2, want_d**2, atol=32 * 2.0**-24 * scale)
    assert got_ids.dtype == np.int64 and got_d.dtype == np.float32


def test_ties_rank_the_entry_added_first_first():
    # Integer points, 64 gallery rows: knn centres the gallery on its mean, an
    # integer / 64, exact in float32, so every distance is computed exactly and
    # equal distances are truly equal (many: points on a small grid).
    rng = np.random.default_rng(3)
    gallery = rng.integers(-2, 3, (64, 3)).astype(np.float32)
    queries = rng.integers(-2, 3, (25, 3)).astype(np.float32)
    ids = rng.permutation(1000)[:64].astype(np.int64)
    index = Index("euclidean").add(gallery, ids)
    got_ids, got_d = index.search(queries, k=10)
    order, want_d = brute_topk(queries, gallery, 10, "euclidean")
    assert np.sum(np.diff(want_d, axis=1) == 0) > 50  # the test has ties to break
    np.testing.assert_array_equal(got_ids, ids[order])
    np.testing.assert_allclose(got_d, want_d, atol=1e-6)


def test_cosine_ties_between_duplicates_and_order_after_remove(search_data):
    gallery, queries = search_data.random(4, n=30)
    gallery = np.concatenate([gallery, gallery[:10]])  # rows 30..39 copy rows 0..9
    ids = np.array([f"item-{i}" for i in range(40)])
    index = Index("cosine").add(gallery, ids)
    got, _ = index.search(gallery[:10], k=2)
    # Each query equals rows i and 30 + i: the one added first comes first.
    np.testing.assert_array_equal(got, np.stack([ids[:10], ids[30:40]], axis=1))
    index.remove(ids[:10])
    got, _ = index.search(gallery[:10], k=1)
    np.testing.assert_array_equal(got[:, 0], ids[30:40])
    order, _ = brute_topk(queries, gallery[10:], 3, "cosine")
    np.testing.assert_array_equal(index.search(queries, 3)[0], ids[10:][order])
    assert len(index) == 30


def test_add_and_remove_after_a_search_are_searched(search_data):
    """The first search prepares the gallery (centred, norms) and keeps it; add and remove
    must drop it, or a search would miss new entries or return removed ones."""
    gallery, queries = search_data.random(5, n=50)
    index = Index().add(gallery, np.arange(50))
    index.search(queries, k=1)  # prepares the gallery
    index.add(queries[:3] + 1e-3, [100, 101, 102])  # new nearest neighbours of three queries
    np.testing.assert_array_equal(index.search(queries[:3], k=1)[0][:, 0], [100, 101, 102])
    index.remove([100, 101, 102])
    order, _ = brute_topk(queries, gallery, 4, "euclidean")
    np.testing.assert_array_equal(index.search(queries, k=4)[0], order)


def test_embeddings_are_read_only_outside_add_and_remove():
    index = Index().add(np.eye(3, dtype=np.float32), [1, 2, 3])
    index.search(np.eye(3, dtype=np.float32), k=1)
    with pytest.raises(ValueError, match="read-only"):
        index.embeddings[0, 0] = 5.0  # would leave the prepared gallery stale
    assert Index().embeddings is None


def test_k_larger_than_index_returns_every_entry(search_data):
    gallery, queries = search_data.random(5, n=4, q=3)
    ids, d = Index().add(gallery, [1, 2, 3, 4]).search(queries, k=10)
    assert ids.shape == d.shape == (3, 4)


def test_bad_input_names_the_problem_and_the_fix():
    index = Index().add(np.eye(3), [1, 2, 3])
    with pytest.raises(ValueError, match="dimension 4 but the index holds 3.*same model"):
        index.search(np.ones((2, 4)), k=1)
    with pytest.raises(ValueError, match="dimension 2 but the index holds 3"):
        index.add(np.ones((1, 2)), [9])
    with pytest.raises(ValueError, match="index is empty: add embeddings"):
        Index().search(np.ones((1, 3)), k=1)
    with pytest.raises(ValueError, match="already in the index.*remove them"):
        index.add(np.ones((1, 3)), [2])
    with pytest.raises(ValueError, match="Duplicate ids in this call"):
        Index().add(np.ones((2, 3)), ["a", "a"])
    with pytest.raises(ValueError, match="queries have 1 row.*NaN.*fix the model"):
        index.search(np.array([[0.0, np.nan, 1.0]]), k=1)
    with pytest.raises(ValueError, match="embeddings have 1 row.*NaN"):
        Index().add(np.array([[np.inf, 0.0]]), [1])
    with pytest.raises(ValueError, match="Unknown index distance 'manhattan'.*cosine, euclidean"):
        Index("manhattan")
    with pytest.raises(ValueError, match="floats are refused"):
        Index().add(np.ones((1, 3)), np.array([1.0]))
    with pytest.raises(ValueError, match="holds int64 ids, got str"):
        index.add(np.ones((1, 3)), ["x"])
    with pytest.raises(ValueError, match="not in the index.*Index.ids"):
        index.remove([42])
    assert len(index) == 3  # nothing above changed the index


def test_add_model_embeds_x_or_xy_batches_with_a_progress_bar(capsys):
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    x = np.random.default_rng(7).standard_normal((10, 4)).astype(np.float32)
    y = np.arange(10, dtype=np.int64) % 3
    index = Index().add_model(model, tf.data.Dataset.from_tensor_slices((x, y)).batch(4))
    np.testing.assert_allclose(index.embeddings, model(x).numpy(), atol=1e-6)
    assert index.ids.tolist() == list(range(10)) and index.labels.tolist() == y.tolist()
    assert "3/3" in capsys.readouterr().out  # the Progbar counted the three batches
    plain = Index().add_model(model, tf.data.Dataset.from_tensor_slices(x).batch(4),
                              ids=[f"p{i}" for i in range(10)], verbose=0)
    assert plain.labels is None and plain.ids[3] == "p3"
    index.add_model(model, tf.data.Dataset.from_tensor_slices(x[:2]).batch(2).map(
        lambda v: (v, {"label": tf.constant([0, 5], tf.int64)})), verbose=0)
    assert index.ids.tolist()[-2:] == [10, 11]  # continues after the largest id
    assert index.labels.tolist()[-2:] == [0, 5]  # the batch contract's "label"


def test_match_labels_gives_the_nearest_class_or_the_no_match_label(search_data):
    index, queries, labels = search_data.five_queries()
    np.testing.assert_array_equal(index.match_labels(queries, 3.5), [0, 0, 0, -1, -1])
    np.testing.assert_array_equal(index.match_labels(queries, None), [-1] * 5)
    np.testing.assert_array_equal(index.match_labels(queries, 3.5, no_match_label=7), [0, 0, 0, 7, 7])
    with pytest.raises(ValueError, match="no_match_label 1 is a class of the index"):
        index.match_labels(queries, 3.5, no_match_label=1)
    named = Index().add(np.eye(2), [1, 2], labels=["cat", "dog"])
    assert named.match_labels(np.array([[1.0, 0.1], [5.0, 5.0]]), 0.5).tolist() == ["cat", ""]
    with pytest.raises(ValueError, match="str labels.*no_match_label"):
        named.match_labels(np.eye(2), 0.5, no_match_label=-1)
    with pytest.raises(ValueError, match="no labels"):
        Index().add(np.eye(2), [1, 2]).match_labels(np.eye(2), 1.0)


def test_single_lookup_takes_one_embedding_or_one_model_input():
    import keras

    index = Index().add(np.eye(3), ["a", "b", "c"], labels=[5, 6, 7],
                        metadata=[{"f": 1}, None, {"f": 3}])
    got = index.single_lookup([0.9, 0.0, 0.1], k=2)
    assert [r["id"] for r in got] == ["a", "c"] and [r["rank"] for r in got] == [1, 2]
    assert [r["label"] for r in got] == [5, 7] and got[1]["metadata"] == {"f": 3}
    assert got[0]["distance"] == pytest.approx(np.sqrt(0.01 + 0.01), abs=1e-4)
    double = keras.Sequential([keras.Input((3,)), keras.layers.Rescaling(2.0)])
    by_model = index.single_lookup(np.array([0.0, 0.5, 0.0], np.float32), k=1, model=double)
    assert by_model[0]["id"] == "b" and by_model[0]["distance"] == pytest.approx(0.0, abs=1e-3)
    with pytest.raises(ValueError, match="one query"):
        index.single_lookup(np.eye(3))
