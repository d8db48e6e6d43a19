"""Pair verification: LFW 10-fold accuracy (Wu §5), ROC AUC and EER (draft Table 2)."""

import numpy as np
import pytest

from tfdml.metrics import verification as ver


def brute_best_threshold(scores, issame):
    u = np.unique(scores)
    cands = [-np.inf] + [(a + b) / 2 for a, b in zip(u[:-1], u[1:])] + [np.inf]
    best_t, best_acc = None, -1.0
    for t in cands:  # ascending: the first maximum is the lowest threshold
        acc = np.mean((scores >= t) == issame)
        if acc > best_acc:
            best_t, best_acc = t, acc
    return best_t, best_acc


def brute_auc(scores, issame):
    """P(s+ > s-) + 1/2 P(s+ = s-) over all positive/negative pairs (Mann-Whitney)."""
    pos, neg = scores[issame], scores[~issame]
    return np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])


@pytest.fixture(scope="module")
def pairs():
    rng = np.random.default_rng(0)
    issame = rng.random(200) < 0.5
    scores = np.round(rng.standard_normal(200) + 1.2 * issame, 1)  # rounded: ties occur
    return scores, issame


def test_best_threshold_equals_brute_force(pairs):
    scores, issame = pairs
    assert ver.best_threshold(scores, issame) == pytest.approx(brute_best_threshold(scores, issame))


def test_kfold_accuracy_equals_brute_force(pairs):
    scores, issame = pairs
    folds = np.arange(200) * 10 // 200
    accs = []
    for f in range(10):
        t, _ = brute_best_threshold(scores[folds != f], issame[folds != f])
        accs.append(np.mean((scores[folds == f] >= t) == issame[folds == f]))
    mean, std, thresholds = ver.kfold_accuracy(scores, issame, n_folds=10)
    assert mean == pytest.approx(np.mean(accs)) and std == pytest.approx(np.std(accs))
    assert thresholds.shape == (10,)


def test_kfold_hand_case():
    # Two folds. Fold 0 pairs: (0.9 same), (0.1 diff); fold 1: (0.2 same), (0.8 diff).
    # Chosen on fold 1: candidates -inf (acc 1/2), 0.5 (acc 0), +inf (acc 1/2) -> the
    # lowest best, -inf, which scores fold 0 at 1/2. Chosen on fold 0: 0.5 (acc 1),
    # which scores fold 1 at 0. Mean 1/4, std 1/4.
    scores = np.array([0.9, 0.1, 0.2, 0.8])
    issame = np.array([True, False, True, False])
    mean, std, thresholds = ver.kfold_accuracy(scores, issame, folds=[0, 0, 1, 1])
    np.testing.assert_allclose(thresholds, [-np.inf, 0.5])
    assert mean == pytest.approx(0.25) and std == pytest.approx(0.25)


def test_auc_equals_mann_whitney(pairs):
    scores, issame = pairs
    assert ver.roc_auc(scores, issame) == pytest.approx(brute_auc(scores, issame))


def test_eer_hand_cases():
    # Perfect separation: EER 0.
    assert ver.eer([0.9, 0.8, 0.2, 0.1], [True, True, False, False]) == 0.0
    # pos 0.9, 0.4; neg 0.6, 0.1: at thresholds in (0.4, 0.6] FPR = FNR = 1/2.
    assert ver.eer([0.9, 0.4, 0.6, 0.1], [True, True, False, False]) == pytest.approx(0.5)
    # pos 0.9, 0.7, 0.3; neg 0.8, 0.2. ROC (FPR, FNR) points: (0, 1), (0, 2/3),
    # (1/2, 2/3), (1/2, 1/3), (1/2, 0), (1, 0). FNR - FPR goes 1/6 -> -1/6 between
    # (1/2, 2/3) and (1/2, 1/3): crossing at FPR = 1/2.
    assert ver.eer([0.9, 0.7, 0.3, 0.8, 0.2], [1, 1, 1, 0, 0]) == pytest.approx(0.5)
    # Inverted scores: every same pair below every different pair -> EER 1.
    assert ver.eer([0.1, 0.2, 0.8, 0.9], [True, True, False, False]) == pytest.approx(1.0)


def test_eer_interpolates_between_roc_points():
    # pos 0.9, 0.5; neg 0.5, 0.1: the tie at 0.5 makes a diagonal ROC step from
    # (FPR, FNR) = (0, 1/2) to (1/2, 0); FNR - FPR goes 1/2 -> -1/2, so the line
    # crosses FPR = FNR halfway: EER = 1/4.
    assert ver.eer([0.9, 0.5, 0.5, 0.1], [1, 1, 0, 0]) == pytest.approx(0.25)


def test_sample_pairs():
    labels = np.repeat(np.arange(7), [1, 2, 3, 4, 5, 6, 7])
    first, second, issame, folds = ver.sample_pairs(labels, num_pairs=205, n_folds=10, seed=4)
    assert first.size == 200 and issame.sum() == 100
    assert np.all(labels[first[issame]] == labels[second[issame]])
    assert np.all(first[issame] != second[issame])
    assert np.all(labels[first[~issame]] != labels[second[~issame]])
    np.testing.assert_array_equal(np.bincount(folds), [20] * 10)
    for f in range(10):
        assert issame[folds == f].sum() == 10
    again = ver.sample_pairs(labels, num_pairs=205, n_folds=10, seed=4)
    np.testing.assert_array_equal(again[0], first)
    with pytest.raises(ValueError, match="two classes"):
        ver.sample_pairs(np.zeros(5), 20, 10)
    with pytest.raises(ValueError, match="at least two examples"):
        ver.sample_pairs(np.arange(5), 20, 10)
    with pytest.raises(ValueError, match="too small"):
        ver.sample_pairs(labels, 5, 10)


def test_pair_scores():
    e = np.array([[0.0, 0.0], [3.0, 4.0], [0.0, 2.0]])
    s, d = ver.pair_scores(e, [0, 1], [1, 2], "euclidean")
    np.testing.assert_allclose(d, [5.0, np.sqrt(13.0)])
    np.testing.assert_allclose(s, -d)
    s, d = ver.pair_scores(e, [1], [2], "cosine")
    np.testing.assert_allclose(s, [0.8])
    with pytest.raises(ValueError, match="distance"):
        ver.pair_scores(e, [0], [1], "l1")


def test_verification_metrics_and_errors(pairs):
    scores, issame = pairs
    out = ver.verification_metrics(scores, issame)
    assert set(out) == {"verification_accuracy", "verification_accuracy_std", "roc_auc", "eer"}
    with pytest.raises(ValueError, match="must match"):
        ver.verification_metrics(scores[:5], issame)
    with pytest.raises(ValueError, match="both"):
        ver.roc_auc([0.1, 0.2], [True, True])
