"""Batch-hard mining: hardest positive and hardest negative per anchor."""

import keras
import tensorflow as tf

from tfdml.kernels import chosen
from tfdml.samplers import base


@keras.saving.register_keras_serializable(package="tfdml")
class HardSampler(base.Sampler):
    """Batch hard triplets: per anchor the hardest positive and negative (kind ``"triplets"``).

    Hard negative mining as discussed by Wu et al. 2017, §3 ("hard negative
    mining often leads to collapsed models"), in its batch-hard form: for each
    anchor a,

        p*_a = argmax_{p candidate positive of a} D_ap,
        n*_a = argmin_{n candidate negative of a} D_an,

    ties going to the lower index. Returns
    :class:`~tfdml.samplers.TripletSelection` with T = B (slot a = anchor a; the
    positive and negative are columns of the [B, M] matrix);
    ``mask`` is true where a has at least one candidate positive and one
    candidate negative.
    """

    kind = "triplets"
    needs_seed = False

    def sample(self, dist, labels, candidates, seed=None, embedding_dim=None):
        pos, neg = base.split_candidates(labels, candidates)
        inf = tf.constant(float("inf"), dist.dtype)
        positive = chosen.first_argmax(tf.where(pos, dist, -inf), axis=1)
        negative = chosen.first_argmin(tf.where(neg, dist, inf), axis=1)
        valid = tf.logical_and(tf.reduce_any(pos, axis=1), tf.reduce_any(neg, axis=1))
        anchor = tf.range(tf.shape(dist)[0], dtype=tf.int32)
        return base.TripletSelection(anchor, positive, negative, valid)
