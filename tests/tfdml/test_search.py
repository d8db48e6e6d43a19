"""tfdml.search.Index against a NumPy brute-force top-k; ids, files and bad input."""

import json
import os
import zipfile

import numpy as np
import pytest

from tfdml.search import Index, as_keys


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


def _random(seed=0, n=150, q=40, dim=8):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, dim)).astype(np.float32), rng.standard_normal(
        (q, dim)).astype(np.float32)


def _clustered(seed=1, classes=6, per=20, q=30, dim=5):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((classes, dim)) * 4
    g = centres.repeat(per, axis=0) + 0.3 * rng.standard_normal((classes * per, dim))
    qs = centres[rng.integers(0, classes, q)] + 0.3 * rng.standard_normal((q, dim))
    return g.astype(np.float32), qs.astype(np.float32)


@pytest.mark.parametrize("distance", ["euclidean", "cosine"])
@pytest.mark.parametrize("data", [_random, _clustered])
def test_search_equals_brute_force(distance, data):
    gallery, queries = data()
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


def test_cosine_ties_between_duplicates_and_order_after_remove():
    gallery, queries = _random(4, n=30)
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


def test_add_and_remove_after_a_search_are_searched():
    """The first search prepares the gallery (centred, norms) and keeps it; add and remove
    must drop it, or a search would miss new entries or return removed ones."""
    gallery, queries = _random(5, n=50)
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


def test_k_larger_than_index_returns_every_entry():
    gallery, queries = _random(5, n=4, q=3)
    ids, d = Index().add(gallery, [1, 2, 3, 4]).search(queries, k=10)
    assert ids.shape == d.shape == (3, 4)


def test_ids_survive_as_given_and_save_load_round_trip(tmp_path):
    gallery, queries = _random(6, n=5, q=4, dim=3)
    int_ids = [2**62 + 1, -5, 0, 2**63 - 1, -(2**63)]
    str_ids = ["é-ü", "猫", "", "a b", "x" * 40]
    labels = np.array([3, 3, 1, 2**62 + 7, 1], np.int64)
    for ids in (int_ids, str_ids):
        index = Index("cosine").add(gallery, ids, labels=labels,
                                    metadata=[{"n": i} for i in range(5)])
        path = index.save(tmp_path / "index.npz")
        loaded = Index.load(path)
        assert len(loaded) == 5 and loaded.distance == "cosine"
        assert loaded.ids.tolist() == ids  # exact: 2**62 + 1 is not a float
        assert loaded.labels.tolist() == labels.tolist()
        assert loaded.metadata_for([ids[1]]) == [{"n": 1}]
        np.testing.assert_array_equal(loaded.embeddings, gallery)
        a, b = index.search(queries, 5), loaded.search(queries, 5)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
        # Only the file itself in the directory: the temporary one was renamed.
        assert os.listdir(tmp_path) == ["index.npz"]
    assert as_keys(np.array([2**62 + 1], np.uint64)).tolist() == [2**62 + 1]
    assert as_keys([b"caf\xc3\xa9"]).tolist() == ["café"]


def test_an_empty_index_saves_and_loads(tmp_path):
    index = Index("cosine").add(np.eye(2), ["a", "b"]).remove(["a", "b"])
    loaded = Index.load(index.save(tmp_path / "empty.npz"))
    assert len(loaded) == 0 and loaded.distance == "cosine"
    assert len(loaded.add(np.ones((1, 5)), [7])) == 1  # any dimension again


def test_manifest_names_format_version_and_checksum(tmp_path):
    path = Index().add(np.eye(3), [1, 2, 3]).save(tmp_path / "i.npz")
    with np.load(path) as data:
        manifest = json.loads(str(data["manifest"]))
    assert manifest["format"] == "tfdml.search.Index" and manifest["version"] == 1
    assert manifest["count"] == 3 and manifest["dim"] == 3 and len(manifest["sha256"]) == 64


def test_truncated_or_corrupt_file_is_a_clear_error(tmp_path):
    path = Index().add(np.eye(4), [1, 2, 3, 4]).save(tmp_path / "i.npz")
    raw = open(path, "rb").read()
    open(tmp_path / "cut.npz", "wb").write(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match="Cannot read the index file.*Index.save"):
        Index.load(tmp_path / "cut.npz")
    # Same size, one embedding changed: the checksum catches it.
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    emb = bytearray(members["embeddings.npy"])
    emb[-1] ^= 0x40
    members["embeddings.npy"] = bytes(emb)
    with zipfile.ZipFile(tmp_path / "bad.npz", "w") as z:
        for name, content in members.items():
            z.writestr(name, content)
    with pytest.raises(ValueError, match="checksum.*Index.save"):
        Index.load(tmp_path / "bad.npz")
    np.savez(tmp_path / "other.npz", embeddings=np.eye(2))
    with pytest.raises(ValueError, match="not a tfdml index"):
        Index.load(tmp_path / "other.npz")


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


def _calibration_data(seed=8, classes=8, right=60, wrong=20):
    """Gallery: one point per class, 10 apart per axis (nearest-neighbour radius 7.07).

    Queries sit at a known distance r from a gallery point, so their nearest
    entry and its distance are known: ``right`` queries carry that point's
    class at r in [0.05, 0.5], ``wrong`` ones carry another class at r in [1, 2].
    Every threshold in [max right r, 1) accepts all right and no wrong queries.
    """
    rng = np.random.default_rng(seed)
    gallery = 10.0 * np.eye(classes)
    n = right + wrong
    near = rng.integers(0, classes, n)
    r = np.concatenate([rng.uniform(0.05, 0.5, right), rng.uniform(1.0, 2.0, wrong)])
    u = rng.standard_normal((n, classes))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    queries = gallery[near] + r[:, None] * u
    labels = np.where(np.arange(n) < right, near, (near + 1) % classes).astype(np.int64)
    return gallery.astype(np.float32), queries.astype(np.float32), labels, r


def numpy_sweep(nearest_distance, correct, thresholds):
    """Reference: precision / recall / F1 of "accept if d <= t", one t at a time."""
    rows = []
    for t in thresholds:
        accepted = nearest_distance <= t
        tp = np.sum(accepted & correct)
        p = tp / max(accepted.sum(), 1)
        rec = tp / max(correct.sum(), 1)
        rows.append((p, rec, 0.0 if p + rec == 0 else 2 * p * rec / (p + rec)))
    return np.array(rows).T


def test_calibrate_matches_a_numpy_sweep_and_finds_the_known_threshold(tmp_path):
    from tfdml.search import calibrate

    gallery, queries, labels, r = _calibration_data()
    index = Index("euclidean").add(gallery, [f"g{i}" for i in range(8)], labels=np.arange(8))
    cal = calibrate(index, queries, labels, target_precision=0.99)
    # The nearest entry of each query is its own gallery point at distance r
    # (float32 expansion: error in d^2 a few eps * |x - mean|^2, |x|^2 ~ 100).
    np.testing.assert_allclose(np.sort(cal.thresholds) ** 2, np.sort(r) ** 2, atol=1e-4)
    correct = np.arange(len(r)) < 60
    d = index.search(queries, 1)[1][:, 0].astype(np.float64)
    precision, recall, f1 = numpy_sweep(d, correct, cal.thresholds.astype(np.float64))
    np.testing.assert_allclose(cal.precision, precision)
    np.testing.assert_allclose(cal.recall, recall)
    np.testing.assert_allclose(cal.f1, f1)
    # After the first wrong query precision is at most 60/61 < 0.99: the
    # threshold is the largest right distance, with full recall.
    assert cal.threshold**2 == pytest.approx(r[:60].max() ** 2, abs=1e-4)
    assert cal.at(cal.threshold) == {"threshold": cal.threshold, "precision": 1.0,
                                     "recall": 1.0, "f1": 1.0}
    ids, dist, is_match = index.match(queries, cal.threshold)
    np.testing.assert_array_equal(is_match[:, 0], correct)
    assert ids[0, 0] == f"g{np.argmin(np.abs(gallery - queries[0]).sum(1))}"
    # A lower target accepts some wrong queries: 60 / (60 + 2) >= 0.96.
    assert calibrate(index, queries, labels, target_precision=0.96).threshold > 1.0
    path = cal.plot(str(tmp_path / "calibration.png"))
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.listdir(tmp_path) == ["calibration.png"]


def test_calibrate_refuses_what_it_cannot_do():
    from tfdml.search import calibrate

    gallery, queries, labels, _ = _calibration_data(right=1, wrong=5)
    with pytest.raises(ValueError, match="no labels.*labels="):
        calibrate(Index().add(gallery, np.arange(8)), queries, labels)
    index = Index().add(gallery, np.arange(8), labels=np.arange(8))
    with pytest.raises(ValueError, match="No threshold reaches precision 0.99.*lower target"):
        calibrate(index, queries[1:], labels[1:])
    with pytest.raises(ValueError, match="int64 labels but.*str"):
        calibrate(index, queries, labels.astype(str))


def _five_queries():
    """Nearest distances 1..5 to the class-0 entry (class 1 is 100 away); the
    queries at 2 and 5 carry class 1, so they are wrong. By hand, at t = 1..5:
    precision 1, 1/2, 2/3, 3/4, 3/5; recall 1/3, 1/3, 2/3, 1, 1;
    F1 1/2, 2/5, 2/3, 6/7, 3/4."""
    index = Index().add(np.array([[0.0, 0.0], [100.0, 0.0]]), ["a", "b"], labels=[0, 1])
    queries = np.array([[d, 0.0] for d in (1, 2, 3, 4, 5)], np.float32)
    return index, queries, np.array([0, 1, 0, 0, 1])


@pytest.mark.parametrize("args, kwargs, want", [
    ((), {}, 1),  # the default: precision 0.99, reached at t = 1 only
    ((), {"target_precision": 0.7}, 4), ((0.7,), {}, 4), ((), {"target": 0.8}, 1),
    ((), {"metric": "precision", "target": 0.6}, 5),
    ((), {"metric": "recall", "target": 0.6}, 3), ((), {"metric": "recall", "target": 1.0}, 4),
    ((), {"metric": "recall", "target": 0.3}, 1), ((), {"metric": "f1"}, 4),
])
def test_calibrate_for_precision_recall_or_f1_on_a_hand_computed_case(args, kwargs, want):
    from tfdml.search import calibrate

    index, queries, labels = _five_queries()
    cal = calibrate(index, queries, labels, *args, **kwargs)
    assert cal.threshold == pytest.approx(want, abs=1e-3)
    np.testing.assert_allclose(cal.precision, [1, 1 / 2, 2 / 3, 3 / 4, 3 / 5])
    np.testing.assert_allclose(cal.recall, [1 / 3, 1 / 3, 2 / 3, 1, 1])
    np.testing.assert_allclose(cal.f1, [1 / 2, 2 / 5, 2 / 3, 6 / 7, 3 / 4])
    assert cal.metric == kwargs.get("metric", "precision")


def test_calibrate_targets_agree_with_a_numpy_search():
    from tfdml.search import calibrate

    gallery, queries, labels, _ = _calibration_data(seed=4, right=50, wrong=30)
    rng = np.random.default_rng(4)
    labels = np.where(rng.random(len(labels)) < 0.2, (labels + 2) % 8, labels)  # interleave errors
    index = Index().add(gallery, np.arange(8), labels=np.arange(8))
    d = index.search(queries, 1)[1][:, 0].astype(np.float64)
    correct = index.search(queries, 1)[0][:, 0] == labels
    t = np.unique(d)
    precision, recall, f1 = numpy_sweep(d, correct, t)
    for target in (0.6, 0.8, 0.95):
        got = calibrate(index, queries, labels, metric="recall", target=target).threshold
        assert got == np.float32(t[np.flatnonzero(recall >= target)[0]])
        ok = np.flatnonzero(precision >= target)
        if ok.size:
            assert calibrate(index, queries, labels, target=target).threshold == np.float32(t[ok[-1]])
        else:
            with pytest.raises(ValueError, match="No threshold reaches precision"):
                calibrate(index, queries, labels, target=target)
    assert calibrate(index, queries, labels, metric="f1").threshold == np.float32(t[np.argmax(f1)])


def test_calibrate_names_a_wrong_metric_or_target():
    from tfdml.search import calibrate

    index, queries, labels = _five_queries()
    with pytest.raises(ValueError, match="metric.*precision, recall, f1"):
        calibrate(index, queries, labels, metric="accuracy")
    with pytest.raises(ValueError, match="target_precision.*metric='precision'.*target="):
        calibrate(index, queries, labels, target_precision=0.9, metric="recall")
    with pytest.raises(ValueError, match="metric='recall' needs a target"):
        calibrate(index, queries, labels, metric="recall")
    with pytest.raises(ValueError, match="metric='f1' takes no target"):
        calibrate(index, queries, labels, metric="f1", target=0.5)
    with pytest.raises(ValueError, match="target must be in"):
        calibrate(index, queries, labels, metric="recall", target=1.5)
    with pytest.raises(ValueError, match="No threshold reaches recall 0.5.*no query"):
        calibrate(index, queries, np.ones(5, int), metric="recall", target=0.5)


def test_match_labels_gives_the_nearest_class_or_the_no_match_label():
    index, queries, labels = _five_queries()
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


_TF_ONLY = r"""
import sys
sys.path.append(sys.argv[1])  # site-packages only: no .pth files, so no editable tfdml
try:
    import tfdml
    raise SystemExit("tfdml is importable: the test would not show TensorFlow alone suffices")
except ImportError:
    pass
import numpy as np
import tensorflow as tf
lookup = tf.saved_model.load(sys.argv[2])
x = np.load(sys.argv[3])
out = lookup.lookup(tf.constant(x))
serving = lookup.signatures["serving_default"](inputs=tf.constant(x))
assert out["ids"].dtype == tf.string, out["ids"].dtype
text = lambda t: np.char.decode(t.numpy().astype(bytes), "utf-8")
np.savez(sys.argv[4], ids=text(out["ids"]), distances=out["distances"].numpy(),
         is_match=out["is_match"].numpy(), embed=lookup.embed(tf.constant(x)).numpy(),
         serving_ids=text(serving["ids"]))
"""


def _model(seed=0):
    import keras

    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh"),
                             keras.layers.Dense(4)])


def test_export_lookup_runs_with_tensorflow_alone(tmp_path):
    import subprocess
    import sys
    import sysconfig

    import tensorflow as tf

    from tfdml.search import export_lookup

    model = _model()
    rng = np.random.default_rng(9)
    x = rng.standard_normal((40, 6)).astype(np.float32)
    queries = rng.standard_normal((7, 6)).astype(np.float32)
    ids = np.array([f"ü-{i}" for i in range(40)])
    index = Index("euclidean").add_model(model, tf.data.Dataset.from_tensor_slices(x).batch(16),
                                         ids=ids, verbose=0)
    want_ids, want_d = index.search(model(queries).numpy(), k=5)
    threshold = float(np.median(want_d[:, 0]))
    path = export_lookup(model, index, tmp_path / "lookup", k=5, threshold=threshold)
    np.save(tmp_path / "q.npy", queries)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run(
        [sys.executable, "-I", "-S", "-c", _TF_ONLY, sysconfig.get_paths()["purelib"], path,
         str(tmp_path / "q.npy"), str(tmp_path / "out.npz")],
        check=True, cwd=tmp_path, env=env, timeout=300)
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_array_equal(out["ids"], want_ids)  # a string tensor, UTF-8
        np.testing.assert_array_equal(out["serving_ids"], want_ids)
        np.testing.assert_allclose(out["distances"], want_d, atol=1e-5)
        np.testing.assert_array_equal(out["is_match"], out["distances"] <= np.float32(threshold))
        assert 0 < out["is_match"][:, 0].sum() < 7
        np.testing.assert_allclose(out["embed"], model(queries).numpy(), atol=1e-6)


def test_export_lookup_int_ids_cosine_and_bad_input(tmp_path):
    import tensorflow as tf

    from tfdml.search import export_lookup

    model = _model(1)
    rng = np.random.default_rng(10)
    x, queries = rng.standard_normal((30, 6)), rng.standard_normal((5, 6))
    ids = np.arange(30, dtype=np.int64) + 2**62 + 1
    index = Index("cosine").add(model(x).numpy(), ids)
    export_lookup(model, index, tmp_path / "m", k=50)
    loaded = tf.saved_model.load(str(tmp_path / "m"))  # keep it: its variables live in it
    out = loaded.lookup(tf.constant(queries, tf.float32))
    want_ids, want_d = index.search(model(queries).numpy(), k=50)
    assert out["ids"].dtype == tf.int64 and out["ids"].shape == (5, 30)  # k capped at N
    np.testing.assert_array_equal(out["ids"].numpy(), want_ids)  # exact beyond 2**53
    np.testing.assert_allclose(out["distances"].numpy(), want_d, atol=1e-5)
    assert not out["is_match"].numpy().any()  # no threshold: nothing is declared a match
    export_lookup(model, index, tmp_path / "m", k=1)  # replaces the old export
    loaded = tf.saved_model.load(str(tmp_path / "m"))
    assert loaded.lookup(tf.constant(queries, tf.float32))["ids"].shape == (5, 1)
    assert sorted(os.listdir(tmp_path)) == ["m"]
    with pytest.raises(ValueError, match="dimension 4 but the index holds 3"):
        export_lookup(model, Index().add(np.eye(3), [1, 2, 3]), tmp_path / "x")
    with pytest.raises(ValueError, match="index is empty"):
        export_lookup(model, Index(), tmp_path / "x")
    assert sorted(os.listdir(tmp_path)) == ["m"]


@pytest.mark.parametrize("with_input", [True, False])
def test_export_lookup_of_a_reloaded_embedding_model_infers_its_input(tmp_path, with_input):
    """A model.keras of an EmbeddingModel, loaded back, has no ``inputs``: the
    lookup's input signature comes from its encoder (or its build shape)."""
    import keras
    import tensorflow as tf

    import tfdml
    from tfdml.search import export_lookup

    keras.utils.set_random_seed(3)
    layers = [keras.layers.Dense(4)]
    encoder = keras.Sequential(([keras.Input((6,))] if with_input else []) + layers)
    model = tfdml.models.EmbeddingModel(encoder)
    rng = np.random.default_rng(12)
    x = rng.standard_normal((10, 6)).astype(np.float32)
    model(x[:2])
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert getattr(loaded, "inputs", None) is None
    index = Index().add(loaded(x).numpy(), np.arange(10))
    export_lookup(loaded, index, tmp_path / "lookup", k=3, threshold=float("inf"))
    served = tf.saved_model.load(str(tmp_path / "lookup"))  # keep a reference
    assert served.signatures["lookup"].structured_input_signature[1]["inputs"].shape.as_list() == [None, 6]
    got = served.lookup(tf.constant(x[:4]))
    np.testing.assert_array_equal(got["ids"].numpy(), index.search(loaded(x[:4]).numpy(), k=3)[0])
    with pytest.raises(ValueError, match="input_signature="):
        export_lookup(tfdml.models.EmbeddingModel(keras.Sequential(layers)), index, tmp_path / "x")


def test_no_threshold_never_matches_and_inf_matches_every_neighbour(tmp_path):
    """threshold=None (no threshold chosen, e.g. a failed calibration) makes
    is_match False everywhere, in Index.match and in the exported lookup alike;
    only an explicit float("inf") accepts every neighbour."""
    import tensorflow as tf

    from tfdml.search import export_lookup

    model = _model(2)
    rng = np.random.default_rng(11)
    x, queries = rng.standard_normal((12, 6)), rng.standard_normal((3, 6)).astype(np.float32)
    index = Index().add(model(x).numpy(), np.arange(12))
    e = model(queries).numpy()
    assert not index.match(e, None, k=4)[2].any()
    assert index.match(e, float("inf"), k=4)[2].all()
    with pytest.raises(ValueError, match="threshold.*NaN"):
        index.match(e, float("nan"))
    for threshold, want in ((None, False), (float("inf"), True)):
        export_lookup(model, index, tmp_path / "m", k=4, threshold=threshold)
        loaded = tf.saved_model.load(str(tmp_path / "m"))  # keep a reference
        assert (loaded.lookup(tf.constant(queries))["is_match"].numpy() == want).all()
    with pytest.raises(ValueError, match="threshold.*NaN"):
        export_lookup(model, index, tmp_path / "m", threshold=float("nan"))


def test_the_command_line_describes_an_index_and_flags_a_damaged_one(tmp_path, capsys):
    from tfdml import search

    path = Index("cosine").add(np.eye(3), ["a", "b", "c"], labels=[1, 1, 2]).save(
        tmp_path / "i.npz")
    assert search.main([path]) == 0
    assert "3 entries, dim 3, distance cosine, str ids, labels: int64" in capsys.readouterr().out
    open(tmp_path / "cut.npz", "wb").write(open(path, "rb").read()[:100])
    assert search.main([path, str(tmp_path / "cut.npz")]) == 2
    assert "cut.npz" in capsys.readouterr().err


def test_python_dash_m_imports_the_module_once(tmp_path):
    """``python -m tfdml.search``: the package does not import tfdml.search
    itself, so runpy runs it once, without its "found in sys.modules" warning;
    ``tfdml.search`` still resolves on first use."""
    import subprocess
    import sys

    path = Index().add(np.eye(2), [1, 2]).save(str(tmp_path / "i.npz"))
    env = dict(os.environ, PYTHONWARNINGS="error::RuntimeWarning")
    done = subprocess.run([sys.executable, "-m", "tfdml.search", path], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "sys.modules" not in done.stderr and "1 index file: 1 ok" in done.stdout
    import tfdml

    assert tfdml.search.Index is Index


@pytest.mark.parametrize("distance", ["euclidean", "cosine"])
def test_faiss_backend_gives_the_same_top_k(distance):
    _faiss()
    gallery, queries = _clustered(seed=11)
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


def test_exact_index_files_load_as_exact(tmp_path):
    from tfdml import search

    path = Index("cosine").add(np.eye(3), ["a", "b", "c"]).save(tmp_path / "i.npz")
    index = Index.load(path)
    assert index.search_settings == {"backend": "tensorflow", "approximate": None}
    assert "search: tensorflow exact" in search.describe(path)


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
