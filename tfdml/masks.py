"""Boolean [B, B] masks of candidate pairs, shared by every sampler and loss.

A pair (i, j) is a candidate when i != j and, if the batch has ``pair_id``
(pair designs such as Hong's p-random, §4.1), when i and j share it.
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
