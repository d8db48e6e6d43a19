"""Boolean [B, B] masks of candidate pairs, shared by every sampler and loss.

A pair (i, j) is a candidate when i != j and, if the batch has ``pair_id``
(pair designs such as Hong's p-random, §4.1), when i and j share it.
:func:`npair_structure` gives the probe / gallery roles of an N-pair batch (the
N-pair and angular losses, the N-pair sampler).
"""

import tensorflow as tf


def candidate_mask(labels, pair_id=None):
    """Off-diagonal pairs, restricted to equal ``pair_id`` when given."""
    labels = tf.reshape(labels, [-1])
    size = tf.shape(labels)[0]
    mask = tf.logical_not(tf.eye(size, dtype=tf.bool))
    if pair_id is not None:
        pair_id = tf.reshape(pair_id, [-1])
        mask = tf.logical_and(mask, tf.equal(pair_id[:, None], pair_id[None, :]))
    return mask


def same_label(labels):
    """[B, B] bool: i and j have the same label (the diagonal included)."""
    labels = tf.reshape(labels, [-1])
    return tf.equal(labels[:, None], labels[None, :])


def split_by_label(labels, candidates):
    """``(positive, negative)`` [B, M]: the ``candidates`` of equal / different label.

    ``candidates`` is [B, M] (M = B: the batch against itself) and ``labels`` the M
    candidates' labels, the B anchors' first (a cross-batch memory appends its entries
    after the batch, :mod:`tfdml.memory`). The one place where positive and negative
    pairs are told apart: losses, samplers and the learned sampler's pools use it.
    """
    labels = tf.reshape(labels, [-1])
    same = tf.equal(labels[: tf.shape(candidates)[0], None], labels[None, :])
    return tf.logical_and(candidates, same), tf.logical_and(candidates, tf.logical_not(same))


def pair_masks(labels, pair_id=None):
    """``(positive, negative)`` masks: candidate pairs of equal / different label."""
    return split_by_label(labels, candidate_mask(labels, pair_id))


def npair_structure(labels, pair_id=None):
    """Probe / gallery roles of a batch, as [B, B] and [B] tensors.

    Examples are grouped by label (and by ``pair_id`` when given); inside a
    group, in batch order, ranks 0 and 1 form a pair (probe, gallery), ranks 2
    and 3 the next pair, and so on; a last odd member is unused. The pair's
    *slot* is rank // 2. Pairs of the same slot form one N-pair batch: the
    negatives of probe i are the galleries of the same slot with another label.

    Returns ``(partner, negatives, is_probe)``: ``partner[i, j]`` is true when j
    is the gallery of probe i; ``negatives[i, j]`` when gallery j is a negative
    of probe i; ``is_probe[i]`` when i is a probe.
    """
    labels = tf.reshape(labels, [-1])
    size = tf.shape(labels)[0]
    group = same_label(labels)
    if pair_id is not None:
        pair_id = tf.reshape(pair_id, [-1])
        group = tf.logical_and(group, tf.equal(pair_id[:, None], pair_id[None, :]))
    earlier = tf.linalg.band_part(tf.ones([size, size], tf.int32), -1, 0) - tf.eye(size, dtype=tf.int32)
    rank = tf.reduce_sum(tf.cast(group, tf.int32) * earlier, axis=1)  # members before i
    even = tf.equal(rank % 2, 0)
    partner = group & tf.equal(rank[None, :], rank[:, None] + 1) & even[:, None]
    is_probe = tf.reduce_any(partner, axis=1)
    is_gallery = tf.reduce_any(partner, axis=0)
    slot = rank // 2
    negatives = (
        is_probe[:, None]
        & is_gallery[None, :]
        & tf.not_equal(labels[:, None], labels[None, :])
        & tf.equal(slot[:, None], slot[None, :])
    )
    return partner, negatives, is_probe
