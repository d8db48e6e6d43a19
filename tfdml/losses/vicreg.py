"""VICReg (Bardes, Ponce & LeCun 2022): variance, invariance and covariance terms on two views."""

import keras
import tensorflow as tf

from tfdml.losses import base
from tfdml.losses import views


def refuse_tuple_reduction(owner, kwargs):
    """A loss of batch statistics has no per-tuple terms: only ``tuple_reduction="mean"``
    (what its equation averages) is taken, so that a saved config reloads."""
    reduction = kwargs.get("tuple_reduction")
    if reduction not in (None, "mean"):
        raise ValueError(
            f"{owner} is a function of the batch's statistics, not a reduction of per-tuple terms; "
            f"got tuple_reduction={reduction!r}: remove it (or use 'mean')."
        )


def covariance(z, weight):
    """C(Z) = 1/(n−1) Σ_i (z_i − z̄)(z_i − z̄)ᵀ over the n rows of weight 1 ([d, d]; 0 for n ≤ 1)."""
    centred, n = views.weighted_centre(z, weight)
    return tf.matmul(centred, centred, transpose_a=True) / tf.maximum(n - 1.0, 1.0)


def variance_term(cov, gamma, epsilon):
    """v(Z) = 1/d Σ_j max(0, γ − S(z^j, ε)), S(x, ε) = √(Var(x) + ε), Var the diagonal of C(Z)."""
    std = tf.sqrt(tf.linalg.diag_part(cov) + tf.cast(epsilon, cov.dtype))
    return tf.reduce_mean(tf.nn.relu(tf.cast(gamma, cov.dtype) - std))


def covariance_term(cov):
    """c(Z) = 1/d Σ_{i≠j} C(Z)_ij²."""
    d = tf.cast(tf.shape(cov)[0], cov.dtype)
    return (tf.reduce_sum(tf.square(cov)) - tf.reduce_sum(tf.square(tf.linalg.diag_part(cov)))) / d


@keras.saving.register_keras_serializable(package="tfdml")
class VICRegLoss(base.MetricLoss):
    """VICReg, Bardes et al. 2022 (§3.1), on the n pairs (z_i, z'_i) of two views:

        ℓ(Z, Z') = λ s(Z, Z') + μ [v(Z) + v(Z')] + ν [c(Z) + c(Z')]

    invariance  s(Z, Z') = 1/n Σ_i ‖z_i − z'_i‖²₂,
    variance    v(Z) = 1/d Σ_j max(0, γ − √(Var(z^j) + ε)),
    covariance  c(Z) = 1/d Σ_{i≠j} C(Z)_ij²,  C(Z) = 1/(n−1) Σ_i (z_i − z̄)(z_i − z̄)ᵀ,

    z^j the j-th dimension over the batch and Var(z^j) = C(Z)_jj (the unbiased
    estimator). Defaults are the paper's: λ = μ = 25, ν = 1, γ = 1, ε = 1e-4.

    Convention: s is written as the paper's equation, a sum over the d dimensions;
    the paper's pseudo-code (and pytorch-metric-learning's ``VICRegLoss``) take the
    mean squared error, s / d, with the same λ = 25. For that convention pass
    ``lam=25 / d``.

    Pairs: the rows that show the same instance (:func:`tfdml.losses.views.instance_ids`:
    ``example_id`` of a two-view batch, else the labels), first and second view in batch
    order (:func:`tfdml.losses.views.view_pairs`); Z holds the first views, Z' the second.
    The class labels of a two-view batch are not read. A batch without a pair has
    loss 0; with a single pair the variance and covariance of one sample are taken as 0.

    Args:
      lam: λ ≥ 0, weight of the invariance term.
      mu: μ ≥ 0, weight of the variance term.
      nu: ν ≥ 0, weight of the covariance term.
      gamma: γ > 0, the target standard deviation.
      epsilon: ε > 0 inside the square root.
      **kwargs: those of :class:`~tfdml.losses.MetricLoss` except ``distance``;
        ``tuple_reduction`` is "mean" only.
    """

    needs_tuples = True  # needs two views of an instance in the batch
    #: Its positives are the views of one instance (rows sharing an ``example_id``): a
    #: batch design must show each image twice (``Design.two_views``); configs check it.
    needs_two_views = True
    takes_distance = False
    fixed_arguments = {"distance": "compares the embeddings themselves (squared differences, covariances)"}

    def __init__(self, lam=25.0, mu=25.0, nu=1.0, gamma=1.0, epsilon=1e-4, **kwargs):
        base.refuse_fixed("VICRegLoss", kwargs, **self.fixed_arguments)
        refuse_tuple_reduction("VICRegLoss", kwargs)
        super().__init__(**kwargs)
        self.lam = base.check_positive("lam", lam, allow_zero=True)
        self.mu = base.check_positive("mu", mu, allow_zero=True)
        self.nu = base.check_positive("nu", nu, allow_zero=True)
        self.gamma = base.check_positive("gamma", gamma)
        self.epsilon = base.check_positive("epsilon", epsilon)

    def terms(self, z, z_prime, weight):
        """``(s, v(Z) + v(Z'), c(Z) + c(Z'))`` over the rows of weight 1."""
        n = tf.reduce_sum(weight)
        invariance = tf.reduce_sum(weight * tf.reduce_sum(tf.square(z - z_prime), axis=1)) / tf.maximum(n, 1.0)
        variance, cov_term = 0.0, 0.0
        for side in (z, z_prime):
            cov = covariance(side, weight)
            variance += variance_term(cov, self.gamma, self.epsilon)
            cov_term += covariance_term(cov)
        return invariance, variance, cov_term

    def compute(self, targets, embeddings):
        views.refuse_pair_id("VICRegLoss", targets)
        z, z_prime, weight = views.paired_views(embeddings, views.instance_ids(targets))
        invariance, variance, cov_term = self.terms(z, z_prime, weight)
        loss = self.lam * invariance + self.mu * variance + self.nu * cov_term
        return tf.where(tf.reduce_sum(weight) > 0, loss, tf.zeros_like(loss))

    def get_config(self):
        config = super().get_config()
        config.update(lam=self.lam, mu=self.mu, nu=self.nu, gamma=self.gamma, epsilon=self.epsilon)
        return config
