"""The embedding loss on the tuples a sampler network selects (Duan et al. 2019,
Algorithm 1, lines 7 and 10): which loss each kind of network trains with, the
per-tuple loss terms of a selection with only the selected examples embedded (the
scores S = L_emb of Eq. 2 / Eq. 9), and their reduction to the loss of the
embedding network's update."""

import tensorflow as tf

from tfdml.losses import NPairLoss, TripletLoss, reduce_tuples

#: The loss class each kind of sampler network (:data:`tfdml.dsn.policy.KINDS`) trains with.
LOSS_FOR_KIND = {"triplet": TripletLoss, "npair": NPairLoss}


def kind_for_loss(loss):
    """The sampler-network kind (``"triplet"``, ``"npair"``) that trains with
    ``loss`` (a loss or a loss class), or ``None`` when no DSN supports it."""
    cls = loss if isinstance(loss, type) else type(loss)
    for kind, loss_cls in LOSS_FOR_KIND.items():
        if issubclass(cls, loss_cls):
            return kind
    return None


def tuple_terms(encoder, loss, kind, x, choice, num, training):
    """The per-tuple loss terms of the ``num`` tuples of ``choice`` (a selection of a
    ``kind`` network from the pool ``x``), only the selected examples embedded by
    ``encoder`` (in training mode or not): ``(terms, extra, embeddings)``, ``extra`` the
    N-pair loss's (probe, gallery) embeddings (None for triplets)."""
    if kind == "triplet":
        idx = tf.concat([choice.anchor, choice.positive, choice.negative], axis=0)
        emb = tf.cast(encoder(tf.gather(x, idx), training=training), loss.dtype)
        a, p, n = emb[:num], emb[num : 2 * num], emb[2 * num :]
        return loss.tuple_terms(a, p, n), None, emb
    idx = tf.concat([choice.probe, choice.gallery], axis=0)
    emb = tf.cast(encoder(tf.gather(x, idx), training=training), loss.dtype)
    probe, gallery = emb[:num], emb[num:]
    return loss.tuple_terms(probe, gallery, choice.mask), (probe, gallery), emb


def embedding_loss(loss, kind, terms, mask, extras):
    """L_emb of line 10: the terms of the K·M tuples (``mask``: the valid ones) reduced as
    ``loss`` reduces its tuples, plus, for the N-pair loss, its ℓ2 term on the tuples'
    (probe, gallery) embeddings (``extras``: one pair per mini-batch, from
    :func:`tuple_terms`)."""
    value = reduce_tuples(terms, tf.cast(mask, terms.dtype), loss.tuple_reduction)
    if kind == "npair" and loss.l2_reg:
        probe = tf.concat([extra[0] for extra in extras], axis=0)
        gallery = tf.concat([extra[1] for extra in extras], axis=0)
        value = value + loss.regularizer(probe, gallery, mask)
    return value


def masked_mean(values, mask):
    """The mean of ``values`` over ``mask`` (0 without any), as a tuple loss's "mean"."""
    return reduce_tuples(values, mask, "mean")
