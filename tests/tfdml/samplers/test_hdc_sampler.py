"""HDC mining (Yuan, Yang & Zhang 2017, §3; pytorch-metric-learning's HDCMiner rule): of the
batch's candidate positive pairs the ceil(f · n₊) farthest, of its negative pairs the
ceil(f · n₋) closest, against a brute-force NumPy loop over the ordered pairs."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tests.tfdml.samplers.test_semi_hard_and_hard import CASES, _case
from tfdml import samplers


def _brute_hdc(d, y, cand, f):
    """List every candidate pair (i, j), i ≠ j, in row-major order; sort the positives by
    decreasing D and the negatives by increasing D (Python's sort is stable: equal D keep
    row-major order) and keep the first ceil(f · n) of each."""
    b, m = d.shape
    positives, negatives = [], []
    for i in range(b):
        for j in range(m):
            if i == j or not cand[i, j]:
                continue
            (positives if y[i] == y[j] else negatives).append((i, j))
    pos, neg = np.zeros((b, m)), np.zeros((b, m))
    for pairs, out, sign in ((positives, pos, -1.0), (negatives, neg, 1.0)):
        ranked = sorted(pairs, key=lambda p: sign * float(d[p]))
        for i, j in ranked[:math.ceil(f * len(pairs))]:
            out[i, j] = 1
    return pos, neg


@pytest.mark.parametrize("f", [0.5, 0.3, 1.0, 0.01])
@pytest.mark.parametrize("name,seed", CASES)
def test_matches_brute_force(name, seed, f):
    d, y, cand, with_pair_id = _case(name, seed)
    sel = samplers.HDCSampler(f)(d, y, cand if with_pair_id else None)
    pos, neg = _brute_hdc(d, y, cand, f)
    np.testing.assert_array_equal(sel.pos_weight.numpy(), pos)
    np.testing.assert_array_equal(sel.neg_weight.numpy(), neg)
    if name == "one_class":
        assert not sel.neg_weight.numpy().any()


def test_hand_case_counts_and_ties():
    # Classes {0, 1} and {2, 3}: 4 ordered positive pairs, 8 ordered negative pairs.
    d = np.array([[0.0, 0.9, 0.2, 0.5],
                  [0.9, 0.0, 0.7, 0.2],
                  [0.2, 0.7, 0.0, 0.4],
                  [0.5, 0.2, 0.4, 0.0]], np.float32)
    y = np.array([0, 0, 1, 1])
    sel = samplers.HDCSampler(0.5)(d, y)
    # Positives (0,1),(1,0) at 0.9 and (2,3),(3,2) at 0.4: ceil(0.5·4) = 2, the two at 0.9.
    np.testing.assert_array_equal(np.argwhere(sel.pos_weight.numpy()), [[0, 1], [1, 0]])
    # Negatives at 0.2: (0,2),(1,3),(2,0),(3,1); ceil(0.5·8) = 4, exactly those.
    np.testing.assert_array_equal(np.argwhere(sel.neg_weight.numpy()), [[0, 2], [1, 3], [2, 0], [3, 1]])
    # ceil(0.3·4) = 2 positives, ceil(0.3·8) = 3 negatives: the tie at 0.2 cut by row-major index.
    sel = samplers.HDCSampler(0.3)(d, y)
    np.testing.assert_array_equal(np.argwhere(sel.neg_weight.numpy()), [[0, 2], [1, 3], [2, 0]])
    # A candidate mask restricts the ranking to its pairs (the cascade's next level).
    cand = np.ones((4, 4), bool)
    cand[0, 1] = cand[1, 0] = False
    sel = samplers.HDCSampler(0.5)(d, y, cand)
    np.testing.assert_array_equal(np.argwhere(sel.pos_weight.numpy()), [[2, 3]])


def test_bad_arguments():
    for bad in (0, 0.0, 1.5, -0.1, None, "x", True, float("nan")):
        with pytest.raises(ValueError, match=r"filter_percentage must be a number in \(0, 1\]"):
            samplers.HDCSampler(bad)


def test_xla_with_unknown_batch_equals_eager():
    sampler = samplers.HDCSampler(0.4)
    spec = (tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([None, None], tf.bool))
    run = lambda d, y, cand: tuple(sampler(d, y, cand))  # noqa: E731
    compiled = tf.function(run, input_signature=spec, jit_compile=True)
    for name, seed in [("random", 1), ("pair_id", 0), ("one_class", 2), ("singleton_class", 3)]:
        d, y, cand, _ = _case(name, seed)
        for e, c in zip(run(d, y, cand), compiled(d, y, cand)):
            np.testing.assert_array_equal(e.numpy(), c.numpy())
