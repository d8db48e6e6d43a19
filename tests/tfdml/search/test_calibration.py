"""tfdml.search.calibrate against a NumPy sweep and hand-computed cases; its refusals."""

import os

import numpy as np
import pytest

from tfdml.search import Index


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


@pytest.mark.parametrize("args, kwargs, want", [
    ((), {}, 1),  # the default: precision 0.99, reached at t = 1 only
    ((), {"target_precision": 0.7}, 4), ((0.7,), {}, 4), ((), {"target": 0.8}, 1),
    ((), {"metric": "precision", "target": 0.6}, 5),
    ((), {"metric": "recall", "target": 0.6}, 3), ((), {"metric": "recall", "target": 1.0}, 4),
    ((), {"metric": "recall", "target": 0.3}, 1), ((), {"metric": "f1"}, 4),
])
def test_calibrate_for_precision_recall_or_f1_on_a_hand_computed_case(search_data, args, kwargs, want):
    from tfdml.search import calibrate

    index, queries, labels = search_data.five_queries()
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


def test_calibrate_names_a_wrong_metric_or_target(search_data):
    from tfdml.search import calibrate

    index, queries, labels = search_data.five_queries()
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
