"""DDMLLoss against brute-force NumPy written from Hu, Lu, Tan 2014 (DDML), Eq. 6 with g of Eq. 7:
ℓ(i, j) = g(1 − ℓ_ij (τ − D_ij²)), g(z) = (1/β) log(1 + exp(βz))."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdml import losses, samplers
from tfdml.losses import ddml


def g(z, beta):
    """Eq. 7, in float64 (log1p(exp) written out, z small enough here)."""
    return math.log1p(math.exp(beta * z)) / beta


def np_ddml(d, pos, neg, tau, beta, w=None, formula=None):
    """Mean of g(1 − ℓ_ij (τ − D_ij²)) over the selected pairs with multiplicity (ℓ = +1 / −1),
    each term weighted by w_ij when given (Hong et al. Eq. 23); ``formula`` replaces the term."""
    term = formula or (lambda dij, l: g(1.0 - l * (tau - dij**2), beta))
    total, count = 0.0, 0.0
    n = len(d)
    for i in range(n):
        for j in range(n):
            wij = 1.0 if w is None else w[i, j]
            total += wij * (pos[i, j] * term(d[i, j], 1.0) + neg[i, j] * term(d[i, j], -1.0))
            count += pos[i, j] + neg[i, j]
    return total / count if count else 0.0


@pytest.mark.parametrize("case", ["mixed", "one_class", "no_positive"])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("tau, beta", [(2.0, 2.0), (1.5, 10.0)])
def test_all_pairs_match_eq6(ref, case, seed, tau, beta):
    labels = ref.LABELS[case]
    e = ref.embeddings(len(labels), seed=seed)
    pos, neg = ref.pos_neg(labels, ref.candidates(labels))
    expected = np_ddml(ref.pairwise(e), pos, neg, tau, beta)
    loss = losses.DDMLLoss(tau=tau, beta=beta)
    np.testing.assert_allclose(float(loss(labels, e)), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(loss(ref.importance_targets(labels), e)), expected, rtol=1e-5, atol=1e-6)


def test_hand_cases():
    """Two points at D² = 1 with τ = 2, β = 2: a positive pair sits on its bound τ − 1 (g(0) =
    log 2 / β); a negative pair is 2 inside its bound τ + 1 (g(2) = log(1 + e⁴) / β)."""
    e = np.array([[0.0, 0.0], [1.0, 0.0]], np.float32)
    loss = losses.DDMLLoss(tau=2.0, beta=2.0)
    assert float(loss(np.array([3, 3]), e)) == pytest.approx(math.log(2.0) / 2.0, rel=1e-6)
    assert float(loss(np.array([3, 4]), e)) == pytest.approx(math.log1p(math.exp(4.0)) / 2.0, rel=1e-6)
    # a negative pair far beyond τ + 1 costs almost nothing, a positive pair at D = 0 little
    far = np.array([[0.0, 0.0], [3.0, 0.0]], np.float32)
    assert float(loss(np.array([3, 4]), far)) == pytest.approx(g(1 + 2 - 9, 2.0), rel=1e-5)
    assert float(loss(np.array([3, 3]), np.zeros((2, 2), np.float32))) == pytest.approx(g(-1.0, 2.0), rel=1e-6)


def test_a_wrong_formula_is_caught(ref):
    """The reference tells Eq. 6 from its likely slips: D instead of D², the sign of ℓ_ij flipped,
    the plain hinge instead of g."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=4)
    d = ref.pairwise(e)
    pos, neg = ref.pos_neg(labels, ref.candidates(labels))
    got = float(losses.DDMLLoss()(labels, e))
    assert got == pytest.approx(np_ddml(d, pos, neg, 2.0, 2.0), rel=1e-5)
    for wrong in (lambda dij, l: g(1.0 - l * (2.0 - dij), 2.0),
                  lambda dij, l: g(1.0 + l * (2.0 - dij**2), 2.0),
                  lambda dij, l: max(1.0 - l * (2.0 - dij**2), 0.0)):
        assert abs(got - np_ddml(d, pos, neg, 2.0, 2.0, formula=wrong)) > 1e-2


def test_the_test_fails_when_the_terms_are_wrong(ref, monkeypatch):
    """The library's terms swapped for D instead of D² no longer match the reference."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=2)
    pos, neg = ref.pos_neg(labels, ref.candidates(labels))
    expected = np_ddml(ref.pairwise(e), pos, neg, 2.0, 2.0)

    def wrong_terms(dist, tau, beta):
        return (ddml.generalized_logistic(1.0 - tau + dist, beta),
                ddml.generalized_logistic(1.0 + tau - dist, beta))

    monkeypatch.setattr(ddml, "ddml_terms", wrong_terms)
    assert abs(float(losses.DDMLLoss()(labels, e)) - expected) > 1e-2


@pytest.mark.parametrize("case", ["mixed", "one_class"])
def test_gradient_matches_finite_differences_of_the_reference(ref, case):
    labels = ref.LABELS[case]
    e = ref.embeddings(len(labels), dim=3, seed=5).astype(np.float64)
    cand = ref.candidates(labels)
    pos, neg = ref.pos_neg(labels, cand)

    def reference(flat):
        return np_ddml(ref.pairwise(flat.reshape(e.shape)), pos, neg, 2.0, 3.0)

    numeric = ref.central_gradient(reference, e.ravel()).reshape(e.shape)
    loss = losses.DDMLLoss(tau=2.0, beta=3.0, dtype="float64")
    x = tf.constant(e)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = loss(labels, x)
    analytic = tape.gradient(value, x).numpy()
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8)
    assert np.abs(analytic).max() > 1e-3


def test_degenerate_batches_are_finite(ref):
    loss = losses.DDMLLoss()
    for labels, e in [(np.array([7]), ref.embeddings(1)),                     # one example
                      (np.array([1, 1, 1]), np.zeros((3, 6), np.float32)),  # one class, identical points
                      (np.array([0, 1, 2]), ref.embeddings(3))]:            # one example per class
        x = tf.constant(e)
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = loss(labels, x)
        grad = tape.gradient(value, x)
        assert np.isfinite(float(value)) and np.all(np.isfinite(grad.numpy()))
    assert float(loss(np.array([7]), ref.embeddings(1))) == 0.0


@pytest.mark.parametrize("sampler", ["semi_hard", "easy_hard", "pair_margin", "npair"])
def test_sampler_pairs(ref, sampler):
    """With a sampler, the reference on the sampler's pairs (a triplet (a, p, n) gives (a, p)
    and (a, n), Wu et al. §5)."""
    labels = ref.LABELS["mixed"] if sampler != "npair" else np.array([0, 1, 0, 2, 1, 2], np.int32)
    e = ref.embeddings(len(labels), seed=6)
    d = ref.pairwise(e)
    selection = samplers.get(sampler)(d.astype(np.float32), labels)
    if isinstance(selection, samplers.TripletSelection):
        pos, neg = ref.pairs_from_triplets(ref.triplet_list(selection), len(labels))
    else:
        pos, neg = selection.pos_weight.numpy(), selection.neg_weight.numpy()
    assert pos.sum() > 0 and neg.sum() > 0
    got = float(losses.DDMLLoss(sampler=sampler)(labels, e))
    np.testing.assert_allclose(got, np_ddml(d, pos, neg, 2.0, 2.0), rtol=1e-5)


def test_importance_weights_each_pair_term(ref):
    """importance=True: Σ W_ij ℓ(i, j) / #pairs (Hong et al. Eq. 23 with Eq. 24 / 25)."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=7)
    y = ref.importance_targets(labels, w_pos=0.03, w_neg=0.004)
    w = ref.hong_weights(labels, ref.CLASS_SIZES, 0.03, 0.004)
    pos, neg = ref.pos_neg(labels, ref.candidates(labels))
    expected = np_ddml(ref.pairwise(e), pos, neg, 2.0, 2.0, w=w)
    np.testing.assert_allclose(float(losses.DDMLLoss(importance=True)(y, e)), expected, rtol=1e-5)
    # plain labels: no columns, every pair weighs 1
    np.testing.assert_allclose(float(losses.DDMLLoss(importance=True)(labels, e)),
                               np_ddml(ref.pairwise(e), pos, neg, 2.0, 2.0), rtol=1e-5)


def test_xla_with_unknown_batch_equals_eager(ref):
    ref.check_xla_equals_eager_with_unknown_batch(losses.DDMLLoss(tau=1.8, beta=4.0))
    ref.check_xla_equals_eager_with_unknown_batch(losses.DDMLLoss(sampler="easy_hard"))


def test_config_round_trip_and_registry(ref):
    loss = losses.get("ddml", tau=2.5, beta=5.0, sampler="pair_margin", importance=True)
    assert isinstance(loss, losses.DDMLLoss)
    config = loss.get_config()
    assert config["tau"] == 2.5 and config["beta"] == 5.0
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert restored.get_config() == config and restored.sampler == samplers.PairMarginSampler()
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=8)
    assert float(restored(labels, e)) == pytest.approx(float(loss(labels, e)), rel=1e-6)


@pytest.mark.parametrize("kwargs, match", [({"tau": 1.0}, "tau must be > 1"), ({"tau": "x"}, "tau must be"),
                                           ({"beta": 0}, "beta must be"), ({"sampler": "top_k"}, "selects")])
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        losses.DDMLLoss(**kwargs)
