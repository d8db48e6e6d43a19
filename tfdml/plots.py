"""PNG plots of an evaluation (matplotlib, Agg canvas; no display, no pyplot state).

* :func:`retrieval_grid` — queries and their top-k results, right answers
  framed green and wrong ones red (Lu et al. 2019 Fig. 5); at most
  :data:`MAX_GRID_ROWS` queries by default, its title says which are shown.
* :func:`distance_histograms` — distributions of positive- and negative-pair
  distances (Wu et al. 2017 Fig. 7 shows the negative one).
* :func:`pr_curve` — mean interpolated precision against recall (Lu Fig. 4c).
* :func:`roc_curve` — true against false positive rate of verification pairs
  (Lu Fig. 4f), with AUC and EER in the legend.
* :func:`threshold_curve` — precision, recall and F1 of a match threshold
  against the threshold (:func:`tfdml.search.calibrate`), the chosen one marked.

Long titles are wrapped to the figure's width (a long class list is cut in
the middle, keeping its count); the model's curves are labelled "model".
Each function writes one PNG and returns its path. The figures are drawn on a
``matplotlib.figure.Figure`` with an Agg canvas, so importing this module
never changes the user's matplotlib backend.
"""

import os

import numpy as np
from matplotlib.figure import Figure

from tfdml import distance_names, figures

_RIGHT, _WRONG = "#1a9850", "#d73027"

#: Rows (queries) and result columns a retrieval grid shows by default; the
#: title says how many were left out. 16 × 12 cells at 90 dpi: about 1.4k × 2k px.
MAX_GRID_ROWS = 16
MAX_GRID_RESULTS = 12
#: Legend label of the model's own curves (next to a baseline's).
MODEL_LABEL = "model"


def is_image_batch(x):
    """True for [N, H, W] or [N, H, W, C] with C in (1, 3, 4)."""
    x = np.asarray(x)
    return x.ndim == 3 or (x.ndim == 4 and x.shape[-1] in (1, 3, 4))


def retrieval_grid(query_images, result_images, correct, path, query_labels=None,
                   result_labels=None, title=None, rows=None, max_rows=MAX_GRID_ROWS,
                   max_results=MAX_GRID_RESULTS):
    """One row per query: the query, then its k nearest results (Lu Fig. 5).

    Args:
      query_images: [Q, H, W(, C)] in [0, 1].
      result_images: [Q, k, H, W(, C)] in [0, 1], nearest first.
      correct: bool [Q, k], result has the query's class (green) or not (red);
        ``None`` when the classes are unknown (grey frames).
      path: PNG file to write.
      query_labels, result_labels: optional [Q] / [Q, k] labels printed above
        (cut with "…" to the width of an image).
      title: what the grid shows (e.g. the split), first line of the title.
      rows: how the rows were chosen (e.g. "3 failures first, then 5
        successes, ..."); default: the number of queries and results.
      max_rows, max_results: the first ``max_rows`` queries and
        ``max_results`` results are drawn (``None``: all); the title says
        how many were left out.
    """
    query_images = np.asarray(query_images)
    result_images = np.asarray(result_images)
    known = correct is not None
    correct = np.asarray(correct, bool) if known else np.ones(result_images.shape[:2], bool)
    if correct.ndim != 2 or result_images.shape[:2] != correct.shape or \
            query_images.shape[0] != correct.shape[0]:
        raise ValueError(
            f"retrieval_grid: {query_images.shape[0]} queries, results of shape "
            f"{result_images.shape[:2]} and correct of shape {correct.shape} disagree."
        )
    num_q, k = correct.shape
    shown_q = num_q if max_rows is None else min(num_q, int(max_rows))
    shown_k = k if max_results is None else min(k, int(max_results))
    if shown_q < 1 or shown_k < 1:
        raise ValueError("retrieval_grid needs at least one query and one result "
                         f"(max_rows={max_rows}, max_results={max_results}).")
    lines = [title] if title else []
    if rows or not title:
        lines.append(rows or f"{num_q} queries and their {k} nearest results")
    notes = []
    if shown_q < num_q:
        notes.append(f"first {shown_q} of {num_q} queries shown")
    if shown_k < k:
        notes.append(f"first {shown_k} of {k} results shown")
    if known:
        notes.append("frame: green = same class as the query, red = another")
    if notes:
        lines.append("; ".join(notes))
    cell = 1.2
    width = cell * (shown_k + 1)
    fontsize = 9
    text = figures.fit_text("\n".join(lines), width - 0.2, fontsize)
    # Title block: its lines, then room for the first row's labels above the images.
    header = 0.12 + text.count("\n") * fontsize * 1.3 / 72 + fontsize * 1.3 / 72 + 0.3
    height = 1.35 * shown_q + header + 0.1
    fig = Figure(figsize=(width, height))
    axes = fig.subplots(shown_q, shown_k + 1, squeeze=False)
    fig.subplots_adjust(left=0.02, right=0.98, bottom=0.1 / height, top=1 - header / height,
                        wspace=0.1, hspace=0.35)
    label_width = cell * 0.95
    for i in range(shown_q):
        figures.show_image(axes[i, 0], query_images[i])
        figures.frame(axes[i, 0], "black")
        label = "query" if query_labels is None else f"query ({query_labels[i]})"
        axes[i, 0].set_title(figures.short_text(label, label_width, 7), fontsize=7)
        for j in range(shown_k):
            ax = axes[i, j + 1]
            figures.show_image(ax, result_images[i, j])
            figures.frame(ax, (_RIGHT if correct[i, j] else _WRONG) if known else "grey")
            label = f"#{j + 1}" if result_labels is None else f"#{j + 1} ({result_labels[i][j]})"
            ax.set_title(figures.short_text(label, label_width, 7), fontsize=7)
    fig.suptitle(text, fontsize=fontsize, y=1 - 0.08 / height, va="top")
    return figures.save(fig, path)


def _set_title(ax, name, title=None, fontsize=9):
    """The plot's name, and under it what it shows (split, classes), wrapped to the
    figure's width (a constrained layout keeps it clear of the plot)."""
    width = ax.figure.get_figwidth() - 0.3
    ax.set_title(figures.fit_text(name if not title else f"{name}\n{title}", width, fontsize),
                 fontsize=fontsize)


def distance_histograms(positive, negative, path, xlabel="distance", bins=50, title=None):
    """Histograms (densities) of positive- and negative-pair distances (Wu Fig. 7).

    ``title``: what the pairs are drawn from (e.g. "test split, classes 5, ..., 9").
    """
    positive = np.asarray(positive, np.float64).reshape(-1)
    negative = np.asarray(negative, np.float64).reshape(-1)
    both = np.concatenate([positive, negative])
    if both.size == 0:
        raise ValueError("distance_histograms needs at least one pair distance.")
    edges = np.histogram_bin_edges(both, bins=bins)
    fig = Figure(figsize=(6, 3.5), layout="constrained")
    ax = fig.subplots()
    if positive.size:
        ax.hist(positive, bins=edges, density=True, alpha=0.6, color=_RIGHT,
                label=f"positive pairs (n={positive.size})")
    if negative.size:
        ax.hist(negative, bins=edges, density=True, alpha=0.6, color=_WRONG,
                label=f"negative pairs (n={negative.size})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("density")
    ax.legend(fontsize=8)
    _set_title(ax, "Pair distance distributions", title)
    return figures.save(fig, path)


def _baseline_line(ax, x, y, label):
    ax.plot(x, y, color="grey", linestyle="--", linewidth=1.2, label=label)


def pr_curve(recall, precision, path, label=MODEL_LABEL, title=None, baseline=None):
    """Precision against recall (Lu Fig. 4c).

    ``label``: the legend of the curve (default "model").
    ``baseline``: ``(recall, precision, label)`` of a reference (e.g. raw
    pixels), drawn dashed grey under the model's curve.
    """
    label = label or MODEL_LABEL
    fig = Figure(figsize=(4.5, 4), layout="constrained")
    ax = fig.subplots()
    if baseline is not None:
        _baseline_line(ax, *baseline)
    ax.plot(recall, precision, color="#4575b4", label=label)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("recall")
    ax.set_ylabel("precision")
    _set_title(ax, "Precision-recall (mean over queries, interpolated)", title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return figures.save(fig, path)


def roc_curve(fpr, tpr, path, auc=None, eer=None, title=None, baseline=None):
    """ROC of verification pairs (Lu Fig. 4f) with the chance diagonal.

    The model's curve is labelled "model" and its AUC and EER.
    ``baseline``: ``(fpr, tpr, label)`` of a reference on the same pairs,
    drawn dashed grey.
    """
    fig = Figure(figsize=(4.5, 4), layout="constrained")
    ax = fig.subplots()
    parts = [MODEL_LABEL, f"AUC {auc:.4f}" if auc is not None else None,
             f"EER {eer:.4f}" if eer is not None else None]
    if baseline is not None:
        _baseline_line(ax, *baseline)
    ax.plot(fpr, tpr, color="#4575b4", label=", ".join(p for p in parts if p))
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
    if eer is not None:
        ax.plot([eer], [1 - eer], "o", color=_WRONG, markersize=4)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    _set_title(ax, "ROC of verification pairs", title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return figures.save(fig, path)


def threshold_curve(thresholds, precision, recall, path, f1=None, threshold=None,
                    target_precision=None):
    """Precision, recall (and F1) of "match if distance <= t" against t."""
    fig = Figure(figsize=(5, 4), layout="constrained")
    ax = fig.subplots()
    ax.plot(thresholds, precision, color="#4575b4", label="precision")
    ax.plot(thresholds, recall, color="#fdae61", label="recall")
    if f1 is not None:
        ax.plot(thresholds, f1, color="grey", linestyle="--", linewidth=1, label="F1")
    if target_precision is not None:
        ax.axhline(target_precision, color="#4575b4", linestyle=":", linewidth=1)
    if threshold is not None:
        ax.axvline(threshold, color=_WRONG, linewidth=1, label=f"threshold {threshold:.4g}")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("distance threshold")
    ax.set_ylabel("rate")
    ax.set_title("Nearest neighbour of the same class: match if distance <= threshold",
                 fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return figures.save(fig, path)


def write_all(embeddings, labels, out_dir, distance="euclidean", images=None, seed=0,
              num_pairs=6000, grid=(8, 8), chunk_size=None, details=None, pr_label=None,
              class_names=None, title=None, baseline=None):
    """Write every plot of an evaluation into ``out_dir``; returns the paths written.

    Args:
      embeddings: [N, d]; labels: [N].
      distance: as in :func:`tfdml.metrics.evaluate_embeddings`.
      images: optional, for the retrieval grid: an array [N, H, W(, C)] in
        [0, 1], or a function ``indices -> images``. No grid without it.
      seed: picks the grid's queries and the verification pairs.
      num_pairs: verification pairs drawn from the labels (histogram, ROC).
      grid: ``(queries, k)`` of the retrieval grid.
      details: the details dict of ``evaluate_embeddings(..., return_details=True)``
        to reuse its pairs and PR curve instead of recomputing them.
      pr_label: legend of the PR curve (default: its mAP when computed here).
      class_names: optional dict label → the user's class name, shown in the
        retrieval grid instead of the contiguous label.
      title: what the plots show (e.g. "test split, classes 5, 6, 7, 8, 9"), under
        each plot's name.
      baseline: ``{"name": ..., "details": ...}``, the details of
        ``evaluate_embeddings(..., return_details=True)`` for a model-free
        baseline on the same examples (and seed, hence the same pairs): its
        PR curve and ROC are drawn dashed grey with the model's. (Not on the
        distance histogram: a baseline's distances have another scale.)

    The grid shows failures first: among a random sample of queries, those
    whose nearest result has another class lead (a grid of correct results
    teaches little), then correct ones; its title says so, with the sample's
    R@1. ``pr_label`` defaults to "model" (and its mAP when computed here).

    Files: ``distance_histogram.png``, ``roc.png``, ``pr_curve.png`` and, with
    images, ``retrieval_grid.png``. A plot that the data cannot support (one
    class only, no class with two examples) is skipped.
    """
    from tfdml import metrics as tm

    embeddings = tm.knn.as_embeddings(embeddings)
    labels = np.asarray(labels).reshape(-1)
    details = details or {}
    base_details = (baseline or {}).get("details") or {}
    base_name = (baseline or {}).get("name", "baseline")
    written = []
    pairs = details.get("pairs")
    if pairs is None:
        try:
            first, second, issame, _ = tm.sample_pairs(labels, num_pairs=num_pairs, seed=seed)
        except ValueError:
            first = None
        if first is not None:
            scores, values = tm.pair_scores(embeddings, first, second, distance)
            pairs = dict(issame=issame, scores=scores, values=values)
    if pairs is not None:
        same = np.asarray(pairs["issame"], bool)
        name = (f"{distance} similarity" if distance_names.is_similarity(distance)
                else f"{distance} distance")
        written.append(distance_histograms(
            pairs["values"][same], pairs["values"][~same],
            os.path.join(out_dir, "distance_histogram.png"), xlabel=name, title=title))
        if same.any() and not same.all():
            fpr, tpr, _ = tm.verification.roc(pairs["scores"], same)
            reference = None
            base_pairs = base_details.get("pairs")
            if base_pairs is not None and np.array_equal(base_pairs["issame"], pairs["issame"]):
                base_fpr, base_tpr, _ = tm.verification.roc(base_pairs["scores"], same)
                reference = (base_fpr, base_tpr, f"{base_name}, AUC "
                             f"{tm.roc_auc(base_pairs['scores'], same):.4f}")
            written.append(roc_curve(fpr, tpr, os.path.join(out_dir, "roc.png"),
                                     auc=tm.roc_auc(pairs["scores"], same),
                                     eer=tm.eer(pairs["scores"], same), title=title,
                                     baseline=reference))
    curve = details.get("pr_curve")
    label = pr_label
    if curve is None:
        r = tm.retrieval_metrics(embeddings, labels, metrics=("map",), distance=distance,
                                 chunk_size=chunk_size, pr_levels=np.linspace(0.0, 1.0, 101))
        if r["num_queries"]:
            curve = r["pr_curve"]
            label = label or f"{MODEL_LABEL}, mAP {r['map']:.4f}"
    if curve is not None and np.all(np.isfinite(curve[1])):
        base_curve = base_details.get("pr_curve")
        reference = None
        if base_curve is not None and np.all(np.isfinite(base_curve[1])):
            reference = (base_curve[0], base_curve[1], base_name)
        written.append(pr_curve(curve[0], curve[1], os.path.join(out_dir, "pr_curve.png"),
                                label=label, title=title, baseline=reference))
    num_queries, k = grid
    if images is not None and num_queries > 0 and k > 0 and labels.size > 1:
        load = images if callable(images) else (lambda idx, a=np.asarray(images): a[idx])
        rng = np.random.default_rng(seed)
        pool = np.sort(rng.choice(labels.size, min(10 * num_queries, labels.size), replace=False))
        pool_idx, _ = tm.nearest_neighbors(embeddings[pool], embeddings, k=k, distance=distance,
                                           chunk_size=chunk_size, query_index=pool)
        wrong = labels[pool_idx[:, 0]] != labels[pool]
        order = np.concatenate([np.flatnonzero(wrong), np.flatnonzero(~wrong)])[:num_queries]
        picked, idx = pool[order], pool_idx[order]
        failures = int(min(wrong.sum(), order.size))
        successes = order.size - failures
        rows = (f"{figures.count(failures, 'failure')} first (nearest result of another class), then "
                f"{figures.count(successes, 'success')}" if failures and successes else
                f"{figures.count(failures, 'failure')} (nearest result of another class)" if failures else
                f"{figures.count(successes, 'success')}, no failure")
        rows += (f", of {pool.size:,} random queries of {labels.size:,} "
                 f"(R@1 {1 - wrong.mean():.3f} on them)")
        query_images = np.asarray(load(picked))
        if is_image_batch(query_images):
            result_images = np.asarray(load(idx.reshape(-1)))
            result_images = result_images.reshape(idx.shape + result_images.shape[1:])
            shown = labels if class_names is None else np.asarray(
                [class_names.get(int(v), str(v)) for v in labels], dtype=object)
            written.append(retrieval_grid(
                query_images, result_images, labels[idx] == labels[picked][:, None],
                os.path.join(out_dir, "retrieval_grid.png"),
                query_labels=shown[picked], result_labels=shown[idx], title=title, rows=rows))
    return written
