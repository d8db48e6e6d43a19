"""Batch easy-hard mining: the easiest positive and a hard negative per anchor (Xuan et al. 2020)."""

import keras
import tensorflow as tf

from tfdml.kernels import chosen
from tfdml.samplers import base

NEGATIVES = ("hard", "semi_hard")


@keras.saving.register_keras_serializable(package="tfdml")
class EasyHardSampler(base.Sampler):
    """Easy positive, hard negative triplets (kind ``"triplets"``): Xuan, Stylianou, Pless,
    WACV 2020, "Improved Embeddings with Easy Positive Triplet Mining", §3.

    For each anchor a, the easiest (closest) candidate positive

        p*_a = argmin_{p candidate positive of a} D_ap,

    and, with ``negative="hard"`` (the paper's EPHN), the hardest (closest) candidate
    negative

        n*_a = argmin_{n candidate negative of a} D_an,

    or with ``negative="semi_hard"`` (EPSHN) the closest negative farther than the easy
    positive, n*_a = argmin_{n : D_an > D_ap*} D_an (the semi-hard rule of
    :class:`SemiHardSampler` applied to the easy positive; an anchor without such a
    negative gives no triplet). Ties go to the lower index.

    Returns :class:`~tfdml.samplers.TripletSelection` with T = B (slot a = anchor a);
    ``mask`` is true where a has a candidate positive and a chosen negative. The
    selection composes with every triplet loss, and with every pair loss as the pairs
    (a, p*_a), (a, n*_a) (:func:`tfdml.losses.triplets_to_pairs`). Deterministic (no
    seed).

    Args:
      negative: ``"hard"`` or ``"semi_hard"``.
    """

    kind = "triplets"
    needs_seed = False

    def __init__(self, negative="hard"):
        if negative not in NEGATIVES:
            raise ValueError(
                f"EasyHardSampler: unknown negative {negative!r}; choose one of {', '.join(NEGATIVES)}."
            )
        self.negative = negative

    def sample(self, dist, labels, candidates, seed=None, embedding_dim=None):
        pos, neg = base.split_candidates(labels, candidates)
        inf = tf.constant(float("inf"), dist.dtype)
        masked_pos = tf.where(pos, dist, inf)
        positive = chosen.first_argmin(masked_pos, axis=1)
        if self.negative == "semi_hard":
            neg = tf.logical_and(neg, dist > tf.reduce_min(masked_pos, axis=1, keepdims=True))
        negative = chosen.first_argmin(tf.where(neg, dist, inf), axis=1)
        valid = tf.logical_and(tf.reduce_any(pos, axis=1), tf.reduce_any(neg, axis=1))
        anchor = tf.range(tf.shape(dist)[0], dtype=tf.int32)
        return base.TripletSelection(anchor, positive, negative, valid)

    def get_config(self):
        return {"negative": self.negative}
