"""Fast form of :func:`tfdml.primitives.count_at_least`: XLA's variadic reduction.

The reference counts ``out[i, j] = #{n : values[i, n] >= thresholds[i, j]}`` by
a ``reduce_sum`` of the comparisons. This form accumulates the counts of up to
``group`` thresholds of a row in one variadic reduction over ``n`` (an XLA op
that TensorFlow's public ops do not expose; jax2tf emits it): the [R, N]
values are read once per ``group`` thresholds and the [R, N, P] comparisons are
never stored, XLA fusing the comparisons, and the producer of ``values`` when
it is elementwise, into the reduction. It exists only while XLA compiles
(:func:`can_run`); ``group`` is the CPU table's parameter
(:data:`tfdml.kernels.CHOICES`).
"""

import functools

import tensorflow as tf

from tfdml import xla

try:  # XLA's own ops for TensorFlow (what jax2tf emits); not in tf.raw_ops
    from tensorflow.compiler.tf2xla.python import xla as _tf2xla
except ImportError:  # pragma: no cover - a future TensorFlow without this module
    _tf2xla = None


def can_run(thresholds):
    """Whether :func:`count_at_least` can be built here: XLA is compiling, TensorFlow has
    the op, and the number of thresholds (``thresholds.shape[1]``) is static."""
    return _tf2xla is not None and xla.is_compiling() and thresholds.shape[1] is not None


@functools.lru_cache(maxsize=None)
def _sum_reducer(width):
    """The reducer of a variadic reduction of ``width`` int32 counts: elementwise sums."""

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)] * (2 * width), autograph=False)
    def add(*pairs):
        return [pairs[i] + pairs[width + i] for i in range(width)]

    return add.get_concrete_function()


def count_at_least(values, thresholds, group):
    """int32 [R, P], equal to the reference; ``group`` thresholds per variadic reduction.

    ``values`` float [R, N], ``thresholds`` [R, P] of the same dtype, P static.
    Only while XLA compiles (:func:`can_run`).
    """
    width = thresholds.shape[1]
    if not can_run(thresholds):
        raise ValueError("The variadic count runs only under XLA with a static number of "
                         "thresholds; use tfdml.kernels.chosen.count_at_least, which chooses.")
    if width == 0:
        return tf.zeros([tf.shape(values)[0], 0], tf.int32)
    reached = [tf.cast(values >= thresholds[:, j : j + 1], tf.int32) for j in range(width)]
    counts = []
    for start in range(0, width, group):
        part = reached[start : start + group]
        counts += _tf2xla.variadic_reduce(part, [tf.constant(0, tf.int32)] * len(part), [1],
                                          _sum_reducer(len(part)))
    return tf.stack(counts, axis=1)
