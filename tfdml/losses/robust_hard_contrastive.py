"""Robust hard contrastive loss: hardest negative beyond β (draft Eq. 22)."""

import keras
import tensorflow as tf

from tfdml.losses import arguments, base, batch


@keras.saving.register_keras_serializable(package="tfdml")
class RobustHardContrastiveLoss(base.MetricLoss):
    """Deep-embeddings draft §5.3, Eq. 22, for a positive pair (i, j):

        ℓ(i, j) = [D_ij − α]_+² + max_{n ∈ X_n(i): D_in > β} [α − D_in]_+²

    where X_n(i) are the candidate negatives of i in the batch. The max picks
    the hardest negative that is still farther than β (too-close negatives are
    noisy, Wu et al. 2017 §4); a max over an empty set is 0. The selection is
    part of the formula, so the loss takes no sampler.

    Reduction (``tuple_reduction="mean"``): the mean over the ordered candidate
    positive pairs (i, j).

    Args:
      alpha: α > 0, the radius that positives should stay within and negatives
        beyond.
      beta: β ≥ 0, lower bound on the distance of a mined negative; β < α
        (otherwise the negative term is always 0).
      distance: pairwise distance D (euclidean, as in the draft).
      importance: weight each positive pair's term by the design's W_ij =
        P_U/Q (Hong et al. Eq. 23-25); the hardest negative is a function of
        the anchor, so the weight of the positive pair is the one that
        corrects the design.
    """

    needs_tuples = True  # the hardest negative of each positive pair's anchor
    default_tuple_reduction = "mean"
    supports_importance = True
    memory_refusal = None  # pair terms of the [B, M] matrix: a memory adds candidates

    def __init__(self, alpha=1.0, beta=0.5, **kwargs):
        super().__init__(**kwargs)
        self.alpha = arguments.check_positive("alpha", alpha)
        self.beta = arguments.check_positive("beta", beta, allow_zero=True)
        if self.beta >= self.alpha:
            raise ValueError(
                f"RobustHardContrastiveLoss needs beta < alpha (got beta={beta}, alpha={alpha}): "
                "a negative farther than beta >= alpha never violates the margin alpha."
            )

    def compute(self, targets, embeddings, candidates=None):
        dist = self.distances(embeddings, candidates)
        pairs = batch.all_pairs(self.candidate_labels(targets, candidates),
                               self.candidate_mask(targets, candidates), dist.dtype)
        positive_term = tf.square(tf.nn.relu(dist - self.alpha))
        eligible = (pairs.neg_weight > 0) & (dist > self.beta)
        negative_term = tf.square(tf.nn.relu(self.alpha - dist))
        hardest = tf.reduce_max(
            tf.where(eligible, negative_term, tf.zeros_like(negative_term)), axis=1
        )
        losses = positive_term + hardest[:, None]
        return self.reduce(losses, pairs.pos_weight,
                           weights=self.importance_weights(targets, dist.dtype, candidates),
                           candidates=candidates)

    def get_config(self):
        config = super().get_config()
        config.update(alpha=self.alpha, beta=self.beta)
        return config
