"""Triplet loss, ℓ2² (FaceNet; Wu et al. 2017 §3) and ℓ2 (Wu et al. 2017 §4)."""

import keras
import tensorflow as tf

from tfdml.losses import arguments, base, batch


def gather_pairs(matrix, rows, cols):
    """``matrix[rows[t], cols[t]]`` for every t.

    A gather from the flattened matrix: the same values as ``tf.gather_nd``, and
    the same gradient bit for bit (contributions summed in slot order), but on
    CPU its gradient (a segment sum) is faster than gather_nd's scatter in
    graph mode (``benchmarks/bench_semi_hard.py``; RESULTS, "Semi-hard sampler").
    """
    n = tf.shape(matrix)[1]
    return tf.gather(tf.reshape(matrix, [-1]), tf.cast(rows, tf.int32) * n + tf.cast(cols, tf.int32))


def anchor_positive(matrix, selection):
    """``matrix[anchor_t, positive_t]`` for every slot t of a triplet selection.

    For a :class:`~tfdml.samplers.base.GridTripletSelection` (slot a·B + p = pair
    (a, p)) that is the flattened matrix itself: no gather, and a dense gradient
    instead of a B² scatter (under XLA, where the selection keeps its B² slots)."""
    if isinstance(selection, batch.samplers_module().GridTripletSelection):
        return tf.reshape(matrix, [-1])
    return gather_pairs(matrix, selection.anchor, selection.positive)


def triplet_terms(d_ap, d_an, margin):
    """The triplet term ``[d_ap − d_an + α]_+`` per triplet (FaceNet, Duan Eq. 2, Wu §3 / §4):
    ``d`` is D² for the ℓ2² form and D for the ℓ2 form. Used by :class:`TripletLoss` and,
    through :meth:`TripletLoss.tuple_terms`, by the learned sampler's score."""
    return tf.nn.relu(d_ap - d_an + margin)


@keras.saving.register_keras_serializable(package="tfdml")
class TripletLoss(base.MetricLoss):
    """Triplet loss on the sampler's triplets (a, p, n):

    squared=True  (FaceNet, Wu et al. 2017 §3):  ℓ = [D_ap² − D_an² + α]_+
    squared=False (Wu et al. 2017 §4, ℓ2):       ℓ = (D_ap − D_an + α)_+

    Samplers: ``"semi_hard"`` (default; FaceNet's n* = argmin_{n: D_an > D_ap}
    D_an for every positive pair (a, p)), ``"hard"`` or
    ``"distance_weighted"`` (Wu et al. §4). The sampler sees D (not D²).

    Reduction (``tuple_reduction="mean"``): the mean over the selected triplets,
    1/|T| Σ_T ℓ (Hong et al. Eq. 1); "mean_active" averages over the triplets
    with non-zero loss instead.

    Args:
      margin: α > 0 (0.2 in FaceNet and Wu et al.).
      squared: ℓ2² (True) or ℓ2 (False) form.
      distance: pairwise distance D (default euclidean).
      sampler: a triplet sampler (name or object).
      seed: seed of a random sampler's stream.
      importance: weight each selected triplet by W_apn = P_U/Q of the batch
        design (group, m-per-class: the ``w_triplet`` column), derived in
        :mod:`tfdml.importance` (not in the papers). Over all triplets of a
        batch the mean is then unbiased for the mean over all triplets of the
        training split; with semi-hard or distance weighted sampling the
        weights correct the design, not the sampler's choice.
    """

    sampler_kinds = ("triplets",)
    memory_refusal = None  # pair / triplet terms of the [B, M] matrix: a memory adds candidates
    sampler_required = True
    needs_tuples = True
    default_tuple_reduction = "mean"
    supports_importance = True
    importance_columns = ("class_size", "w_triplet")  # W_apn (tfdml.importance.triplet_weights)

    def __init__(self, margin=0.2, squared=True, sampler="semi_hard", **kwargs):
        super().__init__(sampler=sampler, **kwargs)
        self.margin = arguments.check_positive("margin", margin)
        self.squared = bool(squared)

    def compute(self, targets, embeddings, candidates=None):
        dist = self.distances(embeddings, candidates)
        selection = self.sample(dist, targets, embeddings, candidates)
        values = tf.square(dist) if self.squared else dist

        def on(selection):
            d_ap = anchor_positive(values, selection)
            d_an = gather_pairs(values, selection.anchor, selection.negative)
            losses = triplet_terms(d_ap, d_an, self.margin)
            weights = self.triplet_importance_weights(targets, selection, dist.dtype)
            return self.reduce(losses, tf.cast(selection.mask, dist.dtype), weights=weights)

        return self.over_triplets(selection, on)

    def tuple_terms(self, anchor, positive, negative):
        """Per-triplet terms [M] of this loss from the embeddings [M, d] of M triplets
        (row t: (anchor_t, positive_t, negative_t)): this loss's distance, form and
        margin. The learned sampler (:mod:`tfdml.dsn`) scores its tuples with it."""
        num = tf.shape(anchor)[0]
        dist = self.distances(tf.concat([anchor, positive, negative], axis=0))
        values = tf.square(dist) if self.squared else dist
        rows = tf.range(num)
        return triplet_terms(gather_pairs(values, rows, rows + num),
                             gather_pairs(values, rows, rows + 2 * num), self.margin)

    def get_config(self):
        config = super().get_config()
        config.update(margin=self.margin, squared=self.squared)
        return config
