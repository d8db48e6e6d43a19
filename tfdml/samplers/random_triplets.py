"""Uniformly drawn triplets: the "random" / "uniform sampling" baseline of Lu et al. 2019
(§4.5) and Duan et al. 2019 (Table 3)."""

import keras
import tensorflow as tf

from tfdml.kernels import chosen
from tfdml.samplers import base


@keras.saving.register_keras_serializable(package="tfdml")
class RandomTripletSampler(base.Sampler):
    """Triplets whose negatives (and, with ``num_triplets``, positive pairs) are drawn
    uniformly at random (kind ``"triplets"``).

    The baseline the sampling papers compare their samplers against: Lu et al. 2019,
    §4.5 ("uniform sampling", the triplet loss's worst baseline in Table 1 / Fig. 4) and
    Duan et al. 2019, Table 3 ("random" triplets, 45.1 R@1 against the learned sampler's
    59.3). Two forms, for the two comparisons:

    * ``num_triplets=None`` (default): **every positive pair, a uniform negative.** For
      every ordered candidate positive pair (a, p), one negative n drawn uniformly from
      anchor a's candidate negatives N_a:

          Pr(n* = n | a, p) = 1 / |N_a|,   n ∈ N_a,

      the rule of :class:`~tfdml.samplers.DistanceWeightedSampler` (Wu et al. 2017, §5:
      "all positive pairs, and sample one negative for each anchor of each positive pair")
      with a flat weight in place of q(d)^-1, so the same triplets per step as the
      semi-hard and distance weighted samplers: their control. Returns a
      :class:`~tfdml.samplers.GridTripletSelection` (T = B·M: slot a·M + p holds
      (a, p, n*)); ``mask`` is true where (a, p) is a candidate positive pair and N_a is
      not empty.
    * ``num_triplets=T``: **T triplets drawn uniformly from all triplets**, independently
      and with replacement: each draw is one of the candidate triplets
      {(a, p, n) : p ∈ P_a, n ∈ N_a} with probability 1 / Σ_a |P_a|·|N_a|. A fixed number
      of tuples per step, as a learned sampler draws (Duan et al.'s K mini-batches).
      Returns a :class:`~tfdml.samplers.TripletSelection` of T slots; ``mask`` is all
      true when the batch holds a candidate triplet, all false otherwise.

    Both are integer draws from stateless philox bits (no float rounding), so a seed
    gives the same triplets with and without ``jit_compile``. Needs ``seed``.
    Cost O(B·M·log M) for B anchors and M candidates.

    Args:
      num_triplets: number of triplets drawn per batch; ``None`` (default) draws one
        negative for each candidate positive pair instead.
    """

    kind = "triplets"
    needs_seed = True

    def __init__(self, num_triplets=None):
        self.num_triplets = base.check_positive_int(
            num_triplets, "num_triplets", "RandomTripletSampler", allow_none=True)

    def sample(self, dist, labels, candidates, seed=None, embedding_dim=None):
        pos, neg = base.split_candidates(labels, candidates)
        negatives = chosen.running_count(tf.cast(neg, tf.int32))  # [B, M]: N_a's members so far
        count = negatives[:, -1]  # |N_a|
        if self.num_triplets is None:
            return self._per_positive_pair(pos, negatives, count, seed)
        return self._from_all_triplets(pos, negatives, count, seed)

    def _per_positive_pair(self, pos, negatives, count, seed):
        size, columns = tf.shape(pos)[0], tf.shape(pos)[1]
        # k-th member of N_a, k uniform on [0, |N_a|): one draw per slot (a, p).
        k = _below(_bits(tf.stack([size, columns]), seed), count[:, None])
        negative = _kth_member(negatives, k)
        valid = tf.logical_and(pos, (count > 0)[:, None])
        return base.GridTripletSelection(
            tf.repeat(tf.range(size, dtype=tf.int32), columns), tf.tile(tf.range(columns, dtype=tf.int32), [size]),
            tf.reshape(tf.where(valid, negative, 0), [-1]), tf.reshape(valid, [-1])
        )

    def _from_all_triplets(self, pos, negatives, count, seed):
        columns = tf.shape(pos)[1]
        # Triplets of slot (a, p): |N_a| if p ∈ P_a. A draw r uniform on [0, total) picks the
        # slot whose cumulative range holds r, and r's offset in that range the negative.
        triplets = tf.where(pos, tf.cast(count, tf.int64)[:, None], tf.constant(0, tf.int64))
        cumulative = tf.reshape(tf.cumsum(tf.reshape(triplets, [-1])), [1, -1])
        total = cumulative[0, -1]
        draw = tf.random.stateless_uniform([self.num_triplets], seed, minval=0, maxval=tf.maximum(total, 1),
                                           dtype=tf.int64, alg="philox")
        slot = tf.minimum(chosen.count_less_equal(cumulative, draw, rows=tf.zeros_like(draw, tf.int32)),
                          tf.size(pos) - 1)
        offset = draw - (tf.gather(cumulative[0], slot) - tf.gather(tf.reshape(triplets, [-1]), slot))
        anchor, positive = slot // columns, slot % columns
        negative = _kth_member(negatives, offset, rows=anchor)
        valid = tf.fill([self.num_triplets], total > 0)
        zero = tf.zeros_like(anchor)
        return base.TripletSelection(
            tf.where(valid, anchor, zero), tf.where(valid, positive, zero), tf.where(valid, negative, zero), valid)

    def get_config(self):
        return {"num_triplets": self.num_triplets}


def _bits(shape, seed):
    """Uniform uint32 philox bits as int64 (identical with and without XLA)."""
    bits = tf.random.stateless_uniform(shape, seed, minval=None, maxval=None, dtype=tf.uint32, alg="philox")
    return tf.cast(bits, tf.int64)


def _below(bits, bound):
    """An integer on [0, bound) from 32 uniform bits: ⌊bits · bound / 2^32⌋ (each value's
    probability within bound / 2^32 of uniform); 0 where bound is 0."""
    bound = tf.cast(bound, tf.int64)
    return tf.bitwise.right_shift(bits * bound, tf.constant(32, tf.int64))


def _kth_member(running, k, rows=None):
    """int32: the column of the k-th (0-based) member of each row's set, from the set's
    [R, N] running count; ``rows`` (the shape of ``k``) names the row of each k."""
    last = tf.shape(running)[1] - 1
    return tf.minimum(chosen.count_less_equal(running, tf.cast(k, running.dtype), rows=rows), last)
