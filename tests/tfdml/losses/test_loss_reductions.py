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
