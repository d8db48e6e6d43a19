"""Weighted contrastive loss with importance weights (Hong et al., Eq. 10 and 23)."""

import math

import keras
import tensorflow as tf

from tfdml.losses import arguments
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
      importance_power: δ, weight each pair by W_ij^δ instead (Hong et al. §6.2, Fig. 1: a
        perturbation of the weights; 1, the default, is the correct W, 0 is "without IS",
        δ < 0 reverses the weights' effect, δ > 1 exaggerates it).
    """

    sampler_kinds = ()  # Eq. 23 scores every pair of the design's batch

    def __init__(self, margin=1.0, eta=1.0, importance=True, importance_power=1.0, **kwargs):
        arguments.refuse_fixed(type(self).__name__, kwargs, squared="is Hong et al.'s squared form (Eq. 10)")
        super().__init__(margin=margin, squared=True, importance=importance, **kwargs)
        self.eta = arguments.check_positive("eta", eta)
        if isinstance(importance_power, bool) or not math.isfinite(float(importance_power)):
            raise ValueError(f"importance_power (δ of W_ij^δ) must be a finite number, got {importance_power!r}.")
        self.importance_power = float(importance_power)

    def importance_weights(self, targets, dtype, candidates=None):
        """W_ij^δ (δ = ``importance_power``; W_ij of the base class, 0 kept 0)."""
        weights = super().importance_weights(targets, dtype, candidates)
        if weights is None or self.importance_power == 1.0:
            return weights
        positive = weights > 0
        powered = tf.pow(tf.where(positive, weights, tf.ones_like(weights)), self.importance_power)
        return tf.where(positive, powered, tf.zeros_like(weights))

    def negative_weights(self, targets, dtype):
        """η_ij of the negative pairs (a scalar here; a [B, B] matrix in subclasses)."""
        del targets
        return tf.constant(self.eta, dtype)

    def get_config(self):
        config = super().get_config()
        config.pop("squared")  # always ℓ2²
        config.update(eta=self.eta, importance_power=self.importance_power)
        return config
