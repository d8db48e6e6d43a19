"""Semi-hard negative mining (FaceNet; Wu et al. 2017, §3)."""

import keras
import tensorflow as tf

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
      FaceNet's and TensorFlow's semi-hard triplet loss. The triplet is valid
      whenever the anchor has at least one candidate negative.
    * ``"drop"``: the slot is masked out.

    Returns :class:`~tfdml.samplers.TripletSelection` with T = B·B: slot
    ``a * B + p`` holds (a, p, n*_ap) for every ordered pair; ``mask`` is true
    where (a, p) is a candidate positive pair and a negative was chosen.

    Cost: one row-wise sort and a binary search per (a, p), O(B² log B)
    (no [B, B, B] tensor);
    distances must be finite.
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
        size = tf.shape(dist)[0]
        pos, neg = base.split_candidates(labels, candidates)
        inf = tf.constant(float("inf"), dist.dtype)
        neg_dist = tf.where(neg, dist, inf)
        # Row a: the candidate negatives of a by increasing distance (stable: lower index first),
        # non-negatives (+inf) last.
        order = tf.argsort(neg_dist, axis=1, stable=True)
        sorted_dist = tf.gather(neg_dist, order, batch_dims=1)
        num_neg = tf.reduce_sum(tf.cast(neg, tf.int32), axis=1)
        # first[a, p] = number of negatives of a with D_an <= D_ap = sorted position of the
        # closest negative with D_an > D_ap.
        first = base.count_less_equal(sorted_dist, dist)
        found = first < num_neg[:, None]
        semi_hard = tf.gather(order, tf.minimum(first, size - 1), batch_dims=1)
        if self.fallback == "hardest_inside":
            hardest_inside = tf.argmax(tf.where(neg, dist, -inf), axis=1, output_type=tf.int32)
            negative = tf.where(found, semi_hard, hardest_inside[:, None])
            valid = tf.logical_and(pos, (num_neg > 0)[:, None])
        else:
            negative = semi_hard
            valid = tf.logical_and(pos, found)
        rows = tf.range(size, dtype=tf.int32)
        anchor = tf.repeat(rows, size)
        positive = tf.tile(rows, [size])
        return base.TripletSelection(
            anchor, positive, tf.reshape(negative, [-1]), tf.reshape(valid, [-1])
        )

    def get_config(self):
        return {"fallback": self.fallback}
