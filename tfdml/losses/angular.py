"""Angular loss, N-pair form (Wang et al. 2017, "Deep Metric Learning with Angular Loss", ICCV, Eq. 8–9)."""

import math

import keras
import tensorflow as tf

from tfdml import distances as distances_lib
from tfdml.losses import arguments, base
from tfdml.losses.npair import npair_terms
from tfdml.masks import npair_structure


def angular_terms(anchor_pair_sim, own, negatives, alpha_degrees):
    """Per-anchor terms of Eq. 8, log(1 + Σ_{n ∈ negatives_a} exp(f_{a,p,n})), with

        f_{a,p,n} = 4 tan²α (x_a + x_p)ᵀ x_n − 2 (1 + tan²α) x_aᵀ x_p,

    from ``anchor_pair_sim`` [P, M] = (x_a + x_p)ᵀ x_n for the M candidates x_n,
    ``own`` [P] = x_aᵀ x_p and ``negatives`` [P, M] bool."""
    sq_tan = tf.cast(math.tan(math.radians(alpha_degrees)) ** 2, anchor_pair_sim.dtype)
    return npair_terms(4.0 * sq_tan * anchor_pair_sim, 2.0 * (1.0 + sq_tan) * own, negatives)


@keras.saving.register_keras_serializable(package="tfdml")
class AngularLoss(base.MetricLoss):
    """Wang et al. 2017, Eq. 8 (angular loss, N-pair form):

        f_ang(B) = 1/N Σ_{x_a ∈ B} log[1 + Σ_{x_n ∈ B, y_n ≠ y_a, y_p} exp(f_{a,p,n})]
        f_{a,p,n} = 4 tan²α (x_a + x_p)ᵀ x_n − 2 (1 + tan²α) x_aᵀ x_p

    on L2-normalised embeddings (as the paper does), and with
    ``combine_npair=True`` Eq. 9, f_npair&ang = f_npair + λ f_ang, where f_npair is
    Sohn's N-pair loss in the paper's notation (Eq. 7: log(1 + Σ exp(x_aᵀ x_n −
    x_aᵀ x_p)), on the same normalised embeddings and tuples, without Sohn's ℓ2
    term, which is constant on unit vectors).

    Tuples: those of :class:`~tfdml.losses.NPairLoss` (:func:`tfdml.masks.npair_structure`):
    within each class, in batch order, examples 1 and 2 are an (anchor x_a,
    positive x_p) pair, 3 and 4 the next, ...; the k-th pairs of all classes form
    one N-pair batch B, and the negatives x_n of an anchor are the positives of
    the other classes' pairs in B (Sohn's N-pair batch, which Eq. 7–8 restate).
    An m-per-class batch (m ≥ 2 even) holds m/2 N-pair batches of N = #classes;
    with a ``pair_id`` column the two examples sharing it and a label are the pair
    and all such pairs form one N-pair batch. A class with one example gives no
    pair, one class gives no negative: such anchors contribute log 1 = 0, and a
    batch without pairs has loss 0.

    Reduction: ``tuple_reduction="mean"`` over the anchors (Eq. 8's 1/N).
    No ``importance`` (an anchor's term is a log-sum-exp over the classes its
    batch drew, as for NPairLoss) and no sampler or distance.

    Defaults: α = 45°, λ = 2 (Eq. 9). Wang et al. select α per dataset (their
    study of the angle's effect); set ``alpha`` per dataset.

    Args:
      alpha: α in degrees, 0 < α < 90.
      combine_npair: Eq. 9 (N-pair + λ angular) instead of Eq. 8 alone.
      lam: λ of Eq. 9 (used with ``combine_npair`` only).
      **kwargs: ``tuple_reduction``, ``name``, ``reduction``, ``dtype`` of
        :class:`~tfdml.losses.base.MetricLoss`.
    """

    takes_distance = False
    needs_tuples = False  # p-random positive pairs form one N-pair batch (as NPairLoss)
    default_tuple_reduction = "mean"

    def __init__(self, alpha=45.0, combine_npair=False, lam=2.0, **kwargs):
        arguments.refuse_fixed("AngularLoss", kwargs, distance="scores dot products of L2-normalised "
                          "embeddings (Wang et al. Eq. 8)")
        super().__init__(**kwargs)
        try:
            ok = 0.0 < float(alpha) < 90.0 and not isinstance(alpha, bool)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"alpha must be an angle in degrees in (0, 90), got {alpha!r}.")
        self.alpha = float(alpha)
        self.combine_npair = bool(combine_npair)
        self.lam = arguments.check_positive("lam", lam, allow_zero=True)

    def compute(self, targets, embeddings):
        partner, negatives, is_probe = npair_structure(targets.label, targets.pair_id)
        x = distances_lib.l2_normalize(embeddings)
        dtype = x.dtype
        sim = tf.matmul(x, x, transpose_b=True)
        partner_f = tf.cast(partner, dtype)
        own = tf.reduce_sum(partner_f * sim, axis=1)  # x_aᵀ x_p
        pair_sim = sim + tf.matmul(partner_f, sim)  # (x_a + x_p)ᵀ x_n
        terms = angular_terms(pair_sim, own, negatives, self.alpha)
        if self.combine_npair:
            terms = npair_terms(sim, own, negatives) + self.lam * terms
        return self.reduce(terms, tf.cast(is_probe, dtype))

    def get_config(self):
        config = super().get_config()
        config.update(alpha=self.alpha, combine_npair=self.combine_npair, lam=self.lam)
        return config
