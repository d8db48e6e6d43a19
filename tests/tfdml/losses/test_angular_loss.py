"""AngularLoss against Wang et al. 2017, Eq. 8 (N-pair form) and Eq. 9 (with the N-pair loss)."""

import math

import keras
import numpy as np
import pytest

from tfdml import losses

from tests.tfdml.losses.test_npair_loss import np_pairs


def np_angular(e, labels, alpha=45.0, combine_npair=False, lam=2.0, pair_id=None):
    """Eq. 8 by loops: x L2-normalised; for every (anchor a, positive p) pair of an N-pair
    batch (tfdml's NPairLoss pairs, :func:`np_pairs`), the negatives x_n are the positives
    of that batch's other classes; f_{a,p,n} = 4 tan²α (x_a + x_p)ᵀ x_n − 2(1 + tan²α) x_aᵀ x_p,
    term = log(1 + Σ_n exp f); f_ang = mean over anchors. Eq. 9 adds the N-pair term
    log(1 + Σ_n exp(x_aᵀ x_n − x_aᵀ x_p)) to λ times it."""
    x = np.asarray(e, np.float64)
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    t2 = math.tan(math.radians(alpha)) ** 2
    pairs = np_pairs(labels, pair_id)
    if not pairs:
        return 0.0
    total = 0.0
    for slot, a, p in pairs:
        negatives = [q for s, b, q in pairs if s == slot and labels[b] != labels[a]]
        ang = np.log1p(sum(np.exp(4 * t2 * (x[a] + x[p]) @ x[n] - 2 * (1 + t2) * x[a] @ x[p]) for n in negatives))
        if combine_npair:
            npair = np.log1p(sum(np.exp(x[a] @ x[n] - x[a] @ x[p]) for n in negatives))
            total += npair + lam * ang
        else:
            total += ang
    return total / len(pairs)


def test_hand_computed_two_pairs():
    """α = 45° (tan²α = 1): f = 4 (x_a + x_p)ᵀ x_n − 4 x_aᵀ x_p. Class 0 at (1, 0), class 1
    at (0, 1), two examples each: f = 4·0 − 4·1 = −4 for both anchors, so
    f_ang = log(1 + e⁻⁴); Eq. 9 adds log(1 + e^(0 − 1)) to 2 f_ang. Scaling the inputs
    changes nothing (the loss normalises)."""
    e = np.array([[1.0, 0], [1.0, 0], [0, 1.0], [0, 1.0]], np.float32)
    labels = np.array([0, 0, 1, 1])
    expected = math.log1p(math.exp(-4.0))
    assert float(losses.AngularLoss()(labels, e)) == pytest.approx(expected, rel=1e-5)
    assert float(losses.AngularLoss()(labels, 5.0 * e)) == pytest.approx(expected, rel=1e-5)
    combined = math.log1p(math.exp(-1.0)) + 2.0 * expected
    assert float(losses.AngularLoss(combine_npair=True)(labels, e)) == pytest.approx(combined, rel=1e-5)


@pytest.mark.parametrize("case", ["mixed", "one_class", "no_positive"])
@pytest.mark.parametrize("alpha,combine_npair", [(45.0, False), (36.0, False), (45.0, True)])
def test_equals_numpy_brute_force_value_and_gradient(ref, case, alpha, combine_npair):
    labels = ref.LABELS[case]
    e = ref.embeddings(len(labels), dim=4, seed=int(alpha), normalize=False).astype(np.float64)
    loss = losses.AngularLoss(alpha=alpha, combine_npair=combine_npair, dtype="float64")
    value, grad = ref.value_and_grad(loss, labels, e)
    np.testing.assert_allclose(value, np_angular(e, labels, alpha, combine_npair), rtol=1e-7, atol=1e-10)
    fd = ref.central_gradient(lambda x: np_angular(x, labels, alpha, combine_npair), e)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-8)
    if case == "mixed":
        assert value > 0 and np.abs(grad).max() > 1e-3


def test_m_per_class_batch_holds_m_over_2_npair_batches(ref):
    """5 classes × 4, shuffled: 10 (anchor, positive) pairs in two N-pair batches of N = 5."""
    rng = np.random.default_rng(3)
    labels = rng.permutation(np.repeat(np.arange(5), 4)).astype(np.int32)
    e = ref.embeddings(len(labels), dim=5, seed=3)
    assert len(np_pairs(labels)) == 10
    np.testing.assert_allclose(float(losses.AngularLoss()(labels, e)), np_angular(e, labels), rtol=1e-5)


def test_pairs_from_pair_id(ref):
    labels = np.array([0, 0, 1, 1, 2, 0, 3, 3], np.int32)
    pair_id = np.array([0, 0, 1, 1, 2, 2, 3, 3], np.int32)
    e = ref.embeddings(len(labels), seed=5)
    got = float(losses.AngularLoss()({"label": labels, "pair_id": pair_id}, e))
    np.testing.assert_allclose(got, np_angular(e, labels, pair_id=pair_id), rtol=1e-5)


def test_shares_the_npair_tuples(ref):
    """Eq. 9 with λ = 0 is Sohn's N-pair loss (NPairLoss without ℓ2) on the normalised
    embeddings: the same (anchor, positive, negatives) tuples."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=7)  # unit rows
    np.testing.assert_allclose(float(losses.AngularLoss(combine_npair=True, lam=0.0)(labels, e)),
                               float(losses.NPairLoss(l2_reg=0.0)(labels, e)), rtol=1e-6)


@pytest.mark.parametrize("labels", [[5, 5, 5, 5], [0, 1, 2, 3], [0, 0, 1]], ids=["one_class", "singletons", "one_pair"])
def test_degenerate_batches_are_zero_and_finite(ref, labels):
    """No negative (one class, or one pair and a singleton) or no pair: every term is
    log 1 = 0; the gradient is finite, also for identical and zero embeddings."""
    labels = np.array(labels)
    for e in (ref.embeddings(len(labels), seed=1), np.ones((len(labels), 6), np.float32),
              np.zeros((len(labels), 6), np.float32)):
        value, grad = ref.value_and_grad(losses.AngularLoss(combine_npair=True), labels, e)
        assert value == 0.0 and np.all(np.isfinite(grad))


def test_identical_embeddings_are_finite(ref):
    labels = ref.LABELS["mixed"]
    value, grad = ref.value_and_grad(losses.AngularLoss(), labels, np.ones((len(labels), 6), np.float32))
    # Every f_{a,p,n} = 4·2 − 4 = 4 (α = 45°): finite, and the gradient of a constant direction too.
    assert np.isfinite(value) and value > 0 and np.all(np.isfinite(grad))


def test_int64_labels_beyond_float_precision(ref):
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=2)
    expected = float(losses.AngularLoss()(labels, e))
    big = labels.astype(np.int64) + 2**40
    np.testing.assert_allclose(float(losses.AngularLoss()(big, e)), expected, rtol=1e-6)
    near = labels.astype(np.int64) + 2**24  # 2**24 + 1 is 2**24 in float32
    np.testing.assert_allclose(float(losses.AngularLoss()(near, e)), expected, rtol=1e-6)


def test_xla_equals_eager_with_unknown_batch(ref):
    loss = losses.AngularLoss(combine_npair=True)
    ref.check_xla_equals_eager_with_unknown_batch(loss)


def test_constructor_refuses_what_the_loss_has_no_meaning_for():
    for alpha in (0, 90, -10, "wide", True):
        with pytest.raises(ValueError, match=r"alpha must be an angle in degrees in \(0, 90\)"):
            losses.AngularLoss(alpha=alpha)
    with pytest.raises(ValueError, match="takes no distance"):
        losses.AngularLoss(distance="cosine")
    with pytest.raises(ValueError, match="has no importance-weighted form"):
        losses.AngularLoss(importance=True)
    with pytest.raises(ValueError, match="takes no sampler"):
        losses.AngularLoss(sampler="all")
    with pytest.raises(ValueError, match="lam must be a number >= 0"):
        losses.AngularLoss(combine_npair=True, lam=-1.0)


def test_registered_and_keras_file_round_trip(tmp_path, ref):
    loss = losses.get("angular", alpha=36.0, combine_npair=True, lam=2.0)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert type(restored) is losses.AngularLoss and restored.get_config() == loss.get_config()
    model, loaded = ref.keras_file_round_trip(loss, tmp_path / "m.keras")
    assert loaded.loss.get_config() == model.loss.get_config()
