"""Fast form of :func:`tfdml.primitives.running_count` (``tf.cumsum`` of a 0/1 mask along rows).

``blocked_matmul``: within a block of ``block`` columns, one matmul with a triangular
matrix of ones; across blocks, the cumulative sum of the block totals (``block``
times fewer elements). Exact: the counts are integers below 2²⁴, which float32 holds
exactly whatever the summation order. Under XLA on CPU ``tf.cumsum`` lowers to a
reduce-window, slower than this.
"""

import numpy as np
import tensorflow as tf

FORMS = ("blocked_matmul",)


def blocked_matmul(mask, block):
    """int32 [R, N]: ``tf.cumsum(mask, axis=1)`` of a 0/1 int32 [R, N] mask, by blocks."""
    rows, n = tf.shape(mask)[0], tf.shape(mask)[1]
    blocks = (n + block - 1) // block
    x = tf.pad(tf.cast(mask, tf.float32), tf.stack([[0, 0], [0, blocks * block - n]]))
    x = tf.reshape(x, tf.stack([rows, blocks, block]))
    upper = tf.constant(np.triu(np.ones((block, block), np.float32)))  # upper[i, j] = 1 for i <= j
    within = tf.einsum("rbi,ij->rbj", x, upper)
    before = tf.cumsum(within[:, :, -1], axis=1, exclusive=True)
    total = tf.reshape(within + before[:, :, None], tf.stack([rows, blocks * block]))
    return tf.cast(total[:, :n], tf.int32)
