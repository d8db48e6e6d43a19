"""Pair-margin mining: the pairs on the wrong side of their margins (pytorch-metric-learning's
PairMarginMiner)."""

import math

import keras
import tensorflow as tf

from tfdml.samplers import base


def _check_margin(name, value):
    try:
        ok = not isinstance(value, bool) and math.isfinite(float(value))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"PairMarginSampler: {name} must be a finite number, got {value!r}.")
    return float(value)


@keras.saving.register_keras_serializable(package="tfdml")
class PairMarginSampler(base.Sampler):
    """The candidate pairs that violate a margin (kind ``"pairs"``):

        positive (i, j) kept  ⇔  D_ij > pos_margin,
        negative (i, k) kept  ⇔  D_ik < neg_margin,

    on the distance matrix the sampler receives (larger = farther; a cosine similarity s
    arrives as 1 − s, so the margins are in units of 1 − s, where pytorch-metric-learning's
    ``PairMarginMiner`` with a similarity compares s itself: its margins m correspond to
    1 − m here). The defaults are that miner's, on its default Euclidean distance. Returns
    a :class:`~tfdml.samplers.PairSelection` of multiplicities 0 / 1; each pair is judged
    on its own, so the selection composes with every pair loss and with isolated pairs
    (the p-random design). Deterministic (no seed).

    Args:
      pos_margin: positive pairs farther than this are kept.
      neg_margin: negative pairs closer than this are kept.
    """

    kind = "pairs"
    needs_seed = False

    def __init__(self, pos_margin=0.2, neg_margin=0.8):
        self.pos_margin = _check_margin("pos_margin", pos_margin)
        self.neg_margin = _check_margin("neg_margin", neg_margin)

    def sample(self, dist, labels, candidates, seed=None, embedding_dim=None):
        pos, neg = base.split_candidates(labels, candidates)
        keep_pos = tf.logical_and(pos, dist > tf.constant(self.pos_margin, dist.dtype))
        keep_neg = tf.logical_and(neg, dist < tf.constant(self.neg_margin, dist.dtype))
        return base.PairSelection(tf.cast(keep_pos, tf.float32), tf.cast(keep_neg, tf.float32))

    def get_config(self):
        return {"pos_margin": self.pos_margin, "neg_margin": self.neg_margin}
