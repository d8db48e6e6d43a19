"""Contrastive loss (Hadsell et al.; Wu et al. 2017 §3) and its ℓ2 form (draft Eq. 18)."""

import keras
import tensorflow as tf

from tfdml.losses import arguments, base


def contrastive_terms(dist, margin, squared=True):
    """Per-pair terms ``(g(D), h(D))`` of the contrastive loss.

    squared=True (Wu et al. 2017 §3, Hong et al. Eq. 5):
        g(D) = D²,   h(D) = [α − D]_+²
    squared=False (ℓ2 contrastive, deep-embeddings draft Eq. 18):
        g(D) = D,    h(D) = [α − D]_+
    """
    hinge = tf.nn.relu(margin - dist)
    if squared:
        return tf.square(dist), tf.square(hinge)
    return dist, hinge


@keras.saving.register_keras_serializable(package="tfdml")
class ContrastiveLoss(base.MetricLoss):
    """ℓ(i, j) = y_ij D_ij² + (1 − y_ij) [α − D_ij]_+²  (Wu et al. 2017 §3).

    With ``squared=False`` the ℓ2 contrastive loss of the deep-embeddings draft,
    Eq. 18: ℓ(i, j) = y_ij D_ij + (1 − y_ij) [α − D_ij]_+.

    Pairs: without a ``sampler`` every ordered candidate pair of the batch
    (i ≠ j, sharing ``pair_id`` when the batch has one), as in Hadsell et al.
    With a pair sampler its pair multiplicities; with a triplet sampler
    (semi-hard, distance weighted: Wu et al. Table 1) each selected (a, p, n)
    contributes the positive pair (a, p) and the negative pair (a, n).

    Reduction (``tuple_reduction="mean"``): the sum of the pair terms divided
    by the number of selected pairs (with multiplicity).

    ``importance=True``: each pair term is weighted by the batch design's
    W_ij = P_U/Q (Hong et al. Eq. 23 with Eq. 24 / 25), read from the batch's
    importance columns: with all pairs and ``squared=True`` this is Hong's
    "contrastive loss with importance sampling" (:class:`WeightedContrastiveLoss`
    with η = 1); with ``squared=False`` the same for draft Eq. 18. With a
    cross-batch memory (all pairs, (m, n)-group design) the batch's and the
    memory's pairs take :func:`tfdml.importance.memory_pair_weights`.

    Args:
      margin: α > 0.
      squared: Eq. of Wu §3 (True) or draft Eq. 18 (False).
      distance: pairwise distance D (default euclidean).
      sampler: ``None`` (all pairs) or a pair / triplet sampler.
      seed: seed of a random sampler's stream.
      importance: weight pairs by W_ij (see above and :class:`~tfdml.losses.base.MetricLoss`).
    """

    sampler_kinds = ("pairs", "triplets")
    memory_refusal = None  # pair / triplet terms of the [B, M] matrix: a memory adds candidates
    memory_importance = True  # a weighted sum of pair terms (tfdml.importance.memory_pair_weights)
    supports_importance = True
    default_tuple_reduction = "mean"

    def __init__(self, margin=1.0, squared=True, **kwargs):
        super().__init__(**kwargs)
        self.margin = arguments.check_positive("margin", margin)
        self.squared = bool(squared)

    def compute(self, targets, embeddings, candidates=None):
        dist = self.distances(embeddings, candidates)
        weights = self.pair_weights(dist, targets, embeddings, candidates)
        g, h = contrastive_terms(dist, self.margin, self.squared)
        eta = self.negative_weights(targets, dist.dtype)
        if eta is not None:
            h = eta * h
        w = self.importance_weights(targets, dist.dtype, candidates)
        return self.reduce(
            tf.stack([g, h]), tf.stack([weights.pos_weight, weights.neg_weight]),
            weights=None if w is None else tf.stack([w, w]), candidates=candidates,
        )

    def negative_weights(self, targets, dtype):
        """η (a scalar or [B, B]) multiplying the negative terms; None: 1 (Hong's
        weighted and balanced forms set it)."""
        del targets, dtype
        return None

    def get_config(self):
        config = super().get_config()
        config.update(margin=self.margin, squared=self.squared)
        return config
