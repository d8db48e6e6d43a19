"""StableContrastLoss (draft Eq. 16) and RobustHardContrastiveLoss (draft Eq. 22) against NumPy."""

import numpy as np
import pytest
import tensorflow as tf

from tfdml.losses import RobustHardContrastiveLoss, StableContrastLoss


def np_stable(d, triplets, alpha, beta):
    """Eq. 16 per ordered positive pair (i, j) with its sampled negative n*(i); mean over pairs."""
    if not triplets:
        return 0.0
    return float(
        np.mean([max(d[i, j] - beta + alpha, 0) + max(beta - d[i, n] + alpha, 0) for i, j, n in triplets])
    )


def np_robust(d, labels, cand, alpha, beta):
    """Eq. 22: [D_ij − α]_+² + max_{n: D_in > β} [α − D_in]_+², mean over positive pairs."""
    terms = []
    n = len(labels)
    for i in range(n):
        negs = [k for k in range(n) if cand[i, k] and labels[k] != labels[i] and d[i, k] > beta]
        hardest = max([max(alpha - d[i, k], 0) ** 2 for k in negs], default=0.0)
        for j in range(n):
            if cand[i, j] and labels[i] == labels[j]:
                terms.append(max(d[i, j] - alpha, 0) ** 2 + hardest)
    return float(np.mean(terms)) if terms else 0.0


@pytest.mark.parametrize("seed", [0, 7])
def test_stable_contrast_eq16_distance_weighted_same_selection(ref, seed):
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), dim=8, seed=seed)
    loss = StableContrastLoss(alpha=0.2, beta=1.1, seed=seed)
    got = float(loss(labels, e))
    d = ref.pairwise(e)
    sel = loss.sampler(d.astype(np.float32), labels, seed=tf.constant([seed, 0]), embedding_dim=8)
    trips = ref.triplet_list(sel)
    # one negative per end of each positive pair: both (i, j) and (j, i) are selected
    assert {(i, j) for i, j, _ in trips} == {(j, i) for i, j, _ in trips}
    np.testing.assert_allclose(got, np_stable(d, trips, 0.2, 1.1), rtol=1e-5)


@pytest.mark.parametrize("case", ["mixed", "one_class", "no_positive"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stable_contrast_eq16_semi_hard_numpy_selection(ref, case, seed):
    labels = ref.LABELS[case]
    e = ref.embeddings(len(labels), seed=seed)
    d = ref.pairwise(e)
    trips = ref.semi_hard_triplets(d, labels, ref.candidates(labels))
    got = StableContrastLoss(alpha=0.3, beta=1.0, sampler="semi_hard")(labels, e)
    np.testing.assert_allclose(float(got), np_stable(d, trips, 0.3, 1.0), rtol=1e-5)


@pytest.mark.parametrize("case", ["mixed", "one_class", "no_positive"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_robust_hard_contrast_eq22(ref, case, seed):
    labels = ref.LABELS[case]
    e = ref.embeddings(len(labels), seed=seed)
    d = ref.pairwise(e)
    for alpha, beta in ((1.3, 1.0), (1.0, 0.5)):
        expected = np_robust(d, labels, ref.candidates(labels), alpha, beta)
        got = RobustHardContrastiveLoss(alpha=alpha, beta=beta)(labels, e)
        np.testing.assert_allclose(float(got), expected, rtol=1e-5, atol=1e-7)


def test_robust_hard_contrast_pair_id(ref):
    labels = ref.LABELS["mixed"]
    pair_id = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2], np.int32)
    e = ref.embeddings(len(labels), seed=5)
    d = ref.pairwise(e)
    expected = np_robust(d, labels, ref.candidates(labels, pair_id), 1.3, 0.8)
    got = RobustHardContrastiveLoss(alpha=1.3, beta=0.8)({"label": labels, "pair_id": pair_id}, e)
    np.testing.assert_allclose(float(got), expected, rtol=1e-5)


def test_bad_parameters():
    with pytest.raises(ValueError, match="beta < alpha"):
        RobustHardContrastiveLoss(alpha=0.5, beta=0.5)
    with pytest.raises(ValueError, match="alpha"):
        RobustHardContrastiveLoss(alpha=-1.0)
    with pytest.raises(ValueError, match="selects"):
        StableContrastLoss(sampler="random")
