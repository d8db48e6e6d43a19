"""tfdml.plots writes readable PNGs and rejects inconsistent input."""

import os

import matplotlib
import numpy as np
import pytest
from matplotlib import image as mpimg

from tfdml import plots


def test_plots_write_pngs_without_touching_the_backend(tmp_path):
    backend = matplotlib.get_backend()
    rng = np.random.default_rng(0)
    q = rng.random((2, 6, 6, 1))
    r = rng.random((2, 3, 6, 6, 1))
    paths = [
        plots.retrieval_grid(q, r, [[True, False, True], [False, False, True]],
                             str(tmp_path / "grid.png"), [1, 2], [[1, 0, 1], [0, 0, 2]]),
        plots.retrieval_grid(rng.random((1, 5, 5, 3)), rng.random((1, 2, 5, 5, 3)),
                             [[True, False]], str(tmp_path / "rgb.png")),
        plots.distance_histograms(rng.random(50), rng.random(80) + 0.5,
                                  str(tmp_path / "sub" / "hist.png")),
        plots.pr_curve(np.linspace(0, 1, 11), np.linspace(1, 0.2, 11), str(tmp_path / "pr.png"),
                       label="mAP 0.5"),
        plots.roc_curve([0, 0.2, 1], [0, 0.7, 1], str(tmp_path / "roc.png"), auc=0.8, eer=0.25),
    ]
    for path in paths:
        img = mpimg.imread(path)
        assert img.ndim == 3 and min(img.shape[:2]) > 40
    assert matplotlib.get_backend() == backend


def test_bad_input(tmp_path):
    with pytest.raises(ValueError, match="disagree"):
        plots.retrieval_grid(np.zeros((2, 4, 4)), np.zeros((2, 3, 4, 4)), np.zeros((2, 2), bool),
                             str(tmp_path / "g.png"))
    with pytest.raises(ValueError, match="at least one"):
        plots.distance_histograms([], [], str(tmp_path / "h.png"))
    assert plots.is_image_batch(np.zeros((2, 4, 4, 3))) and not plots.is_image_batch(
        np.zeros((2, 10)))


def test_write_all(tmp_path):
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 6)
    emb = (rng.standard_normal((4, 3))[labels] * 3 + rng.standard_normal((24, 3))).astype(
        np.float32)
    paths = plots.write_all(emb, labels, str(tmp_path / "a"), num_pairs=40)
    assert sorted(map(os.path.basename, paths)) == [
        "distance_histogram.png", "pr_curve.png", "roc.png"]
    images = rng.random((24, 5, 5, 1))
    paths = plots.write_all(emb, labels, str(tmp_path / "b"), images=images, num_pairs=40,
                            grid=(2, 3))
    assert "retrieval_grid.png" in map(os.path.basename, paths)
    # One example per class: no pairs or PR curve to draw, nothing fails.
    assert plots.write_all(emb[:4], np.arange(4), str(tmp_path / "c")) == []


def test_retrieval_grid_shows_failures_first(tmp_path, monkeypatch):
    """Issue 16: a grid of 64 green borders teaches nothing; queries whose
    nearest result has another class come first."""
    from tfdml import plots as plots_lib

    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 10)
    embeddings = np.eye(4)[labels] + 0.01 * rng.normal(size=(40, 4))
    embeddings[[3, 17]] = np.eye(4)[[2, 0]]  # two examples that sit in another class
    seen = {}

    def record(query_images, result_images, correct, path, **kwargs):
        seen["correct"], seen["title"] = np.asarray(correct), kwargs.get("title")
        return path

    monkeypatch.setattr(plots_lib, "retrieval_grid", record)
    images = rng.random((40, 4, 4))
    plots_lib.write_all(embeddings.astype("float32"), labels, str(tmp_path), images=images, grid=(40, 3),
                        title="test split, classes a, b")
    first = seen["correct"][:, 0]
    assert not first[0] and first.any()
    assert list(first) == sorted(first)  # every failure (False) before every correct query
    assert seen["title"] == "test split, classes a, b"


def test_every_plot_names_its_split_and_draws_the_baseline(tmp_path, monkeypatch):
    """Issue 16: each plot says which split and classes it shows; where a baseline was
    scored, its PR curve and ROC (same pairs) are drawn next to the model's."""
    from tfdml import metrics

    figures = {}
    save = plots._save

    def keep(fig, path):
        figures[os.path.basename(path)] = fig
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(5), 12)
    emb = rng.normal(size=(60, 4)) + 2 * np.eye(5, 4)[labels]
    raw = rng.normal(size=(60, 9))
    levels = np.linspace(0, 1, 11)
    _, details = metrics.evaluate_embeddings(emb, labels, ["map", "verification"], seed=3,
                                             pr_levels=levels, return_details=True)
    _, base = metrics.evaluate_embeddings(raw, labels, ["map", "verification"], seed=3,
                                          pr_levels=levels, return_details=True)
    title = "test split, classes 5, 6, 7, 8, 9"
    plots.write_all(emb, labels, str(tmp_path), images=rng.random((60, 6, 6)), seed=3,
                    details=details, title=title,
                    baseline={"name": "raw pixels", "details": base})
    assert set(figures) == {"distance_histogram.png", "roc.png", "pr_curve.png",
                            "retrieval_grid.png"}
    for name, fig in figures.items():
        texts = [ax.get_title() for ax in fig.axes] + [fig._suptitle.get_text()
                                                       if fig._suptitle else ""]
        assert any(title in t for t in texts), name
    for name in ("roc.png", "pr_curve.png"):
        lines = {line.get_label(): line for line in figures[name].axes[0].get_lines()}
        reference = [label for label in lines if label.startswith("raw pixels")]
        assert reference, f"{name}: no baseline line among {sorted(lines)}"
    fpr, tpr, _ = metrics.verification.roc(base["pairs"]["scores"], base["pairs"]["issame"])
    drawn = [ln for ln in figures["roc.png"].axes[0].get_lines()
             if ln.get_label().startswith("raw pixels")][0]
    np.testing.assert_allclose(drawn.get_xdata(), fpr)
    np.testing.assert_allclose(drawn.get_ydata(), tpr)
    # Without a baseline nothing grey is drawn.
    figures.clear()
    plots.write_all(emb, labels, str(tmp_path), seed=3, details=details, title=title)
    assert not any(ln.get_label().startswith("raw pixels")
                   for ln in figures["roc.png"].axes[0].get_lines())
