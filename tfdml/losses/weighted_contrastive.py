"""Weighted contrastive loss with importance weights (Hong et al., Eq. 10 and 23)."""

import keras
import tensorflow as tf

from tfdml.losses import base
from tfdml.losses.contrastive import ContrastiveLoss


@keras.saving.register_keras_serializable(package="tfdml")
class WeightedContrastiveLoss(ContrastiveLoss):
    """Hong et al. Eq. 10 in the mini-batch form of Eq. 23:

        L = 1/B Σ_(i,j) W_ij ( Y_ij g(D_ij) + (1 − Y_ij) η h(D_ij) ),
        g(d) = d²,  h(d) = [α − d]_+²   (Eq. 5)

    over the B ordered candidate pairs of the batch (i ≠ j; pairs sharing
    ``pair_id`` when the batch has one, as in the p-random design, §4.1).

    This is ``ContrastiveLoss(squared=True, importance=True)`` over all pairs
    with a weight η on the negative terms: W_ij is the importance weight P_U/Q
    of the batch design (Eq. 24 / 25), computed by
    :func:`tfdml.importance.pair_weights` from the ``class_size``, ``w_pos``
    and ``w_neg`` columns; with plain labels (or without those columns)
    W_ij = 1 and the loss is the contrastive loss with negative weight η.
    ``eta=1`` with importance columns is Hong et al.'s "contrastive loss with
    importance sampling". ``importance=False`` drops W_ij (every pair weighs 1
    whatever columns the batch carries): the "without IS" arm of Hong et al.'s
    Table 1 and Fig. 2–3.

    Reduction: ``tuple_reduction="mean"`` divides by B, the number of pairs
    (not by Σ W), as Eq. 23 does.

    Args:
      margin: α > 0 of h.
      eta: η > 0, the weight of every negative pair.
      distance: pairwise distance D (Hong et al. use euclidean).
      importance: weight each pair by W_ij (default True, the point of the loss).
    """

    sampler_kinds = ()  # Eq. 23 scores every pair of the design's batch

    def __init__(self, margin=1.0, eta=1.0, importance=True, **kwargs):
        base.refuse_fixed(type(self).__name__, kwargs, squared="is Hong et al.'s squared form (Eq. 10)")
        super().__init__(margin=margin, squared=True, importance=importance, **kwargs)
        self.eta = base.check_positive("eta", eta)

    def negative_weights(self, targets, dtype):
        """η_ij of the negative pairs (a scalar here; a [B, B] matrix in subclasses)."""
        del targets
        return tf.constant(self.eta, dtype)

    def get_config(self):
        config = super().get_config()
        config.pop("squared")  # always ℓ2²
        config.update(eta=self.eta)
        return config
