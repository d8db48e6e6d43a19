"""Weighted contrastive loss with importance weights (Hong et al., Eq. 10 and 23)."""

import keras
import tensorflow as tf

from tfdml.losses import base
from tfdml.losses.contrastive import contrastive_terms


@keras.saving.register_keras_serializable(package="tfdml")
class WeightedContrastiveLoss(base.MetricLoss):
    """Hong et al. Eq. 10 in the mini-batch form of Eq. 23:

        L = 1/B Σ_(i,j) W_ij ( Y_ij g(D_ij) + (1 − Y_ij) η h(D_ij) ),
        g(d) = d²,  h(d) = [α − d]_+²   (Eq. 5)

    over the B ordered candidate pairs of the batch (i ≠ j; pairs sharing
    ``pair_id`` when the batch has one, as in the p-random design, §4.1).

    W_ij is the importance weight P_U/Q of the batch design (Eq. 24 / 25),
    computed by :func:`tfdml.importance.pair_weights` from the ``class_size``,
    ``w_pos`` and ``w_neg`` columns; with plain labels (or without those
    columns) W_ij = 1 and the loss is the contrastive loss with negative weight η.
    ``eta=1`` with importance columns is Hong et al.'s "contrastive loss with
    importance sampling".

    Reduction: ``tuple_reduction="mean"`` divides by B, the number of pairs
    (not by Σ W), as Eq. 23 does.

    Args:
      margin: α > 0 of h.
      eta: η > 0, the weight of every negative pair.
      distance: pairwise distance D (Hong et al. use euclidean).
    """

    default_tuple_reduction = "mean"

    def __init__(
        self,
        margin=1.0,
        eta=1.0,
        distance="euclidean",
        tuple_reduction=None,
        name=None,
        reduction="sum_over_batch_size",
        dtype=None,
    ):
        super().__init__(
            distance=distance,
            tuple_reduction=tuple_reduction,
            name=name,
            reduction=reduction,
            dtype=dtype,
        )
        self.margin = base.check_positive("margin", margin)
        self.eta = base.check_positive("eta", eta)

    def negative_weights(self, targets, dtype):
        """η_ij of the negative pairs (a scalar here; a [B, B] matrix in subclasses)."""
        del targets
        return tf.constant(self.eta, dtype)

    def compute(self, targets, embeddings):
        dist = self.distances(embeddings)
        pairs = base.all_pairs(targets.label, self.candidates(targets), dist.dtype)
        g, h = contrastive_terms(dist, self.margin, squared=True)
        h = self.negative_weights(targets, dist.dtype) * h
        w = base.importance_matrix(targets, dist.dtype)
        if w is not None:
            w = tf.stack([w, w])
        return self.reduce(
            tf.stack([g, h]), tf.stack([pairs.pos_weight, pairs.neg_weight]), weights=w
        )

    def get_config(self):
        config = super().get_config()
        config.update(margin=self.margin, eta=self.eta)
        return config
