"""Pair verification: same or different? (Wu et al. 2017 §5, LFW protocol).

A verification set is a list of pairs with a ``issame`` flag and a *score*
per pair, larger meaning "more likely the same" (cosine similarity, or minus
the euclidean distance: see :func:`pair_scores`).

* **10-fold accuracy** (Wu §5, LFW): the pairs are split into ``n_folds``
  folds; for each fold the threshold is chosen on the other folds (the one
  with the best accuracy there) and accuracy is measured on the fold. The
  mean (and standard deviation) over folds is reported. Candidate thresholds
  lie midway between consecutive distinct training scores (plus ±inf, "all
  same" / "all different"); among equally good ones the lowest is taken.
  A pair is predicted "same" when ``score >= threshold``.
* **ROC AUC** (Lu Fig. 4f; the draft's Table 2): area under the ROC curve,
  ties between a positive and a negative score counting 1/2.
* **EER** (the draft's Table 2 reports 100% − EER): the rate where the false
  positive rate equals the false negative rate, linearly interpolated between
  the two ROC points around the crossing.

For data with class labels but no pair list, :func:`sample_pairs` draws a
balanced LFW-like set (half same-class pairs), fold by fold.
"""

import numpy as np

from tfdml import distance_names


def sample_pairs(labels, num_pairs=6000, n_folds=10, seed=0):
    """Draw ``num_pairs`` pairs (with replacement), half same-class, in ``n_folds`` folds.

    Like LFW's 6,000 pairs in 10 folds of 300 + 300: each fold holds
    ``num_pairs // (2 n_folds)`` positive then as many negative pairs, so
    ``num_pairs`` is rounded down to a multiple of ``2 n_folds``.
    A positive pair is a uniform example of a class with >= 2 examples and
    another uniform example of its class; a negative pair is a uniform example
    and a uniform example of any other class.

    Returns ``(first, second, issame, folds)`` int64 / bool / int64 arrays.
    """
    labels = np.asarray(labels).reshape(-1)
    n_folds = int(n_folds)
    per_fold = int(num_pairs) // (2 * n_folds)
    if per_fold < 1:
        raise ValueError(
            f"num_pairs={num_pairs} is too small for {n_folds} folds: need >= {2 * n_folds}."
        )
    _, ids = np.unique(labels, return_inverse=True)
    counts = np.bincount(ids)
    if counts.size < 2:
        raise ValueError("Verification pairs need at least two classes.")
    if counts.max() < 2:
        raise ValueError("Verification pairs need a class with at least two examples.")
    rng = np.random.default_rng(seed)
    order = np.argsort(ids, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    where = np.empty_like(order)
    where[order] = np.arange(order.size)  # position of each example in ``order``
    n_half = per_fold * n_folds

    eligible = np.flatnonzero(counts[ids] >= 2)
    a_pos = rng.choice(eligible, n_half)
    c = ids[a_pos]
    r = rng.integers(0, counts[c] - 1)
    r = np.where(r >= where[a_pos] - starts[c], r + 1, r)  # skip the anchor itself
    b_pos = order[starts[c] + r]

    a_neg = rng.integers(0, labels.size, n_half)
    c = ids[a_neg]
    r = rng.integers(0, labels.size - counts[c])
    r = np.where(r >= starts[c], r + counts[c], r)  # skip the anchor's class block
    b_neg = order[r]

    first = np.stack([a_pos.reshape(n_folds, per_fold), a_neg.reshape(n_folds, per_fold)], 1)
    second = np.stack([b_pos.reshape(n_folds, per_fold), b_neg.reshape(n_folds, per_fold)], 1)
    issame = np.zeros((n_folds, 2, per_fold), bool)
    issame[:, 0] = True
    folds = np.repeat(np.arange(n_folds), 2 * per_fold)
    return first.reshape(-1), second.reshape(-1), issame.reshape(-1), folds


def pair_scores(embeddings, first, second, distance="euclidean"):
    """``(scores, values)`` for pairs: scores are larger-is-same, values the distance.

    ``distance="cosine"``: both are the cosine similarity; ``"euclidean"``:
    values are ``||f_a - f_b||`` (Wu's D_ij) and scores ``-values``;
    ``"squared_euclidean"``: the same with squares.
    """
    e = np.asarray(embeddings, np.float64)
    a, b = e[first], e[second]
    if distance_names.is_similarity(distance):
        na = np.linalg.norm(a, axis=1)
        nb = np.linalg.norm(b, axis=1)
        sim = np.sum(a * b, axis=1) / np.maximum(na * nb, 1e-12)
        return sim, sim
    d2 = np.sum((a - b) ** 2, axis=1)
    if distance == "squared_euclidean":
        return -d2, d2
    if distance == "euclidean":
        d = np.sqrt(d2)
        return -d, d
    raise ValueError(
        f"Unknown distance {distance!r}; choose euclidean, squared_euclidean or cosine."
    )


def _check(scores, issame):
    scores = np.asarray(scores, np.float64).reshape(-1)
    issame = np.asarray(issame).reshape(-1).astype(bool)
    if scores.size != issame.size:
        raise ValueError(f"{scores.size} scores for {issame.size} issame flags; they must match.")
    if not np.all(np.isfinite(scores)):
        raise ValueError("Verification scores contain NaN or Inf.")
    return scores, issame


def best_threshold(scores, issame):
    """The threshold with the best accuracy on these pairs (lowest among ties).

    Candidates: -inf, the midpoints between consecutive distinct scores, +inf.
    Returns ``(threshold, accuracy)``.
    """
    scores, issame = _check(scores, issame)
    u = np.unique(scores)
    candidates = np.concatenate([[-np.inf], (u[:-1] + u[1:]) / 2, [np.inf]])
    pos = np.sort(scores[issame])
    neg = np.sort(scores[~issame])
    pos_same = pos.size - np.searchsorted(pos, candidates, side="left")  # pos with s >= t
    neg_diff = np.searchsorted(neg, candidates, side="left")  # neg with s < t
    acc = (pos_same + neg_diff) / scores.size
    best = int(np.argmax(acc))
    return float(candidates[best]), float(acc[best])


def kfold_accuracy(scores, issame, n_folds=10, folds=None):
    """Accuracy with the threshold chosen on the other folds (LFW, Wu §5).

    ``folds``: fold id per pair; default ``n_folds`` contiguous equal parts in
    the given order (LFW's pairs.txt is ordered that way).
    Returns ``(mean accuracy, std over folds, thresholds per fold)``.
    """
    scores, issame = _check(scores, issame)
    if folds is None:
        if not 2 <= n_folds <= scores.size:
            raise ValueError(f"n_folds must be in [2, num_pairs={scores.size}], got {n_folds}.")
        folds = np.arange(scores.size) * n_folds // scores.size
    folds = np.asarray(folds).reshape(-1)
    if folds.size != scores.size:
        raise ValueError("folds must give one fold id per pair.")
    accs, thresholds = [], []
    for f in np.unique(folds):
        test = folds == f
        t, _ = best_threshold(scores[~test], issame[~test])
        accs.append(np.mean((scores[test] >= t) == issame[test]))
        thresholds.append(t)
    return float(np.mean(accs)), float(np.std(accs)), np.asarray(thresholds)


def roc(scores, issame):
    """``(fpr, tpr, thresholds)`` over all distinct thresholds (scikit-learn)."""
    scores, issame = _check(scores, issame)
    from sklearn import metrics as _skm  # on use: importing tfdml does not import scikit-learn

    return _skm.roc_curve(issame, scores, drop_intermediate=False)


def roc_auc(scores, issame):
    """Area under the ROC curve (ties count 1/2)."""
    scores, issame = _check(scores, issame)
    if issame.all() or not issame.any():
        raise ValueError("ROC AUC needs both same and different pairs.")
    from sklearn import metrics as _skm

    return float(_skm.roc_auc_score(issame, scores))


def eer(scores, issame):
    """Equal error rate: FPR = FNR, interpolated between the ROC points around it."""
    fpr, tpr, _ = roc(scores, issame)
    fnr = 1.0 - tpr
    gap = fnr - fpr  # from 1 (threshold +inf) down to -1 (threshold -inf)
    i = int(np.argmax(gap <= 0))
    if i == 0:
        return float(fpr[0])
    w = gap[i - 1] / (gap[i - 1] - gap[i])
    return float(fpr[i - 1] + w * (fpr[i] - fpr[i - 1]))


def verification_metrics(scores, issame, n_folds=10, folds=None):
    """``verification_accuracy`` (+ ``_std``), ``roc_auc`` and ``eer`` of scored pairs."""
    acc, std, _ = kfold_accuracy(scores, issame, n_folds=n_folds, folds=folds)
    return {
        "verification_accuracy": acc,
        "verification_accuracy_std": std,
        "roc_auc": roc_auc(scores, issame),
        "eer": eer(scores, issame),
    }
