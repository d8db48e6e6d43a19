"""TripletLoss against FaceNet / Wu et al. 2017 §3 (ℓ2²) and Wu §4 (ℓ2), on NumPy or same-seed selections."""

import numpy as np
import pytest
import tensorflow as tf

from tfdml.losses import TripletLoss


def np_triplet(d, triplets, margin, squared):
    """Wu §3: [D_ap² − D_an² + α]_+ ; Wu §4: (D_ap − D_an + α)_+ ; mean over triplets (Hong Eq. 1)."""
    if not triplets:
        return 0.0
    q = 2 if squared else 1
    return float(np.mean([max(d[a, p] ** q - d[a, n] ** q + margin, 0.0) for a, p, n in triplets]))


@pytest.mark.parametrize("squared", [True, False])
@pytest.mark.parametrize("case", ["mixed", "one_class", "no_positive"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_semi_hard_numpy_selection(ref, case, seed, squared):
    labels = ref.LABELS[case]
    e = ref.embeddings(len(labels), seed=seed)
    d = ref.pairwise(e)
    trips = ref.semi_hard_triplets(d, labels, ref.candidates(labels))
    expected = np_triplet(d, trips, 0.3, squared)
    got = TripletLoss(margin=0.3, squared=squared)(labels, e)
    np.testing.assert_allclose(float(got), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("squared", [True, False])
@pytest.mark.parametrize("seed", [0, 3])
def test_hard_numpy_selection(ref, seed, squared):
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=seed)
    d = ref.pairwise(e)
    trips = ref.hard_triplets(d, labels, ref.candidates(labels))
    expected = np_triplet(d, trips, 0.2, squared)
    got = TripletLoss(squared=squared, sampler="hard")(labels, e)
    np.testing.assert_allclose(float(got), expected, rtol=1e-5)


@pytest.mark.parametrize("seed", [2, 9])
def test_distance_weighted_same_selection(ref, seed):
    """Wu §4 'triplet ℓ2 + distance weighted': NumPy loss on the selection of seed [s, 0]."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), dim=8, seed=seed)
    loss = TripletLoss(squared=False, sampler="distance_weighted", seed=seed)
    got = float(loss(labels, e))
    d = ref.pairwise(e)
    sel = loss.sampler(d.astype(np.float32), labels, seed=tf.constant([seed, 0]), embedding_dim=8)
    trips = ref.triplet_list(sel)
    assert trips
    np.testing.assert_allclose(got, np_triplet(d, trips, 0.2, False), rtol=1e-5)


def test_cosine_distance_is_lu_eq1(ref):
    """distance='cosine' uses D = 1 − s, so ℓ2 triplet = [s_an − s_ap + γ]_+ (Lu et al. Eq. 1)."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=4, normalize=False)
    s = ref.cosine(e)
    trips = ref.semi_hard_triplets(1 - s, labels, ref.candidates(labels))
    expected = np.mean([max(s[a, n] - s[a, p] + 0.1, 0) for a, p, n in trips])
    got = TripletLoss(margin=0.1, squared=False, distance="cosine")(labels, e)
    np.testing.assert_allclose(float(got), expected, rtol=1e-5)


def test_triplet_bad_input():
    with pytest.raises(ValueError, match="selects"):
        TripletLoss(sampler="all")
    with pytest.raises(ValueError, match="triplet sampler"):
        TripletLoss(sampler=None)
    with pytest.raises(ValueError, match="margin"):
        TripletLoss(margin=0)
    with pytest.raises(ValueError, match="Unknown distance"):
        TripletLoss(distance="manhattan")
