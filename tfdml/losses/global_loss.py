"""Global loss on the distributions of a batch's positive and negative distances (Kumar B G,
Carneiro & Reid 2016, "Learning Local Image Descriptors with Deep Siamese and Triplet
Convolutional Networks by Minimising Global Loss Functions"), the term that Harwood et al.
2017 ("Smart Mining for Deep Metric Learning") add to the triplet loss."""

import keras
import tensorflow as tf

from tfdml.losses import arguments, base

#: λ and t of :class:`GlobalLoss` when not given: this library's defaults (t for squared
#: distances of unit-norm embeddings, which lie in [0, 4]), not settings read from the papers.
DEFAULT_LAM = 1.0
DEFAULT_MARGIN = 0.4


def _moments(dist, weight):
    """(μ, σ², has_pairs): the weighted mean and variance Σ w (d − μ)² / Σ w of ``dist``
    over the pairs of ``weight`` (≥ 0, same shape); μ = σ² = 0 without pairs."""
    weight = tf.cast(weight, dist.dtype)
    total = tf.reduce_sum(weight)
    has_pairs = total > 0
    safe = tf.where(has_pairs, total, tf.ones_like(total))
    mean = tf.reduce_sum(weight * dist) / safe
    var = tf.reduce_sum(weight * tf.square(dist - mean)) / safe
    return mean, var, has_pairs


def global_loss(dist, pos_weight, neg_weight, lam=DEFAULT_LAM, margin=DEFAULT_MARGIN):
    """J = (σ²₊ + σ²₋) + λ max(0, μ₊ − μ₋ + t) from a distance matrix ``dist`` [B, M] and the
    positive / negative pair weights [B, M] (multiplicities): μ±, σ²± the weighted mean and
    variance of the distances of the positive / negative pairs. 0 (with zero gradient) when
    the batch has no positive or no negative pair."""
    mu_pos, var_pos, has_pos = _moments(dist, pos_weight)
    mu_neg, var_neg, has_neg = _moments(dist, neg_weight)
    value = var_pos + var_neg + tf.cast(lam, dist.dtype) * tf.nn.relu(
        mu_pos - mu_neg + tf.cast(margin, dist.dtype))
    return tf.where(has_pos & has_neg, value, tf.zeros_like(value))


@keras.saving.register_keras_serializable(package="tfdml")
class GlobalLoss(base.MetricLoss):
    """The global loss of Kumar B G, Carneiro & Reid 2016 on the batch's pairs:

        d_ij = D(x_i, x_j)                          (``distance``, default squared euclidean)
        μ± = mean of d_ij over the positive (+) / negative (−) pairs
        σ²± = their variance, Σ (d_ij − μ±)² / |S±|
        J = (σ²₊ + σ²₋) + λ max(0, μ₊ − μ₋ + t)

    It pulls the two distance distributions apart (the mean of the positive distances below
    the mean of the negative ones by the margin t) and makes each narrow (small variances),
    so fewer pairs fall in their overlap. Harwood et al. 2017 ("Smart Mining for Deep Metric
    Learning") train with this term beside the triplet loss (their abstract and Fig. 1: "a
    triplet and a global loss"); a config writes that as a ``weighted_sum`` of ``triplet``
    and ``global`` (configs/harwood_smart_mining.yaml).

    Where the equation was read: the form above is the global loss as summarised from Kumar
    et al. 2016 (in its similarity form J = (σ²₊ + σ²₋) + λ max(0, m − (μ₊ − μ₋)), where μ₊
    should exceed μ₋; for distances the order flips, μ₋ should exceed μ₊). Neither paper's
    equation numbers could be read, so none are cited; the defaults λ = 1 and t = 0.4
    (:data:`DEFAULT_LAM`, :data:`DEFAULT_MARGIN`) are this library's. Kumar et al. compute
    μ± and σ²± over the anchor-positive and anchor-negative distances of the triplets of a
    mini-batch; here they are over every positive and negative pair of the batch (the
    triplets' pairs are among them), or over a pair sampler's pairs.

    Pairs: without a sampler every candidate pair of the batch (i ≠ j; ordered pairs count
    each unordered pair twice, which leaves means and variances unchanged). With a pair
    sampler its multiplicities weight the pairs. A batch without a positive or without a
    negative pair has loss 0 with zero gradient.

    Reduction: none over tuples: J is one value of the two distributions, so
    ``tuple_reduction`` is "mean" only.

    Args:
      lam: λ ≥ 0, the weight of the means' hinge against the variances.
      margin: t ≥ 0, the margin between the mean positive and mean negative distance.
      distance: the pairwise distance (default ``"squared_euclidean"``).
      **kwargs: ``sampler`` (a pair sampler), ``seed``, ``name``, ``reduction``, ``dtype`` of
        :class:`~tfdml.losses.base.MetricLoss`.
    """

    sampler_kinds = ("pairs",)
    default_tuple_reduction = "mean"

    def __init__(self, lam=DEFAULT_LAM, margin=DEFAULT_MARGIN, distance="squared_euclidean", **kwargs):
        super().__init__(distance=distance, **kwargs)
        if self.tuple_reduction != "mean":
            raise ValueError(
                f"GlobalLoss(tuple_reduction={self.tuple_reduction!r}): the loss is one value of "
                "the batch's two distance distributions, not a sum over tuples; leave "
                "tuple_reduction at 'mean'."
            )
        self.lam = arguments.check_positive("lam", lam, allow_zero=True)
        self.margin = arguments.check_positive("margin", margin, allow_zero=True)

    def compute(self, targets, embeddings):
        dist = self.distances(embeddings)
        weights = self.pair_weights(dist, targets, embeddings)
        return global_loss(dist, weights.pos_weight, weights.neg_weight, self.lam, self.margin)

    def get_config(self):
        config = super().get_config()
        config.update(lam=self.lam, margin=self.margin)
        return config
