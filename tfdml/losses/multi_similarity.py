"""Multi-similarity loss (Wang et al. 2019, L_MS) with its pair mining by default."""

import keras
import tensorflow as tf

from tfdml.losses import arguments, base
from tfdml.losses import pair_weighting as gpw
from tfdml.losses.lifted_structured import refuse_importance


@keras.saving.register_keras_serializable(package="tfdml")
class MultiSimilarityLoss(base.MetricLoss):
    """Wang et al. 2019 ("Multi-Similarity Loss with General Pair Weighting"), the MS loss:

        L_MS = 1/m Σ_i { 1/α log[1 + Σ_{k∈P_i} e^{−α (S_ik − λ)}]
                         + 1/β log[1 + Σ_{k∈N_i} e^{β (S_ik − λ)}] }

    on the cosine similarity S over the m anchors of the batch, with P_i / N_i
    the anchor's positive / negative pairs after mining. Defaults α = 2,
    β = 50, λ = 1 and the paper's pair mining with ε = 0.1
    (:class:`~tfdml.samplers.MultiSimilaritySampler`, ``sampler="multi_similarity"``),
    the paper's settings. λ = 1 is the paper's; the authors' released
    code and pytorch-metric-learning (``base``) use 0.5, which is not what
    L_MS is evaluated with in the paper, so it is left to ``lam=0.5``.

    Its gradient is the general pair weighting of §3 (the paper's w⁺, w⁻, see
    :func:`tfdml.losses.pair_weighting.multi_similarity_weights`).

    Pairs: any pair sampler (``"all"`` or ``sampler=None``: every candidate
    pair), or a triplet sampler's pairs (a, p), (a, n); a pair selected c times
    counts c times inside the sums. ``tuple_reduction="mean"`` divides by m,
    every anchor of the batch (the paper's 1/m; an anchor without mined pairs
    adds 0).

    No ``importance``: each anchor's term is a log-sum-exp over its pairs, not a
    sum of per-pair terms, so no weighting of pairs by P_U/Q (Hong et al.
    Eq. 23) makes the mini-batch loss unbiased; refused with that reason.

    Args:
      alpha: α > 0 (positive scale).
      beta: β > 0 (negative scale).
      lam: λ, the similarity margin.
      sampler: default ``"multi_similarity"`` (ε = 0.1); pairs or triplets.
      **kwargs: those of :class:`~tfdml.losses.MetricLoss` (``distance`` must be
        ``"cosine"``).
    """

    sampler_kinds = ("pairs", "triplets")
    fixed_distance = "cosine"
    memory_refusal = None  # pair / triplet terms of the [B, M] matrix: a memory adds candidates
    default_tuple_reduction = "mean"

    def __init__(self, alpha=2.0, beta=50.0, lam=1.0, sampler="multi_similarity", distance="cosine", **kwargs):
        refuse_importance(type(self).__name__, kwargs,
                          "each anchor's term is a log-sum-exp over its pairs (Wang et al.'s L_MS)")
        super().__init__(distance=distance, sampler=sampler, **kwargs)
        self.alpha = arguments.check_positive("alpha", alpha)
        self.beta = arguments.check_positive("beta", beta)
        try:
            self.lam = float(lam)
        except (TypeError, ValueError):
            raise ValueError(f"lam must be a number, got {lam!r}.") from None

    def compute(self, targets, embeddings, candidates=None):
        dist = self.distances(embeddings, candidates)  # 1 − S
        weights = self.pair_weights(dist, targets, embeddings, candidates)
        terms = gpw.multi_similarity_terms(1.0 - dist, weights.pos_weight, weights.neg_weight,
                                           self.alpha, self.beta, self.lam)
        return self.reduce(terms, tf.ones_like(terms))

    def get_config(self):
        config = super().get_config()
        config.update(alpha=self.alpha, beta=self.beta, lam=self.lam)
        return config

