"""A pool's class structure and the random draws of the DSN policies (Duan et al. 2019, Eq. 4).

Random draws are Gumbel-max on stateless philox bits (:func:`tfdml.samplers.base.uniform01`),
keyed by a [2] int seed, or on uniform noise drawn once for a whole step
(:func:`draw_noise`); everything has fixed shapes and compiles under XLA.
"""

import collections

import tensorflow as tf

from tfdml import masks
from tfdml.samplers import base as samplers_base

PoolStructure = collections.namedtuple("PoolStructure", ["same", "count", "is_rep", "rep"])
PoolStructure.__doc__ = """Class structure of a pool: ``same`` [P, P] bool (equal labels), ``count``
[P] (members of each example's class), ``is_rep`` [P] (first member of its class: the class's
slot), ``rep`` [P] (index of the class's first member)."""

_NEG = -1e9  # logit of masked candidates: finite, so gradients stay finite


def pool_structure(labels):
    """The :class:`PoolStructure` of a pool's labels [P]."""
    labels = tf.reshape(labels, [-1])
    size = tf.shape(labels)[0]
    same = masks.same_label(labels)
    index = tf.range(size)
    rep = tf.reduce_min(tf.where(same, index[None, :], size), axis=1)
    return PoolStructure(
        same=same,
        count=tf.reduce_sum(tf.cast(same, tf.int32), axis=1),
        is_rep=tf.equal(rep, index),
        rep=rep,
    )


def masked_log_softmax(logits, mask):
    """Row-wise log-softmax over the ``mask``ed entries (Eq. 4); masked entries get ≈ −1e9."""
    logits = tf.where(mask, logits, tf.cast(_NEG, logits.dtype))
    return tf.nn.log_softmax(logits, axis=-1)


def gumbel_sample(logits, mask, seed=None, uniform=None):
    """One index per row drawn from softmax(logits) restricted to ``mask`` (Gumbel-max).

    The randomness is ``uniform`` (floats in [0, 1) of the logits' shape) or
    drawn from ``seed``. Rows without a valid entry return an arbitrary index
    (mask them out).
    """
    u = samplers_base.uniform01(tf.shape(logits), seed) if uniform is None else uniform
    gumbel = -tf.math.log(-tf.math.log(tf.cast(u, logits.dtype) + tf.cast(1e-12, logits.dtype)))
    scores = tf.where(mask, logits + gumbel, tf.cast(-float("inf"), logits.dtype))
    return tf.argmax(scores, axis=-1, output_type=tf.int32)


def uniform_classes(structure, eligible, num, uniform):
    """``num`` class slots (pool indices of class representatives), uniformly over the
    ``eligible`` classes: slot t takes the (t mod L)-th class of a random permutation
    of the L eligible classes (the permutation sorts the [P] ``uniform`` keys).
    Returns ``(rep [num], valid [num])``; without an eligible class every slot is invalid."""
    keys = tf.where(eligible, uniform, 2.0)
    order = tf.argsort(keys, stable=True)
    num_eligible = tf.reduce_sum(tf.cast(eligible, tf.int32))
    slot = tf.math.floormod(tf.range(num), tf.maximum(num_eligible, 1))
    valid = tf.broadcast_to(num_eligible > 0, [num])
    return tf.gather(order, slot), valid


def uniform_member(structure, rep, uniform):
    """One example uniformly among the members of each class ``rep`` [M] ([M, P] ``uniform``)."""
    return uniform_draw(tf.gather(structure.same, rep), uniform)[0]


def uniform_draw(mask, uniform):
    """One index per row uniformly among the ``mask``ed entries of [M, P] ``mask``, from
    [M, P] ``uniform`` noise, and the log of its probability, −log |mask row| (0 for an
    empty row): the policy of Eq. 4 with all logits equal."""
    index = gumbel_sample(tf.zeros(tf.shape(mask), tf.float32), mask, uniform=uniform)
    count = tf.reduce_sum(tf.cast(mask, tf.float32), axis=1)
    return index, -tf.math.log(tf.maximum(count, 1.0))


def draw_noise(seed, rows, pool_size, batch_shape=()):
    """Uniform [*batch_shape, rows, P] floats in [0, 1) for :meth:`SamplerNetwork.select`:
    one philox draw (each stateless draw is a costly XLA kernel to compile)."""
    return samplers_base.uniform01(list(batch_shape) + [rows, pool_size], seed)

