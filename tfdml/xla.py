"""Whether the ops being built will be compiled by XLA.

Some computations have a fast form in each mode: XLA needs fixed shapes and
fuses elementwise work into its reductions, while TensorFlow's graph kernels
handle data-dependent shapes and run an arg-min as one pass. A sampler or
loss asks :func:`is_compiling` at trace time and builds the form that suits
the mode; both forms give the same selection and the same loss.

:func:`count_at_least` is XLA's variadic reduction, which TensorFlow's public
ops do not expose: many counts from one pass over the data.
"""

import functools

import tensorflow as tf

try:  # TensorFlow's own test for this (tf.function wraps XLA tracing in an XLA context)
    from tensorflow.python.framework import ops as _ops
    from tensorflow.python.ops import control_flow_util as _control_flow_util
except ImportError:  # pragma: no cover - a future TensorFlow without these modules
    _control_flow_util = None

try:  # XLA's own ops for TensorFlow (what jax2tf emits); not in tf.raw_ops
    from tensorflow.compiler.tf2xla.python import xla as _tf2xla
except ImportError:  # pragma: no cover - a future TensorFlow without this module
    _tf2xla = None

#: Thresholds counted by one variadic reduction (one pass over the data each).
#: Wider passes compile for longer and run no faster (benchmarks/RESULTS.md,
#: "Evaluation").
COUNT_GROUP = 64


def is_compiling():
    """True while tracing for XLA: inside ``tf.function(jit_compile=True)`` (also nested,
    and Keras' ``jit_compile=True``), False in graph mode without XLA and eagerly.

    Uses TensorFlow's internal test (the one ``tf.function`` uses to nest XLA
    functions). Should a TensorFlow version lack it, this answers True: the
    fixed-shape forms are correct in every mode, only slower in graph mode."""
    if _control_flow_util is None:  # pragma: no cover
        return True
    return bool(_control_flow_util.GraphOrParentsInXlaContext(_ops.get_default_graph()))


@functools.lru_cache(maxsize=None)
def _sum_reducer(width):
    """The reducer of a variadic reduction of ``width`` int32 counts: elementwise sums."""

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)] * (2 * width))
    def add(*pairs):
        return [pairs[i] + pairs[width + i] for i in range(width)]

    return add.get_concrete_function()


def count_at_least(values, thresholds):
    """int32 [R, P]: ``out[i, j] = #{n : values[i, n] >= thresholds[i, j]}``.

    ``values`` float [R, N], ``thresholds`` [R, P] of the same dtype; exact
    integer counts (a comparison per pair, NaN reaches nothing). While XLA
    compiles (:func:`is_compiling`) the P counts of a row are accumulated in
    one variadic reduction over N, so the [R, N] values are read once per
    :data:`COUNT_GROUP` thresholds and the [R, N, P] comparisons are never
    stored; XLA fuses the comparisons into it, and with it the producer of
    ``values`` when that is elementwise. Otherwise (graph mode, eager, or a
    TensorFlow without the op) one ``reduce_sum`` per threshold.
    """
    values = tf.convert_to_tensor(values)
    thresholds = tf.convert_to_tensor(thresholds, values.dtype)
    width = thresholds.shape[1]
    if width is None:
        raise ValueError("count_at_least needs a static number of thresholds (thresholds.shape[1]).")
    if width == 0:
        return tf.zeros([tf.shape(values)[0], 0], tf.int32)
    reached = [tf.cast(values >= thresholds[:, j : j + 1], tf.int32) for j in range(width)]
    if _tf2xla is None or not is_compiling():
        return tf.stack([tf.reduce_sum(r, axis=1) for r in reached], axis=1)
    counts = []
    for start in range(0, width, COUNT_GROUP):
        group = reached[start : start + COUNT_GROUP]
        counts += _tf2xla.variadic_reduce(group, [tf.constant(0, tf.int32)] * len(group), [1],
                                          _sum_reducer(len(group)))
    return tf.stack(counts, axis=1)
