"""The shared reduction (mean / mean over active / sum) and the triplet → pair conversion, by hand."""

import numpy as np
import pytest
import tensorflow as tf

from tfdml.losses import reduce_tuples, triplets_to_pairs
from tfdml.samplers import TripletSelection


def test_reductions_hand_computed():
    losses = np.array([0.0, 2.0, 1.0, 0.5], np.float32)
    counts = np.array([1.0, 2.0, 0.0, 1.0], np.float32)
    weights = np.array([3.0, 0.5, 9.0, 2.0], np.float32)
    total = 0.0 * 1 * 3 + 2.0 * 2 * 0.5 + 0 + 0.5 * 1 * 2  # = 3
    assert float(reduce_tuples(losses, counts, "sum", weights)) == pytest.approx(total)
    assert float(reduce_tuples(losses, counts, "mean", weights)) == pytest.approx(total / 4)
    assert float(reduce_tuples(losses, counts, "mean_active", weights)) == pytest.approx(total / 3)
    assert float(reduce_tuples(losses, counts, "mean_active", extra=1.0)) == pytest.approx((4.5 + 1) / 3)


def test_empty_selection_is_zero_not_nan():
    x = tf.Variable([0.3, 0.0])
    for mode in ("sum", "mean", "mean_active"):
        with tf.GradientTape() as tape:
            value = reduce_tuples(x * 2.0, tf.zeros([2]), mode)
        assert float(value) == 0.0
        assert np.all(np.isfinite(tape.gradient(value, x).numpy()))
    with pytest.raises(ValueError, match="tuple_reduction"):
        reduce_tuples(x, x, "median")


def test_triplets_to_pairs_counts_multiplicity():
    sel = TripletSelection(
        anchor=tf.constant([0, 0, 1, 2], tf.int32),
        positive=tf.constant([1, 1, 0, 3], tf.int32),
        negative=tf.constant([2, 3, 2, 0], tf.int32),
        mask=tf.constant([True, True, True, False]),
    )
    pairs = triplets_to_pairs(sel, 4)
    pos = np.zeros((4, 4))
    pos[0, 1], pos[1, 0] = 2, 1
    neg = np.zeros((4, 4))
    neg[0, 2], neg[0, 3], neg[1, 2] = 1, 1, 1
    np.testing.assert_array_equal(pairs.pos_weight.numpy(), pos)
    np.testing.assert_array_equal(pairs.neg_weight.numpy(), neg)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("per_anchor", [3, 20])
def test_triplets_to_pairs_of_a_grid_selection_counts_like_numpy(jit, per_anchor):
    """A grid selection (slot a·B + p) gives pos[a, p] = mask and neg[a, n] = the number of
    valid slots of anchor a holding negative n; under XLA with at most the listed width of valid slots
    per anchor (3) only those are scattered, else (20) the whole grid: the same counts."""
    from tfdml.samplers import GridTripletSelection

    b = 40
    rng = np.random.default_rng(per_anchor)
    mask = np.zeros((b, b), bool)
    for a in range(b):
        mask[a, rng.choice(b, per_anchor, replace=False)] = True
    negative = rng.integers(0, b, (b, b)).astype(np.int32)
    rows = np.arange(b, dtype=np.int32)
    sel = GridTripletSelection(np.repeat(rows, b), np.tile(rows, b), negative.reshape(-1), mask.reshape(-1))
    pairs = tf.function(lambda s: tuple(triplets_to_pairs(s, b)), jit_compile=jit)(sel)
    neg = np.zeros((b, b))
    np.add.at(neg, (np.nonzero(mask)[0], negative[mask]), 1)
    np.testing.assert_array_equal(pairs[0].numpy(), mask.astype(float))
    np.testing.assert_array_equal(pairs[1].numpy(), neg)
