"""REINFORCE for the sampler network (Duan et al. 2019, Eq. 6–8, footnote 1),
and the per-tuple scores S(x_s; θ) = L_emb(x_s; θ) of the selected tuples.

The DSN maximises the expected score of its tuples (Eq. 6),

    L_s = −E_{x_s ∼ p(x_s | X; η)} [S(x_s; θ)],

whose gradient is (Eq. 7, 8)  ∇_η E[S] = E[S · ∇_η log p(x_s | X; η)].
On a mini-batch of M sampled tuples with scores S_t, footnote 1 subtracts the
mini-batch mean S̄ ("to provide both positive and negative scores"):

    L_dsn = −1/M Σ_t (S_t − S̄) · log p(x_t | X; η),

with S treated as a constant. Its gradient estimates −∇_η E[S]; because S̄
includes S_t itself its expectation is −(1 − 1/M)·∇_η E[S] (same direction;
``baseline="none"`` gives the plain unbiased estimator).

Scores, one per tuple, are the terms of the loss the embedding trains with,
computed by the loss itself: :meth:`tfdml.losses.TripletLoss.tuple_terms`
(Duan Eq. 2 / FaceNet, or Wu's ℓ2 form, with the loss's distance and margin)
and :meth:`tfdml.losses.NPairLoss.tuple_terms` (Eq. 9 per probe; its ℓ2 term:
:meth:`~tfdml.losses.NPairLoss.regularizer`). No loss formula is written here.
"""

import tensorflow as tf


BASELINES = ("mean", "none")


def reinforce_loss(log_prob, scores, mask=None, baseline="mean"):
    """The DSN's surrogate loss −1/M Σ_t (S_t − S̄)·log p(x_t) (Eq. 8, footnote 1).

    Args:
      log_prob: [M] log p(x_t | X; η) of the sampled tuples (differentiable).
      scores: [M] scores S_t (gradients are stopped).
      mask: optional [M] bool; invalid tuples take no part (neither in S̄ nor in the sum).
      baseline: ``"mean"`` (footnote 1) or ``"none"``.
    """
    if baseline not in BASELINES:
        raise ValueError(f"Unknown baseline {baseline!r}; choose one of {', '.join(BASELINES)}.")
    scores = tf.stop_gradient(tf.cast(scores, log_prob.dtype))
    if mask is None:
        mask = tf.ones_like(scores, dtype=tf.bool)
    weight = tf.cast(mask, log_prob.dtype)
    count = tf.maximum(tf.reduce_sum(weight), 1.0)
    advantage = scores
    if baseline == "mean":
        advantage = scores - tf.reduce_sum(scores * weight) / count
    return -tf.reduce_sum(weight * advantage * log_prob) / count
