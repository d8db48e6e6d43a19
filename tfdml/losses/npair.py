"""N-pair loss (Sohn 2016; Duan et al. 2019 Eq. 9) with Sohn's ℓ2 embedding regulariser."""

import keras
import tensorflow as tf

from tfdml.losses import arguments, base
from tfdml.masks import npair_structure


def npair_terms(sim, own, negatives):
    """Per-probe N-pair terms log(1 + Σ_{j ∈ negatives_i} exp(sim_ij − own_i)) (Duan Eq. 9):
    ``sim`` [P, G] = f_iᵀ f_j⁺, ``own`` [P] = f_iᵀ f_i⁺, ``negatives`` [P, G] bool."""
    logits = tf.where(negatives, sim - own[:, None], tf.fill(tf.shape(sim), tf.constant(-1e30, sim.dtype)))
    logits = tf.concat([tf.zeros_like(own)[:, None], logits], axis=1)
    return tf.reduce_logsumexp(logits, axis=1)


def npair_l2(probe_sq, gallery_sq, weight):
    """Sohn's ℓ2 term before its weight: Σ_i w_i (‖f_i‖² + ‖f_i⁺‖²) / (2 max(1, Σ_i w_i))."""
    return tf.reduce_sum(weight * (probe_sq + gallery_sq)) / (2.0 * tf.maximum(tf.reduce_sum(weight), 1.0))


@keras.saving.register_keras_serializable(package="tfdml")
class NPairLoss(base.MetricLoss):
    """Duan et al. 2019 Eq. 9 (Sohn's N-pair loss):

        L = 1/N Σ_i log(1 + Σ_{j≠i} exp(f_iᵀ f_j⁺ − f_iᵀ f_i⁺))
            + l2_reg · 1/(2N) Σ_i (‖f_i‖² + ‖f_i⁺‖²)

    over N (probe f_i, gallery f_i⁺) pairs of N distinct classes, with Sohn's
    ℓ2 regulariser on the embeddings of the pairs (similarities are plain dot
    products, so embeddings should not be unit-normalised).

    Pairs from a batch of labels (fixed shapes, see :func:`tfdml.masks.npair_structure`):
    within each class, in batch order, examples 1 and 2 are a pair, 3 and 4 the
    next, ...; the k-th pairs of all classes form one N-pair batch, so an
    m-per-class batch (m ≥ 2 even, e.g. 64 classes × 4) holds m/2 N-pair
    batches of N = #classes, and the loss is the mean over all their probes.
    With a ``pair_id`` column, the two examples sharing a ``pair_id`` and a
    label are the pair (p-random positive pairs) and all such pairs form one
    N-pair batch. A class with one example contributes nothing; a batch
    without pairs has loss 0.

    Reduction: ``tuple_reduction="mean"`` over probes (1/N of Eq. 9).

    No ``importance`` argument. Hong et al.'s weights P_U/Q make the expected
    mini-batch loss equal a sum of fixed per-tuple terms over the training set
    (pairs, Eq. 23; triplets, :mod:`tfdml.importance`). A probe's N-pair term
    is a log-sum-exp over the negatives that share its batch: its value
    depends on which other classes the design drew, so there is no per-tuple
    term whose design probability could be corrected, and the "loss over all
    N-pair tuples of the training set" that such weights would target is not
    defined by Sohn or Duan et al. (the N-pair tuple is made by the batch).
    Configs refuse ``importance`` for ``npair`` (tested).

    Args:
      l2_reg: weight of the ℓ2 regulariser (Sohn uses 0.002).
      **kwargs: the base arguments of :class:`~tfdml.losses.base.MetricLoss`
        (``tuple_reduction``, ``name``, ...), except ``distance``.
    """

    needs_tuples = False  # p-random positive pairs form one N-pair batch (see above)
    takes_distance = False
    default_tuple_reduction = "mean"
    fixed_arguments = {"distance": "scores dot products of the embeddings (Sohn 2016; Duan et al. Eq. 9)"}

    def __init__(self, l2_reg=0.002, **kwargs):
        arguments.refuse_fixed("NPairLoss", kwargs, **self.fixed_arguments)
        super().__init__(**kwargs)
        self.l2_reg = arguments.check_positive("l2_reg", l2_reg, allow_zero=True)

    def compute(self, targets, embeddings):
        partner, negatives, is_probe = npair_structure(targets.label, targets.pair_id)
        dtype = embeddings.dtype
        sim = tf.matmul(embeddings, embeddings, transpose_b=True)
        own = tf.reduce_sum(tf.where(partner, sim, tf.zeros_like(sim)), axis=1)  # f_iᵀ f_i⁺
        per_probe = npair_terms(sim, own, negatives)  # log(1 + Σ exp(...))
        counts = tf.cast(is_probe, dtype)
        loss = self.reduce(per_probe, counts)
        if self.l2_reg:
            sq_norm = tf.reduce_sum(tf.square(embeddings), axis=1)
            gallery_sq = tf.reduce_sum(tf.cast(partner, dtype) * sq_norm[None, :], axis=1)
            loss = loss + self.l2_reg * npair_l2(sq_norm, gallery_sq, counts)
        return loss

    def tuple_terms(self, probe, gallery, mask=None):
        """Per-probe terms [N] of Eq. 9 for N (probe, gallery) pairs given as
        embeddings [N, d] (pair i: distinct classes); ``mask`` [N] marks valid
        pairs (an invalid gallery is no negative). The learned sampler
        (:mod:`tfdml.dsn`) scores its tuples with it."""
        n = tf.shape(probe)[0]
        if mask is None:
            mask = tf.ones([n], tf.bool)
        sim = tf.matmul(probe, gallery, transpose_b=True)  # f_iᵀ f_j⁺
        negatives = mask[None, :] & tf.logical_not(tf.eye(n, dtype=tf.bool))
        return npair_terms(sim, tf.linalg.diag_part(sim), negatives)

    def regularizer(self, probe, gallery, mask=None):
        """``l2_reg`` times Sohn's ℓ2 term over the valid (probe, gallery) pairs."""
        probe_sq = tf.reduce_sum(tf.square(probe), axis=1)
        gallery_sq = tf.reduce_sum(tf.square(gallery), axis=1)
        weight = tf.ones_like(probe_sq) if mask is None else tf.cast(mask, probe_sq.dtype)
        return self.l2_reg * npair_l2(probe_sq, gallery_sq, weight)

    def get_config(self):
        config = super().get_config()
        config.update(l2_reg=self.l2_reg)
        return config
