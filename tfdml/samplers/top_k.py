"""Misplaced sets P and N around the top-k boundary (Lu et al. 2019, §3.3)."""

import keras
import tensorflow as tf

from tfdml.samplers import base, ordering


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

    Two paths give the same sets (tested, ties included). Every set above is
    cut at the j-th member (j ≤ k) of the ranking of the candidates, of the
    positives or of the negatives, so for k ≤ ``PREFIX_UP_TO`` the sampler
    finds those k first members by k passes of (max, lowest index among the
    maxima) per ranking and compares every column with the cut: O(k·B²), no
    sort. Above it, one descending order per row
    (:func:`~tfdml.samplers.ordering.stable_order`: TensorFlow's sort in graph
    mode, a sorting network under XLA), O(B² log B), whose cost does not grow
    with k (both paths at k = 32: ``benchmarks/RESULTS.md``, "Row order").

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
        if self.k <= PREFIX_UP_TO:
            return _by_prefixes(key, candidates, pos, neg, self.k)
        return _by_sorting(key, pos, neg, self.k)

    def get_config(self):
        return {"k": self.k}


#: Largest k for which the sets are cut by k passes per ranking instead of a sort.
PREFIX_UP_TO = 16


def _first_members(key, member, count):
    """The first ``count`` members of each row's ranking (decreasing ``key``, ties
    by lower column): their keys [B, count], columns [B, count] and whether the row
    has that many members [B, count]. ``key`` of a member is finite, -inf outside."""
    size = tf.shape(key)[1]
    columns = tf.range(size, dtype=tf.int32)[None, :]
    minus_inf = tf.constant(-float("inf"), key.dtype)
    left = tf.where(member, key, minus_inf)
    values, indices, present = [], [], []
    for _ in range(count):
        best = tf.reduce_max(left, axis=1, keepdims=True)
        index = tf.reduce_min(tf.where(left == best, columns, size), axis=1, keepdims=True)
        values.append(best)
        indices.append(index)
        present.append(best > minus_inf)
        left = tf.where(columns == index, minus_inf, left)
    return tf.concat(values, 1), tf.concat(indices, 1), tf.concat(present, 1)


def _ranked_at_or_before(key, value, index):
    """[B, M]: column j ranks at or before the member (value, index) of its row."""
    columns = tf.range(tf.shape(key)[1], dtype=tf.int32)[None, :]
    return tf.logical_or(key > value, tf.logical_and(key == value, columns <= index))


def _by_prefixes(key, candidates, pos, neg, k):
    """The sets from the first k members of three rankings, O(k·B²), no sort."""
    n_plus = tf.reduce_sum(tf.cast(pos, tf.int32), axis=1, keepdims=True)
    case1 = n_plus < k
    # K: every candidate when there are fewer than k, else those up to the k-th.
    c_value, c_index, c_present = _first_members(key, candidates, k)
    in_top = tf.logical_and(candidates, tf.logical_or(
        tf.logical_not(c_present[:, -1:]), _ranked_at_or_before(key, c_value[:, -1:], c_index[:, -1:])))
    # Case 2 (Eq. 10): positives outside K among the k best positives (the k-th exists: n_+ ≥ k).
    p_value, p_index, _ = _first_members(key, pos, k)
    outside = tf.logical_and(pos, tf.logical_not(in_top))
    misplaced_pos = tf.where(case1, outside, tf.logical_and(
        outside, _ranked_at_or_before(key, p_value[:, -1:], p_index[:, -1:])))  # Eq. 6 / Eq. 10
    # Case 1 (Eq. 7): negatives in K ranked after the (k − n_+)-th negative, if it exists.
    n_value, n_index, n_present = _first_members(key, neg, k)
    at = tf.clip_by_value(k - n_plus, 1, k) - 1
    cut = base.gather_rows(n_value, at), base.gather_rows(n_index, at)
    after_cut = tf.logical_and(base.gather_rows(n_present, at),
                               tf.logical_not(_ranked_at_or_before(key, *cut)))
    negatives_in_top = tf.logical_and(neg, in_top)
    misplaced_neg = tf.where(case1, tf.logical_and(negatives_in_top, after_cut), negatives_in_top)  # Eq. 7 / 9
    return base.SetSelection(misplaced_pos, misplaced_neg)


def _by_sorting(key, pos, neg, k):
    """The sets from one descending sort per row, O(B² log B)."""
    size = tf.shape(key)[1]
    order = ordering.stable_order(-key)  # decreasing key, ties: lower index first
    sorted_pos = base.gather_rows(pos, order)
    sorted_neg = base.gather_rows(neg, order)
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
    inverse = base.invert_permutation_rows(order)
    return base.SetSelection(base.gather_rows(misplaced_pos, inverse), base.gather_rows(misplaced_neg, inverse))
