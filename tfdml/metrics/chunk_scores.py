"""The scores of a chunk of queries and the thresholds every retrieval count starts from.

Shared by the reference path (:mod:`tfdml.metrics.retrieval`) and its fast forms
(:mod:`tfdml.kernels.retrieval`).
"""

import numpy as np
import tensorflow as tf

from tfdml import kernels
from tfdml.kernels import counting as _counting
from tfdml.metrics import knn as _knn

_INF = np.float32(np.inf)


def count_at_least(values, thresholds):
    """int32 [R, P]: ``out[i, j] = #{n : values[i, n] >= thresholds[i, j]}``.

    ``values`` float [R, N], ``thresholds`` [R, P] of the same dtype; exact
    integer counts (IEEE comparisons: ±0 are equal, a NaN value reaches
    nothing and a NaN threshold is reached by nothing). The reference compares
    every pair and sums (it may hold the ``[R, P, N]`` comparisons in memory);
    the ``"variadic_reduce"`` form (:mod:`tfdml.kernels.counting`, under XLA)
    reads the values once per group of thresholds and stores none of them.
    """
    values = tf.convert_to_tensor(values)
    thresholds = tf.convert_to_tensor(thresholds, values.dtype)
    choice = kernels.choose("count_at_least")
    if choice.form == "variadic_reduce" and _counting.can_run(thresholds):
        return _counting.count_at_least(values, thresholds, **choice.params)
    return tf.reduce_sum(tf.cast(values[:, None, :] >= thresholds[:, :, None], tf.int32), axis=2)


def positive_thresholds(s, pos_idx):
    """Positive scores ascending [c, P] (+inf padded) and R [c, 1], from the scores ``s``."""
    valid = pos_idx >= 0
    num_pos = tf.reduce_sum(tf.cast(valid, tf.int32), axis=1, keepdims=True)
    pos_s = tf.gather(s, tf.maximum(pos_idx, 0), batch_dims=1)
    return tf.sort(tf.where(valid, pos_s, _INF), axis=1), num_pos


def scores_and_thresholds(query, gallery, gallery_norms, pos_idx, self_index):
    """Scores [c, N] (self: -inf), positive scores ascending [c, P] (+inf padded), R [c, 1]."""
    s = _knn.exclude_self(_knn.scores(query, gallery, gallery_norms), self_index)
    thr, num_pos = positive_thresholds(s, pos_idx)
    return s, thr, num_pos


scores_and_thresholds_xla = tf.function(scores_and_thresholds, jit_compile=True, autograph=False)
