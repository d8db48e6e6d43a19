"""Fast forms of :func:`tfdml.primitives.stable_order` for keys of at most 32 bits.

Both turn every entry into one int64 whose plain integer order is the reference's
order: the key's bits made order-preserving in the high half, the tie rank (column,
plus N for the columns not ``first``) in the low half (:func:`pack`); then sort
the int64 rows and read the columns back from the low half (:func:`unpack`):

* ``packed_sort``: ``tf.sort`` of the packed rows (TensorFlow's kernel; on CPU
  faster than the reference's stable partition and ``tf.argsort``);
* ``bitonic``: a bitonic sorting network (Batcher 1968) for XLA: the row padded to a
  power of two N₂ with the largest int64, log₂N₂·(log₂N₂ + 1)/2 stages of
  elementwise min / max in one ``tf.while_loop`` (each stage gathers every position's
  partner and runs as one vectorised loop; XLA's own CPU sort calls a comparator per
  comparison). The stages are looped, not unrolled: one small program to
  compile whatever N is, known while tracing or not (the unrolled stages take
  longer to compile; benchmarks/RESULTS.md, "Row order"). Its O(N log² N) work loses to a
  sort only at large N.

Keys arrive as the reference prepares them (−0.0 made +0.0, no NaN); float16 and
bfloat16 widen to float32 exactly. Tested against the reference and NumPy's
``lexsort``, ties included.
"""

import numpy as np
import tensorflow as tf

FORMS = ("packed_sort", "bitonic")

_PAD = np.iinfo(np.int64).max  # sorts after every packed key: the padding columns stay last


def packed_sort(keys, first):
    """[R, N] int32 order of float keys (≤ 32 bits) by ``tf.sort`` of the packed rows."""
    return unpack(tf.sort(pack(tf.cast(keys, tf.float32), first), axis=1), tf.shape(keys)[1])


def bitonic(keys, first):
    """[R, N] int32 order of float keys (≤ 32 bits) by a bitonic network on the packed rows."""
    return unpack(_network(pack(tf.cast(keys, tf.float32), first)), tf.shape(keys)[1])


def pack(keys, first):
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


def unpack(packed, size):
    """The columns back from sorted packed keys (the low half, less N for the second group)."""
    rank = tf.cast(tf.bitwise.bitwise_and(packed, 0xFFFFFFFF), tf.int32)
    return tf.where(rank >= size, rank - size, rank)


def _network(packed):
    """Sorted rows of the packed keys by a bitonic network (:func:`_stages`)."""
    static = packed.shape[1]
    size = tf.shape(packed)[1] if static is None else static
    width = _power_of_two_at_least(size)
    packed = tf.pad(packed, [[0, 0], [0, width - size]], constant_values=_PAD)
    return _stages(packed, width)[:, :size]


def _power_of_two_at_least(n):
    """The least power of two ≥ n (≥ 1); n a Python int or an int32 scalar tensor."""
    if isinstance(n, int):
        return 1 << max(n - 1, 0).bit_length()
    m = tf.maximum(n - 1, 0)
    for shift in (1, 2, 4, 8, 16):  # every bit below the highest set
        m = tf.bitwise.bitwise_or(m, tf.bitwise.right_shift(m, shift))
    return m + 1


def _stages(packed, width):
    """The network's stages in a ``tf.while_loop``. Stage (k, j) compares positions i and
    i XOR j (its partner, gathered) and keeps the smaller at the first of the two where bit
    k of i is clear, at the second where it is set."""
    position = tf.range(width)

    def stage(k, j, packed):
        partner = tf.gather(packed, tf.bitwise.bitwise_xor(position, j), axis=1)
        lower = tf.equal(tf.bitwise.bitwise_and(position, j), 0)  # i is the first of its pair
        ascending = tf.equal(tf.bitwise.bitwise_and(position, k), 0)
        keep_smaller = tf.equal(lower, ascending)[None, :]
        packed = tf.where(keep_smaller, tf.minimum(packed, partner), tf.maximum(packed, partner))
        last = tf.equal(j, 1)  # the last stage of this k: next k, j = k
        return tf.where(last, 2 * k, k), tf.where(last, k, j // 2), packed

    _, _, packed = tf.while_loop(
        lambda k, j, _: k <= width, stage, (tf.constant(2), tf.constant(1), packed)
    )
    return packed
