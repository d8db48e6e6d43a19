"""ContrastiveLoss against brute-force NumPy: Wu et al. 2017 §3 (squared) and draft Eq. 18 (ℓ2)."""

import numpy as np
import pytest
import tensorflow as tf

from tfdml import samplers
from tfdml.losses import ContrastiveLoss


def np_contrastive(d, pos, neg, margin, squared):
    """Wu §3: y D² + (1−y)[α − D]_+² (squared) / draft Eq. 18: y D + (1−y)[α − D]_+,
    averaged over the selected pairs with multiplicity."""
    total, count = 0.0, 0.0
    n = len(d)
    for i in range(n):
        for j in range(n):
            hinge = max(margin - d[i, j], 0.0)
            g, h = (d[i, j] ** 2, hinge**2) if squared else (d[i, j], hinge)
            total += pos[i, j] * g + neg[i, j] * h
            count += pos[i, j] + neg[i, j]
    return total / count if count else 0.0


@pytest.mark.parametrize("squared", [True, False])
@pytest.mark.parametrize("case", ["mixed", "one_class", "no_positive"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_all_pairs_matches_wu_section3_and_draft_eq18(ref, case, seed, squared):
    labels = ref.LABELS[case]
    e = ref.embeddings(len(labels), seed=seed)
    pos, neg = ref.pos_neg(labels, ref.candidates(labels))
    expected = np_contrastive(ref.pairwise(e), pos, neg, 1.1, squared)
    loss = ContrastiveLoss(margin=1.1, squared=squared)
    np.testing.assert_allclose(float(loss(labels, e)), expected, rtol=1e-5, atol=1e-6)
    # [B, 1] labels and the batch-contract dict give the same value.
    np.testing.assert_allclose(float(loss(labels[:, None], e)), expected, rtol=1e-5, atol=1e-6)
    y = ref.importance_targets(labels)
    np.testing.assert_allclose(float(loss(y, e)), expected, rtol=1e-5, atol=1e-6)


def test_pair_id_restricts_candidate_pairs(ref):
    labels = ref.LABELS["mixed"]
    pair_id = np.array([0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5], np.int32)
    e = ref.embeddings(len(labels), seed=3)
    pos, neg = ref.pos_neg(labels, ref.candidates(labels, pair_id))
    expected = np_contrastive(ref.pairwise(e), pos, neg, 1.0, True)
    got = ContrastiveLoss()({"label": labels, "pair_id": pair_id}, e)
    np.testing.assert_allclose(float(got), expected, rtol=1e-5)
    assert abs(expected - float(ContrastiveLoss()(labels, e))) > 1e-3  # the restriction matters


@pytest.mark.parametrize("seed", [3, 11])
def test_random_pairs_same_selection(ref, seed):
    """Sampled pairs: the NumPy loss on the selection the sampler makes with the same seed."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=seed)
    sampler = samplers.RandomPairSampler(num_pairs=16)
    loss = ContrastiveLoss(margin=1.2, sampler=sampler, seed=seed)
    got = float(loss(labels, e))
    d = ref.pairwise(e)
    sel = sampler(d.astype(np.float32), labels, seed=tf.constant([seed, 0], tf.int32))
    expected = np_contrastive(d, sel.pos_weight.numpy(), sel.neg_weight.numpy(), 1.2, True)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    # The stream advances: the second call uses seed [seed, 1].
    sel2 = sampler(d.astype(np.float32), labels, seed=tf.constant([seed, 1], tf.int32))
    expected2 = np_contrastive(d, sel2.pos_weight.numpy(), sel2.neg_weight.numpy(), 1.2, True)
    np.testing.assert_allclose(float(loss(labels, e)), expected2, rtol=1e-5)


@pytest.mark.parametrize("seed", [0, 5])
def test_semi_hard_triplets_become_pairs(ref, seed):
    """Wu Table 1 'contrastive + semi-hard': pairs (a, p) and (a, n*) of a NumPy semi-hard selection."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=seed)
    d = ref.pairwise(e)
    trips = ref.semi_hard_triplets(d, labels, ref.candidates(labels))
    pos, neg = ref.pairs_from_triplets(trips, len(labels))
    expected = np_contrastive(d, pos, neg, 1.0, False)
    got = ContrastiveLoss(squared=False, sampler="semi_hard")(labels, e)
    np.testing.assert_allclose(float(got), expected, rtol=1e-5)
