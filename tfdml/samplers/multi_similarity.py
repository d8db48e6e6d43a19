"""Multi-similarity pair mining (Wang et al. 2019: the hard-pair mining of the MS loss)."""

import keras
import tensorflow as tf

from tfdml.samplers import base


@keras.saving.register_keras_serializable(package="tfdml")
class MultiSimilaritySampler(base.Sampler):
    """Hard pairs of each anchor by relative similarity (kind ``"pairs"``).

    Wang et al. 2019 (the mining step of the MS loss), on similarities S: a negative pair (i, k) is
    kept when S_ik > min_{y_j = y_i} S_ij − ε (harder than the anchor's
    hardest positive, up to ε), a positive pair (i, j) when
    S_ij < max_{y_k ≠ y_i} S_ik + ε (harder than its hardest negative).
    On the distance matrix a sampler receives (larger = farther; a cosine
    similarity s arrives as 1 − s, so this is the same rule for cosine):

        negative (i, k) kept  ⇔  D_ik < max_j D_ij + ε   (j: candidate positives of i)
        positive (i, j) kept  ⇔  D_ij > min_k D_ik − ε   (k: candidate negatives of i)

    Both thresholds use all candidate pairs of the anchor. An anchor without a
    candidate positive keeps no negative, one without a candidate negative no
    positive. Returns a :class:`~tfdml.samplers.PairSelection` of
    multiplicities 0 / 1. Deterministic (no seed).

    Args:
      epsilon: ε ≥ 0 in the units of the distance (Wang et al.: 0.1 on cosine).
    """

    kind = "pairs"
    needs_seed = False
    #: Both rules compare an anchor's positives with its negatives: isolated pairs
    #: (the p-random design) give it nothing to select.
    needs_tuples = True

    def __init__(self, epsilon=0.1):
        try:
            ok = float(epsilon) >= 0 and not isinstance(epsilon, bool)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"MultiSimilaritySampler: epsilon must be a number >= 0, got {epsilon!r}.")
        self.epsilon = float(epsilon)

    def sample(self, dist, labels, candidates, seed=None, embedding_dim=None):
        pos, neg = base.split_candidates(labels, candidates)
        inf = tf.constant(float("inf"), dist.dtype)
        eps = tf.constant(self.epsilon, dist.dtype)
        hardest_positive = tf.reduce_max(tf.where(pos, dist, -inf), axis=1, keepdims=True)
        hardest_negative = tf.reduce_min(tf.where(neg, dist, inf), axis=1, keepdims=True)
        keep_neg = tf.logical_and(neg, dist < hardest_positive + eps)
        keep_pos = tf.logical_and(pos, dist > hardest_negative - eps)
        return base.PairSelection(tf.cast(keep_pos, tf.float32), tf.cast(keep_neg, tf.float32))

    def get_config(self):
        return {"epsilon": self.epsilon}
