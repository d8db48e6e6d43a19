"""Stateless draws of a chunk of batches: distinct uniform classes, m distinct examples of a
class, and epochs of blocks of a permutation."""

import tensorflow as tf


def uniform_below(x, k):
    """A uniform integer in [0, k) from x ~ U[0, 1) (float64; k >= 1, a number or a tensor)."""
    k = tf.cast(k, tf.float64)
    return tf.cast(tf.minimum(tf.floor(x * k), k - 1.0), tf.int32)


def top_k_subset(key, chunk, population, count):
    """[chunk, count] distinct uniform indices of [0, population): top of i.i.d. 64-bit keys."""
    bits = tf.random.stateless_uniform(
        [chunk, population], key, dtype=tf.int64, minval=None, maxval=None
    )
    return tf.math.top_k(bits, count, sorted=False).indices


def distinct_uniform(key, chunk, population, count):
    """[chunk, count] uniformly random count-subsets of [0, population), one per row.

    Small populations (< 4·count): the top ``count`` of i.i.d. random keys
    over the whole population. Large ones (SOP: 11,318 classes): the first
    ``count`` distinct values among 2·count i.i.d. uniform draws, which by
    symmetry is a uniformly random subset, at O(count²) instead of
    O(population) per batch; a row with fewer than ``count`` distinct draws
    (rare) takes an independent top-k draw instead, which keeps it uniform.
    (Integer draws come from 64-bit keys: bias below population / 2**64.)
    """
    k_fast, k_slow = tf.unstack(tf.random.experimental.stateless_split(key, 2))
    if population < 4 * count:
        return top_k_subset(k_slow, chunk, population, count)
    width = 2 * count
    draws = tf.random.stateless_uniform(
        [chunk, width], k_fast, minval=0, maxval=population, dtype=tf.int64
    )
    position = tf.range(width)
    earlier = position[:, None] > position[None, :]
    repeat = tf.reduce_any(tf.equal(draws[:, :, None], draws[:, None, :]) & earlier, axis=-1)
    rank = tf.where(repeat, width + position, position)
    first = tf.math.top_k(-rank, count, sorted=True).indices  # first `count` new values
    subset = tf.cast(tf.gather(draws, first, batch_dims=1), tf.int32)
    enough = tf.reduce_sum(tf.cast(~repeat, tf.int32), axis=-1) >= count
    return tf.cond(
        tf.reduce_all(enough),
        lambda: subset,
        lambda: tf.where(enough[:, None], subset, top_k_subset(k_slow, chunk, population, count)),
    )


def draw_m_per_class(plan, consts, key, classes, m):
    """m distinct uniform examples of each class in ``classes`` [K, n] (dense ids) -> [K, n·m].

    Top m of i.i.d. uniform keys over each class's positions (padding masked).
    """
    sizes = tf.gather(consts["sizes"], classes)
    width = plan.max_size
    shape = tf.concat([tf.shape(classes), [width]], 0)
    noise = tf.random.stateless_uniform(shape, key, dtype=tf.float64)
    # Positions beyond a class's size get -1 so top_k never picks them.
    valid = tf.range(width) < sizes[..., None]
    noise = tf.where(valid, noise, -tf.ones_like(noise))
    pos = tf.math.top_k(noise, m, sorted=False).indices
    flat = tf.gather(consts["offsets"], classes)[..., None] + pos
    return tf.reshape(tf.gather(consts["order"], flat), [plan.chunk, -1])



def permutation_blocks(items, block, chunk, seed, salt):
    """Infinite dataset of [chunk, block] blocks of ``items`` (a 1-D array): each epoch is a
    fresh uniform permutation of the items, independent of the previous epochs, cut into
    floor(len / block) blocks; the last len mod block items of the permutation are dropped
    for that epoch. Keyed by ``(seed, salt)`` and the epoch."""
    count = len(items)
    blocks = count // block
    items = tf.constant(items)
    epoch_base = tf.constant([int(seed), salt], tf.int64)

    def epoch(e):
        key = tf.random.experimental.stateless_fold_in(epoch_base, e)
        bits = tf.random.stateless_uniform([count], key, dtype=tf.int64, minval=None, maxval=None)
        perm = tf.argsort(bits)[: blocks * block]
        return tf.reshape(tf.gather(items, perm), [blocks, block])

    # The stream is infinite: drop_remainder drops nothing and keeps the shape static.
    return tf.data.Dataset.counter().map(epoch).unbatch().batch(chunk, drop_remainder=True)
