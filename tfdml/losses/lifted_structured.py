"""Lifted structured loss (Song et al. 2016, Eq. 4) and Hermans et al. 2017's generalisation."""

import keras

from tfdml.losses import arguments, base
from tfdml.losses import pair_weighting as gpw


@keras.saving.register_keras_serializable(package="tfdml")
class LiftedStructuredLoss(base.MetricLoss):
    """Song et al. 2016, Eq. 4 (``generalized=False``, default):

        J_ij = log( Σ_{(i,k)∈N} exp(α − D_ik) + Σ_{(j,l)∈N} exp(α − D_jl) ) + D_ij
        L    = 1/(2|P|) Σ_{(i,j)∈P} [J_ij]_+²

    with D the euclidean distance and α = 1 (Song et al.'s default margin).
    P and N are the positive and negative pairs: without a ``sampler`` every
    candidate pair of the batch (all of the batch's negatives of i and of j, as
    in Song et al.); with a pair sampler its selection; with a triplet sampler
    the pairs (a, p), (a, n) of its triplets (:func:`~tfdml.losses.triplets_to_pairs`).
    A pair selected c times counts c times, in P and inside the sums.

    Pairs are ordered: (i, j) and (j, i) are both in P. J_ij = J_ji, so the
    mean over ordered pairs equals Song et al.'s mean over unordered ones;
    ``tuple_reduction="mean"`` gives L exactly (the sum of the ordered terms
    [J]_+²/2 over the number of ordered pairs), ``"sum"`` Σ_{unordered} [J]_+².
    A positive pair with no negative at either end has J = −∞: no loss.

    ``generalized=True``: Hermans et al. 2017 ("In Defense of the Triplet
    Loss", §2), the lifted loss generalised to every positive and every
    negative of an anchor, one term per anchor a:

        L_a = [ log Σ_{p∈P_a} e^{D_ap} + log Σ_{n∈N_a} e^{α − D_an} ]_+

    (plain hinge; Hermans et al.'s L_LG, written for P classes × K examples)
    averaged over the anchors that have a positive and a negative with
    ``"mean"``; Hermans et al. sum over anchors: ``tuple_reduction="sum"``.
    Both equations as checked against pytorch-metric-learning's documentation
    of ``LiftedStructureLoss`` / ``GeneralizedLiftedStructureLoss``.

    No ``importance``: J_ij couples a positive pair with all negatives of both
    ends through a log-sum-exp, so it is not a sum of per-pair terms and no
    weighting of pairs by P_U/Q (Hong et al. Eq. 23) makes the mini-batch
    loss unbiased for a loss over the training set; refused with that reason.

    Args:
      margin: α > 0.
      generalized: Hermans et al.'s per-anchor form instead of Song et al. Eq. 4.
      **kwargs: those of :class:`~tfdml.losses.MetricLoss` (``distance``,
        default euclidean as in Song et al.; ``sampler``: pairs or triplets).
    """

    sampler_kinds = ("pairs", "triplets")
    memory_refusal = ("Song et al. Eq. 4 adds the negatives of the positive pair's other end j "
                      "(log Σ e^{α − D_jl}), and a memory row is a candidate, never an anchor "
                      "whose negatives are known")
    needs_tuples = True
    default_tuple_reduction = "mean"

    def __init__(self, margin=1.0, generalized=False, **kwargs):
        refuse_importance(type(self).__name__, kwargs,
                          "its term J_ij couples a positive pair with every negative of both "
                          "ends through a log-sum-exp (Song et al. Eq. 4)")
        super().__init__(**kwargs)
        self.margin = arguments.check_positive("margin", margin)
        self.generalized = bool(generalized)

    def compute(self, targets, embeddings):
        dist = self.distances(embeddings)
        weights = self.pair_weights(dist, targets, embeddings)
        pos, neg = weights.pos_weight, weights.neg_weight
        if self.generalized:
            terms = gpw.lifted_generalized_terms(dist, pos, neg, self.margin)
            return self.reduce(terms, gpw.lifted_anchors(pos, neg))
        negatives = gpw.lifted_negative_logsumexp(dist, neg, self.margin)
        terms = 0.5 * gpw.lifted_structured_terms(dist, pos, negatives, negatives)
        return self.reduce(terms, pos)

    def get_config(self):
        config = super().get_config()
        config.update(margin=self.margin, generalized=self.generalized)
        return config


def refuse_importance(owner, kwargs, reason):
    """Raise the one error for ``importance=True`` on a loss that is not a sum of pair terms."""
    if kwargs.get("importance"):
        raise ValueError(
            f"{owner} takes no importance=True: {reason}, so it is not a sum of per-pair terms "
            "and no weighting of pairs by the design's P_U/Q (Hong et al. Eq. 23) makes its "
            "mini-batch loss unbiased. Use importance=False, or a loss that is a sum of pair "
            "terms (contrastive, margin, binomial_deviance with balanced=False)."
        )
