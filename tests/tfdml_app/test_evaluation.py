"""tfdml_app.evaluation.run: one options object in, one result object out."""

import dataclasses
import json
import os

import pytest
import tensorflow as tf

from tfdml_app import evaluation


def _flatten(x):
    return tf.reshape(tf.cast(x, tf.float32), [tf.shape(x)[0], -1])


def test_run_returns_what_it_wrote(tmp_path):
    from pipelines import sources

    split = sources.get_source("digits").split("test")
    options = evaluation.Options(metrics=("recall", "map@r"), ks=(1,), plots=False,
                                 baseline="raw_pixels", calibrate=0.9)
    result = evaluation.run(_flatten, split, str(tmp_path), options, verbose=0)
    assert isinstance(result, evaluation.Result)
    with open(result.paths["metrics"]) as fh:
        written = json.load(fh)
    assert written == json.loads(json.dumps(result.record))
    assert set(result.metrics) >= {"recall@1", "map@r"}
    assert written["metrics"]["recall@1"] == pytest.approx(float(result.metrics["recall@1"]))
    assert result.baseline == written["baseline"] and result.baseline["name"] == "raw_pixels"
    assert result.calibration == written["calibration"]
    assert os.path.exists(result.paths["calibration"]) and result.paths["plots"] == []


def test_options_are_fixed_and_default_to_the_command_line_s():
    options = evaluation.Options()
    assert options.metrics == evaluation.DEFAULT_METRICS and options.ks == evaluation.DEFAULT_KS
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.distance = "cosine"


def test_run_writes_per_class_figures_whose_query_weighted_mean_is_the_figure(tmp_path):
    """per_class.csv: one row per class of the split with its name and number of
    queries; the query-weighted mean of a class's R@1 and MAP@R is the split's."""
    import csv

    import numpy as np
    from pipelines import sources

    split = sources.get_source("digits").split("test")
    options = evaluation.Options(metrics=("recall", "map@r"), ks=(1,), plots=False)
    result = evaluation.run(_flatten, split, str(tmp_path), options, verbose=0)
    assert result.record["per_class"] == "per_class.csv"
    with open(result.paths["per_class"]) as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["class"]) for r in rows] == list(range(split.num_classes))
    assert [r["name"] for r in rows] == [split.class_names[i] for i in range(split.num_classes)]
    counts = np.array([int(r["num_queries"]) for r in rows])
    assert counts.tolist() == [split.class_sizes[i] for i in range(split.num_classes)]
    for key in ("recall@1", "map@r"):
        per_class = np.array([float(r[key]) for r in rows])
        assert np.sum(per_class * counts) / counts.sum() == pytest.approx(
            float(result.metrics[key]), abs=1e-6)


def test_every_default_of_metrics_and_ks_is_the_library_s_one_table():
    import inspect

    from tfdml import callbacks, metric_names, metrics
    from tfdml_app import config

    table = (metric_names.DEFAULT_METRICS, metric_names.DEFAULT_KS)
    assert (metrics.DEFAULT_METRICS, metrics.DEFAULT_KS) == table and metrics.METRICS is metric_names.METRICS
    assert (evaluation.DEFAULT_METRICS, evaluation.DEFAULT_KS) == table  # evaluate.py
    assert (evaluation.Options().metrics, evaluation.Options().ks) == table
    defaults = config.validate({})["evaluation"]
    assert (tuple(defaults["metrics"]), tuple(defaults["ks"])) == table
    for function in (metrics.evaluate_embeddings, metrics.parse_metrics, callbacks.RetrievalEvaluation):
        parameters = inspect.signature(function).parameters
        assert (parameters["metrics"].default, parameters["ks"].default) == table, function


def test_embedding_map_writes_the_projector_and_the_map_and_a_rerun_without_removes_them(tmp_path, monkeypatch):
    """(t-SNE itself is tested in tests/tfdml/test_embedding_map.py; a cheap layout here.)"""
    import numpy as np
    from pipelines import sources

    from tfdml import embedding_map

    monkeypatch.setattr(embedding_map, "coordinates", lambda e, **kw: (np.asarray(e)[:, :2], "tsne"))
    split = sources.get_source("digits").split("test")
    options = evaluation.Options(metrics=("recall",), ks=(1,), plots=False, embedding_map=True)
    result = evaluation.run(_flatten, split, str(tmp_path), options, verbose=0)
    assert result.record["projector"] == "projector" and "embedding_map.png" in result.record["plots"]
    projector = tmp_path / "projector"
    for name in ("tensors.tsv", "metadata.tsv", "sprite.png", "projector_config.pbtxt"):
        assert (projector / name).exists(), name
    assert len((projector / "metadata.tsv").read_text().splitlines()) == len(split.labels) + 1
    evaluation.run(_flatten, split, str(tmp_path), dataclasses.replace(options, embedding_map=False), verbose=0)
    assert not projector.exists() and not (tmp_path / "embedding_map.png").exists()


def test_run_scores_embeddings_given_and_refuses_those_of_another_split(tmp_path):
    """``embedded``: the split's embeddings at hand give the figures of embedding it
    again; rows in another order are refused, not scored against the wrong labels."""
    import numpy as np

    from pipelines import sources

    split = sources.get_source("digits").split("test")
    options = evaluation.Options(metrics=("recall", "map@r"), ks=(1,), plots=False)
    fresh = evaluation.run(_flatten, split, str(tmp_path / "fresh"), options, verbose=0)
    given = evaluation.run(None, split, str(tmp_path / "given"), options, verbose=0,
                           embedded=(fresh.embeddings, fresh.labels))
    assert given.metrics == fresh.metrics
    order = np.argsort(fresh.labels, kind="stable")[::-1]
    with pytest.raises(ValueError, match="not those of the 'test' split"):
        evaluation.run(None, split, str(tmp_path / "wrong"), options, verbose=0,
                       embedded=(fresh.embeddings[order], fresh.labels[order]))
