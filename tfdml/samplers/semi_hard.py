"""Semi-hard negative mining (FaceNet; Wu et al. 2017, §3)."""

import keras
import tensorflow as tf

from tfdml.kernels import chosen
from tfdml.kernels import semi_hard as _fast
from tfdml.samplers import base

FALLBACKS = ("hardest_inside", "drop")


@keras.saving.register_keras_serializable(package="tfdml")
class SemiHardSampler(base.Sampler):
    """One semi-hard negative per positive pair (Wu et al. 2017, §3, FaceNet rule).

    For every ordered candidate positive pair (a, p) (kind ``"triplets"``):

        n*_ap = argmin_{n : D_an > D_ap} D_an            (Wu et al., §3)

    over the candidate negatives n of anchor a (different label, candidate
    pair). Ties between equally distant negatives go to the lower index.

    When no candidate negative is farther than the positive (every negative
    violates the margin by more than the positive distance), ``fallback``
    decides:

    * ``"hardest_inside"`` (default): take the negative with the largest D_an,
      i.e. the least violating one inside the band; this is the convention of
      FaceNet's and TensorFlow's semi-hard triplet loss (ties: lower index).
      The triplet is valid whenever the anchor has at least one candidate
      negative.
    * ``"drop"``: the slot is masked out.

    Returns :class:`~tfdml.samplers.TripletSelection` with T = B·M (B anchors, M
    candidates; M = B for the batch alone): slot ``a * M + p`` holds (a, p, n*_ap)
    for every ordered pair; ``mask`` is true
    where (a, p) is a candidate positive pair and a negative was chosen.
    Invalid slots hold the anchor's hardest-inside negative (an index in range).

    n*_ap is computed by :func:`semi_hard_negatives`: its reference path is the
    rule above, one anchor at a time; a device may run a fast form with the same
    selection (:data:`tfdml.kernels.CHOICES`, ``"semi_hard"``; on CPU a per-class
    compare path or a row sort, :mod:`tfdml.kernels.semi_hard`). Distances must be
    finite.
    """

    kind = "triplets"
    needs_seed = False

    def __init__(self, fallback="hardest_inside"):
        if fallback not in FALLBACKS:
            raise ValueError(
                f"SemiHardSampler: unknown fallback {fallback!r}; choose one of {', '.join(FALLBACKS)}."
            )
        self.fallback = fallback

    def sample(self, dist, labels, candidates, seed=None, embedding_dim=None):
        size, columns = tf.shape(dist)[0], tf.shape(dist)[1]
        pos, neg = base.split_candidates(labels, candidates)
        semi_hard, found = semi_hard_negatives(dist, labels, pos, neg)
        # The least violating negative (largest D_an, lower index on ties); also fills
        # the invalid slots with an index in range.
        inf = tf.constant(float("inf"), dist.dtype)
        hardest_inside = chosen.first_argmax(tf.where(neg, dist, -inf), axis=1)
        negative = tf.where(found, semi_hard, hardest_inside[:, None])
        if self.fallback == "hardest_inside":
            valid = tf.logical_and(pos, tf.reduce_any(neg, axis=1)[:, None])
        else:
            valid = found
        anchor = tf.repeat(tf.range(size, dtype=tf.int32), columns)
        positive = tf.tile(tf.range(columns, dtype=tf.int32), [size])
        return base.GridTripletSelection(
            anchor, positive, tf.reshape(negative, [-1]), tf.reshape(valid, [-1])
        )

    def get_config(self):
        return {"fallback": self.fallback}


def semi_hard_negatives(dist, labels, pos, neg):
    """``(nearest, found)`` [B, M]: ``found[a, p]`` where ``pos[a, p]`` and some n with
    ``neg[a, n]`` has D_an > D_ap; ``nearest[a, p]`` the n of least such D_an, lowest
    index on ties (meaningful where ``found``). The kernel chooses the form
    (:func:`tfdml.kernels.semi_hard.nearest_beyond`), or runs :func:`_reference`; every
    form gives the same answer."""
    return _fast.nearest_beyond(dist, labels, pos, neg, _reference)


def _reference(dist, pos, neg):
    """The rule, one anchor at a time (an [M, M] comparison of positives by negatives each)."""
    inf = tf.constant(float("inf"), dist.dtype)

    def one_anchor(row):
        d, negative = row  # D_a· and the candidate negatives of anchor a, [B] each
        beyond = tf.logical_and(negative[None, :], d[None, :] > d[:, None])  # [p, n]: D_an > D_ap
        return chosen.first_argmin(tf.where(beyond, d[None, :], inf), axis=1), tf.reduce_any(beyond, axis=1)

    nearest, found = tf.map_fn(one_anchor, (dist, neg), fn_output_signature=(tf.int32, tf.bool))
    return nearest, tf.logical_and(pos, found)
