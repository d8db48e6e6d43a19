"""Circle loss (Sun et al. 2020), pair-similarity form on the cosine similarity."""

import keras

from tfdml.losses import arguments, base
from tfdml.losses import pair_weighting as gpw
from tfdml.losses.lifted_structured import refuse_importance


@keras.saving.register_keras_serializable(package="tfdml")
class CircleLoss(base.MetricLoss):
    """Sun et al. 2020 ("Circle Loss: A Unified Perspective of Pair Similarity
    Optimization", CVPR), with pair-wise labels. Per anchor i of the batch, with
    its positive similarities s_p^j = S_ij (j ∈ P_i) and negative ones
    s_n^k = S_ik (k ∈ N_i) on the cosine similarity S (Eq. 1's general form,
    re-weighted as Eq. 4–6):

        L_i = log[1 + Σ_{k∈N_i} Σ_{j∈P_i} exp(γ (α_n^k (s_n^k − Δ_n) − α_p^j (s_p^j − Δ_p)))]

    with the self-paced weights of Eq. 5, α_p^j = [O_p − s_p^j]_+ and
    α_n^k = [s_n^k − O_n]_+, held constant (no gradient through them, as in
    the paper and pytorch-metric-learning), and Eq. 8's O_p = 1 + m,
    O_n = −m, Δ_p = 1 − m, Δ_n = m. The double sum factorises, so L_i is
    computed stably as softplus(log Σ_k e^{γ α_n^k (s_n^k − Δ_n)}
    + log Σ_j e^{−γ α_p^j (s_p^j − Δ_p)}) (:func:`tfdml.losses.pair_weighting.circle_terms`).

    Defaults m = 0.25, γ = 256: the paper's setting for face recognition and
    person re-identification (§4); for fine-grained image retrieval it uses
    m = 0.4, γ = 80, which are pytorch-metric-learning's ``CircleLoss``
    defaults (pass ``m=0.4, gamma=80`` for those). The margin form is the
    paper's (one relaxation m gives O_p, O_n, Δ_p, Δ_n), as in PML.

    Reduction (``tuple_reduction="mean"``, default): the mean of L_i over the
    anchors with at least one positive and one negative pair; an anchor without
    either adds nothing to the sum or to the count. PML's default reducer
    (``AvgNonZeroReducer``) averages over the anchors whose loss is > 0, which
    leaves out, besides those, anchors whose loss underflows to 0 in floating
    point (a well-separated anchor with γ = 256); ``tuple_reduction="mean_active"``
    is that convention, ``"sum"`` the plain sum.

    Pairs: every candidate pair of the batch by default (``sampler=None`` or
    ``"all"``), or any pair sampler's selection, or a triplet sampler's pairs
    (a, p), (a, n); a pair selected c times counts c times inside the sums.

    No ``importance``: each anchor's term is a log-sum-exp over its pairs, not a
    sum of per-pair terms (as the multi-similarity loss), so no weighting of
    pairs by P_U/Q (Hong et al. Eq. 23) makes the mini-batch loss unbiased;
    refused with that reason.

    Args:
      m: m ≥ 0, the relaxation factor (margin).
      gamma: γ > 0, the scale factor.
      sampler: default ``None`` (all pairs); pairs or triplets.
      **kwargs: those of :class:`~tfdml.losses.MetricLoss` (``distance`` must be
        ``"cosine"``).
    """

    sampler_kinds = ("pairs", "triplets")
    fixed_distance = "cosine"
    needs_tuples = True  # an anchor's term compares its positives with its negatives
    memory_refusal = None  # per-anchor terms of the [B, M] matrix: a memory adds candidates
    default_tuple_reduction = "mean"

    def __init__(self, m=0.25, gamma=256.0, sampler=None, distance="cosine", **kwargs):
        refuse_importance(type(self).__name__, kwargs,
                          "each anchor's term is a log-sum-exp over its pairs (Sun et al.'s Eq. 6)")
        super().__init__(distance=distance, sampler=sampler, **kwargs)
        self.m = arguments.check_positive("m", m, allow_zero=True)
        self.gamma = arguments.check_positive("gamma", gamma)

    def compute(self, targets, embeddings, candidates=None):
        dist = self.distances(embeddings, candidates)  # 1 − S
        weights = self.pair_weights(dist, targets, embeddings, candidates)
        terms = gpw.circle_terms(1.0 - dist, weights.pos_weight, weights.neg_weight, self.gamma, self.m)
        return self.reduce(terms, gpw.lifted_anchors(weights.pos_weight, weights.neg_weight))

    def get_config(self):
        config = super().get_config()
        config.update(m=self.m, gamma=self.gamma)
        return config
