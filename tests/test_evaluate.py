"""evaluate.py end to end: a tiny .keras model and a tiny SavedModel, plots, clear errors."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from matplotlib import image as mpimg

from tfdml_app import embedding, evaluate_cli, evaluation

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PLOTS = ("retrieval_grid.png", "distance_histogram.png", "pr_curve.png", "roc.png")
FAST = ["--data", "digits", "--quiet", "--num-pairs", "200", "--grid", "3", "4",
        "--metrics", "recall", "map@r", "r_precision", "map", "nmi", "verification"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A tiny untrained embedding model for 8×8×1 digits, as .keras and as SavedModel."""
    root = tmp_path_factory.mktemp("models")
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(),
                              keras.layers.Dense(6)])
    keras_path = str(root / "model.keras")
    model.save(keras_path)
    export_path = str(root / "export")
    model.export(export_path, verbose=False)
    conv = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(2, 3)])
    conv_path = str(root / "feature_map.keras")
    conv.save(conv_path)
    big = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Flatten(),
                            keras.layers.Dense(4)])
    big_path = str(root / "mnist_model.keras")
    big.save(big_path)
    rgb = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                            keras.layers.Dense(5)])
    rgb_path = str(root / "rgb_model.keras")
    rgb.save(rgb_path)
    return dict(keras=keras_path, export=export_path, conv=conv_path, big=big_path,
                rgb=rgb_path, root=root)


def test_keras_model_end_to_end(models, tmp_path):
    out = str(tmp_path / "eval")
    assert evaluate_cli.main(["--model", models["keras"], "--out", out] + FAST) == 0
    with open(os.path.join(out, "metrics.json")) as f:
        report = json.load(f)
    m = report["metrics"]
    for key in ("recall@1", "recall@8", "map@r", "r_precision", "map", "nmi",
                "verification_accuracy", "roc_auc", "eer", "num_queries"):
        assert key in m
    assert 0.0 < m["recall@1"] <= 1.0 and m["num_queries"] == report["info"]["num_examples"]
    assert report["info"]["embedding_dim"] == 6
    assert sorted(report["plots"]) == sorted(PLOTS)
    for name in PLOTS:
        img = mpimg.imread(os.path.join(out, name))
        assert img.ndim == 3 and img.shape[0] > 50 and img.shape[1] > 50


def test_saved_model_gives_the_same_metrics(models, tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    args = FAST + ["--no-plots"]
    assert evaluate_cli.main(["--model", models["keras"], "--out", a] + args) == 0
    assert evaluate_cli.main(["--model", models["export"], "--out", b] + args) == 0
    ma = json.load(open(os.path.join(a, "metrics.json")))["metrics"]
    mb = json.load(open(os.path.join(b, "metrics.json")))["metrics"]
    assert mb == pytest.approx(ma, abs=1e-6)
    assert not os.path.exists(os.path.join(b, "roc.png"))


def test_config_sections(models, tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "model: {backbone: mlp}\n"  # other sections are ignored
        "data:\n  source: digits\n  options: {}\n  test_split: test\n"
        "image: {size: null, channels: 3}\n"
        "evaluation:\n  metrics: [recall@2, map@r]\n  ks: [1]\n  distance: cosine\n")
    read = evaluation.read_config(str(cfg))
    assert read == {"source": "digits", "source_kwargs": {}, "split": "test", "image_size": None,
                    "image_channels": 3, "metrics": ["recall@2", "map@r"], "ks": [1],
                    "distance": "cosine", "baseline": None}
    out = str(tmp_path / "eval")
    # The model takes 3-channel images: the config's image.channels converts the 1-channel digits.
    assert evaluate_cli.main(["--model", models["rgb"], "--config", str(cfg), "--out", out,
                          "--quiet", "--no-plots"]) == 0
    report = json.load(open(os.path.join(out, "metrics.json")))
    assert list(report["metrics"])[:3] == ["recall@1", "recall@2", "map@r"]
    assert report["info"]["distance"] == "cosine"
    # The keys evaluate.py reads are keys that train.py's config accepts.
    from tfdml_app import config as config_lib

    assert config_lib.load(str(cfg))["evaluation"]["distance"] == "cosine"
    assert evaluate_cli.main(["--model", models["rgb"], "--data", "digits", "--out", out,
                          "--quiet", "--no-plots"]) == 2  # without the transform: clear error


def test_model_input_transform():
    t = embedding.model_input_transform(size=4, channels=3)
    assert tuple(t(np.zeros((2, 8, 8, 1), np.float32)).shape) == (2, 4, 4, 3)
    assert embedding.model_input_transform() is None


@pytest.mark.parametrize("case, match", [
    ("missing", "no such file"),
    ("dir", "without saved_model.pb"),
    ("h5", "expected a .keras file"),
    ("conv", "not an embedding"),
    ("big", "expects inputs of shape 28×28×1 but cannot take the data's inputs of shape 8×8×1"),
    ("truncated", "not a complete .keras archive"),
    ("out_is_a_file", "File exists"),
    ("metric", "Unknown metric"),
    ("config", "no such file"),
    ("config_typo", "Unknown config key 'evaluation.distanse' (did you mean 'distance'?)"),
    ("source", "Unknown source"),
])
def test_clear_errors(models, tmp_path, capsys, case, match):
    model = models["keras"]
    extra = []
    if case == "missing":
        model = str(tmp_path / "nope.keras")
    elif case == "dir":
        model = str(tmp_path)
    elif case == "h5":
        model = str(tmp_path / "model.h5")
        open(model, "w").close()
    elif case in ("conv", "big"):
        model = models[case]
    elif case == "truncated":  # as left by a run killed while writing it
        model = str(tmp_path / "model.keras")
        with open(models["keras"], "rb") as src, open(model, "wb") as dst:
            dst.write(src.read()[:1000])
    elif case == "out_is_a_file":  # an unwritable --out
        (tmp_path / "o").write_text("a file, not a directory")
    elif case == "metric":
        extra = ["--metrics", "accuracy"]
    elif case == "config":
        extra = ["--config", str(tmp_path / "missing.yaml")]
    elif case == "config_typo":  # read and checked as train.py reads it, not ignored
        (tmp_path / "typo.yaml").write_text("evaluation: {distanse: cosine}\n")
        extra = ["--config", str(tmp_path / "typo.yaml")]
    elif case == "source":
        extra = ["--data", "imagenet"]
    args = ["--model", model, "--out", str(tmp_path / "o"), "--quiet", "--grid", "0", "0"]
    args += FAST[:2] if case != "source" else []
    code = evaluate_cli.main(args + extra)
    err = capsys.readouterr().err
    assert code == 2
    assert match in err and "Traceback" not in err


#: The environment of a user who never heard of TF_CPP_MIN_LOG_LEVEL.
_ENV_WITHOUT_LOG_LEVEL = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}


def test_cli_bad_path_fails_fast_without_traceback(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "evaluate.py"), "--model",
                           str(tmp_path / "missing.keras")], capture_output=True, text=True,
                          timeout=120, env=_ENV_WITHOUT_LOG_LEVEL)
    assert proc.returncode == 2
    assert "no such file" in proc.stderr and "Traceback" not in proc.stderr
    assert "absl::InitializeLog" not in proc.stderr and "oneDNN custom operations" not in proc.stderr


def test_raw_pixel_baseline_matches_scikit_learn(models, tmp_path, capsys):
    """--baseline raw_pixels: Recall@1 and NMI of the L2-normalised test digits,
    checked against scikit-learn's brute-force neighbours and its NMI of the
    same k-means clustering; metrics.json keeps model and baseline apart."""
    from sklearn.datasets import load_digits
    from sklearn.metrics import normalized_mutual_info_score
    from sklearn.neighbors import NearestNeighbors

    from tfdml.metrics import kmeans

    out = str(tmp_path / "eval")
    args = ["--model", models["keras"], "--out", out, "--data", "digits", "--no-plots",
            "--metrics", "recall", "nmi", "--ks", "1", "--baseline", "raw_pixels"]
    assert evaluate_cli.main(args) == 0
    report = json.load(open(os.path.join(out, "metrics.json")))
    assert report["baseline"]["name"] == "raw_pixels"
    baseline = report["baseline"]["metrics"]

    x, y = load_digits(return_X_y=True)
    x, y = x[y >= 5] / 16.0, y[y >= 5]  # the digits source's test split
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    _, idx = NearestNeighbors(n_neighbors=2).fit(x).kneighbors(x)
    assert baseline["recall@1"] == pytest.approx(np.mean(y[idx[:, 1]] == y), abs=1e-9)
    clusters = kmeans(x.astype(np.float32), 5, seed=0)
    assert baseline["nmi"] == pytest.approx(normalized_mutual_info_score(y, clusters), abs=1e-6)
    assert report["metrics"]["recall@1"] != baseline["recall@1"]  # the model's own figure

    with pytest.raises(SystemExit):  # a typo is refused by the parser, naming the choice
        evaluate_cli.main(args[:-2] + ["--baseline", "raw_pixel"])
    assert "raw_pixels" in capsys.readouterr().err


def test_retrieval_grid_shows_the_users_class_names(tmp_path, monkeypatch):
    """Labels are contiguous indices inside the pipeline; the plots
    show the user's classes (a folder's class directories), not "(2)"."""
    import tensorflow as tf

    from pipelines import sources
    from tfdml import plots

    rng = np.random.default_rng(0)
    for cname in ("ant", "bee", "cat", "dog"):
        (tmp_path / "imgs" / cname).mkdir(parents=True)
        for k in range(3):
            pixels = rng.integers(0, 256, size=(4, 4, 3), dtype=np.uint8)
            tf.io.write_file(str(tmp_path / "imgs" / cname / f"{k}.png"), tf.io.encode_png(pixels))
    split = sources.get_source("folder", root=tmp_path / "imgs", image_size=4).split("test")
    shown = {}

    def record(query_images, result_images, correct, path, query_labels=None, result_labels=None, **kw):
        shown["query"], shown["result"] = list(query_labels), np.asarray(result_labels).ravel().tolist()
        return path

    monkeypatch.setattr(plots, "retrieval_grid", record)
    evaluation.run(lambda x: tf.reshape(x, [tf.shape(x)[0], -1]), split, str(tmp_path / "out"),
                   evaluation.Options(metrics=("recall",), ks=(1,), grid=(4, 2)), verbose=0)
    assert set(shown["query"]) <= {"cat", "dog"} and set(shown["result"]) <= {"cat", "dog"}
    assert shown["query"]


def test_config_evaluation_baseline_is_honoured(models, tmp_path):
    """Evaluate.py --config ignored evaluation.baseline."""
    cfg = tmp_path / "run.yaml"
    cfg.write_text("data: {source: digits}\nevaluation: {metrics: [recall], ks: [1], baseline: raw_pixels}\n")
    out = str(tmp_path / "eval")
    assert evaluate_cli.main(["--model", models["keras"], "--config", str(cfg), "--out", out, "--quiet",
                          "--no-plots"]) == 0
    report = json.load(open(os.path.join(out, "metrics.json")))
    assert report["baseline"]["name"] == "raw_pixels" and "recall@1" in report["baseline"]["metrics"]


def test_calibrate_option_writes_a_threshold_and_its_plot(models, tmp_path):
    out = str(tmp_path / "eval")
    assert evaluate_cli.main(["--model", models["keras"], "--out", out, "--calibrate", "0.9"]
                         + FAST) == 0
    with open(os.path.join(out, "metrics.json")) as f:
        report = json.load(f)
    c = report["calibration"]
    assert c["target_precision"] == 0.9 and c["distance"] == "euclidean"
    assert c["precision"] >= 0.9 and 0.0 < c["recall"] <= 1.0 and c["threshold"] > 0
    assert c["num_index"] + c["num_queries"] == report["info"]["num_examples"]
    assert "calibration.png" in report["plots"]
    assert os.path.exists(os.path.join(out, "calibration.png"))
    assert json.load(open(os.path.join(out, "calibration.json"))) == c


def test_calibration_report_matches_a_numpy_nearest_neighbour_check():
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 4, 200).astype(np.int64)
    emb = (np.eye(4)[labels] * 3 + rng.standard_normal((200, 4))).astype(np.float32)
    c = evaluation.calibration_report(emb, labels, "euclidean", 0.95, seed=5)
    # The documented split: a permutation from default_rng(seed), first half indexed.
    order = np.random.default_rng(5).permutation(200)
    g, q = order[:100], order[100:]
    d = np.sqrt(((emb[q][:, None].astype(np.float64) - emb[g][None]) ** 2).sum(-1))
    nn = np.argmin(d, axis=1)
    correct = labels[g][nn] == labels[q]
    accepted = d[np.arange(100), nn] <= c["threshold"] + 1e-5
    assert c["precision"] == pytest.approx(np.sum(correct & accepted) / accepted.sum())
    assert c["recall"] == pytest.approx(np.sum(correct & accepted) / correct.sum())
    assert c["precision"] >= 0.95
    # The largest such threshold: every larger nearest distance misses the target.
    nearest = d[np.arange(100), nn]
    for t in nearest[nearest > c["threshold"] + 1e-5]:
        acc = nearest <= t
        assert np.sum(correct & acc) / acc.sum() < 0.95
    # Every example its own class: no nearest neighbour is ever right.
    bad = evaluation.calibration_report(emb, np.arange(200), "cosine", 0.5)
    assert "No threshold reaches precision 0.5" in bad["error"] and bad["distance"] == "cosine"


def test_save_index_writes_the_split_as_a_search_index(models, tmp_path):
    from tfdml import search

    out, path = str(tmp_path / "eval"), str(tmp_path / "index.npz")
    assert evaluate_cli.main(["--model", models["keras"], "--out", out, "--save-index", path,
                          "--no-plots", "--distance", "cosine"] + FAST) == 0
    index = search.Index.load(path)
    report = json.load(open(os.path.join(out, "metrics.json")))
    assert len(index) == report["info"]["num_examples"] and index.distance == "cosine"
    assert index.ids.tolist() == list(range(len(index))) and index.labels.dtype == np.int64
    # Leave-one-out recall@1 from the index equals the metric evaluate.py reports.
    ids, _ = index.search(index.embeddings, k=2)
    nearest = np.where(ids[:, 0] == np.arange(len(index)), ids[:, 1], ids[:, 0])
    recall1 = np.mean(index.labels[nearest] == index.labels)
    assert recall1 == pytest.approx(report["metrics"]["recall@1"], abs=2 / len(index))


def test_help_states_the_ranking_and_tie_rule():
    text = " ".join(evaluate_cli.build_parser().format_help().split())
    assert "same neighbours and the same metrics by cosine and by euclidean" in text
    assert "negative tied with a positive before it" in text
    assert "lower index first" in text


def test_the_roc_shows_the_baseline_whatever_the_metrics(tmp_path, monkeypatch):
    """The raw-pixel ROC is drawn next to the model's also when 'verification'
    is not among the metrics, and is the same curve as when it is."""
    import tensorflow as tf

    from pipelines import sources
    from tfdml import plots

    split = sources.get_source("digits").split("test")
    drawn = []
    original = plots.roc_curve

    def record(fpr, tpr, path, baseline=None, **kwargs):
        drawn.append(baseline)
        return original(fpr, tpr, path, baseline=baseline, **kwargs)

    monkeypatch.setattr(plots, "roc_curve", record)
    embedder = lambda x: tf.reshape(x, [tf.shape(x)[0], -1])[:, :20]  # noqa: E731
    for metrics in (["recall"], ["recall", "verification"]):
        evaluation.run(embedder, split, str(tmp_path / metrics[-1]),
                       evaluation.Options(metrics=tuple(metrics), ks=(1,), num_pairs=300, grid=(0, 0),
                                          baseline="raw_pixels"), verbose=0)
    assert len(drawn) == 2 and drawn[0] is not None and drawn[1] is not None
    for a, b in zip(drawn[0][:2], drawn[1][:2]):
        np.testing.assert_array_equal(a, b)
    assert drawn[0][2] == drawn[1][2] and drawn[0][2].startswith("raw pixels, AUC")


def test_table_columns_line_up():
    results = {"recall@1": 0.5, "map@r": 0.25, "num_queries": 896}
    lines = evaluation.format_table(results, {"recall@1": 0.75, "num_queries": 896}, "raw_pixels").splitlines()
    ends = {line.rstrip().__len__() for line in lines}
    assert len(ends) == 1, lines  # every column right-aligned to the same edge
    last = len("  raw_pixels")
    assert {len(line[:-last].rstrip()) for line in lines} == {len(lines[0]) - last}, lines
    assert lines[3].rstrip().endswith("-")  # a figure the baseline lacks
