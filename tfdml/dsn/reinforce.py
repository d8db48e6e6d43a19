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

Scores, one per tuple (pure functions of the embeddings of the selected
examples; the losses of :mod:`tfdml.losses` return the reduced batch loss, so
the per-tuple terms they average are written here):

* :func:`triplet_terms`: Duan Eq. 2 / FaceNet, [D_ap² − D_an² + α]_+ (or the
  ℓ2 form (D_ap − D_an + α)_+ of Wu et al. §4) — the term of
  :class:`tfdml.losses.TripletLoss`.
* :func:`npair_terms`: Duan Eq. 9 per probe, log(1 + Σ_{j≠i} exp(f_iᵀf_j⁺ −
  f_iᵀf_i⁺)) — the term of :class:`tfdml.losses.NPairLoss`; its ℓ2
  regulariser is :func:`npair_regularizer`.
"""

import tensorflow as tf

from tfdml.losses import base as losses_base
from tfdml.losses.triplet import gather_pairs

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


def triplet_terms(anchor, positive, negative, margin=0.2, squared=True, distance="euclidean"):
    """Per-triplet loss [M] from the embeddings [M, d] of anchors, positives, negatives.

    squared=True (Duan Eq. 2, FaceNet): [D_ap² − D_an² + α]_+; squared=False
    (Wu et al. §4): (D_ap − D_an + α)_+. ``distance`` names a
    :mod:`tfdml.distances` function (a similarity s is used as 1 − s, as in
    :class:`tfdml.losses.TripletLoss`).
    """
    num = tf.shape(anchor)[0]
    dist = losses_base.distance_matrix(tf.concat([anchor, positive, negative], axis=0), distance)
    values = tf.square(dist) if squared else dist
    rows = tf.range(num)
    d_ap = gather_pairs(values, rows, rows + num)
    d_an = gather_pairs(values, rows, rows + 2 * num)
    return tf.nn.relu(d_ap - d_an + margin)


def npair_terms(probe, gallery, mask=None):
    """Per-probe N-pair loss [N] (Duan Eq. 9): log(1 + Σ_{j≠i, valid} exp(f_iᵀf_j⁺ − f_iᵀf_i⁺)).

    ``probe`` and ``gallery`` are [N, d] (row i: x_i and x_i⁺, distinct
    classes); ``mask`` [N] marks valid pairs (invalid galleries are no negative).
    """
    n = tf.shape(probe)[0]
    if mask is None:
        mask = tf.ones([n], tf.bool)
    sim = tf.matmul(probe, gallery, transpose_b=True)  # f_iᵀ f_j⁺
    own = tf.linalg.diag_part(sim)
    negatives = mask[None, :] & tf.logical_not(tf.eye(n, dtype=tf.bool))
    logits = tf.where(negatives, sim - own[:, None], tf.cast(-1e30, sim.dtype))
    logits = tf.concat([tf.zeros([n, 1], sim.dtype), logits], axis=1)
    return tf.reduce_logsumexp(logits, axis=1)


def npair_regularizer(probe, gallery, mask=None):
    """Sohn's ℓ2 term of :class:`tfdml.losses.NPairLoss` before its weight:
    1/(2N) Σ_i (‖f_i‖² + ‖f_i⁺‖²) over the valid pairs."""
    sq = tf.reduce_sum(tf.square(probe), axis=1) + tf.reduce_sum(tf.square(gallery), axis=1)
    if mask is None:
        mask = tf.ones_like(sq, dtype=tf.bool)
    weight = tf.cast(mask, sq.dtype)
    return tf.reduce_sum(weight * sq) / (2.0 * tf.maximum(tf.reduce_sum(weight), 1.0))
