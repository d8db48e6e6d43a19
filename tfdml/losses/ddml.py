"""DDML loss: the generalized logistic pair loss of Hu, Lu, Tan, CVPR 2014, "Discriminative Deep
Metric Learning for Face Verification in the Wild"."""

import keras
import tensorflow as tf

from tfdml.losses import arguments, base


def generalized_logistic(z, beta):
    """g(z) = (1/β) log(1 + exp(βz)) (Hu et al. Eq. 7), a smooth hinge max(z, 0) that it
    approaches as β grows; computed as softplus(βz)/β (finite for any z)."""
    return tf.nn.softplus(beta * z) / beta


def ddml_terms(dist, tau, beta):
    """Per-pair terms ``(positive, negative)`` of Hu et al. Eq. 6, g(1 − ℓ_ij (τ − D_ij²)):

        positive pair (ℓ_ij = +1):  g(1 − τ + D_ij²),
        negative pair (ℓ_ij = −1):  g(1 + τ − D_ij²)."""
    sq = tf.square(dist)
    return generalized_logistic(1.0 - tau + sq, beta), generalized_logistic(1.0 + tau - sq, beta)


@keras.saving.register_keras_serializable(package="tfdml")
class DDMLLoss(base.MetricLoss):
    """Hu, Lu, Tan 2014 (DDML), the loss term of the objective, Eq. 6 with g of Eq. 7:

        ℓ(i, j) = g(1 − ℓ_ij (τ − D_ij²)),   g(z) = (1/β) log(1 + exp(βz)),

    with ℓ_ij = +1 for a positive pair (same label), −1 for a negative pair, the
    threshold τ and the sharpness β. The pair constraint ℓ_ij (τ − D²) > 1 (Eq. 5) asks
    D² < τ − 1 of a positive pair and D² > τ + 1 of a negative one; g penalises a pair
    smoothly as it comes near or crosses its bound (g(z) → max(z, 0) as β → ∞). D is the
    loss's ``distance`` (Euclidean, as in the paper, by default: D² is the squared
    Euclidean distance d_f² of Eq. 4). The paper's other term (λ/2 Σ ‖W‖², Eq. 6) is
    weight decay of the network, which the model's optimizer or regularizers carry.

    Written from the definition above and the equation numbers as cited: the paper's text
    was not available to check them against.

    Pairs: without a ``sampler`` every ordered candidate pair of the batch (i ≠ j,
    sharing ``pair_id`` when the batch has one; the paper's pairs of labelled face
    images); with a pair sampler its pairs, with a triplet sampler the pairs (a, p),
    (a, n) of its triplets (:func:`~tfdml.losses.triplets_to_pairs`); a pair selected c
    times counts c times.

    Reduction (``tuple_reduction="mean"``): the mean of ℓ over the selected pairs. Eq. 6
    sums over pairs with the factor 1/2; ``"sum"`` gives the sum over ordered pairs, in
    which each unordered pair appears twice, so it equals Eq. 6's loss term times 2.

    ``importance=True``: each pair term is weighted by the batch design's W_ij = P_U/Q
    (Hong et al. Eq. 23 with Eq. 24 / 25); the loss is a mean of pair terms, so with
    ``tuple_reduction="mean"`` the mini-batch loss is unbiased for the mean of the terms
    over all ordered pairs of the training split, as for :class:`ContrastiveLoss`
    (without a cross-batch memory: the weights of memory pairs are derived for the
    contrastive losses).

    Args:
      tau: the threshold τ > 1 between positive and negative squared distances. The
        default 2 puts it at D² = 2 (orthogonal unit vectors), so both bounds τ ∓ 1 are
        reachable on the unit sphere (D² ≤ 4).
      beta: the sharpness β > 0 of g.
      **kwargs: those of :class:`~tfdml.losses.MetricLoss` (``distance``, ``sampler``:
        pairs or triplets, ``seed``, ``importance``, ``memory``, ...).
    """

    sampler_kinds = ("pairs", "triplets")
    memory_refusal = None  # pair terms of the [B, M] matrix: a memory adds candidates
    supports_importance = True
    default_tuple_reduction = "mean"

    def __init__(self, tau=2.0, beta=2.0, **kwargs):
        super().__init__(**kwargs)
        self.tau = arguments.check_positive("tau", tau)
        if self.tau <= 1.0:
            raise ValueError(f"tau must be > 1 (the positive pairs' bound τ − 1 on D² must be > 0), "
                             f"got {tau!r}.")
        self.beta = arguments.check_positive("beta", beta)

    def compute(self, targets, embeddings, candidates=None):
        dist = self.distances(embeddings, candidates)
        weights = self.pair_weights(dist, targets, embeddings, candidates)
        pos_terms, neg_terms = ddml_terms(dist, self.tau, self.beta)
        w = self.importance_weights(targets, dist.dtype, candidates)
        return self.reduce(
            tf.stack([pos_terms, neg_terms]), tf.stack([weights.pos_weight, weights.neg_weight]),
            weights=None if w is None else tf.stack([w, w]), candidates=candidates,
        )

    def get_config(self):
        config = super().get_config()
        config.update(tau=self.tau, beta=self.beta)
        return config
