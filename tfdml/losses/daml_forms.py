"""The metric objectives J_m of DAML (Duan et al. 2018) in its four forms, each the form's
loss on tuples whose negatives are the generator's synthetic negatives x̃⁻:

* ``"triplet"``, DAML (tri): Σ_t [D²(x_t, x⁺_t) − D²(x_t, x̃⁻_t) + α]_+;
* ``"contrastive"``, DAML (cont): Σ_i D²(x_i, x⁺_i) + Σ_j [α − D²(x_j, x̃⁻_j)]_+, one
  positive pair and one synthetic negative pair per triplet;
* ``"npair"``, DAML (N-pair): Sohn's N-pair term per anchor i over its synthetic negatives,
  log(1 + Σ_{t: anchor i} exp(f_iᵀ x̃⁻_t − f_iᵀ f⁺_t)) (:func:`tfdml.losses.npair.npair_terms`;
  with the ``npair`` sampler, t runs over the triplets (x_i, x⁺_i, x⁺_j), j ≠ i, of an N-pair
  batch); without Sohn's ℓ2 regulariser of the embeddings (:class:`~tfdml.losses.NPairLoss`
  has it);
* ``"lifted"``, DAML (lifted): Song et al.'s lifted structured term per positive pair (i, j),
  [log(Σ_{t: anchor i} e^{α − D(x_i, x̃⁻_t)} + Σ_{t: anchor j} e^{α − D(x_j, x̃⁻_t)}) + D_ij]_+²
  / 2 (:func:`tfdml.losses.pair_weighting.lifted_structured_terms`), D the Euclidean distance,
  over the ordered positive pairs (i, j) of the triplets, each once however many triplets
  hold it; the negatives of i are the synthetic negatives of the triplets anchored at i.

The triplet and contrastive forms are those of the paper (as restated in readers' notes of
it); for the N-pair and lifted forms the paper's own equations were not readable in the
available text: there each is the form's loss with every real negative replaced by its
synthetic negative, the paper's general objective J_m(θ_f; x, x⁺, x̃⁻).

Every form takes the sampler's triplets (x, x⁺, x⁻) as rows of [T, d] tensors with their
batch indices and validity mask (fixed shapes), and returns ``(terms, counts)`` for
:meth:`tfdml.losses.MetricLoss.reduce`: per-triplet terms for the first two, per-anchor
terms [B] for the N-pair form, per-ordered-positive-pair terms [B, B] for the lifted form.
The N-pair and lifted forms group the triplets by anchor through a [B, T] membership matrix.
"""

import tensorflow as tf

from tfdml import distances, primitives
from tfdml.losses import npair
from tfdml.losses import pair_weighting as gpw

def squared_distance(x, y):
    """‖x_t − y_t‖² per row t of two [T, d] tensors (smooth everywhere, also at 0)."""
    return primitives.squared_norms(x - y)


def _by_anchor(values, tuples, batch_size):
    """``(matrix, member)`` [B, T]: ``values`` [T] repeated on every row, and whether triplet
    t is a valid one of anchor b."""
    member = tf.logical_and(tf.equal(tf.range(batch_size)[:, None], tuples.anchor[None, :]),
                            tuples.mask[None, :])
    return tf.broadcast_to(values[None, :], tf.shape(member)), member


def triplet_form(anchor, positive, negative, tuples, margin, **_):
    counts = tf.cast(tuples.mask, anchor.dtype)
    return tf.nn.relu(squared_distance(anchor, positive) - squared_distance(anchor, negative) + margin), counts


def contrastive_form(anchor, positive, negative, tuples, margin, **_):
    counts = tf.cast(tuples.mask, anchor.dtype)
    return squared_distance(anchor, positive) + tf.nn.relu(margin - squared_distance(anchor, negative)), counts


def npair_form(anchor, positive, negative, tuples, batch_size, **_):
    logits = tf.reduce_sum(anchor * negative, axis=1) - tf.reduce_sum(anchor * positive, axis=1)
    matrix, member = _by_anchor(logits, tuples, batch_size)
    terms = npair.npair_terms(matrix, tf.zeros([batch_size], anchor.dtype), member)
    return terms, tf.cast(tf.reduce_any(member, axis=1), anchor.dtype)


def lifted_form(anchor, negative, tuples, margin, batch_size, dist, **_):
    d_an = distances.safe_sqrt(squared_distance(anchor, negative))
    matrix, member = _by_anchor(d_an, tuples, batch_size)
    half = gpw.lifted_negative_logsumexp(matrix, tf.cast(member, anchor.dtype), margin)
    valid = tf.cast(tuples.mask, anchor.dtype)[:, None]
    pairs = tf.matmul(tf.one_hot(tuples.anchor, batch_size, dtype=anchor.dtype) * valid,
                      tf.one_hot(tuples.positive, batch_size, dtype=anchor.dtype), transpose_a=True)
    pos = tf.minimum(pairs, 1.0)  # each ordered positive pair of the triplets once
    return 0.5 * gpw.lifted_structured_terms(dist, pos, half, half), pos


_FORMS = {"triplet": triplet_form, "contrastive": contrastive_form, "npair": npair_form, "lifted": lifted_form}

#: The forms' names (``DAMLLoss(form=...)``; :data:`tfdml.builtin_names.DAML_FORMS` copies them).
FORMS = tuple(_FORMS)


def metric_terms(form, anchor, positive, negative, tuples, margin, batch_size, dist):
    """``(terms, counts)`` of J_m in ``form`` on the triplets ``tuples`` (a
    :class:`tfdml.samplers.base.TripletSelection`) with rows ``anchor``, ``positive``,
    ``negative`` ([T, d]); ``dist`` [B, B] is the batch's Euclidean distance matrix (the lifted
    form's D_ij)."""
    return _FORMS[form](anchor=anchor, positive=positive, negative=negative, tuples=tuples, margin=margin,
                        batch_size=batch_size, dist=dist)
