"""Hard-aware cascade mining (Yuan, Yang & Zhang, ICCV 2017, "Hard-Aware Deeply Cascaded
Embedding"): the hardest fraction of the batch's positive and of its negative pairs."""

import math

import keras
import tensorflow as tf

from tfdml import primitives
from tfdml.kernels import chosen
from tfdml.samplers import base


def _check_fraction(value):
    try:
        ok = not isinstance(value, bool) and 0.0 < float(value) <= 1.0 and math.isfinite(float(value))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"HDCSampler: filter_percentage must be a number in (0, 1] (the fraction of the "
                         f"positive and of the negative pairs kept, e.g. 0.5), got {value!r}.")
    return float(value)


def hardest_fraction(key, mask, fraction):
    """[B, M] bool: of the ``mask`` entries, the ceil(``fraction`` · n) with the smallest
    ``key`` over the whole matrix (n = the number of ``mask`` entries); equal keys: the lower
    row-major index first. ``key`` is a float [B, M]; entries outside ``mask`` are never kept."""
    shape = tf.shape(key)
    flat_key = tf.where(mask, key, tf.constant(float("inf"), key.dtype))
    flat_key = tf.reshape(flat_key, [1, -1])
    flat_mask = tf.reshape(mask, [1, -1])
    # Mask entries first (``first``), by key, ties by flat index: the order of the whole matrix.
    order = chosen.stable_order(flat_key, first=flat_mask)
    rank = primitives.invert_permutation_rows(order)  # rank[0, i]: position of entry i
    count = tf.reduce_sum(tf.cast(mask, tf.float64))
    keep = tf.cast(tf.math.ceil(tf.constant(fraction, tf.float64) * count), tf.int32)
    return tf.reshape(tf.logical_and(flat_mask, rank < keep), shape)


@keras.saving.register_keras_serializable(package="tfdml")
class HDCSampler(base.Sampler):
    """The hard pairs of one level of the HDC cascade (kind ``"pairs"``).

    Yuan, Yang & Zhang (ICCV 2017), §3: each level of the cascade passes on the pairs it finds
    hard, the hardest positive pairs (the farthest) and the hardest negative pairs (the
    closest), a fixed share of each in the mini-batch. With n₊ candidate positive pairs and n₋
    candidate negative pairs (ordered pairs (i, j), i ≠ j, of the [B, M] candidate mask):

        positives kept: the ceil(f · n₊) with the LARGEST D_ij,
        negatives kept: the ceil(f · n₋) with the SMALLEST D_ij,

    ranked over the whole batch, not per anchor (pytorch-metric-learning's ``HDCMiner``, whose
    ``filter_percentage`` and default this is). Equal distances: the pair of lower row-major
    index (i · M + j) first, so the selection is deterministic; the two orders (i, j) and
    (j, i) of a symmetric distance are separate pairs and can be split by the cut. No
    candidate pair of a sign: nothing of that sign. The paper's equations for the
    selection were not read (the rule here is the text's and that miner's); the paper's
    selection ranks by the pair's loss, which for the contrastive loss of a positive pair
    grows with D and of a negative pair falls with D, as here (a negative beyond the margin,
    of loss 0, is kept only when fewer than ceil(f · n₋) negatives are inside it).

    A cascade (:class:`tfdml.losses.HDCLoss`) calls it level after level, each level's
    candidates being the pairs the previous level kept. Returns a
    :class:`~tfdml.samplers.PairSelection` of multiplicities 0 / 1, which every pair loss and
    every loss taking pairs composes with. Deterministic (no seed).

    Args:
      filter_percentage: f in (0, 1], the fraction of the positive and of the negative pairs
        kept.
    """

    kind = "pairs"
    needs_seed = False

    def __init__(self, filter_percentage=0.5):
        self.filter_percentage = _check_fraction(filter_percentage)

    def sample(self, dist, labels, candidates, seed=None, embedding_dim=None):
        pos, neg = base.split_candidates(labels, candidates)
        keep_pos = hardest_fraction(-dist, pos, self.filter_percentage)
        keep_neg = hardest_fraction(dist, neg, self.filter_percentage)
        return base.PairSelection(tf.cast(keep_pos, tf.float32), tf.cast(keep_neg, tf.float32))

    def get_config(self):
        return {"filter_percentage": self.filter_percentage}
