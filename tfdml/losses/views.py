"""What the losses of two views share: which rows of a batch are views of one instance.

A two-view batch (``pipelines.designs.TwoViewDesign``) holds every image twice under
independent augmentation; its ``example_id`` column names the image, so the rows that
share an ``example_id`` are views of one instance. Given plain labels (no dict), the
labels are the instance ids: ``model.compile(loss=NTXentLoss())`` on a user's
``(x, instance_id)`` dataset needs nothing else.
"""

import tensorflow as tf



def instance_ids(targets):
    """[B] ids of the instances the rows show: ``example_id`` when the batch carries it,
    else ``label``."""
    return targets.label if targets.example_id is None else targets.example_id


def refuse_pair_id(owner, targets):
    """A loss of two views scores every row against every other: a batch of isolated
    pairs (a ``pair_id`` column, the p-random design) has no such structure. Decided by
    the columns present, so it raises while tracing, under XLA too."""
    if targets.pair_id is not None:
        raise ValueError(
            f"{owner} compares every row of the batch with every other, but the batch has a "
            "'pair_id' column (isolated pairs, the p-random design); use the two_views design "
            "(or group / m_per_class for SupConLoss)."
        )


def view_pairs(ids):
    """Pair the views of each instance: ``(first [B] bool, second [B] int32)``.

    Among the rows sharing an id, in batch order, rows 1 and 2 are a pair (first view,
    second view), rows 3 and 4 the next, ...; a last odd row is unused (the pairs of
    :func:`tfdml.masks.npair_structure` with the ids as labels, which the tests hold this
    to). ``first[i]`` is true when row i is the first view of a pair, and then
    ``second[i]`` is the row of its second view (0 otherwise).

    One stable sort of the ids, O(B log B): the rows of an id become a run of the sorted
    order, in batch order, and a row's rank in its id is its distance to the run's start.
    The [B, B] form of ``npair_structure`` costs O(B²)."""
    ids = tf.reshape(ids, [-1])
    size = tf.shape(ids)[0]
    order = tf.argsort(ids, stable=True)
    sorted_ids = tf.gather(ids, order)
    position = tf.range(size)
    same_as_next = tf.concat([tf.equal(sorted_ids[1:], sorted_ids[:-1]), tf.zeros([1], tf.bool)], 0)[:size]
    starts_run = tf.concat([tf.ones([1], tf.bool), tf.logical_not(same_as_next[:-1])], 0)[:size]
    run = tf.cumsum(tf.cast(starts_run, tf.int32)) - 1
    run_start = tf.math.unsorted_segment_min(position, run, size)
    rank = position - tf.gather(run_start, run)
    first_sorted = same_as_next & tf.equal(rank % 2, 0)
    next_row = tf.concat([order[1:], order[:1]], 0)
    back = tf.math.invert_permutation(order)
    first = tf.gather(first_sorted, back)
    second = tf.gather(tf.where(first_sorted, next_row, tf.zeros_like(next_row)), back)
    return first, second


def paired_views(embeddings, ids):
    """The two views as aligned matrices: ``(z, z_prime, weight)`` where ``z`` [B, d] are
    the rows, ``z_prime`` [B, d] the second view of each first view, and ``weight`` [B]
    (embeddings' dtype) is 1 for the rows that are a first view, 0 otherwise: the
    n = Σ weight pairs (z_i, z'_i) of the batch, at fixed shapes."""
    first, second = view_pairs(ids)
    z_prime = tf.gather(embeddings, second)
    weight = tf.cast(first, embeddings.dtype)
    return embeddings, z_prime, weight


def weighted_centre(z, weight):
    """``z`` minus the mean of its rows of weight 1, times the weight: [B, d] (rows of
    weight 0 become 0), and n = Σ weight."""
    n = tf.reduce_sum(weight)
    mean = tf.reduce_sum(z * weight[:, None], axis=0) / tf.maximum(n, 1.0)
    return (z - mean) * weight[:, None], n
