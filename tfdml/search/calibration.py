"""Calibration: held-out queries with known classes turn into a match threshold.

A query "matches" when its nearest entry is within the threshold, and the
match is right when that entry has the query's label. :func:`calibrate`
chooses the threshold for a precision or recall target, or the best F1; no
threshold (``None``) matches nothing (:func:`match_limit`, the one rule of
:meth:`Index.match <tfdml.search.Index.match>`, :meth:`Index.match_labels
<tfdml.search.Index.match_labels>` and :func:`~tfdml.search.export_lookup`).
"""

import dataclasses

import numpy as np

from tfdml.search.entries import as_keys, kind


@dataclasses.dataclass
class Calibration:
    """Precision, recall and F1 of "match if nearest distance <= t", for every t.

    ``thresholds`` are the distinct nearest-neighbour distances of the
    calibration queries, ascending; at threshold ``t`` the accepted queries are
    those with nearest distance ``<= t``. A *true positive* is an accepted
    query whose nearest entry has its label; ``precision = TP / accepted``,
    ``recall = TP / (queries whose nearest entry has their label)``.
    ``threshold`` is the one :func:`calibrate` chose for ``metric`` and
    ``target`` (``target_precision``: the target when ``metric`` is
    ``"precision"``, else None).
    """

    thresholds: np.ndarray
    precision: np.ndarray
    recall: np.ndarray
    f1: np.ndarray
    threshold: float
    target_precision: float
    distance: str
    metric: str = "precision"
    target: float = None

    def at(self, threshold):
        """``{"threshold", "precision", "recall", "f1"}`` at the largest tabulated
        threshold ``<= threshold`` (precision NaN below the smallest)."""
        i = int(np.searchsorted(self.thresholds, threshold, side="right")) - 1
        if i < 0:
            return {"threshold": float(threshold), "precision": float("nan"), "recall": 0.0,
                    "f1": 0.0}
        return {"threshold": float(self.thresholds[i]), "precision": float(self.precision[i]),
                "recall": float(self.recall[i]), "f1": float(self.f1[i])}

    def plot(self, path):
        """The precision / recall / F1 against threshold curve as a PNG (written atomically)."""
        from tfdml import plots

        return plots.threshold_curve(self.thresholds, self.precision, self.recall, path,
                                     f1=self.f1, threshold=self.threshold,
                                     target_precision=self.target_precision)


#: What :func:`calibrate` can choose a threshold for.
CALIBRATION_METRICS = ("precision", "recall", "f1")


def _calibration_target(metric, target, target_precision):
    if metric not in CALIBRATION_METRICS:
        raise ValueError(f"Unknown calibration metric {metric!r}; choose one of "
                         f"{', '.join(CALIBRATION_METRICS)}.")
    if target_precision is not None:
        if metric != "precision":
            raise ValueError(f"target_precision applies to metric='precision'; for "
                             f"metric={metric!r} pass target=.")
        if target is not None and float(target) != float(target_precision):
            raise ValueError(f"Got target_precision={target_precision} and target={target}; "
                             "pass one.")
        target = target_precision
    if metric == "f1":
        if target is not None:
            raise ValueError("metric='f1' takes no target: it chooses the threshold of the "
                             "highest F1.")
        return None
    if target is None:
        if metric == "recall":
            raise ValueError("metric='recall' needs a target, e.g. target=0.9.")
        target = 0.99
    if not 0.0 < float(target) <= 1.0:
        raise ValueError(f"target must be in (0, 1], got {target}.")
    return float(target)


def calibrate(index, queries, labels, target_precision=None, *, metric="precision", target=None):
    """Choose a match threshold for ``index`` from held-out ``queries`` and their ``labels``.

    The index must have labels (``Index.add(..., labels=)``), of the same kind
    (int64 or strings) as ``labels``. A query is accepted at threshold ``t``
    when its nearest entry is within ``t``, and right when that entry has its
    label (see :class:`Calibration`). The threshold, by ``metric``:

    * ``"precision"`` (default): the largest ``t`` whose precision is at least
      ``target`` (default 0.99; ``target_precision`` is the same argument);
    * ``"recall"``: the smallest ``t`` whose recall is at least ``target``
      (required);
    * ``"f1"``: the ``t`` of the highest F1 (the smallest of equal ones); no
      target.

    Returns a :class:`Calibration`; pass it to :meth:`Index.match
    <tfdml.search.Index.match>`. If no threshold reaches the target, a
    ValueError says the best value found.
    """
    target = _calibration_target(metric, target, target_precision)
    if len(index) and index.labels is None:
        raise ValueError(
            "The index has no labels: add its entries with Index.add(..., labels=...) "
            "(or (x, y) batches in add_model) to calibrate it."
        )
    labels = as_keys(labels, "labels")
    pos, dist = index._search_positions(queries, 1)
    if labels.shape[0] != pos.shape[0]:
        raise ValueError(f"Got {pos.shape[0]} queries but {labels.shape[0]} labels.")
    if pos.shape[0] == 0:
        raise ValueError("calibrate needs at least one query.")
    if kind(labels) != kind(index.labels):
        raise ValueError(
            f"The index has {kind(index.labels)} labels but the queries' labels are "
            f"{kind(labels)}; use the same kind of label for both."
        )
    d = dist[:, 0].astype(np.float64)
    correct = index.labels[pos[:, 0]] == labels
    order = np.argsort(d, kind="stable")
    d, correct = d[order], correct[order]
    tp = np.cumsum(correct)
    # The last position of each distinct distance: everything up to it is accepted.
    last = np.flatnonzero(np.append(d[1:] != d[:-1], True))
    thresholds, tp, accepted = d[last], tp[last], last + 1
    precision = tp / accepted
    recall = tp / max(int(correct.sum()), 1)
    denom = precision + recall
    f1 = np.where(denom > 0, 2 * precision * recall / np.where(denom > 0, denom, 1), 0.0)
    if not correct.any() and metric != "precision":
        raise ValueError(
            f"No threshold reaches {metric} {target if target is not None else 'above 0'}: no "
            "query's nearest entry has its class; train the model further, or check the labels."
        )
    if metric == "f1":
        chosen = int(np.argmax(f1))
    elif metric == "recall":
        chosen = int(np.flatnonzero(recall >= target)[0])
    else:
        ok = np.flatnonzero(precision >= target)
        if not ok.size:
            raise ValueError(
                f"No threshold reaches precision {target}: the best is "
                f"{precision.max():.4f} (at distance {thresholds[np.argmax(precision)]:.4g}); "
                "lower target_precision, or train the model further."
            )
        chosen = int(ok[-1])
    return Calibration(thresholds.astype(np.float32), precision, recall, f1,
                       float(thresholds[chosen]), target if metric == "precision" else None,
                       index.distance, metric, target)


def match_limit(threshold):
    """The float32 distance limit of ``is_match``: ``None`` (no threshold) is
    -inf, so that nothing matches; a NaN is refused."""
    if isinstance(threshold, Calibration):
        threshold = threshold.threshold
    if threshold is None:
        return np.float32(-np.inf)
    try:
        limit = np.float32(threshold)
    except (TypeError, ValueError):
        raise ValueError(f"threshold must be a distance, a Calibration or None, got {threshold!r}.") from None
    if np.isnan(limit):
        raise ValueError("threshold is NaN; pass a distance, a Calibration, or None (nothing matches).")
    return limit

