"""Misplaced sets P and N around the top-k boundary (Lu et al. 2019, §3.3)."""

import keras
import tensorflow as tf

from tfdml import primitives
from tfdml.kernels import chosen
from tfdml.kernels import top_k as _fast
from tfdml.samplers import base


@keras.saving.register_keras_serializable(package="tfdml")
class TopKMisplacedSampler(base.Sampler):
    """Lu et al. 2019, §3.3: the misplaced positive set P and negative set N per query.

    **Takes SCORES, not distances**: ``dist`` must be the large-margin score
    matrix ŝ = s + γ(1 − y) of Lu et al. Eq. 4 (larger = closer; s is e.g. the
    cosine similarity of :func:`tfdml.distances.cosine_similarity`, and the
    loss adds the margin γ to the negative pairs before calling the sampler).

    Every example a takes its turn as the query (Algorithm 1); its candidate
    set C is the candidate columns of row a, y_i = 1 for candidates of a's
    class, n_+ = Σ y_i, and K = the top-k candidates by ŝ (all of C when C has
    fewer than k members). Then (kind ``"sets"``):

    * Case 1, n_+ < k:
      P = {z_i ∈ C \\ K : y_i = 1}                                     (Eq. 6)
      N = {z_i ∈ K : y_i = 0, ŝ_i < ŝ⁻_[k−n_+]}                          (Eq. 7)
      i.e. the negatives in K ranked after the first k − n_+ negatives.
    * Case 2, n_+ ≥ k:
      N = {z_i ∈ K : y_i = 0}                                         (Eq. 9)
      P = {z_i ∈ C \\ K : y_i = 1, ŝ_i ≥ ŝ⁺_[k]}                          (Eq. 10)
      i.e. the positives outside K among the k best-ranked positives.

    Ranking: by decreasing score, equal scores by column index (lower index
    first), which decides K, "the first k − n_+ negatives" and "the k best
    positives" when scores tie, so that |P| = |N| always holds, as in the
    paper. With distinct scores the sets equal the value comparisons of Eq. 7
    and 10 exactly. Rows without candidates give empty sets.

    The reference path (:func:`reference`) ranks each row once
    (:func:`tfdml.kernels.chosen.stable_order`) and counts ranks; a device may
    run a fast form with the same sets (:data:`tfdml.kernels.CHOICES`,
    ``"top_k"``; on CPU for k up to the table's ``up_to``, k passes per ranking
    and no sort), which :func:`tfdml.kernels.top_k.misplaced_sets` chooses.

    Returns :class:`~tfdml.samplers.SetSelection`: [B, M] bool, row a = query,
    columns = members of P (``positive``) and N (``negative``). The loss of
    Eq. 5 is then ``Σ_N ŝ − Σ_P ŝ`` per row.

    Args:
      k: the k of Prec@k (Lu et al. use 3, 5 or 10).
    """

    kind = "sets"
    needs_seed = False

    def __init__(self, k=5):
        self.k = base.check_positive_int(k, "k", "TopKMisplacedSampler")

    def sample(self, dist, labels, candidates, seed=None, embedding_dim=None):
        pos, neg = base.split_candidates(labels, candidates)
        # Candidates by decreasing score (ties: lower index first); the rest after them.
        lowest = tf.constant(dist.dtype.min, dist.dtype)
        key = tf.where(candidates, tf.maximum(dist, lowest), tf.constant(-float("inf"), dist.dtype))
        return base.SetSelection(*_fast.misplaced_sets(key, candidates, pos, neg, self.k, reference))

    def get_config(self):
        return {"k": self.k}


def reference(key, candidates, pos, neg, k):
    """``(P, N)`` [B, M] bool from one descending order per row (``key``: the candidates'
    scores, -inf elsewhere), O(B·M log M)."""
    size = tf.shape(key)[1]
    order = chosen.stable_order(-key)  # decreasing key, ties: lower index first
    sorted_pos = primitives.gather_rows(pos, order)
    sorted_neg = primitives.gather_rows(neg, order)
    rank = tf.range(size, dtype=tf.int32)[None, :]  # 0-based position in the ranking
    in_top = rank < k  # K (candidates occupy the first |C| positions)
    pos_rank = tf.cumsum(tf.cast(sorted_pos, tf.int32), axis=1)  # 1-based rank among positives
    neg_rank = tf.cumsum(tf.cast(sorted_neg, tf.int32), axis=1)  # 1-based rank among negatives
    n_plus = tf.reduce_sum(tf.cast(pos, tf.int32), axis=1, keepdims=True)
    outside = tf.logical_and(sorted_pos, tf.logical_not(in_top))
    negatives_in_top = tf.logical_and(sorted_neg, in_top)
    case1 = n_plus < k
    misplaced_pos = tf.where(case1, outside, tf.logical_and(outside, pos_rank <= k))  # Eq. 6 / Eq. 10
    misplaced_neg = tf.where(
        case1, tf.logical_and(negatives_in_top, neg_rank > k - n_plus), negatives_in_top
    )  # Eq. 7 / Eq. 9
    # Back from ranking order to columns: inverse[a, order[a, r]] = r.
    inverse = primitives.invert_permutation_rows(order)
    return primitives.gather_rows(misplaced_pos, inverse), primitives.gather_rows(misplaced_neg, inverse)
