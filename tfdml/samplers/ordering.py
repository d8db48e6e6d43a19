"""Stable row-wise ordering of a [R, N] float matrix, fast with and without XLA.

``stable_order(keys, first)`` gives each row's columns in increasing key; at
equal keys the columns where ``first`` is true come before the others, and
each group keeps its index order. −0.0 and +0.0 are one key (:func:`~tfdml.
samplers.base.sort_key`). Keys must not be NaN.

Every entry becomes one int64 whose plain integer order is that order: the
key's bits made order-preserving in the high half, the tie rank (column, plus
N for the columns not ``first``) in the low half. The int64 rows are then
sorted (tested against NumPy's ``lexsort``, ties included):

* graph mode and eagerly: ``tf.sort`` (TensorFlow's kernel, faster than a
  stable partition + ``tf.argsort`` of the float keys);
* under XLA: a bitonic sorting network (Batcher 1968): the row padded to a
  power of two N₂ with the largest int64, log₂N₂·(log₂N₂ + 1)/2 stages of
  elementwise min / max, which XLA fuses into one vectorised loop each (XLA's
  own CPU sort calls a comparator per comparison and is much slower). When N
  is unknown while tracing, the stages run in a ``tf.while_loop``, partners
  found by two dynamic slices. Its O(N log² N) work loses to TensorFlow's sort
  only at large N.

float64 keys leave no room for the tie rank: they take a stable partition
(``first`` columns ahead) and a stable ``tf.argsort`` in every mode.
Figures: ``python benchmarks/bench_ordering.py``; ``benchmarks/RESULTS.md``,
"Row order".
"""

import numpy as np
import tensorflow as tf

from tfdml import xla
from tfdml.samplers import base

_PAD = np.iinfo(np.int64).max  # sorts after every packed key: the padding columns stay last


def stable_order(keys, first=None):
    """[R, N] int32: ``order[r, i]`` = the column at position i of row r, by increasing
    ``keys`` (float [R, N]); equal keys: ``first`` (bool [R, N], None = no column)
    columns ahead, then index order within each group."""
    keys = base.sort_key(tf.convert_to_tensor(keys))
    if first is None:
        first = tf.ones(tf.shape(keys), tf.bool)
    if keys.dtype.size > 4:  # float64: no room for the tie rank beside the key's bits
        return _by_argsort(keys, first)
    size = tf.shape(keys)[1]
    packed = _packed(tf.cast(keys, tf.float32), first)  # float16 / bfloat16 widen exactly
    if xla.is_compiling():
        return _columns(_by_network(packed), size)
    return _columns(tf.sort(packed, axis=1), size)


def _by_argsort(keys, first):
    """float64 keys: partition each row stably (``first`` columns ahead), then one stable sort."""
    size = tf.shape(keys)[1]
    is_first = tf.cast(first, tf.int32)
    num_first = tf.reduce_sum(is_first, axis=1)
    # dest[r, j] = position of column j in the partition; part[r, q] = column at position q.
    # First columns before j: its running count minus itself; the others: j minus those.
    firsts_before = base.running_count(is_first) - is_first
    dest = tf.where(first, firsts_before, num_first[:, None] + tf.range(size)[None, :] - firsts_before)
    part = base.invert_permutation_rows(dest)
    return base.gather_rows(part, tf.argsort(base.gather_rows(keys, part), axis=1, stable=True))


def _packed(keys, first):
    """One int64 per entry whose order is (key, not first, column): the float's bits made
    monotone (negative floats: the 31 low bits flipped) in the high half, the tie rank
    ``column + N·(not first)`` (< 2N) in the low half."""
    size = tf.shape(keys)[1]
    bits = tf.bitcast(keys, tf.int32)
    monotone = tf.bitwise.bitwise_xor(bits, tf.bitwise.bitwise_and(tf.bitwise.right_shift(bits, 31), 0x7FFFFFFF))
    column = tf.range(size)[None, :]
    rank = tf.where(first, column, size + column)
    # A product, not a left shift: shifting a negative signed value is not defined everywhere.
    return tf.cast(monotone, tf.int64) * (1 << 32) + tf.cast(rank, tf.int64)


def _columns(packed, size):
    """The columns back from sorted packed keys (the low half, less N for the second group)."""
    rank = tf.cast(tf.bitwise.bitwise_and(packed, 0xFFFFFFFF), tf.int32)
    return tf.where(rank >= size, rank - size, rank)


def _by_network(packed):
    """Sorted rows of the packed keys by a bitonic network: unrolled when N is static while
    tracing, else in a ``tf.while_loop``."""
    static = packed.shape[1]
    size = tf.shape(packed)[1] if static is None else static
    width = _power_of_two_at_least(size)
    packed = tf.pad(packed, [[0, 0], [0, width - size]], constant_values=_PAD)
    network = _looped_network if static is None else _unrolled_network
    return network(packed, width)[:, :size]


def _power_of_two_at_least(n):
    """The least power of two ≥ n (≥ 1); n a Python int or an int32 scalar tensor."""
    if isinstance(n, int):
        return 1 << max(n - 1, 0).bit_length()
    m = tf.maximum(n - 1, 0)
    for shift in (1, 2, 4, 8, 16):  # every bit below the highest set
        m = tf.bitwise.bitwise_or(m, tf.bitwise.right_shift(m, shift))
    return m + 1


def _unrolled_network(packed, width):
    """Stage (k, j) compares positions i and i + j (bit j of i clear) and puts the smaller
    first where bit k of i is clear, last where it is set; with a static width each stage is
    a reshape to [R, width / 2j, 2, j] and an elementwise min / max."""
    rows = tf.shape(packed)[0]
    k = 2
    while k <= width:
        j = k // 2
        while j >= 1:
            pairs = tf.reshape(packed, tf.stack([rows, width // (2 * j), 2, j]))
            low, high = pairs[:, :, 0, :], pairs[:, :, 1, :]
            i = tf.range(width // (2 * j))[:, None] * (2 * j) + tf.range(j)[None, :]
            descending = tf.not_equal(tf.bitwise.bitwise_and(i, k), 0)
            smaller, larger = tf.minimum(low, high), tf.maximum(low, high)
            pairs = tf.stack([tf.where(descending, larger, smaller), tf.where(descending, smaller, larger)], axis=2)
            packed = tf.reshape(pairs, tf.stack([rows, width]))
            j //= 2
        k *= 2
    return packed


def _looped_network(packed, width):
    """The stages of :func:`_unrolled_network` in a ``tf.while_loop`` (width known only
    when XLA compiles): each position's partner i ± j from two dynamic slices of the row
    written twice."""
    position = tf.range(width)[None, :]

    def stage(k, j, packed):
        twice = tf.concat([packed, packed], axis=1)
        ahead = tf.slice(twice, tf.stack([0, j]), tf.shape(packed))  # entry i + j
        behind = tf.slice(twice, tf.stack([0, width - j]), tf.shape(packed))  # entry i - j
        lower = tf.equal(tf.bitwise.bitwise_and(position, j), 0)  # i is the first of its pair
        ascending = tf.equal(tf.bitwise.bitwise_and(position, k), 0)
        partner = tf.where(lower, ahead, behind)
        keep_smaller = tf.equal(lower, ascending)
        packed = tf.where(keep_smaller, tf.minimum(packed, partner), tf.maximum(packed, partner))
        last = tf.equal(j, 1)  # the last stage of this k: next k, j = k
        return tf.where(last, 2 * k, k), tf.where(last, k, j // 2), packed

    _, _, packed = tf.while_loop(
        lambda k, j, _: k <= width, stage, (tf.constant(2), tf.constant(1), packed)
    )
    return packed
