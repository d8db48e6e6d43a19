"""tfdml.plots writes readable PNGs and rejects inconsistent input."""

import os

import matplotlib
import numpy as np
import pytest
from matplotlib import image as mpimg

from tfdml import figures as drawing
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
    """A grid of 64 green borders teaches nothing; queries whose
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
    """Each plot says which split and classes it shows; where a baseline was
    scored, its PR curve and ROC (same pairs) are drawn next to the model's."""
    from tfdml import metrics

    figures = {}
    save = drawing.save

    def keep(fig, path):
        figures[os.path.basename(path)] = fig
        return save(fig, path)

    monkeypatch.setattr(drawing, "save", keep)
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


# --- layout: what each figure says, and that its text stays readable ------------------------

LONG_TITLE = "test split, classes " + ", ".join(f"Acura Integra Type R {2000 + i}" for i in range(12)) + \
    ", ... (76 classes)"


@pytest.fixture
def figures(monkeypatch):
    """The figures the plots draw, by file name (drawn, so that their layout is final)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    drawn = {}

    def keep(fig, path):
        FigureCanvasAgg(fig).draw()
        drawn[os.path.basename(path)] = fig
        return path

    monkeypatch.setattr(drawing, "save", keep)
    return drawn


def assert_readable(fig):
    """Everything drawn lies inside the figure, and no title overlaps an image, a plot area
    or another title."""
    renderer = fig.canvas.get_renderer()
    tight = fig.get_tightbbox(renderer)  # inches: every drawn artist, tick labels included
    width, height = fig.get_size_inches()
    eps = 0.02
    assert tight.x0 >= -eps and tight.y0 >= -eps and tight.x1 <= width + eps and \
        tight.y1 <= height + eps, f"drawn outside the figure: {tight} vs {width} x {height} in"
    titles = [t for t in [fig._suptitle] + [ax.title for ax in fig.axes]
              if t is not None and t.get_text().strip()]
    boxes = [t.get_window_extent(renderer) for t in titles]
    inside = fig.bbox
    areas = [ax.get_window_extent(renderer) for ax in fig.axes]
    for text, box in zip(titles, boxes):
        assert box.x0 >= inside.x0 - 1 and box.x1 <= inside.x1 + 1 and box.y1 <= inside.y1 + 1, \
            f"{text.get_text()!r} is clipped"
        for area in areas:
            assert not box.overlaps(area), f"{text.get_text()!r} overlaps a plot area"
        for other, other_box in zip(titles, boxes):
            if other is not text:
                assert not box.overlaps(other_box), f"{text.get_text()!r} overlaps {other.get_text()!r}"


def test_grid_caps_its_rows_and_says_so_and_keeps_the_old_call(tmp_path, figures):
    """Rows are capped (max_rows) so that many queries give a bounded image, and the title
    says how many are shown. search.py's call (positional correct, keyword labels and title)
    keeps working."""
    rng = np.random.default_rng(0)
    q, r = rng.random((42, 6, 6, 3)), rng.random((42, 5, 6, 6, 3))
    correct = rng.random((42, 5)) < 0.5
    plots.retrieval_grid(q, r, correct, str(tmp_path / "g.png"),
                         query_labels=[f"query_file_with_a_long_name_{i}.jpg" for i in range(42)],
                         result_labels=[[f"{d:.3f}" for d in row] for row in rng.random((42, 5))],
                         title="42 queries, 5 nearest of 1234")
    fig = figures["g.png"]
    assert len(fig.axes) == plots.MAX_GRID_ROWS * 6
    assert f"first {plots.MAX_GRID_ROWS} of 42 queries shown" in fig._suptitle.get_text()
    assert "42 queries, 5 nearest of 1234" in fig._suptitle.get_text()
    assert fig.get_figheight() < 1.5 * plots.MAX_GRID_ROWS + 1
    assert_readable(fig)
    plots.retrieval_grid(q[:3], r[:3], correct[:3], str(tmp_path / "all.png"), max_rows=None)
    assert len(figures["all.png"].axes) == 3 * 6
    assert "shown" not in figures["all.png"]._suptitle.get_text()
    assert "3 queries and their 5 nearest results" in figures["all.png"]._suptitle.get_text()
    # Classes unknown (a folder of unlabelled queries): grey frames, no colour key.
    plots.retrieval_grid(q[:2], r[:2], None, str(tmp_path / "unknown.png"), title="2 queries")
    fig = figures["unknown.png"]
    assert "green" not in fig._suptitle.get_text()
    assert {matplotlib.colors.to_hex(ax.spines["top"].get_edgecolor()) for ax in fig.axes[1:6]} == {
        matplotlib.colors.to_hex("grey")}


def test_grid_from_write_all_says_failures_come_first(tmp_path, figures):
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 25)
    embeddings = np.eye(4)[labels] + 0.01 * rng.normal(size=(100, 4))
    embeddings[[3, 17, 40]] = np.eye(4)[[2, 0, 3]]  # three examples that sit in another class
    plots.write_all(embeddings.astype("float32"), labels, str(tmp_path), images=rng.random((100, 5, 5)),
                    grid=(8, 4), title=LONG_TITLE)
    fig = figures["retrieval_grid.png"]
    import re

    text = fig._suptitle.get_text().replace("\n", " ")
    found = re.search(r"(\d+) failures first \(nearest result of another class\), then (\d+) "
                      r"successes, of 80 random queries of 100 \(R@1 ([\d.]+) on them\)", text)
    assert found, text
    failures, successes, recall = int(found[1]), int(found[2]), float(found[3])
    assert failures >= 3 and failures + successes == 8
    assert recall <= 1 - failures / 80 + 1e-9
    # The rows are as announced: the first `failures` queries' nearest results are red.
    nearest = [fig.axes[i * 5 + 1].spines["top"].get_edgecolor() for i in range(8)]
    red = [matplotlib.colors.to_hex(c) == plots._WRONG for c in nearest]
    assert red == [True] * failures + [False] * successes
    assert "green = same class" in text
    assert_readable(fig)


def test_long_subtitles_wrap_inside_the_figure(tmp_path, figures):
    """A subtitle naming many classes wraps inside the figure, clear of the plots and the
    grid's first row, and keeps the number of classes."""
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 6)
    emb = (rng.standard_normal((4, 3))[labels] * 3 + rng.standard_normal((24, 3))).astype(np.float32)
    plots.write_all(emb, labels, str(tmp_path), images=rng.random((24, 5, 5, 1)), num_pairs=40,
                    grid=(2, 2), title=LONG_TITLE)
    assert set(figures) == {"distance_histogram.png", "roc.png", "pr_curve.png", "retrieval_grid.png"}
    for name, fig in figures.items():
        assert_readable(fig)
        # Cut in the middle: the first names and the number of classes stay.
        text = " ".join([fig._suptitle.get_text() if fig._suptitle else ""] +
                        [ax.get_title() for ax in fig.axes]).replace("\n", " ")
        assert "classes Acura Integra Type R 2000" in text and "(76 classes)" in text, (name, text)


def test_legends_name_the_models_curve(tmp_path, figures):
    """The model's own PR curve and ROC are labelled, next to a baseline's."""
    base = (np.linspace(0, 1, 11), np.linspace(0.9, 0.1, 11), "raw pixels")
    plots.pr_curve(np.linspace(0, 1, 11), np.linspace(1, 0.2, 11), str(tmp_path / "pr.png"),
                   baseline=base)
    plots.roc_curve([0, 0.2, 1], [0, 0.7, 1], str(tmp_path / "roc.png"),
                    baseline=([0, 0.5, 1], [0, 0.5, 1], "raw pixels"))
    plots.distance_histograms(np.ones(5), np.zeros(5), str(tmp_path / "h.png"))
    for name in ("pr.png", "roc.png"):
        legend = [t.get_text() for t in figures[name].axes[0].get_legend().get_texts()]
        assert legend == ["raw pixels", "model"], (name, legend)
    legend = [t.get_text() for t in figures["h.png"].axes[0].get_legend().get_texts()]
    assert legend == ["positive pairs (n=5)", "negative pairs (n=5)"]
    plots.roc_curve([0, 0.2, 1], [0, 0.7, 1], str(tmp_path / "roc.png"), auc=0.8, eer=0.25)
    assert [t.get_text() for t in figures["roc.png"].axes[0].get_legend().get_texts()] == [
        "model, AUC 0.8000, EER 0.2500"]
