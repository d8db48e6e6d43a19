"""Retrieval metrics from the ranks of each query's positives, by chunks.

For a query with ``R`` positives in the gallery (same-class items, the query
itself excluded), let ``r_1 < r_2 < ... < r_R`` be the 1-based positions of
those positives in the query's ranking of the gallery. Every retrieval metric
is a function of these ranks, for all k at once:

* **Recall@k** (Wu et al. 2017 §5, Song et al.; Lu et al. 2019 §4.3: "1 if any
  positive is ranked in top k"): ``[r_1 <= k]``.
* **Precision@k** (Lu et al. 2019 Eq. 2): ``#{m : r_m <= k} / k``.
* **R-Precision** (Musgrave et al. 2020): ``#{m : r_m <= R} / R``.
* **MAP@R** (Musgrave et al. 2020): ``(1/R) Σ_{i<=R} P(i)·rel(i)``, and since
  ``P(r_m) = m / r_m``: ``(1/R) Σ_{m : r_m <= R} m / r_m``.
* **mAP** over the full ranking (Lu et al. 2019 §4.3): ``(1/R) Σ_m m / r_m``.
* **MRR**, mean reciprocal rank (Voorhees 1999, TREC-8 QA): ``1 / r_1``, the
  rank of the first correct neighbour.

Each is averaged over the queries that have at least one positive.

How the ranks are found, per chunk of queries, without a top-k over the gallery
(:func:`chunk_counts`, the reference path): one matmul gives the [chunk, N]
scores (:func:`tfdml.primitives.scores`), the R positives' scores are
gathered and sorted (they are known by label), and for every positive score
the items scoring at least as high are counted, by its position in the
sorted score row; the ranks follow from these counts (:func:`positive_ranks`).
Memory grows with ``chunk × N``; time does not depend on k, so Recall@1000
costs the same as Recall@1 (no ``top_k`` over 1000 columns). Faster forms of
the counts (comparisons counted by one variadic reduction under XLA,
:func:`tfdml.kernels.chosen.count_at_least`; NumPy sorting) live in
:mod:`tfdml.kernels.retrieval` and :mod:`tfdml.kernels.counting`, chosen by
:func:`tfdml.kernels.retrieval.chunk_counter` and
:func:`tfdml.kernels.chosen.count_at_least`; they return the same counts.

Conventions:

* **Ties**: a negative whose score equals a positive's is ranked *before* it
  (pessimistic), so ties never raise a metric and no metric depends on the
  order of the data set. (:func:`tfdml.metrics.knn.knn`, which returns
  neighbours rather than metrics, breaks ties by lower gallery index.) Every
  distance ranks on the same scores (:func:`tfdml.metrics.knn.ranking_frame`),
  so on unit-norm embeddings cosine and euclidean give the same metrics. Lu's Eq. 2 counts every item
  tied with the k-th; on continuous embeddings exact ties do not occur.
* **Queries without positives** (a class with a single example in
  leave-one-out, or a query class absent from the gallery) can never be
  answered right: they are excluded from every metric here (as in
  Musgrave et al.'s MAP@R / R-Precision) and counted in
  ``num_excluded_queries``; ``num_queries`` counts those that remain.
* **k larger than the gallery**: at most ``N_eff`` items can be retrieved
  (``N_eff`` = gallery size, minus one in leave-one-out), so Precision@k uses
  ``min(k, N_eff)`` as its denominator and Recall@k for such k is 1.
"""

import numpy as np
import tensorflow as tf

from tfdml import primitives
from tfdml.kernels import retrieval as fast
from tfdml.metrics import knn as _knn

#: Metric names this module computes ("recall" and "precision" take ks).
RANK_METRICS = ("recall", "precision", "map@r", "r_precision", "map", "mrr")

def encode_labels(query_labels, gallery_labels=None):
    """Integer class ids for query (and gallery) labels, sharing one vocabulary."""
    q = np.asarray(query_labels).reshape(-1)
    if gallery_labels is None:
        _, ids = np.unique(q, return_inverse=True)
        return ids.astype(np.int64), None
    g = np.asarray(gallery_labels).reshape(-1)
    _, ids = np.unique(np.concatenate([q, g]), return_inverse=True)
    return ids[: q.size].astype(np.int64), ids[q.size :].astype(np.int64)


def _positive_table(gallery_ids, num_classes):
    """[C, P] gallery indices of each class, padded with -1 (P = largest class)."""
    counts = np.bincount(gallery_ids, minlength=num_classes)
    width = int(counts.max()) if counts.size else 0
    table = np.full((num_classes, width), -1, np.int64)
    order = np.argsort(gallery_ids, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    cols = np.arange(gallery_ids.size) - np.repeat(starts, counts)
    table[gallery_ids[order], cols] = order
    return table


def chunk_counts(query, gallery, gallery_norms, pos_idx, self_index):
    """``(at_least, thr, num_pos)`` of a chunk of queries, the reference path.

    ``thr`` [c, P]: each query's positive scores ascending (+inf padded),
    ``num_pos`` [c, 1]: R, and ``at_least[i, j]``: the gallery items other
    than query ``i`` (its own score is −∞) scoring at least ``thr[i, j]``:
    ``N`` minus the position of ``thr[i, j]`` in the sorted score row. The
    fast forms (:mod:`tfdml.kernels.retrieval`) return the same.
    """
    s, thr, num_pos = primitives.scores_and_thresholds(query, gallery, gallery_norms, pos_idx, self_index)
    below = tf.searchsorted(tf.sort(s, axis=1), thr, side="left")
    return tf.shape(s)[1] - below, thr, num_pos


chunk_counts_xla = tf.function(chunk_counts, jit_compile=True, autograph=False)


def chunk_counter(num_positives, num_pairs):
    """The function that counts each chunk of an evaluation whose largest class gives
    ``num_positives`` positives per query, scoring ``num_pairs`` query–gallery pairs:
    :func:`chunk_counts` (compiled by XLA) or the form the kernels table chooses
    (:func:`tfdml.kernels.retrieval.chunk_counter`)."""
    return fast.chunk_counter(num_positives, num_pairs, chunk_counts_xla)


def _ranks(at_least, thr, num_pos):
    """r_m of each positive from the counts; see :func:`positive_ranks`."""
    at_least, thr, num_pos = np.asarray(at_least), np.asarray(thr), np.asarray(num_pos)
    width = thr.shape[1]
    j = np.arange(width)[None, :]
    # Positives scoring >= thr_j: R minus those strictly below, i.e. minus the
    # first column holding thr_j's value (rows are sorted).
    new_value = np.ones(thr.shape, bool)
    new_value[:, 1:] = thr[:, 1:] != thr[:, :-1]
    first = np.maximum.accumulate(np.where(new_value, j, 0), axis=1)
    pos_at_least = num_pos - first
    m = num_pos - j  # 1-based position of positive j among the positives
    rank = m + (at_least - pos_at_least)  # negatives tied with it go first
    return np.where(j < num_pos, rank, 0).astype(np.int64)


def positive_ranks(query, query_ids, gallery=None, gallery_ids=None, distance="euclidean",
                   chunk_size=None):
    """Yield ``(start, ranks, num_pos)`` per chunk of queries.

    ``ranks`` is int [c, P]: entry j (positives sorted by ascending score, so
    the m-th best positive is at j = R - m) holds r_m, padding entries 0;
    ``num_pos`` int [c] is R for each query. ``gallery=None`` means leave-one-out within ``query``.
    The last chunk is padded to the chunk size so that XLA compiles once.
    """
    leave_one_out = gallery is None
    if leave_one_out:
        gallery, gallery_ids = query, query_ids
    num_classes = int(max(query_ids.max(), gallery_ids.max())) + 1
    table = _positive_table(gallery_ids, num_classes)
    chunk = min(_knn.chunk_size_for(gallery.shape[0], chunk_size), query.shape[0])
    query, gallery = _knn.ranking_frame(query, gallery, distance)
    g, g_norms = _knn.gallery_tensors(gallery)  # the norms once, not once per chunk
    counts = chunk_counter(table.shape[1], query.shape[0] * gallery.shape[0])
    for start in range(0, query.shape[0], chunk):
        stop = min(start + chunk, query.shape[0])
        size = stop - start
        self_index = _knn.self_indices(start, size, leave_one_out)
        idx = table[query_ids[start:stop]]
        idx = np.where(idx == self_index[:, None], -1, idx)
        num_pos = np.sum(idx >= 0, axis=1)
        if not num_pos.any():
            yield start, np.zeros((size, idx.shape[1]), np.int32), num_pos
            continue
        q = query[start:stop]
        pad = chunk - size
        if pad:
            q = np.concatenate([q, np.zeros((pad, q.shape[1]), q.dtype)])
            idx = np.concatenate([idx, np.full((pad, idx.shape[1]), -1, idx.dtype)])
            self_index = np.concatenate([self_index, np.full(pad, -1, np.int32)])
        at_least, thr, r = counts(
            tf.constant(q), g, g_norms, tf.constant(idx, tf.int32), tf.constant(self_index))
        yield start, _ranks(at_least, thr, r)[:size], num_pos


def per_query(ranks, num_pos, metrics, ks, num_gallery_eff, pr_levels=None):
    """Per-query values of ``metrics`` from positive ranks (rows with R > 0 only)."""
    ranks = ranks.astype(np.float64)
    R = num_pos.astype(np.float64)[:, None]
    valid = ranks > 0
    m = np.where(valid, R - np.arange(ranks.shape[1])[None, :], 0.0)
    prec_at_pos = np.where(valid, m / np.where(valid, ranks, 1.0), 0.0)
    out = {}
    for k in ks if "recall" in metrics else ():
        out[f"recall@{k}"] = np.any(valid & (ranks <= k), axis=1).astype(np.float64)
    for k in ks if "precision" in metrics else ():
        k_eff = min(k, num_gallery_eff)
        out[f"precision@{k}"] = np.sum(valid & (ranks <= k), axis=1) / k_eff
    in_r = valid & (ranks <= R)
    if "r_precision" in metrics:
        out["r_precision"] = np.sum(in_r, axis=1) / R[:, 0]
    if "map@r" in metrics:
        out["map@r"] = np.sum(np.where(in_r, prec_at_pos, 0.0), axis=1) / R[:, 0]
    if "map" in metrics:
        out["map"] = np.sum(prec_at_pos, axis=1) / R[:, 0]
    if "mrr" in metrics:
        # r_1, the best positive's rank, is in column R - 1 (positives by ascending score).
        first = np.take_along_axis(ranks, num_pos.astype(np.int64)[:, None] - 1, axis=1)[:, 0]
        out["mrr"] = 1.0 / first
    if pr_levels is not None:
        out["pr_curve"] = _interpolated_pr(prec_at_pos, num_pos, pr_levels)
    return out


def _interpolated_pr(prec_at_pos, num_pos, levels):
    """Interpolated precision p(l) = max_{m/R >= l} m / r_m, per query, at recall ``levels``."""
    width = prec_at_pos.shape[1]
    rows = np.arange(prec_at_pos.shape[0])[:, None]
    # Column t in "m order" (m = t + 1) is column j = R - 1 - t.
    t = np.arange(width)[None, :]
    j = np.clip(num_pos[:, None] - 1 - t, 0, max(width - 1, 0))
    by_m = np.where(t < num_pos[:, None], prec_at_pos[rows, j], 0.0)
    best_after = np.maximum.accumulate(by_m[:, ::-1], axis=1)[:, ::-1]
    need = np.ceil(np.asarray(levels)[None, :] * num_pos[:, None]).astype(np.int64)
    need = np.clip(need, 1, np.maximum(num_pos[:, None], 1)) - 1
    return np.take_along_axis(best_after, need, axis=1)


def retrieval_metrics(query, query_labels, gallery=None, gallery_labels=None,
                      metrics=("recall", "map@r", "r_precision"), ks=(1,),
                      distance="euclidean", chunk_size=None, pr_levels=None, per_class=False):
    """Retrieval metrics averaged over queries that have positives.

    Args:
      query: [Q, d] embeddings; query_labels: [Q] class labels.
      gallery, gallery_labels: a separate gallery, or ``None`` for
        leave-one-out retrieval within the query set.
      metrics: names from :data:`RANK_METRICS`.
      ks: the k of Recall@k and Precision@k.
      distance: ``"euclidean"`` (Wu), ``"squared_euclidean"`` or ``"cosine"`` (Lu).
      chunk_size: queries per chunk (memory ∝ chunk_size × N).
      pr_levels: optional recall levels in [0, 1]; adds ``"pr_curve"``, the
        mean interpolated precision at each level (Lu Fig. 4c).
      per_class: also return ``"per_class"``, a dict of arrays over the query
        classes in sorted order: ``class`` (the label), ``num_queries``,
        ``num_excluded_queries`` and each metric key (the mean over that
        class's scored queries; NaN for a class none of whose queries has a
        positive). :func:`tfdml.metrics.per_class_csv` writes it as CSV.

    Returns:
      dict: ``recall@k``, ``precision@k``, ``map@r``, ``r_precision``, ``map``,
      ``mrr`` (as requested), ``num_queries`` (queries scored) and
      ``num_excluded_queries`` (queries without any positive).
    """
    unknown = [m for m in metrics if m not in RANK_METRICS]
    if unknown:
        raise ValueError(f"Unknown retrieval metric(s) {unknown}; choose from {RANK_METRICS}.")
    _knn.check_distance(distance)
    ks = sorted({int(k) for k in ks})
    if any(k < 1 for k in ks):
        raise ValueError(f"ks must be positive integers, got {ks}.")
    query = _knn.as_embeddings(query, "query")
    q_ids, g_ids = encode_labels(query_labels, gallery_labels)
    if q_ids.size != query.shape[0]:
        raise ValueError(
            f"{q_ids.size} query labels for {query.shape[0]} query embeddings; they must match."
        )
    if gallery is not None:
        gallery = _knn.as_embeddings(gallery, "gallery")
        if gallery_labels is None or g_ids.size != gallery.shape[0]:
            raise ValueError("gallery_labels must give one label per gallery embedding.")
        if gallery.shape[1] != query.shape[1]:
            raise ValueError(
                f"query and gallery dimensions differ ({query.shape[1]} vs {gallery.shape[1]})."
            )
    n_eff = query.shape[0] - 1 if gallery is None else gallery.shape[0]
    num_ids = int(max(q_ids.max(), -1 if g_ids is None else g_ids.max())) + 1
    class_sums, class_scored = {}, np.zeros(num_ids, np.int64)
    sums, count, excluded = {}, 0, 0
    for start, ranks, num_pos in positive_ranks(query, q_ids, gallery, g_ids, distance, chunk_size):
        keep = num_pos > 0
        excluded += int(np.sum(~keep))
        if not keep.any():
            continue
        values = per_query(ranks[keep], num_pos[keep], metrics, ks, n_eff, pr_levels)
        for name, v in values.items():
            sums[name] = sums.get(name, 0.0) + np.sum(v, axis=0)
        count += int(np.sum(keep))
        if per_class:
            kept_ids = q_ids[start:start + keep.size][keep]
            np.add.at(class_scored, kept_ids, 1)
            for name, v in values.items():
                if name != "pr_curve":
                    np.add.at(class_sums.setdefault(name, np.zeros(num_ids)), kept_ids, v)
    out = {}
    names = [f"recall@{k}" for k in ks if "recall" in metrics]
    names += [f"precision@{k}" for k in ks if "precision" in metrics]
    names += [m for m in ("map@r", "r_precision", "map", "mrr") if m in metrics]
    for name in names:
        out[name] = float(sums[name] / count) if count else float("nan")
    if per_class:
        out["per_class"] = _per_class_table(query_labels, q_ids, names, class_sums, class_scored)
    if pr_levels is not None:
        out["pr_curve"] = (np.asarray(pr_levels, np.float64),
                           sums["pr_curve"] / count if count else np.full(len(pr_levels), np.nan))
    out["num_queries"] = count
    out["num_excluded_queries"] = excluded
    return out


def _per_class_table(query_labels, q_ids, names, class_sums, class_scored):
    """The per-class dict of :func:`retrieval_metrics` (query classes, sorted)."""
    labels = np.asarray(query_labels).reshape(-1)
    present = np.unique(q_ids)
    first = np.unique(q_ids, return_index=True)[1]  # one query of each class, for its label
    scored = class_scored[present]
    table = {"class": labels[first],
             "num_queries": scored,
             "num_excluded_queries": np.bincount(q_ids)[present] - scored}
    with np.errstate(invalid="ignore", divide="ignore"):
        for name in names:
            sums = class_sums.get(name, np.zeros(class_scored.size))[present]
            table[name] = np.where(scored > 0, sums / np.maximum(scored, 1), np.nan)
    return table
