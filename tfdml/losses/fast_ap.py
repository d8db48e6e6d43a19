"""FastAP (Cakir, He, Xia, Kulis & Sclaroff 2019, "Deep Metric Learning to Rank", CVPR)."""

import keras
import tensorflow as tf

from tfdml import distances as distances_lib
from tfdml import masks as masks_lib
from tfdml.losses import arguments, base
from tfdml.losses.lifted_structured import refuse_importance
from tfdml.losses.proxies import check_size


def soft_histograms(dist, positive, candidate, num_bins):
    """(h⁺, h) [B, L + 1]: each query's soft histograms of its positives' and of all its
    candidates' distances over the bin centres z_l = l·Δ, l = 0..L, Δ = 4/L, each
    distance d shared between its two nearest centres by the triangular kernel
    δ(d, z_l) = max(0, 1 − |d − z_l| / Δ). The linear interpolation of the histogram
    loss (:func:`tfdml.losses.histogram.soft_histogram`), per query rather than over all
    pairs: a [B, M, L + 1] product, since a segment sum into B·(L + 1) bins would have a
    number of segments that depends on the batch size, which XLA needs fixed."""
    delta = 4.0 / num_bins
    centres = tf.range(num_bins + 1, dtype=dist.dtype) * delta
    pulse = tf.nn.relu(1.0 - tf.abs(dist[:, :, None] - centres) / delta)  # [B, M, L + 1]
    h_pos = tf.einsum("bml,bm->bl", pulse, tf.cast(positive, dist.dtype))
    h_all = tf.einsum("bml,bm->bl", pulse, tf.cast(candidate, dist.dtype))
    return h_pos, h_all


@keras.saving.register_keras_serializable(package="tfdml")
class FastAPLoss(base.MetricLoss):
    """Cakir et al. 2019, FastAP (§3; the equation numbers are not cited here because they
    were not re-checked): average precision of each query's ranking of the other batch
    examples, estimated from histograms of distances. For a query q with the squared
    Euclidean distances d ∈ [0, 4] of the unit-norm embeddings, L + 1 bin centres
    z_l = l·4/L and the triangular soft binning (:func:`soft_histograms`) of its
    positives (h_l⁺) and of all its retrieval candidates (h_l), with the cumulative
    counts H_l⁺ = Σ_{l'≤l} h_{l'}⁺ and H_l = Σ_{l'≤l} h_{l'}:

        FastAP_q = 1/N_q⁺ Σ_l h_l⁺ H_l⁺ / H_l       (a bin with H_l = 0 adds 0),

    N_q⁺ the query's positives; the loss is the mean of 1 − FastAP_q over the queries
    with a positive (a query without one adds nothing, neither to the sum nor to the
    count; "sum" sums them, "mean_active" averages over the queries with FastAP_q < 1). The gradient is autodiff's through the soft binning, the
    paper's derivative of the relaxed histograms.

    Default L = 10 bins (pytorch-metric-learning's ``num_bins=10``; the same binning,
    the same squared distance of unit vectors and the same mean over queries with a
    positive). The retrieval set of a query is every other example of the batch (the
    candidate pairs: with a ``pair_id`` column, its pair only).

    No ``importance``: FastAP_q is a ratio of soft counts of pairs (h⁺ H⁺ / H), not a sum
    of per-pair terms, so weighting pairs by the design's W = P_U/Q does not make the
    mini-batch loss unbiased for the loss over the training split; refused with that
    reason. No sampler (AP ranks the whole retrieval set) and no cross-batch memory.

    Args:
      num_bins: L >= 1.
      **kwargs: ``tuple_reduction``, ``name``, ``reduction``, ``dtype``
        of :class:`~tfdml.losses.base.MetricLoss`.
    """

    takes_distance = False
    needs_tuples = True  # a query's AP ranks its positives among its negatives
    default_tuple_reduction = "mean"

    def __init__(self, num_bins=10, **kwargs):
        owner = type(self).__name__
        refuse_importance(owner, kwargs, "each query's FastAP is a ratio of soft counts of its pairs "
                                         "(h+ H+ / H)")
        arguments.refuse_fixed(owner, kwargs, distance="ranks by the squared Euclidean distance of unit-norm "
                                                  "embeddings (4 at most, the range of its bins)")
        super().__init__(**kwargs)
        self.num_bins = check_size("num_bins", num_bins, 1, "the bins of the distance histograms")

    def query_terms(self, targets, embeddings):
        """(1 − FastAP_q [B], has a positive [B])."""
        candidate = self.candidate_mask(targets)
        positive, _ = masks_lib.split_by_label(targets.label, candidate)
        dist = 2.0 - 2.0 * distances_lib.cosine_similarity(embeddings)
        dist = tf.clip_by_value(dist, 0.0, 4.0)
        h_pos, h_all = soft_histograms(dist, positive, candidate, self.num_bins)
        ratio = tf.math.divide_no_nan(h_pos * tf.cumsum(h_pos, axis=1), tf.cumsum(h_all, axis=1))
        num_pos = tf.reduce_sum(tf.cast(positive, dist.dtype), axis=1)
        has_pos = tf.cast(num_pos > 0, dist.dtype)
        fast_ap = tf.math.divide_no_nan(tf.reduce_sum(ratio, axis=1), num_pos)
        return has_pos * (1.0 - fast_ap), has_pos

    def compute(self, targets, embeddings):
        terms, has_pos = self.query_terms(targets, embeddings)
        return self.reduce(terms, has_pos)

    def get_config(self):
        config = super().get_config()
        config.update(num_bins=self.num_bins)
        return config
