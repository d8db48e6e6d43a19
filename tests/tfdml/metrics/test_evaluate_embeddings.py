"""tfdml.metrics.evaluate_embeddings: the shared entry point of callback and evaluate.py."""

import numpy as np
import pytest

from tfdml import metrics


@pytest.fixture(scope="module")
def blobs():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(5), 12)
    centers = rng.standard_normal((5, 4)) * 10
    return (centers[labels] + rng.standard_normal((60, 4)) * 0.1).astype(np.float32), labels


def test_separated_classes_score_perfectly(blobs):
    x, labels = blobs
    out, details = metrics.evaluate_embeddings(
        x, labels, metrics=metrics.METRICS, ks=(1, 5), num_pairs=200, pr_levels=[0, 0.5, 1],
        return_details=True)
    for key in metrics.metric_keys(metrics.METRICS, (1, 5)):
        if key == "eer":
            assert out[key] == 0.0
        elif key != "verification_accuracy_std":
            assert out[key] == pytest.approx(1.0), key
    assert out["num_queries"] == 60 and out["num_excluded_queries"] == 0
    np.testing.assert_allclose(details["pr_curve"][1], 1.0)
    assert details["pairs"]["issame"].sum() == 100
    assert details["roc"][0][0] == 0.0


def test_keys_in_documented_order_and_agree_with_parts(blobs):
    x, labels = blobs
    rng = np.random.default_rng(1)
    noisy = x + rng.standard_normal(x.shape).astype(np.float32) * 8
    out = metrics.evaluate_embeddings(noisy, labels, metrics=["recall@2", "map@r", "nmi"], ks=[1])
    assert list(out)[:4] == ["recall@1", "recall@2", "map@r", "nmi"]
    ref = metrics.retrieval_metrics(noisy, labels, metrics=("recall", "map@r"), ks=(1, 2))
    assert out["map@r"] == ref["map@r"] and out["recall@2"] == ref["recall@2"]
    assert out["nmi"] == metrics.clustering_metrics(noisy, labels, ("nmi",))["nmi"]


def test_separate_gallery(blobs):
    x, labels = blobs
    out = metrics.evaluate_embeddings(x[::2], labels[::2], ["recall"], gallery=x[1::2],
                                      gallery_labels=labels[1::2])
    assert out["recall@1"] == 1.0 and out["num_queries"] == 30


def test_parse_metrics():
    assert metrics.parse_metrics(["Recall@10", "map@r", "mapr"], ks=[1]) == (
        ("recall", "map@r"), (1, 10))
    assert metrics.parse_metrics("precision", ks=5) == (("precision",), (5,))
    assert metrics.metric_keys(["verification", "nmi"]) == [
        "verification_accuracy", "verification_accuracy_std", "roc_auc", "eer", "nmi"]
    for bad, match in [(["accuracy"], "Unknown metric"), (["recall@x"], "recall@1"),
                       ([], "No metric")]:
        with pytest.raises(ValueError, match=match):
            metrics.parse_metrics(bad)
    with pytest.raises(ValueError, match="ks"):
        metrics.parse_metrics(["recall"], ks=[0])


def test_unknown_names_suggest_the_closest_registered_one():
    with pytest.raises(ValueError, match=r"Unknown metric 'Recal' \(did you mean 'recall'\?\); choose from recall, "):
        metrics.parse_metrics(["Recal"])


@pytest.fixture
def spread_metric():
    """A metric registered by name, as user code registers one; removed after the test."""
    seen = []

    @metrics.register("spread")
    def spread(embeddings, labels, *, gallery, gallery_labels, distance, seed):
        seen.append((embeddings.shape, labels.shape, gallery, distance, seed))
        return float(np.mean(np.std(embeddings, axis=0)))

    yield spread, seen
    del metrics.METRICS["spread"]


def test_a_registered_metric_is_used_by_name(blobs, spread_metric):
    spread, seen = spread_metric
    x, labels = blobs
    assert metrics.METRICS["spread"] is spread
    assert metrics.parse_metrics(["recall", "Spread"], ks=[1]) == (("recall", "spread"), (1,))
    assert metrics.metric_keys(["spread", "nmi"]) == ["spread", "nmi"]
    out = metrics.evaluate_embeddings(x, labels, ["recall", "spread"], ks=[1], distance="cosine", seed=3)
    assert list(out)[:2] == ["recall@1", "spread"]
    assert out["spread"] == float(np.mean(np.std(x, axis=0)))
    assert seen == [((60, 4), (60,), None, "cosine", 3)]


def test_registering_a_metric_refuses_what_could_not_be_selected(spread_metric):
    for name, match in [("recall", "already registered"), ("mapr", "alias of 'map@r'"),
                        ("Spread2", "lower case"), ("map@5", "Python identifier"),
                        ("spread", "already registered")]:
        with pytest.raises(ValueError, match=match):
            metrics.register(name)(lambda embeddings, labels, **options: 0.0)
    with pytest.raises(ValueError, match="callable"):
        metrics.register("constant")(0.5)
    assert "constant" not in metrics.METRICS


def test_a_registered_metric_returns_one_number(blobs):
    x, labels = blobs
    metrics.register("pair")(lambda embeddings, labels, **options: (1.0, 2.0))
    try:
        with pytest.raises(ValueError, match=r"metric 'pair' returned \(1.0, 2.0\); a registered metric returns one "
                                             r"number"):
            metrics.evaluate_embeddings(x, labels, ["pair"])
    finally:
        del metrics.METRICS["pair"]


def test_bad_inputs(blobs):
    x, labels = blobs
    with pytest.raises(ValueError, match="labels"):
        metrics.evaluate_embeddings(x, labels[:-1])
    with pytest.raises(ValueError, match="distance"):
        metrics.evaluate_embeddings(x, labels, distance="hamming")
    with pytest.raises(ValueError, match="rank-2"):
        metrics.evaluate_embeddings(x[:, :, None], labels)


def test_ami_and_mrr_are_metric_names(blobs):
    x, labels = blobs
    assert metrics.parse_metrics(["AMI", "mrr", "nmi"]) == (("ami", "mrr", "nmi"), metrics.DEFAULT_KS)
    assert "ami" in metrics.METRICS and "mrr" in metrics.METRICS
    from tfdml_app import config  # validates evaluation.metrics with parse_metrics: no copied list

    assert config.validate({"evaluation": {"metrics": ["mrr", "ami"]}})["evaluation"]["metrics"] == [
        "mrr", "ami"]
    out = metrics.evaluate_embeddings(x, labels, ["mrr", "ami"])
    assert list(out)[:2] == ["mrr", "ami"]
    assert out["mrr"] == pytest.approx(1.0) and out["ami"] == pytest.approx(1.0)


def test_per_class_figures_in_the_details_and_as_csv(blobs, tmp_path):
    import csv

    x, labels = blobs
    rng = np.random.default_rng(2)
    noisy = x + rng.standard_normal(x.shape).astype(np.float32) * 6
    labels = labels.copy()
    labels[0] = 9  # a class of one example: no query of it can be scored
    out, details = metrics.evaluate_embeddings(noisy, labels, ["recall", "map@r", "mrr", "nmi"], ks=[1],
                                               per_class=True, return_details=True)
    table = details["per_class"]
    assert list(table["class"]) == [0, 1, 2, 3, 4, 9]
    assert list(table["num_queries"]) == [11, 12, 12, 12, 12, 0]
    scored = table["num_queries"] > 0
    for key in ("recall@1", "map@r", "mrr"):
        assert np.isnan(table[key][-1])
        assert np.sum(table[key][scored] * table["num_queries"][scored]) / 59 == pytest.approx(out[key])
    names = {c: f"class {c}" for c in range(10)}
    path = tmp_path / "per_class.csv"
    text = metrics.per_class_csv(table, str(path), class_names=names)
    assert path.read_text() == text
    rows = list(csv.DictReader(text.splitlines()))
    assert list(rows[0]) == ["class", "name", "num_queries", "num_excluded_queries", "recall@1",
                             "map@r", "mrr"]
    assert rows[-1]["name"] == "class 9" and rows[-1]["mrr"] == "" and rows[-1]["num_excluded_queries"] == "1"
    assert float(rows[2]["map@r"]) == table["map@r"][2]
    # Without return_details (or without a retrieval metric) nothing per class is computed.
    assert "per_class" not in metrics.evaluate_embeddings(noisy, labels, ["nmi"], per_class=True,
                                                          return_details=True)[1]
