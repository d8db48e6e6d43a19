"""General pair weighting (Wang et al. 2019, §3): the per-pair terms of the
log-sum-exp family, as pure functions of an anchors × candidates matrix.

Wang et al. (§3, Eq. 1–2) write a pair-based loss L(S) through its gradient:
∂L/∂θ = Σ_ij ∂L/∂S_ij · ∂S_ij/∂θ, so each pair (i, j) is weighted by
w_ij = |∂L/∂S_ij|, a function of its own similarity S_ij and of its
neighbours' (the other pairs of anchor i). A loss of this family is its
weighting; the functions here compute the loss terms whose gradients are
those weights, and :func:`multi_similarity_weights` the closed form of
the MS loss's pair weights w⁺, w⁻ (tested against the gradient of the terms).

Every function takes matrices of shape [B, M]: row i is an anchor of the
batch, column j a candidate (the batch itself today, M = B; a cross-batch
memory later, M = B + memory), never a square matrix with a diagonal.
``pos`` / ``neg`` are float [B, M] *multiplicities* of the positive and
negative pairs (0 = not a pair of the loss, as a sampler's selection or the
candidate masks give them): inside a log-sum-exp a pair of multiplicity c
counts as c copies, Σ_k c_k e^{x_k}.
"""

import tensorflow as tf

#: The value of log Σ over an empty set (instead of −inf): exp of it is 0 in
#: every float dtype, and it keeps values and gradients finite.
EMPTY_LOG = -1e4


def _neutral(x):
    return tf.zeros_like(x)


def weighted_logsumexp(logits, counts, axis=-1, plus_one=False):
    """log(δ + Σ_k c_k exp(x_k)) along ``axis``, δ = 1 with ``plus_one`` else 0.

    ``counts`` c_k ≥ 0 (0 leaves x_k out, whatever its value). An empty sum
    without ``plus_one`` gives :data:`EMPTY_LOG`; with it, log 1 = 0. Stable
    (the largest included logit is factored out) and with finite gradients,
    also for the logits left out.
    """
    counts = tf.cast(counts, logits.dtype)
    present = counts > 0
    floor = tf.constant(EMPTY_LOG, logits.dtype)
    lowest = tf.fill(tf.shape(logits), tf.constant(logits.dtype.min, logits.dtype))
    # The largest *included* logit (0 for an empty set), however low it is.
    top = tf.reduce_max(tf.where(present, logits, lowest), axis=axis, keepdims=True)
    top = tf.where(tf.reduce_any(present, axis=axis, keepdims=True), top, tf.zeros_like(top))
    if plus_one:
        top = tf.maximum(top, tf.zeros_like(top))
    top = tf.stop_gradient(top)  # any constant shift gives the same value and gradient
    shifted = tf.where(present, logits - top, _neutral(logits))
    scaled = tf.where(present, counts * tf.exp(shifted), _neutral(logits))
    total = tf.reduce_sum(scaled, axis=axis, keepdims=True)
    if plus_one:
        # log(1 + Σ) directly when no logit exceeds 0 (exact for a tiny Σ).
        small = tf.equal(top, 0.0)
        plain = tf.math.log1p(tf.where(small, total, tf.zeros_like(total)))
        total = total + tf.exp(-top)
        big = top + tf.math.log(tf.where(small, tf.ones_like(total), total))
        return tf.squeeze(tf.where(small, plain, big), axis=axis)
    nonempty = total > 0
    out = tf.where(nonempty, top + tf.math.log(tf.where(nonempty, total, tf.ones_like(total))),
                   tf.fill(tf.shape(total), floor))
    return tf.squeeze(out, axis=axis)


def anchor_count(counts):
    """[B] float: 1 for an anchor with at least one pair in ``counts`` [B, M], else 0."""
    return tf.cast(tf.reduce_any(counts > 0, axis=1), counts.dtype)


# -- lifted structured (Song et al. 2016, Eq. 4; Hermans et al. 2017) ----------


def lifted_negative_logsumexp(dist, neg, margin):
    """``(lse, has)`` [B]: log Σ_{(i,k) ∈ N} exp(α − D_ik) per anchor i (the negatives'
    half of Song et al. Eq. 4) and whether anchor i has a negative (``lse`` is
    :data:`EMPTY_LOG` where not; emptiness is read from ``has``, never from the value,
    which may be as low for far negatives)."""
    return weighted_logsumexp(margin - dist, neg, axis=1), tf.reduce_any(neg > 0, axis=1)


def lifted_structured_terms(dist, pos, anchor, candidate):
    """[B, M] squared hinges [J_ij]_+² of Song et al. Eq. 4 on the positive pairs:

        J_ij = log( Σ_{(i,k)∈N} e^{α − D_ik} + Σ_{(j,l)∈N} e^{α − D_jl} ) + D_ij

    given the two halves as :func:`lifted_negative_logsumexp` pairs ``(lse, has)``:
    ``anchor`` ([B], of anchor i) and ``candidate`` ([M], of candidate j, from its
    own negatives; M = B: the same pair). Zero where ``pos`` is 0 or neither end
    has a negative (J = −∞).
    """
    shape = tf.shape(dist)
    a = tf.broadcast_to(anchor[0][:, None], shape)
    c = tf.broadcast_to(candidate[0][None, :], shape)
    a_has = tf.broadcast_to(anchor[1][:, None], shape)
    c_has = tf.broadcast_to(candidate[1][None, :], shape)
    both = tf.reduce_logsumexp(tf.stack([a, c]), axis=0)
    lse = tf.where(tf.logical_and(a_has, c_has), both, tf.where(a_has, a, c))
    j = lse + dist
    active = tf.logical_and(tf.logical_and(pos > 0, tf.logical_or(a_has, c_has)), j > 0)
    return tf.where(active, tf.square(tf.where(active, j, _neutral(j))), _neutral(j))


def lifted_generalized_terms(dist, pos, neg, margin):
    """[B] per-anchor terms of Hermans et al. 2017's generalised lifted loss:

        [ log Σ_{p∈P_a} e^{D_ap} + log Σ_{n∈N_a} e^{α − D_an} ]_+

    (a soft maximum over the anchor's positives against a soft minimum over its
    negatives); 0 for an anchor without a positive or without a negative."""
    hardest_pos = weighted_logsumexp(dist, pos, axis=1)
    hardest_neg = weighted_logsumexp(margin - dist, neg, axis=1)
    valid = lifted_anchors(pos, neg) > 0
    value = tf.nn.relu(tf.where(valid, hardest_pos + hardest_neg, _neutral(hardest_pos)))
    return tf.where(valid, value, _neutral(value))


def lifted_anchors(pos, neg):
    """[B] float: anchors with at least one positive and one negative pair."""
    return anchor_count(pos) * anchor_count(neg)


# -- binomial deviance (Yi et al. 2014; Ustinova & Lempitsky 2016 §4) -----------


def binomial_deviance_terms(sim, alpha, beta, cost):
    """``(positive, negative)`` [B, M] per-pair terms ln(1 + e^{−α (s_ij − β) m_ij}):

        m_ij = 1   (positive pair):  ln(1 + e^{−α (s_ij − β)})
        m_ij = −C  (negative pair):  ln(1 + e^{α C (s_ij − β)})

    on cosine similarities ``sim``; the caller picks which pairs count."""
    shifted = sim - beta
    return tf.nn.softplus(-alpha * shifted), tf.nn.softplus(alpha * cost * shifted)


def binomial_deviance_weights(sim, alpha, beta, cost):
    """``(positive, negative)`` [B, M] GPW weights |∂ℓ/∂s_ij| of the pair terms:
    α σ(−α(s − β)) for a positive pair, α C σ(α C (s − β)) for a negative one."""
    shifted = sim - beta
    return alpha * tf.sigmoid(-alpha * shifted), alpha * cost * tf.sigmoid(alpha * cost * shifted)


# -- multi-similarity (Wang et al. 2019: L_MS and its weights w⁺, w⁻) -------------


def multi_similarity_terms(sim, pos, neg, alpha, beta, lam):
    """[B] per-anchor terms of Wang et al.'s L_MS:

        1/α log[1 + Σ_{k∈P_i} e^{−α (S_ik − λ)}] + 1/β log[1 + Σ_{k∈N_i} e^{β (S_ik − λ)}]

    (an empty set gives log 1 = 0)."""
    positive = weighted_logsumexp(-alpha * (sim - lam), pos, axis=1, plus_one=True) / alpha
    negative = weighted_logsumexp(beta * (sim - lam), neg, axis=1, plus_one=True) / beta
    return positive + negative


def multi_similarity_weights(sim, pos, neg, alpha, beta, lam):
    """``(positive, negative)`` [B, M] GPW weights w⁺, w⁻ of Wang et al.'s MS loss:

        w⁺_ij = 1 / (e^{α (S_ij − λ)} + Σ_{k∈P_i} e^{α (S_ij − S_ik)})
        w⁻_ij = 1 / (e^{β (λ − S_ij)} + Σ_{k∈N_i} e^{β (S_ik − S_ij)})

    (multiplicities as copies), i.e. |∂L_i/∂S_ij| of :func:`multi_similarity_terms`
    divided by the pair's own multiplicity; 0 off the pairs."""
    def weights(scaled, counts):
        # 1 / (e^{−x_j} + Σ_k c_k e^{x_k − x_j}) = e^{x_j} / (1 + Σ_k c_k e^{x_k}).
        log_norm = weighted_logsumexp(scaled, counts, axis=1, plus_one=True)
        w = tf.exp(scaled - log_norm[:, None])
        return tf.where(counts > 0, w, _neutral(w))

    return weights(-alpha * (sim - lam), pos), weights(beta * (sim - lam), neg)


# -- circle loss (Sun et al. 2020, Eq. 1 / 6 with the self-paced weights of Eq. 5 / 8) ------


def circle_terms(sim, pos, neg, gamma, m):
    """[B] per-anchor terms of Sun et al.'s Circle loss (Eq. 6, with Eq. 5 and Eq. 8):

        log[1 + Σ_{k∈N_i} Σ_{j∈P_i} e^{γ (α_n^k (S_ik − Δ_n) − α_p^j (S_ij − Δ_p))}]
          = softplus( log Σ_{k∈N_i} e^{γ α_n^k (S_ik − Δ_n)} + log Σ_{j∈P_i} e^{−γ α_p^j (S_ij − Δ_p)} )

    with α_p^j = [1 + m − S_ij]_+, α_n^k = [S_ik + m]_+ (held constant: no gradient
    flows through them), Δ_p = 1 − m, Δ_n = m. 0 for an anchor without a positive
    or without a negative pair (:func:`lifted_anchors`)."""
    fixed = tf.stop_gradient(sim)
    alpha_p = tf.nn.relu(1.0 + m - fixed)
    alpha_n = tf.nn.relu(fixed + m)
    positive = weighted_logsumexp(-gamma * alpha_p * (sim - (1.0 - m)), pos, axis=1)
    negative = weighted_logsumexp(gamma * alpha_n * (sim - m), neg, axis=1)
    valid = lifted_anchors(pos, neg) > 0
    both = tf.where(valid, positive + negative, _neutral(positive))
    return tf.where(valid, tf.nn.softplus(both), _neutral(both))
