"""Stable contrast loss: one sampled negative per end of a positive pair (draft Eq. 16)."""

import keras
import tensorflow as tf

from tfdml.losses import arguments, base
from tfdml.losses.triplet import anchor_positive, gather_pairs


def stable_contrast_terms(d_ij, d_in, alpha, beta):
    """Per-slot terms (D_ij − β + α)_+ + (β − D_in + α)_+ (deep-embeddings draft Eq. 16)."""
    return tf.nn.relu(d_ij - beta + alpha) + tf.nn.relu(beta - d_in + alpha)


@keras.saving.register_keras_serializable(package="tfdml")
class StableContrastLoss(base.MetricLoss):
    """Deep-embeddings draft §5.1, Eq. 16, for a positive pair (i, j):

        ℓ(i, j) = (D_ij − β + α)_+ + (β − D_{i,n*(i)} + α)_+

    with one negative n*(i) sampled for the end i. The triplet sampler gives
    one slot per *ordered* positive pair (i, j), so the reversed pair (j, i)
    brings the negative of the other end: every end of every positive pair
    gets its own negative (Wu et al. 2017 §5's batch construction).

    Reduction (``tuple_reduction="mean"``): the mean of ℓ over the selected
    ordered positive pairs.

    Args:
      alpha: margin α > 0.
      beta: fixed boundary β between positive and negative distances (see
        :class:`MarginLoss` for a learned β).
      distance: pairwise distance D (euclidean, as in the draft).
      sampler: a triplet sampler (default ``"distance_weighted"``).
      seed: seed of a random sampler's stream.
      importance: weight each slot (i, j, n*(i)) by the design's triplet
        weight W = P_U/Q (:func:`tfdml.importance.triplet_weights`, as
        :class:`TripletLoss` does).
    """

    sampler_kinds = ("triplets",)
    memory_refusal = None  # pair / triplet terms of the [B, M] matrix: a memory adds candidates
    sampler_required = True
    needs_tuples = True
    default_tuple_reduction = "mean"
    supports_importance = True
    importance_columns = ("class_size", "w_triplet")  # W_apn (tfdml.importance.triplet_weights)

    def __init__(self, alpha=0.2, beta=1.2, sampler="distance_weighted", **kwargs):
        super().__init__(sampler=sampler, **kwargs)
        self.alpha = arguments.check_positive("alpha", alpha)
        try:
            self.beta = float(beta)
        except (TypeError, ValueError):
            raise ValueError(f"beta must be a number, got {beta!r}.") from None

    def compute(self, targets, embeddings, candidates=None):
        dist = self.distances(embeddings, candidates)
        selection = self.sample(dist, targets, embeddings, candidates)

        def on(selection):
            d_ij = anchor_positive(dist, selection)
            d_in = gather_pairs(dist, selection.anchor, selection.negative)
            losses = stable_contrast_terms(d_ij, d_in, self.alpha, self.beta)
            weights = self.triplet_importance_weights(targets, selection, dist.dtype)
            return self.reduce(losses, tf.cast(selection.mask, dist.dtype), weights=weights)

        return self.over_triplets(selection, on)

    def get_config(self):
        config = super().get_config()
        config.update(alpha=self.alpha, beta=self.beta)
        return config
