"""The primitives of :mod:`tfdml.primitives` that have fast forms, in the form the table chooses.

Each function here takes the primitive's arguments, asks :func:`tfdml.kernels.choose`
for its kernel and runs that form, or the primitive itself (the reference path, which
never asks the table). Samplers, metrics and the kernels' own forms call these; a
sampler's or a metric's own kernel is chosen by that kernel's function, which runs the
reference the caller passes in (:func:`tfdml.kernels.semi_hard.nearest_beyond`, ...); the
primitives without fast forms (:func:`~tfdml.primitives.gather_rows`, ...) are called
from :mod:`tfdml.primitives` directly.

=================  ==============================  ===========================================
function           kernel (``CHOICES``)             fast forms
=================  ==============================  ===========================================
running_count      ``"running_count"``             :mod:`tfdml.kernels.running_count`
first_argmin/max   ``"first_argmin"``              :mod:`tfdml.kernels.argmin`
count_less_equal   ``"count_less_equal"``          :mod:`tfdml.kernels.binary_search`
stable_order       ``"ordering"``                  :mod:`tfdml.kernels.sorting`
count_at_least     ``"count_at_least"``            :mod:`tfdml.kernels.counting`
=================  ==============================  ===========================================

The losses and models ask the table here too, and receive a plain answer:
:func:`listed_slots_width` and :func:`keeps_valid_slots_only` (``"triplet_slots"``, how
a triplet loss holds a grid selection, :mod:`tfdml.kernels.triplet_slots`) and
:func:`dtype_policy` (``"dtype_policy"``, the dtype policy of an ``"auto"`` encoder).
"""

import tensorflow as tf

from tfdml import kernels, primitives, xla
from tfdml.kernels import argmin, binary_search, counting, sorting
from tfdml.kernels import running_count as _running_count


def running_count(mask):
    """:func:`tfdml.primitives.running_count` (``tf.cumsum`` of a 0/1 mask along rows)."""
    choice = kernels.choose("running_count")
    if choice.form == "blocked_matmul":
        return _running_count.blocked_matmul(mask, **choice.params)
    return primitives.running_count(mask)


def first_argmin(values, axis=-1):
    """:func:`tfdml.primitives.first_argmin` (the lowest index holding the minimum)."""
    if kernels.choose("first_argmin").form == "one_pass":
        return argmin.one_pass(values, axis=axis)
    return primitives.first_argmin(values, axis=axis)


def first_argmax(values, axis=-1):
    """:func:`tfdml.primitives.first_argmax` (the lowest index holding the maximum)."""
    if kernels.choose("first_argmin").form == "one_pass":
        return argmin.one_pass(values, axis=axis, largest=True)
    return primitives.first_argmax(values, axis=axis)


def count_less_equal(sorted_rows, values, strict=False, rows=None):
    """:func:`tfdml.primitives.count_less_equal` (binary lifting over sorted rows)."""
    unroll = binary_search.unrolled if kernels.choose("count_less_equal").form == "unrolled" else None
    return primitives.count_less_equal(sorted_rows, values, strict=strict, rows=rows, unroll=unroll)


def stable_order(keys, first=None):
    """:func:`tfdml.primitives.stable_order` (stable row-wise order, ``first`` columns
    ahead at equal keys); the packed forms for keys of at most 32 bits."""
    keys = tf.convert_to_tensor(keys)
    form = kernels.choose("ordering").form
    if form not in sorting.FORMS or keys.dtype.size > 4:  # the packed forms hold 32 key bits beside the tie rank
        return primitives.stable_order(keys, first)
    keys = primitives.sort_key(keys)
    if first is None:
        first = tf.ones(tf.shape(keys), tf.bool)
    return getattr(sorting, form)(keys, first)


def count_at_least(values, thresholds):
    """:func:`tfdml.primitives.count_at_least` (``#{n : values[i, n] >= thresholds[i, j]}``);
    the variadic reduction only where it can be built (:func:`tfdml.kernels.counting.can_run`)."""
    values = tf.convert_to_tensor(values)
    thresholds = tf.convert_to_tensor(thresholds, values.dtype)
    choice = kernels.choose("count_at_least")
    if choice.form == "variadic_reduce" and counting.can_run(thresholds):
        return counting.count_at_least(values, thresholds, **choice.params)
    return primitives.count_at_least(values, thresholds)


def row_columns(mask, width):
    """``(column, count)`` of a [R, N] bool mask: ``column[r, k]`` (int32 [R, width]) is
    the k-th true column of row r, for k < ``count[r]`` (its number of true columns);
    later slots hold N − 1. Binary lifting on the row's running count."""
    mask = tf.cast(mask, tf.int32)
    k = tf.broadcast_to(tf.range(width)[None, :], tf.stack([tf.shape(mask)[0], width]))
    column = tf.minimum(count_less_equal(running_count(mask), k), tf.shape(mask)[1] - 1)
    return column, tf.reduce_sum(mask, axis=1)


def listed_slots_width():
    """How many valid slots per anchor a triplet loss compacts a grid selection to here
    (``"listed_slots"``: on CPU under XLA), or None (it keeps all B·M slots, or cuts them to
    the valid ones, :func:`keeps_valid_slots_only`).

    The reference path computes a triplet loss on all B·M slots (B anchors, M candidates)
    of a grid selection, weighted by 0 where not valid; ``"listed_slots"`` lists up to this
    many valid slots per anchor (fixed shapes, :func:`tfdml.samplers.base.compact_grid`).
    The same triplets, so the same loss."""
    choice = kernels.choose("triplet_slots")
    return choice.params["width"] if choice.form == "listed_slots" else None


def keeps_valid_slots_only():
    """True where a triplet loss cuts a triplet selection to its valid slots
    (``"valid_slots"``: on CPU in graph mode, :func:`tfdml.samplers.base.valid_triplets`):
    a shape known at run time, so never under XLA."""
    return not xla.is_compiling() and kernels.choose("triplet_slots").form == "valid_slots"


def dtype_policy(jit_compile=False):
    """The Keras dtype policy name of an ``"auto"`` encoder here: the table's
    ``"dtype_policy"`` in the mode the encoder runs (``"xla"`` when ``jit_compile`` is True,
    the whole train step compiled; else ``"graph"``), ``"float32"`` for the reference."""
    choice = kernels.choose("dtype_policy", mode="xla" if jit_compile is True else "graph")
    return "float32" if choice.is_reference else choice.form
