"""Retrieval, clustering and verification metrics of embeddings.

One entry point, :func:`evaluate_embeddings`, serves the Keras callback
(:class:`tfdml.callbacks.RetrievalEvaluation`) and ``evaluate.py``.

Metric names (``metrics=``) and the keys they produce:

=================  ==========================================  =====================
name               key(s) in the result                        source
=================  ==========================================  =====================
``recall``         ``recall@k`` for each k in ``ks``           Wu §5; Lu §4.3
``precision``      ``precision@k`` for each k in ``ks``        Lu Eq. 2
``map@r``          ``map@r``                                   Musgrave et al. 2020
``r_precision``    ``r_precision``                             Musgrave et al. 2020
``map``            ``map`` (mean AP over the full ranking)     Lu §4.3
``mrr``            ``mrr`` (mean 1 / rank of the first         Voorhees 1999
                   correct neighbour)
``nmi``            ``nmi`` (k-means, as many clusters as       Wu §5; Duan §4
                   classes)
``ami``            ``ami`` (NMI adjusted for chance, same      Vinh et al. 2010
                   k-means)
``f1``             ``f1`` (pairwise, same k-means)             Song et al.; Duan §4
``verification``   ``verification_accuracy`` (10-fold),        Wu §5 (LFW); draft
                   ``verification_accuracy_std``, ``roc_auc``,  Table 2
                   ``eer``
=================  ==========================================  =====================

``"recall@5"`` / ``"precision@5"`` are accepted as names too (they add k=5).
Names are looked up in :data:`METRICS`, a :class:`tfdml.registry.Registry`:
a metric registered with :func:`register` is selected by its name like the
built-in ones (``metrics=``, a config's ``evaluation.metrics``,
``evaluate.py --metrics``) and gives one key, its name.
Retrieval results also carry ``num_queries`` (queries scored) and
``num_excluded_queries`` (queries whose class has no other example in the
gallery: excluded, see :mod:`tfdml.metrics.retrieval`). Every metric is
"larger is better" except ``eer``. Per-class retrieval figures:
``evaluate_embeddings(..., per_class=True, return_details=True)`` puts them in
``details["per_class"]``, and :func:`per_class_csv` writes them.

Ranking and ties: every distance ranks on one score
(:func:`tfdml.metrics.knn.ranking_frame`: cosine puts the embeddings on the
unit sphere, where ``cos = 1 - d²/2``), so unit-norm embeddings give the same
neighbours and metrics by cosine and by euclidean. Retrieval metrics rank a
negative tied with a positive *before* it (pessimistic); neighbour lists
(:func:`tfdml.metrics.knn.knn`) put equal distances lower index first.
"""

import numpy as np

from tfdml.metrics import clustering, knn, retrieval, verification
from tfdml.metrics.clustering import ami, clustering_metrics, kmeans, nmi, pairwise_f1
from tfdml.metrics.knn import knn as nearest_neighbors
from tfdml.metrics.retrieval import retrieval_metrics
from tfdml.metrics.verification import (
    eer,
    kfold_accuracy,
    pair_scores,
    roc_auc,
    sample_pairs,
    verification_metrics,
)

from tfdml.metric_names import DEFAULT_KS, DEFAULT_METRICS, METRICS  # the one table of names and defaults
from tfdml.metric_names import parse_metrics  # without TensorFlow: a config is checked with it first
from tfdml.metric_names import BuiltinMetric as _BuiltinMetric

VERIFICATION_KEYS = ("verification_accuracy", "verification_accuracy_std", "roc_auc", "eer")
#: Keys where smaller is better (for ModelCheckpoint / EarlyStopping ``mode``).
LOWER_IS_BETTER = ("eer",)



def register(name):
    """Decorator: make ``fn`` a metric named ``name`` (:data:`METRICS`), selected by name
    wherever metric names are (``metrics=``, configs' ``evaluation.metrics``, ``evaluate.py``).

    ``fn(embeddings, labels, *, gallery, gallery_labels, distance, seed)``
    returns one number, the value of the key ``name`` (larger is better):
    ``embeddings`` float32 [N, d] and ``labels`` [N] as NumPy arrays, the
    separate gallery and its labels (or ``None``: leave-one-out within
    ``embeddings``), the distance the retrieval metrics rank by, and the
    seed of the evaluation. ``name``: a lower-case Python identifier that is
    neither taken nor an alias.

        @tfdml.metrics.register("spread")
        def spread(embeddings, labels, **options):
            return float(embeddings.std(axis=0).mean())
    """
    return METRICS.register(name)


def metric_keys(metrics=DEFAULT_METRICS, ks=DEFAULT_KS):
    """The result keys :func:`evaluate_embeddings` produces for these metrics."""
    names, ks = parse_metrics(metrics, ks)
    keys = []
    for name in names:
        if name in ("recall", "precision"):
            keys += [f"{name}@{k}" for k in ks]
        elif name == "verification":
            keys += list(VERIFICATION_KEYS)
        else:
            keys.append(name)
    return keys


def evaluate_embeddings(embeddings, labels, metrics=DEFAULT_METRICS, ks=DEFAULT_KS, *,
                        gallery=None, gallery_labels=None, distance="euclidean",
                        chunk_size=None, seed=0, nmi_average="arithmetic", num_clusters=None,
                        num_pairs=6000, n_folds=10, pr_levels=None, per_class=False,
                        return_details=False):
    """Evaluate embeddings with the named metrics.

    Args:
      embeddings: [N, d] query embeddings; labels: [N] class labels.
      metrics, ks: see the module docstring.
      gallery, gallery_labels: a separate gallery (In-Shop style); default
        leave-one-out retrieval within ``embeddings``. Clustering and
        verification always use ``embeddings``.
      distance: ``"euclidean"`` (Wu), ``"squared_euclidean"`` or ``"cosine"`` (Lu).
      chunk_size: queries per kNN chunk (memory ∝ chunk_size × gallery size).
      seed: seeds k-means and the verification pairs.
      nmi_average: ``"arithmetic"`` (Duan) or ``"geometric"`` (Wu).
      num_clusters: k-means clusters; default: number of classes.
      num_pairs, n_folds: verification pairs drawn from the labels
        (:func:`~tfdml.metrics.verification.sample_pairs`) and folds.
      pr_levels: recall levels for the mean interpolated precision-recall
        curve (only in the details).
      per_class: with ``return_details``, also put the retrieval metrics of
        each query class in the details as ``per_class``
        (:func:`tfdml.metrics.retrieval.retrieval_metrics`; written by
        :func:`per_class_csv`).
      return_details: also return a dict with ``pr_curve`` (levels,
        precision), ``pairs`` (first, second, issame, folds, scores, values)
        and ``roc`` (fpr, tpr) where computed.

    Returns:
      dict of metric key → float (plus ``num_queries``/``num_excluded_queries``
      for retrieval), and the details dict if ``return_details``.
    """
    names, ks = parse_metrics(metrics, ks)
    knn.check_distance(distance)
    embeddings = knn.as_embeddings(embeddings)
    labels = np.asarray(labels).reshape(-1)
    if labels.size != embeddings.shape[0]:
        raise ValueError(
            f"{labels.size} labels for {embeddings.shape[0]} embeddings; they must match."
        )
    results, details = {}, {}
    rank_names = [n for n in names if n in retrieval.RANK_METRICS]
    per_class = bool(per_class and return_details and rank_names)
    if rank_names or pr_levels is not None:
        r = retrieval.retrieval_metrics(
            embeddings, labels, gallery, gallery_labels, metrics=rank_names, ks=ks,
            distance=distance, chunk_size=chunk_size, pr_levels=pr_levels, per_class=per_class,
        )
        for key in ("pr_curve", "per_class"):
            if key in r:
                details[key] = r.pop(key)
        results.update(r)
    cluster_names = [n for n in names if n in clustering.CLUSTER_METRICS]
    if cluster_names:
        results.update(clustering.clustering_metrics(
            embeddings, labels, cluster_names, num_clusters=num_clusters, seed=seed,
            nmi_average=nmi_average,
        ))
    if "verification" in names:
        first, second, issame, folds = verification.sample_pairs(
            labels, num_pairs=num_pairs, n_folds=n_folds, seed=seed)
        scores, values = verification.pair_scores(embeddings, first, second, distance)
        results.update(verification.verification_metrics(scores, issame, folds=folds))
        details["pairs"] = dict(first=first, second=second, issame=issame, folds=folds,
                                scores=scores, values=values)
        fpr, tpr, _ = verification.roc(scores, issame)
        details["roc"] = (fpr, tpr)
    registered = [n for n in names if not isinstance(METRICS[n], _BuiltinMetric)]
    if registered and gallery is not None:
        gallery = knn.as_embeddings(gallery, "gallery")
        gallery_labels = None if gallery_labels is None else np.asarray(gallery_labels).reshape(-1)
    for name in registered:
        results[name] = _registered_value(name, METRICS[name](
            embeddings, labels, gallery=gallery, gallery_labels=gallery_labels, distance=distance,
            seed=seed))
    ordered = {k: results[k] for k in metric_keys(names, ks) if k in results}
    ordered.update({k: v for k, v in results.items() if k not in ordered})
    return (ordered, details) if return_details else ordered


def _registered_value(name, value):
    """The number a registered metric returned, as a float, or a ValueError saying what it returned."""
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(())[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise ValueError(f"The metric {name!r} returned {value!r}; a registered metric returns one "
                         "number (the value of its key).")
    return float(value)


def per_class_csv(per_class, path=None, class_names=None):
    """The per-class retrieval figures (``details["per_class"]``) as CSV text, one row per class.

    Columns: ``class`` (the label), ``name`` (with ``class_names``, a dict
    label → display name, e.g. ``split.class_names``), ``num_queries``,
    ``num_excluded_queries``, then each metric (empty where NaN). With
    ``path``, the text is also written there atomically. Returns the text.
    """
    import csv
    import io

    columns = [c for c in per_class if c != "class"]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["class"] + (["name"] if class_names is not None else []) + columns)
    for i, label in enumerate(per_class["class"]):
        label = label.item() if isinstance(label, np.generic) else label
        row = [label] + ([class_names.get(label, str(label))] if class_names is not None else [])
        for column in columns:
            value = per_class[column][i]
            if column.startswith("num_"):
                row.append(int(value))
            else:
                row.append("" if np.isnan(value) else repr(float(value)))
        writer.writerow(row)
    text = buffer.getvalue()
    if path is not None:
        from tfdml import files

        files.write_text(path, text)
    return text


__all__ = [
    "DEFAULT_KS", "DEFAULT_METRICS", "LOWER_IS_BETTER", "METRICS", "ami", "clustering",
    "clustering_metrics", "eer", "evaluate_embeddings", "kfold_accuracy", "kmeans", "knn",
    "metric_keys", "nearest_neighbors", "nmi", "pair_scores", "pairwise_f1", "parse_metrics",
    "per_class_csv", "register",
    "retrieval", "retrieval_metrics", "roc_auc", "sample_pairs", "verification",
    "verification_metrics",
]
