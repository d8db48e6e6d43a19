"""Binomial deviance loss (Yi et al. 2014; Ustinova & Lempitsky 2016, §4)."""

import keras
import tensorflow as tf

from tfdml.losses import arguments, base
from tfdml.losses import pair_weighting as gpw


@keras.saving.register_keras_serializable(package="tfdml")
class BinomialDevianceLoss(base.MetricLoss):
    """Yi et al. 2014 ("Deep Metric Learning for Person Re-Identification"), as
    used by Ustinova & Lempitsky 2016 (§4, the binomial deviance baseline):

        L = Σ_(i,j) w_ij ln(1 + exp(−α (s_ij − β) m_ij))

    on the cosine similarity s_ij, with m_ij = 1 for a positive pair and −C for
    a negative one, and weights w_ij = 1/n_pos for the positive pairs, 1/n_neg
    for the negative ones (``balanced=True``, default): the mean positive term
    plus the mean negative term. Defaults α = 2, β = 0.5, C = 25 (Ustinova &
    Lempitsky's setting). The form is Yi et al.'s J_dev, as checked against
    pytorch-lifestream's ``ptls/frames/coles/losses/binomial_deviance_loss.py``
    (mean positive term + mean negative term, m = −C for negatives).

    Pairs: without a ``sampler`` every ordered candidate pair of the batch; with
    a pair sampler its selection, with a triplet sampler the pairs (a, p),
    (a, n) of its triplets; a pair selected c times counts c times (in the sums
    and in n_pos, n_neg). ``tuple_reduction``: ``"mean"`` as above, ``"sum"``
    the plain sum of the terms, ``"mean_active"`` means over pairs with a term
    > 0 (every pair: the softplus is positive).

    ``balanced=False``: one mean over all selected pairs, w_ij = 1/(n_pos + n_neg)
    (C alone balances positives against negatives). The loss is then a mean of
    per-pair terms, and ``importance=True`` weights each term by the design's
    W_ij = P_U/Q (Hong et al. Eq. 23–25): the mini-batch loss is unbiased for
    the mean of the terms over all ordered pairs of the training split (tested
    in tests/pipelines/test_pipeline_unbiased.py). With ``balanced=True``,
    1/n_pos and 1/n_neg are ratios of the batch's own counts, for which the
    columns give no unbiased weighting (the split's number of positive pairs
    is not in them): ``importance=True`` is refused there, naming the fix.

    Args:
      alpha: α > 0, the scale.
      beta: β, the similarity threshold.
      cost: C > 0, the negative cost.
      balanced: 1/n_pos, 1/n_neg weights (Yi et al.) or one mean.
      **kwargs: those of :class:`~tfdml.losses.MetricLoss` (``distance`` must be
        ``"cosine"``; ``sampler``: pairs or triplets; ``importance``).
    """

    sampler_kinds = ("pairs", "triplets")
    fixed_distance = "cosine"
    memory_refusal = None  # pair / triplet terms of the [B, M] matrix: a memory adds candidates
    supports_importance = True
    default_tuple_reduction = "mean"

    def __init__(self, alpha=2.0, beta=0.5, cost=25.0, balanced=True, distance="cosine", **kwargs):
        if kwargs.get("importance") and balanced:
            raise ValueError(
                f"{type(self).__name__}(importance=True) needs balanced=False: with balanced=True "
                "the positive and negative terms are divided by the batch's own counts n_pos, "
                "n_neg, which no weighting of pairs by P_U/Q makes unbiased; balanced=False "
                "takes one mean over all pairs, which the importance weights make unbiased."
            )
        super().__init__(distance=distance, **kwargs)
        self.alpha = arguments.check_positive("alpha", alpha)
        try:
            self.beta = float(beta)
        except (TypeError, ValueError):
            raise ValueError(f"beta must be a number, got {beta!r}.") from None
        self.cost = arguments.check_positive("cost", cost)
        self.balanced = bool(balanced)

    def compute(self, targets, embeddings, candidates=None):
        dist = self.distances(embeddings, candidates)  # 1 − s
        weights = self.pair_weights(dist, targets, embeddings, candidates)
        sim = 1.0 - dist
        pos_terms, neg_terms = gpw.binomial_deviance_terms(sim, self.alpha, self.beta, self.cost)
        if self.balanced:
            return (self.reduce(pos_terms, weights.pos_weight)
                    + self.reduce(neg_terms, weights.neg_weight))
        w = self.importance_weights(targets, dist.dtype, candidates)
        return self.reduce(
            tf.stack([pos_terms, neg_terms]), tf.stack([weights.pos_weight, weights.neg_weight]),
            weights=None if w is None else tf.stack([w, w]), candidates=candidates,
        )

    def get_config(self):
        config = super().get_config()
        config.update(alpha=self.alpha, beta=self.beta, cost=self.cost, balanced=self.balanced)
        return config
