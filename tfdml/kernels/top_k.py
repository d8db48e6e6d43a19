"""Fast form of :class:`tfdml.samplers.TopKMisplacedSampler`'s sets (Lu et al. 2019, §3.3).

``prefix(key, candidates, pos, neg, k)`` returns what the sampler's reference path
returns (``(P, N)`` as [B, M] bool). Every set is cut at the j-th member (j ≤ k) of
the ranking of the candidates, of the positives or of the negatives, so it finds
those k first members by k passes of (max, lowest index among the maxima) per
ranking and compares every column with the cut: O(k·B·M), no sort. The table's
``up_to`` is the largest k it is chosen for: above it the reference's one
descending order per row, O(B·M log M), whose cost does not grow with k, is cheaper
(both at k = 32: ``benchmarks/RESULTS.md``, "Row order").
"""

import tensorflow as tf

from tfdml import kernels, primitives

FORMS = ("prefix",)


def misplaced_sets(key, candidates, pos, neg, k, reference):
    """``(P, N)`` [B, M] bool in the form the table chooses for ``"top_k"`` (:func:`prefix`
    for k up to its ``up_to``), or ``reference(key, candidates, pos, neg, k)``: the
    sampler's reference path, passed in (the sampler imports this module), which never
    asks the table."""
    choice = kernels.choose("top_k")
    if choice.form == "prefix" and k <= choice.params["up_to"]:
        return prefix(key, candidates, pos, neg, k)
    return reference(key, candidates, pos, neg, k)


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


def prefix(key, candidates, pos, neg, k):
    """``(misplaced_pos, misplaced_neg)`` [B, M] from the first k members of three rankings,
    O(k·B·M), no sort."""
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
    cut = primitives.gather_rows(n_value, at), primitives.gather_rows(n_index, at)
    after_cut = tf.logical_and(primitives.gather_rows(n_present, at),
                               tf.logical_not(_ranked_at_or_before(key, *cut)))
    negatives_in_top = tf.logical_and(neg, in_top)
    misplaced_neg = tf.where(case1, tf.logical_and(negatives_in_top, after_cut), negatives_in_top)  # Eq. 7 / 9
    return misplaced_pos, misplaced_neg
