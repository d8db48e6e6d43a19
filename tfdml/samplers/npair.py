"""N-pair sampling: the triplets of an N-pair batch (Sohn 2016's batch construction, as a
sampler for triplet losses in Duan et al. 2019, Table 3)."""

import keras
import tensorflow as tf

from tfdml import input_checks, masks
from tfdml.kernels import chosen
from tfdml.samplers import base

#: What :class:`NPairSampler` needs of the batch's labels, and how to get it.
REQUIREMENT = "must hold exactly two examples of each class (an N-pair batch)"
FIX = ("Feed N-pair batches, two examples of each of N classes: pipelines.designs.MPerClassDesign(m=2, "
       "classes_per_batch=N) (in a config, the m_per_class design with m: 2), or use another sampler.")


def npair_rows_valid(labels):
    """[B] bool: example i's label occurs exactly twice among the ``labels`` of the batch."""
    labels = tf.reshape(labels, [-1])
    return tf.equal(tf.reduce_sum(tf.cast(masks.same_label(labels), tf.int32), axis=1), 2)


@keras.saving.register_keras_serializable(package="tfdml")
class NPairSampler(base.Sampler):
    """The triplets of an N-pair batch (kind ``"triplets"``).

    Sohn 2016 builds a batch of N pairs (x_i, x_i⁺) of N distinct classes; its N-pair
    loss (Duan et al. 2019, Eq. 9) compares each x_i with its x_i⁺ and with the N − 1
    other classes' x_j⁺. As a sampler ("N-pair sampling", Duan et al. Table 3) the same
    batch gives the N (N − 1) triplets

        (x_i, x_i⁺, x_j⁺),   j ≠ i,

    for any triplet (or, through :func:`tfdml.losses.triplets_to_pairs`, pair) loss. In
    batch order, the first example of a class is its anchor x_i and the second its
    positive x_i⁺ (:func:`tfdml.masks.npair_structure`).

    The batch must hold exactly two examples of each class: the sampler has no rule for
    other batches. :meth:`input_checks` states this as a check of the ``label`` column,
    which the loss applies (:meth:`tfdml.losses.MetricLoss.input_checks`): eagerly an
    :class:`tfdml.errors.InvalidInputError` naming the fix, in a graph an assert, under
    XLA a NaN loss and the error from :class:`tfdml.models.EmbeddingModel` after the
    step. Called on its own, the sampler raises eagerly and otherwise selects nothing from
    such a batch. A batch of one class (N = 1) is an N-pair batch without negatives: no
    triplet.

    Returns :class:`~tfdml.samplers.TripletSelection` with T = B² (slot a·B + n holds
    anchor a, its positive, and the candidate negative n); ``mask`` is true where a is an
    anchor, n another class's positive, and (a, positive), (a, n) candidate pairs. Only
    the batch's own columns are used (a cross-batch memory's rows are never chosen).
    Deterministic (no seed).
    """

    kind = "triplets"
    needs_seed = False
    #: The examples of each class its rule needs in a batch (configs check a design's m).
    examples_per_class = 2

    def input_checks(self):
        """The check of the ``label`` column: each class twice in the batch."""
        return [input_checks.InputCheck("label", REQUIREMENT, FIX, npair_rows_valid, 0)]

    def sample(self, dist, labels, candidates, seed=None, embedding_dim=None):
        size = tf.shape(dist)[0]
        batch_labels = labels[:size]
        rows_valid = npair_rows_valid(batch_labels)
        if tf.executing_eagerly() and not bool(tf.reduce_all(rows_valid)):
            raise self.input_checks()[0].error(
                type(self).__name__, int(tf.reduce_sum(tf.cast(~rows_valid, tf.int32))),
                seen=tf.boolean_mask(batch_labels, ~rows_valid).numpy())
        own = candidates[:, :size]
        partner, negatives, _ = masks.npair_structure(batch_labels)
        partner = tf.logical_and(partner, own)
        positive = chosen.first_argmax(tf.cast(partner, dist.dtype), axis=1)
        valid = negatives & own & tf.reduce_any(partner, axis=1)[:, None] & tf.reduce_all(rows_valid)
        anchor = tf.repeat(tf.range(size, dtype=tf.int32), size)
        return base.TripletSelection(
            anchor,
            tf.repeat(positive, size),
            tf.tile(tf.range(size, dtype=tf.int32), [size]),
            tf.reshape(valid, [-1]),
        )
