"""Stable row-wise ordering of a [R, N] float matrix.

``stable_order(keys, first)`` gives each row's columns in increasing key; at
equal keys the columns where ``first`` is true come before the others, and
each group keeps its index order. −0.0 and +0.0 are one key (:func:`~tfdml.
samplers.base.sort_key`). Keys must not be NaN.

The reference path says exactly that: a stable partition of each row (``first``
columns ahead) and a stable ``tf.argsort`` of the partitioned keys. For keys of at
most 32 bits a device may run a fast form (:data:`tfdml.kernels.CHOICES`,
``"ordering"``; :mod:`tfdml.kernels.sorting`): on CPU, the key and its tie rank
packed into one int64 and sorted by ``tf.sort`` in graph mode, by a bitonic sorting
network under XLA (whose own CPU sort is slower). Figures: ``python
benchmarks/bench_ordering.py``; ``benchmarks/RESULTS.md``, "Row order".
"""

import tensorflow as tf

from tfdml import kernels
from tfdml.kernels import sorting
from tfdml.samplers import base


def stable_order(keys, first=None):
    """[R, N] int32: ``order[r, i]`` = the column at position i of row r, by increasing
    ``keys`` (float [R, N]); equal keys: ``first`` (bool [R, N], None = no column)
    columns ahead, then index order within each group."""
    keys = base.sort_key(tf.convert_to_tensor(keys))
    if first is None:
        first = tf.ones(tf.shape(keys), tf.bool)
    form = kernels.choose("ordering").form
    if keys.dtype.size <= 4:  # the packed forms hold 32 key bits beside the tie rank
        if form == "packed_sort":
            return sorting.packed_sort(keys, first)
        if form == "bitonic":
            return sorting.bitonic(keys, first)
    return _reference(keys, first)


def _reference(keys, first):
    """Partition each row stably (``first`` columns ahead), then one stable sort."""
    size = tf.shape(keys)[1]
    is_first = tf.cast(first, tf.int32)
    num_first = tf.reduce_sum(is_first, axis=1)
    # dest[r, j] = position of column j in the partition; part[r, q] = column at position q.
    # First columns before j: its running count minus itself; the others: j minus those.
    firsts_before = base.running_count(is_first) - is_first
    dest = tf.where(first, firsts_before, num_first[:, None] + tf.range(size)[None, :] - firsts_before)
    part = base.invert_permutation_rows(dest)
    return base.gather_rows(part, tf.argsort(base.gather_rows(keys, part), axis=1, stable=True))
