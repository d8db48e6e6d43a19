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

    Cost: one stable row-wise sort of the distances (negatives ranked before
    other columns at equal distance) and a cumulative count, O(B² log B)
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
        is_neg = tf.cast(neg, tf.int32)
        num_neg = tf.reduce_sum(is_neg, axis=1)
        # 1. Stable partition of each row: negatives first, then the other columns, each in
        #    index order. dest[a, j] = position of column j; part[a, q] = column at position q.
        dest = tf.where(
            neg,
            tf.cumsum(is_neg, axis=1, exclusive=True),
            num_neg[:, None] + tf.cumsum(1 - is_neg, axis=1, exclusive=True),
        )
        part = base.invert_permutation_rows(dest)
        # 2. One stable sort of the whole row by distance: ties keep the partition order, so
        #    columns are ordered by (D_aj, negatives first, index).
        order = base.gather_rows(part, tf.argsort(base.gather_rows(dist, part), axis=1, stable=True))
        # 3. At the sorted position of each column, the number of negatives at or before it:
        #    for a positive p this is |{n : D_an <= D_ap}|, the rank of n*_ap among the negatives.
        sorted_neg = base.gather_rows(neg, order)
        below = tf.cumsum(tf.cast(sorted_neg, tf.int32), axis=1)
        # 4. The negatives in increasing distance: by_rank[a, t] = column of the t-th negative.
        slot = tf.where(sorted_neg, below - 1, size)  # non-negatives go to a spare slot
        flat_slot = tf.reshape(slot + (tf.range(size) * (size + 1))[:, None], [-1])
        by_rank = tf.math.unsorted_segment_max(tf.reshape(order, [-1]), flat_slot, size * (size + 1))
        by_rank = tf.reshape(by_rank, tf.stack([size, size + 1]))
        # 5. Back to columns: first[a, p] = rank of the first negative beyond D_ap.
        first = base.gather_rows(below, base.invert_permutation_rows(order))
        found = first < num_neg[:, None]
        semi_hard = base.gather_rows(by_rank, tf.minimum(first, size - 1))
        # The least violating negative (largest D_an); also keeps dropped slots in range.
        hardest_inside = tf.argmax(tf.where(neg, dist, -inf), axis=1, output_type=tf.int32)
        negative = tf.where(found, semi_hard, hardest_inside[:, None])
        if self.fallback == "hardest_inside":
            valid = tf.logical_and(pos, (num_neg > 0)[:, None])
        else:
            valid = tf.logical_and(pos, found)
        rows = tf.range(size, dtype=tf.int32)
        anchor = tf.repeat(rows, size)
        positive = tf.tile(rows, [size])
        return base.TripletSelection(
            anchor, positive, tf.reshape(negative, [-1]), tf.reshape(valid, [-1])
        )

    def get_config(self):
        return {"fallback": self.fallback}
