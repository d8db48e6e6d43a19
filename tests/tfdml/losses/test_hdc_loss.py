"""HDCLoss (Yuan, Yang & Zhang 2017, §3, Figure 2: level k trained on the pairs the levels
before it kept; the contrastive loss of Wu et al. 2017 §3 per level) against a brute-force
NumPy loop over levels and ordered pairs; its gradient against central finite differences."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdml import losses


def _contrastive_mean(d, y, pairs, margin):
    """Mean over the pairs of y D² + (1 − y) [α − D]_+² (Wu et al. 2017 §3); 0 without pairs."""
    terms = [d[i, j] ** 2 if y[i] == y[j] else max(margin - d[i, j], 0.0) ** 2 for i, j in pairs]
    return sum(terms) / len(terms) if terms else 0.0


def _hdc_keep(d, y, pairs, f):
    """The ceil(f·n₊) farthest positive and ceil(f·n₋) closest negative pairs (stable: row-major)."""
    pos = sorted([p for p in pairs if y[p[0]] == y[p[1]]], key=lambda p: -d[p])
    neg = sorted([p for p in pairs if y[p[0]] != y[p[1]]], key=lambda p: d[p])
    return sorted(pos[:math.ceil(f * len(pos))] + neg[:math.ceil(f * len(neg))])


def _brute(e, y, levels, f, margin=1.0, weights=None):
    b = len(y)
    pairs = [(i, j) for i in range(b) for j in range(b) if i != j]
    total = 0.0
    for k, part in enumerate(np.split(e, levels, axis=1)):
        d = np.sqrt(np.maximum(((part[:, None] - part[None]) ** 2).sum(-1), 0.0))
        total += (1.0 if weights is None else weights[k]) * _contrastive_mean(d, y, pairs, margin)
        pairs = _hdc_keep(d, y, pairs, f)
    return total


def _batch(seed, b=8, width=12, classes=3):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=b).astype(np.int32)
    e = rng.normal(size=(b, width))
    return y, e


@pytest.mark.parametrize("levels,f", [(1, 0.5), (2, 0.5), (3, 0.5), (3, 0.3), (2, 1.0)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_value_matches_brute_force(levels, f, seed):
    y, e = _batch(seed)
    loss = losses.HDCLoss(levels=levels, filter_percentage=f, dtype="float64")
    np.testing.assert_allclose(float(loss(y, tf.constant(e))), _brute(e, y, levels, f), rtol=1e-10)


def test_level_weights_and_margin():
    y, e = _batch(4)
    loss = losses.HDCLoss(levels=3, loss=losses.ContrastiveLoss(margin=2.0, dtype="float64"),
                          level_weights=[1.0, 0.5, 2.0], dtype="float64")
    np.testing.assert_allclose(float(loss(y, tf.constant(e))), _brute(e, y, 3, 0.5, 2.0, [1.0, 0.5, 2.0]),
                               rtol=1e-10)


def test_level_two_sees_only_level_ones_hard_pairs():
    """Hand case: batch of 4, classes {0, 1}, {2, 3}; level 1 is a line, level 2 anything."""
    e1 = np.array([[0.0], [3.0], [1.0], [1.5]])  # positives D01 = 3, D23 = 0.5; negatives 1, 1.5, 2, 1.5
    y = np.array([0, 0, 1, 1])
    masks = losses.HDCLoss(levels=2).level_candidates(
        __import__("tfdml").targets.unpack(y), tf.constant(np.concatenate([e1, e1], 1), tf.float32))
    np.testing.assert_array_equal(masks[0].numpy(), ~np.eye(4, dtype=bool))
    # ceil(0.5·4) = 2 positives: (0,1), (1,0) at 3. ceil(0.5·8) = 4 negatives: (0,2), (2,0) at 1,
    # then of the four at 1.5, (0,3), (1,3), (3,0), (3,1), the two of lowest row-major index.
    expect = np.zeros((4, 4), bool)
    for i, j in [(0, 1), (1, 0), (0, 2), (2, 0), (0, 3), (1, 3)]:
        expect[i, j] = True
    np.testing.assert_array_equal(masks[1].numpy(), expect)


def test_gradient_matches_central_differences(ref):
    y, e = _batch(5, b=6, width=6)
    loss = losses.HDCLoss(levels=3, filter_percentage=0.5, dtype="float64")
    x = tf.constant(e)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = loss(y, x)
    grad = tape.gradient(value, x).numpy()
    numeric = ref.central_gradient(lambda flat: _brute(flat.reshape(e.shape), y, 3, 0.5), e.ravel())
    np.testing.assert_allclose(grad, numeric.reshape(e.shape), rtol=1e-5, atol=1e-7)
    assert np.abs(grad).max() > 1e-3


def test_degenerate_batches_give_zero_not_nan():
    for y in (np.zeros(5, np.int32), np.arange(5, dtype=np.int32)):  # one class; one example per class
        x = tf.constant(np.random.default_rng(0).normal(size=(5, 6)))
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = losses.HDCLoss(levels=2, dtype="float64")(y, x)
        grad = tape.gradient(value, x)
        assert np.isfinite(float(value))
        assert grad is None or np.all(np.isfinite(grad.numpy()))
    # A single example: no pair at all.
    x = tf.constant(np.ones((1, 6)))
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = losses.HDCLoss(levels=2, dtype="float64")([0], x)
    assert float(value) == 0.0
    grad = tape.gradient(value, x)
    assert grad is None or not np.any(grad.numpy())


def test_xla_with_unknown_batch_equals_eager(ref):
    """Value and gradient (the shared helper: a [None, 6] input signature)."""
    ref.check_xla_equals_eager_with_unknown_batch(losses.HDCLoss(levels=3, filter_percentage=0.4), dim=6)


def test_config_round_trip_and_errors():
    loss = losses.HDCLoss(levels=2, loss=losses.ContrastiveLoss(margin=0.5), filter_percentage=0.25,
                          level_weights=[1.0, 2.0])
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert type(restored) is losses.HDCLoss and restored.get_config() == loss.get_config()
    assert restored.level_loss.margin == 0.5 and restored.filter_percentage == 0.25
    with pytest.raises(ValueError, match="levels must be a positive integer"):
        losses.HDCLoss(levels=0)
    with pytest.raises(ValueError, match="takes a tfdml pair loss for every level"):
        losses.HDCLoss(loss=losses.FastAPLoss())
    with pytest.raises(ValueError, match="build it with sampler=None"):
        losses.HDCLoss(loss=losses.ContrastiveLoss(sampler="hard"))
    with pytest.raises(ValueError, match="level_weights must be 3 numbers"):
        losses.HDCLoss(level_weights=[1.0])
    with pytest.raises(ValueError, match="width divides by 3"):
        losses.HDCLoss(levels=3)([0, 0, 1], tf.zeros([3, 8]))
