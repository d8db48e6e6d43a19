"""Supervised contrastive loss (Khosla et al. 2020, Eq. 2, L^sup_out) and what it shares
with NT-Xent (:mod:`tfdml.losses.nt_xent`): a softmax over every other row of the batch."""

import keras
import tensorflow as tf

from tfdml.losses import base
from tfdml.losses import views

_MASKED = -1e9  # logit of the row itself: finite, so its gradient stays 0 and finite


def contrast_terms(embeddings, positives, temperature):
    """Per-anchor terms of Khosla et al. 2020 Eq. 2 (L^sup_out), and the anchors that have one.

    With z_i = e_i / ‖e_i‖ and A(i) every row but i,

        ℓ_i = −1/|P(i)| Σ_{p∈P(i)} log( exp(z_i·z_p/τ) / Σ_{a∈A(i)} exp(z_i·z_a/τ) )
            = logsumexp_{a∈A(i)}(z_i·z_a/τ) − 1/|P(i)| Σ_{p∈P(i)} z_i·z_p/τ.

    ``positives`` [B, B] bool is P(i) (row i itself is never in it). Returns
    ``(terms [B], has_positive [B] bool)``; an anchor without a positive has term 0.
    Chen et al. 2020 Eq. 1 (NT-Xent) is the case of exactly one positive per anchor.
    """
    z = tf.math.l2_normalize(embeddings, axis=1)
    logits = tf.matmul(z, z, transpose_b=True) / tf.cast(temperature, z.dtype)
    itself = tf.eye(tf.shape(logits)[0], dtype=tf.bool)
    positives = positives & tf.logical_not(itself)
    log_denominator = tf.reduce_logsumexp(tf.where(itself, tf.cast(_MASKED, z.dtype), logits), axis=1)
    count = tf.reduce_sum(tf.cast(positives, z.dtype), axis=1)
    positive_mean = tf.reduce_sum(tf.where(positives, logits, tf.zeros_like(logits)), axis=1) / tf.maximum(count, 1.0)
    has_positive = count > 0
    terms = tf.where(has_positive, log_denominator - positive_mean, tf.zeros_like(count))
    return terms, has_positive


class ContrastOfViews(base.MetricLoss):
    """What :class:`SupConLoss` and :class:`~tfdml.losses.NTXentLoss` share: the
    terms of :func:`contrast_terms` on the cosine similarity scaled by 1/τ, positives
    of equal :meth:`identity`, averaged over the anchors that have a positive
    (``tuple_reduction="mean"``; ``"sum"`` gives the sum over anchors as Khosla Eq. 2
    writes it). Subclasses say which column makes two rows positives."""

    needs_tuples = True  # an anchor's term compares its positives with every other row
    takes_distance = False
    default_tuple_reduction = "mean"
    fixed_arguments = {"distance": "scores the cosine similarity divided by the temperature"}

    def __init__(self, temperature=0.1, **kwargs):
        base.refuse_fixed(type(self).__name__, kwargs, **self.fixed_arguments)
        super().__init__(**kwargs)
        self.temperature = base.check_positive("temperature", temperature)

    def identity(self, targets):
        raise NotImplementedError

    def compute(self, targets, embeddings):
        views.refuse_pair_id(type(self).__name__, targets)
        ids = self.identity(targets)
        positives = tf.equal(ids[:, None], ids[None, :])
        terms, has_positive = contrast_terms(embeddings, positives, self.temperature)
        return self.reduce(terms, tf.cast(has_positive, embeddings.dtype))

    def get_config(self):
        config = super().get_config()
        config.update(temperature=self.temperature)
        return config


@keras.saving.register_keras_serializable(package="tfdml")
class SupConLoss(ContrastOfViews):
    """Supervised contrastive loss, Khosla et al. 2020 Eq. 2 (L^sup_out): for every
    row i of the batch (an anchor), its positives P(i) are the other rows of its class
    (``label``), and

        L^sup_out = Σ_i −1/|P(i)| Σ_{p∈P(i)} log( exp(z_i·z_p/τ) / Σ_{a∈A(i)} exp(z_i·z_a/τ) )

    with z = e/‖e‖ (the loss normalises) and A(i) every row but i. On a two-view batch
    (``pipelines.designs.TwoViewDesign``) the other view of an image is one of its
    positives; on a class-balanced batch (group, m-per-class) SupCon needs no views.

    Reduction: the mean over the anchors with a positive (``tuple_reduction="mean"``,
    as the authors' code averages); ``"sum"`` is Eq. 2's sum. An anchor alone in its
    class adds nothing; a batch of one class has every other row as a positive.

    Args:
      temperature: τ > 0 (the paper's 0.1).
      **kwargs: those of :class:`~tfdml.losses.MetricLoss` except ``distance``.
    """

    def identity(self, targets):
        return targets.label
