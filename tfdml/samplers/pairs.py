"""Pair samplers: all candidate pairs, or uniform random pairs (Wu et al. 2017, §5.1)."""

import keras
import tensorflow as tf

from tfdml.samplers import base


@keras.saving.register_keras_serializable(package="tfdml")
class AllPairsSampler(base.Sampler):
    """Every candidate pair once (kind ``"pairs"``).

    Returns :class:`~tfdml.samplers.PairSelection` with weight 1 on every
    candidate positive pair (same label) and every candidate negative pair,
    0 elsewhere (and on the diagonal). This is the "all pairs" objective of
    Wu et al. 2017, §3 (sum over all pairs) restricted to the batch.
    """

    kind = "pairs"
    needs_seed = False

    def sample(self, dist, labels, candidates, seed=None, embedding_dim=None):
        pos, neg = base.split_candidates(labels, candidates)
        return base.PairSelection(tf.cast(pos, tf.float32), tf.cast(neg, tf.float32))


@keras.saving.register_keras_serializable(package="tfdml")
class RandomPairSampler(base.Sampler):
    """Uniform random pairs with replacement (Wu et al. 2017, §5.1 "random").

    Wu et al. (§5.1): "By random sampling, we refer to uniform sampling from
    all positive and negative pairs." ``num_pairs`` ordered pairs (i, j) are
    drawn independently and uniformly, with replacement, from all candidate
    pairs (positive and negative alike; (i, j) and (j, i) are two candidates).
    The returned :class:`~tfdml.samplers.PairSelection` holds how many times
    each pair was drawn, so ``sum(pos_weight) + sum(neg_weight) == num_pairs``
    whenever the batch has at least one candidate pair (all zeros otherwise).

    Args:
      num_pairs: number of draws per batch; ``None`` (default) draws B (the anchors).

    Needs ``seed``. Cost: O(B·M + num_pairs) for B anchors and M candidates.
    """

    kind = "pairs"
    needs_seed = True

    def __init__(self, num_pairs=None):
        self.num_pairs = base.check_positive_int(num_pairs, "num_pairs", "RandomPairSampler", allow_none=True)

    def sample(self, dist, labels, candidates, seed=None, embedding_dim=None):
        rows, cols = tf.shape(candidates)[0], tf.shape(candidates)[1]
        cells = rows * cols
        num_pairs = rows if self.num_pairs is None else self.num_pairs
        flat = tf.reshape(candidates, [-1])
        total = tf.reduce_sum(tf.cast(flat, tf.int32))
        draws = base.uniform_int([num_pairs], seed, total)  # rank of the drawn candidate, 0-based
        # Flat positions of the candidates in order: compacted[r] = position of the r-th candidate.
        rank = tf.cumsum(tf.cast(flat, tf.int32), exclusive=True)
        slot = tf.where(flat, rank, cells)  # non-candidates go to a spare last slot
        positions = tf.range(cells, dtype=tf.int32)
        compacted = tf.math.unsorted_segment_max(positions, slot, cells + 1)
        position = tf.gather(compacted, tf.minimum(draws, tf.maximum(total - 1, 0)))
        position = tf.clip_by_value(position, 0, cells - 1)
        ones = tf.fill([num_pairs], tf.cast(total > 0, tf.float32))
        counts = tf.math.unsorted_segment_sum(ones, position, cells)
        counts = tf.reshape(counts, tf.stack([rows, cols]))
        pos, neg = base.split_candidates(labels, candidates)
        zeros = tf.zeros_like(counts)
        return base.PairSelection(tf.where(pos, counts, zeros), tf.where(neg, counts, zeros))

    def get_config(self):
        return {"num_pairs": self.num_pairs}
