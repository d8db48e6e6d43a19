"""How a loss turns its per-tuple terms into one scalar.

Every tfdml loss computes a term per selected tuple (a pair, a triplet, a
query) together with the tuple's multiplicity ``count`` (how often the sampler
selected it; 0 = not selected) and, for Hong et al.'s losses, an importance
weight ``W``. One function, :func:`reduce_tuples`, turns them into the
scalar

    (Σ_t count_t · W_t · ℓ_t + extra) / denominator

where the *reduction* names the denominator:

==================  ==========================================================
``"sum"``           1 (Lu et al. 2019, Algorithm 1 sums ℓ_k over queries)
``"mean"``          Σ_t count_t: the number of selected tuples (Hong et al.
                    Eq. 1 and the mini-batch form Eq. 23, ``1/B Σ_k``)
``"mean_active"``   Σ_t count_t · 1{ℓ_t > 0}: the number of selected tuples
                    with non-zero loss (Wu et al. 2017's reference code for the
                    margin loss, "pair_cnt")
==================  ==========================================================

A denominator of 0 (no selected or no active tuple) is replaced by 1, so a
batch without tuples gives loss 0 and finite (zero) gradients instead of NaN.
``extra`` is an additive term of the numerator (the ν-regulariser of Wu's
margin loss).
"""

import tensorflow as tf

REDUCTIONS = ("sum", "mean", "mean_active")


def _sum_denominator(losses, counts):
    del losses
    return tf.ones([], counts.dtype)


def _mean_denominator(losses, counts):
    del losses
    return tf.reduce_sum(counts)


def _mean_active_denominator(losses, counts):
    active = tf.cast(losses > 0, counts.dtype)
    return tf.reduce_sum(counts * active)


_DENOMINATORS = {
    "sum": _sum_denominator,
    "mean": _mean_denominator,
    "mean_active": _mean_active_denominator,
}


def check_reduction(reduction):
    """Return ``reduction`` if it is one of :data:`REDUCTIONS`, else raise ``ValueError``."""
    if reduction not in _DENOMINATORS:
        raise ValueError(
            f"Unknown tuple_reduction {reduction!r}; choose one of {', '.join(REDUCTIONS)}."
        )
    return reduction


def reduce_tuples(losses, counts, reduction, weights=None, extra=None):
    """``(Σ count·W·ℓ + extra) / denominator(reduction)`` as a scalar.

    Args:
      losses: per-tuple terms ℓ_t, any shape.
      counts: multiplicities of the tuples, same shape (0 = not selected).
      reduction: one of :data:`REDUCTIONS`.
      weights: optional importance weights W_t, broadcastable to ``losses``.
      extra: optional scalar added to the numerator.
    """
    losses = tf.reshape(losses, [-1])
    counts = tf.reshape(tf.cast(counts, losses.dtype), [-1])
    weighted = counts * losses
    if weights is not None:
        weighted = weighted * tf.reshape(tf.cast(weights, losses.dtype), [-1])
    total = tf.reduce_sum(weighted)
    if extra is not None:
        total = total + tf.cast(extra, losses.dtype)
    denominator = _DENOMINATORS[check_reduction(reduction)](losses, counts)
    denominator = tf.where(denominator > 0, denominator, tf.ones_like(denominator))
    return total / denominator
