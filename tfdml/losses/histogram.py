"""Histogram loss (Ustinova & Lempitsky 2016, "Learning Deep Embeddings with Histogram Loss", Eq. 1–4)."""

import keras
import tensorflow as tf

from tfdml import distances as distances_lib
from tfdml.losses import arguments, base

#: R of the paper's experiments: the authors' released code trains with the bin step
#: Δ = 0.01 on [−1, 1] (``grid_delta: 0.01``), i.e. R = 2/Δ + 1 = 201 nodes; the paper
#: (Fig. 1 caption) calls the number of bins the loss's only parameter, with low sensitivity.
DEFAULT_NUM_BINS = 201


def soft_histogram(sim, weight, num_bins):
    """h_r (Eq. 1–2) [R] of the similarities ``sim`` with per-pair ``weight`` (same shape, ≥ 0).

    Nodes t_r = −1 + rΔ, r = 0..R−1, Δ = 2/(R − 1). A similarity s (clipped to
    [−1, 1]) between t_r and t_{r+1} gives (t_{r+1} − s)/Δ to node r and
    (s − t_r)/Δ to node r + 1 (Eq. 2), each times its weight; the sum is divided
    by Σ weight (Eq. 1's 1/|S|, the weighted count). Piecewise linear in s, so the
    gradient flows through the interpolation. All-zero weights give h = 0.
    """
    dtype = sim.dtype
    sim = tf.reshape(sim, [-1])
    weight = tf.reshape(tf.cast(weight, dtype), [-1])
    position = (tf.clip_by_value(sim, -1.0, 1.0) + 1.0) * tf.cast((num_bins - 1) / 2.0, dtype)  # (s − t_0)/Δ
    lower = tf.clip_by_value(tf.floor(tf.stop_gradient(position)), 0.0, float(num_bins - 2))
    upper_share = position - lower  # (s − t_r)/Δ ∈ [0, 1]
    index = tf.cast(lower, tf.int32)
    counts = (tf.math.unsorted_segment_sum(weight * (1.0 - upper_share), index, num_bins)
              + tf.math.unsorted_segment_sum(weight * upper_share, index + 1, num_bins))
    total = tf.reduce_sum(weight)
    return counts / tf.where(total > 0, total, tf.ones_like(total))


def histogram_loss(sim, pos_weight, neg_weight, num_bins=DEFAULT_NUM_BINS):
    """L = Σ_r h⁻_r Φ⁺_r, Φ⁺_r = Σ_{q≤r} h⁺_q (Eq. 3–4), from an anchors × candidates
    similarity matrix ``sim`` [B, M] and the positive / negative pair weights [B, M]
    (multiplicities, times importance weights when used). 0 when either set is empty.
    Computed in float32 at least: a 16-bit float cannot place s on a grid of 201 nodes
    (bfloat16 holds 3 significant digits)."""
    dtype = sim.dtype
    wide = tf.float32 if dtype.size < 4 else dtype
    sim = tf.cast(sim, wide)
    h_pos = soft_histogram(sim, pos_weight, num_bins)
    h_neg = soft_histogram(sim, neg_weight, num_bins)
    return tf.cast(tf.reduce_sum(h_neg * tf.cumsum(h_pos)), dtype)


@keras.saving.register_keras_serializable(package="tfdml")
class HistogramLoss(base.MetricLoss):
    """Ustinova & Lempitsky 2016, Eq. 1–4:

        s_ij = x̂_iᵀ x̂_j (cosine similarity of the L2-normalised embeddings)
        h±_r = 1/|S±| Σ_{(i,j) ∈ S±} δ_ijr                       (Eq. 1)
        δ_ijr = linear interpolation onto the nodes t_r           (Eq. 2)
        L = Σ_{r=1}^{R} h⁻_r Σ_{q≤r} h⁺_q                         (Eq. 3–4)

    with R nodes t_r uniformly on [−1, 1], step Δ = 2/(R − 1): the estimated
    probability that a negative pair is more similar than a positive one.
    Default R = 201 (Δ = 0.01, the paper's setting, see
    :data:`DEFAULT_NUM_BINS`). The loss has no other hyper-parameter.

    Pairs: without a sampler every candidate pair of the batch, positive (S⁺)
    and negative (S⁻): the histograms are those of the unordered pairs i < j
    (the loss scores the ordered candidate pairs, which count each pair twice;
    the normalisation 1/|S| cancels that). With a pair sampler
    its pair multiplicities weight the histogram entries (|S| becomes the sum of
    the multiplicities). A batch without a positive or without a negative pair
    has loss 0 with zero gradient.

    ``importance=True``: each pair enters its histogram with the batch design's
    weight W_ij (Hong et al. Eq. 23–25, :mod:`tfdml.importance`), normalised by
    Σ W over the pairs of that histogram: h± are then ratio estimators, consistent
    for the histograms of all positive / negative pairs of the training split
    (tested in tests/pipelines/test_pipeline_unbiased.py). The loss, a product of
    the two histograms, is consistent but not unbiased per batch.

    Reduction: none over tuples: L is one value of the two histograms, so
    ``tuple_reduction`` is "mean" only. No ``distance``: Eq. 1 uses the cosine
    similarity (the paper L2-normalises the embeddings).

    Args:
      num_bins: R ≥ 2, the number of histogram nodes (Δ = 2/(R − 1)).
      **kwargs: ``sampler`` (a pair sampler), ``seed``, ``importance``, ``name``,
        ``reduction``, ``dtype`` of :class:`~tfdml.losses.base.MetricLoss`.
    """

    sampler_kinds = ("pairs",)
    supports_importance = True
    takes_distance = False
    default_tuple_reduction = "mean"

    def __init__(self, num_bins=DEFAULT_NUM_BINS, **kwargs):
        arguments.refuse_fixed("HistogramLoss", kwargs, distance="scores cosine similarities of "
                          "L2-normalised embeddings (Ustinova & Lempitsky Eq. 1)")
        super().__init__(**kwargs)
        if self.tuple_reduction != "mean":
            raise ValueError(
                f"HistogramLoss(tuple_reduction={self.tuple_reduction!r}): the loss is one value "
                "of the two pair histograms (Eq. 4), not a sum over tuples; leave tuple_reduction "
                "at 'mean'."
            )
        if isinstance(num_bins, bool) or not isinstance(num_bins, int) or num_bins < 2:
            raise ValueError(f"num_bins must be an int >= 2 (R of Eq. 2), got {num_bins!r}.")
        self.num_bins = num_bins

    def similarities(self, embeddings):
        return distances_lib.cosine_similarity(embeddings)

    def compute(self, targets, embeddings):
        sim = self.similarities(embeddings)
        weights = self.pair_weights(1.0 - sim, targets, embeddings)  # samplers see larger = farther
        pos, neg = weights.pos_weight, weights.neg_weight
        w = self.importance_weights(targets, sim.dtype)
        if w is not None:
            pos, neg = pos * w, neg * w
        return histogram_loss(sim, pos, neg, self.num_bins)

    def get_config(self):
        config = super().get_config()
        config.update(num_bins=self.num_bins)
        return config
