"""Row primitives and score helpers in plain TensorFlow: the lowest layer of tfdml.

Samplers, metrics and the kernels are built on these functions; this module imports
nothing of tfdml. Each function here is a **reference path**: the plain form that
defines what the computation returns, and never asks the kernels table. Where a
device runs a primitive faster in another form (a blocked matmul for a running count,
a one-pass arg-min, a sorting network, a variadic reduction), that form lives in
``tfdml/kernels/`` and :mod:`tfdml.kernels.chosen` calls the form the table chooses;
code above the kernels calls a primitive through it, so that the choice is made in
one place (docs/design.md, "Kernels").

* Rows of a [R, N] matrix: :func:`gather_rows`, :func:`invert_permutation_rows`,
  :func:`sort_key`, :func:`running_count`, :func:`first_argmin` /
  :func:`first_argmax`, :func:`count_less_equal`, :func:`stable_order`.
* Scores of a chunk of queries against a gallery (exact kNN and the retrieval
  metrics, :mod:`tfdml.metrics`): :func:`squared_norms`, :func:`scores`,
  :func:`exclude_self`, :func:`positive_thresholds`, :func:`count_at_least`,
  :func:`scores_and_thresholds`.
"""

import math

import numpy as np
import tensorflow as tf

_INF = np.float32(np.inf)


# --- rows ------------------------------------------------------------------------------

def gather_rows(params, indices):
    """``tf.gather(params, indices, batch_dims=1)`` for [R, N] params and [R, M] indices.

    A flat gather: faster on CPU than the batched form, in graph mode and XLA.
    """
    n = tf.shape(params)[1]
    offset = (tf.range(tf.shape(params)[0], dtype=indices.dtype) * tf.cast(n, indices.dtype))[:, None]
    return tf.gather(tf.reshape(params, [-1]), indices + offset)


def invert_permutation_rows(order):
    """Row-wise inverse of a [R, N] permutation: ``inverse[r, order[r, i]] = i``.

    A flat segment sum: on CPU much faster than ``tf.scatter_nd`` or a second
    sort (``tf.math.invert_permutation`` is 1-D only).
    """
    shape = tf.shape(order)
    rows, n = shape[0], shape[1]
    position = tf.broadcast_to(tf.range(n, dtype=order.dtype)[None, :], shape)
    target = order + (tf.range(rows, dtype=order.dtype) * n)[:, None]
    inverse = tf.math.unsorted_segment_sum(tf.reshape(position, [-1]), tf.reshape(target, [-1]), rows * n)
    return tf.reshape(inverse, shape)


def sort_key(values):
    """``values`` with −0.0 made +0.0, so that a sort ranks them as the tie they are.

    TensorFlow's sort kernels compare −0.0 == +0.0 and keep such ties in index
    order; XLA's CPU sort uses a total order (−0.0 < +0.0), so without this a
    batch holding both (a cosine score of orthogonal embeddings, say) would be
    ranked differently with and without ``jit_compile``. (A ``tf.where``, not
    ``values + 0.0``, which graph optimisation removes.)"""
    return tf.where(tf.equal(values, 0.0), tf.zeros_like(values), values)


def running_count(mask):
    """``tf.cumsum(mask, axis=1)``: int32 [R, N] running count of a 0/1 int32 [R, N] mask.
    Fast form: :mod:`tfdml.kernels.running_count`."""
    return tf.cumsum(tf.cast(mask, tf.int32), axis=1)


def first_argmin(values, axis=-1):
    """int32: the lowest index holding the minimum of ``values`` along ``axis``.

    The minimum, then the lowest index holding it (two plain reductions, which XLA
    fuses with the elementwise work before them). −0.0 and +0.0 tie; the same answer
    on infinite values; not for NaN. Fast form: :mod:`tfdml.kernels.argmin`."""
    rank = values.shape.rank
    axis = axis % rank
    size = tf.shape(values)[axis]
    least = tf.reduce_min(values, axis=axis, keepdims=True)
    index = tf.reshape(tf.range(size), [-1 if d == axis else 1 for d in range(rank)])
    return tf.minimum(tf.reduce_min(tf.where(tf.equal(values, least), index, size), axis=axis), size - 1)


def first_argmax(values, axis=-1):
    """int32: the lowest index holding the maximum (:func:`first_argmin` of ``-values``)."""
    return first_argmin(-values, axis=axis)


def count_less_equal(sorted_rows, values, strict=False, rows=None, unroll=None):
    """``tf.searchsorted(sorted_rows, values, side="right")`` by binary lifting.

    ``sorted_rows`` is [R, N], ascending along each row; ``values`` is [R, M].
    Returns [R, M] int32: how many entries of the row are <= each value
    (< each value with ``strict=True``, i.e. ``side="left"``). With ``rows``
    (int32, the shape of ``values``, any rank), value i is searched in row
    ``rows[i]`` instead: a few values in chosen rows.
    ``tf.searchsorted`` lowers under XLA (CPU) to an all-pairs comparison,
    ~100x slower at N = M = 256; here each of the ceil(log2(N + 1)) steps is
    one gather, the steps looped by a ``tf.while_loop``. ``unroll`` (a fast form,
    :func:`tfdml.kernels.binary_search.unrolled`) runs the same steps instead
    where N is static: ``unroll(lift, count, top)``.
    """
    num_rows = tf.shape(sorted_rows)[0]
    n = tf.shape(sorted_rows)[1]
    flat = tf.reshape(sorted_rows, [-1])
    if rows is None:
        rows = tf.range(num_rows)[:, None]
    offset = tf.cast(rows, tf.int32) * n - 1  # the c-th entry (1-based) of row r is flat[r * n + c - 1]
    count = tf.zeros(tf.shape(values), tf.int32)

    def lift(count, step):
        # Standard binary lifting: if the (count + step)-th entry is <= value (< value), all before it are too.
        nxt = count + step
        entry = tf.gather(flat, tf.maximum(offset + tf.minimum(nxt, n), 0))
        below = entry < values if strict else entry <= values
        return tf.where(tf.logical_and(nxt <= n, below), nxt, count)

    static_n = sorted_rows.shape[1]
    if static_n is not None:  # the largest power of two <= N (0 for N = 0)
        top = 1 << (int(static_n).bit_length() - 1) if static_n > 0 else 0
        if unroll is not None:
            return unroll(lift, count, top)
        top = tf.constant(top, tf.int32)
    else:
        # The largest step only has to be >= the largest power of two <= n; one step too many is harmless.
        log2 = tf.math.floor(tf.math.log(tf.cast(tf.maximum(n, 1), tf.float32)) / math.log(2.0))
        top = tf.where(n > 0, tf.bitwise.left_shift(1, tf.cast(log2, tf.int32) + 1), 0)
    count, _ = tf.while_loop(
        lambda count, step: step >= 1, lambda count, step: (lift(count, step), step // 2), (count, top)
    )
    return count


def stable_order(keys, first=None):
    """[R, N] int32: ``order[r, i]`` = the column at position i of row r, by increasing
    ``keys`` (float [R, N]); equal keys: ``first`` (bool [R, N], None = no column)
    columns ahead, then index order within each group. −0.0 and +0.0 are one key
    (:func:`sort_key`); keys must not be NaN.

    A stable partition of each row (``first`` columns ahead) and one stable
    ``tf.argsort`` of the partitioned keys. Fast forms for keys of at most 32 bits:
    :mod:`tfdml.kernels.sorting`."""
    keys = sort_key(tf.convert_to_tensor(keys))
    if first is None:
        first = tf.ones(tf.shape(keys), tf.bool)
    size = tf.shape(keys)[1]
    is_first = tf.cast(first, tf.int32)
    num_first = tf.reduce_sum(is_first, axis=1)
    # dest[r, j] = position of column j in the partition; part[r, q] = column at position q.
    # First columns before j: its running count minus itself; the others: j minus those.
    firsts_before = running_count(is_first) - is_first
    dest = tf.where(first, firsts_before, num_first[:, None] + tf.range(size)[None, :] - firsts_before)
    part = invert_permutation_rows(dest)
    return gather_rows(part, tf.argsort(gather_rows(keys, part), axis=1, stable=True))


# --- scores of a chunk of queries ------------------------------------------------------

def squared_norms(x):
    """``|x_i|²`` of every row."""
    return tf.reduce_sum(tf.square(x), axis=-1)


def expanded_squared_distances(u, v, sq_u, sq_v):
    """``|u_i|² + |v_j|² − 2 u_i·v_j`` clipped at 0 (one matmul), from the rows' squared
    norms ``sq_u`` and ``sq_v`` (:func:`squared_norms`)."""
    return tf.maximum(sq_u[:, None] + sq_v[None, :] - 2.0 * tf.matmul(u, v, transpose_b=True), 0.0)


def scores(query, gallery, gallery_squared_norms=None):
    """[Q, N] "larger is closer" scores: minus the squared euclidean distance.

    Pass ``query`` and ``gallery`` through :func:`tfdml.metrics.knn.ranking_frame`
    once beforehand: it puts cosine on the sphere (so this ranks by cosine too)
    and centres the data (so small distances stay accurate). Ranking by
    squared euclidean distance equals ranking by euclidean distance (Wu
    D_ij) and skips the square root over the whole matrix. A caller that scores
    many chunks of queries against one gallery passes its
    ``gallery_squared_norms`` (:func:`squared_norms`, computed once): otherwise
    every chunk reads the whole gallery once more to compute them.
    """
    query = tf.convert_to_tensor(query)
    if not query.dtype.is_floating:
        query = tf.cast(query, tf.float32)
    gallery = tf.cast(gallery, query.dtype)
    if gallery_squared_norms is None:
        gallery_squared_norms = squared_norms(gallery)
    sq_g = tf.cast(gallery_squared_norms, query.dtype)
    return -expanded_squared_distances(query, gallery, squared_norms(query), sq_g)


def exclude_self(score_chunk, self_index):
    """Score -inf where gallery column == ``self_index[i]`` (-1: exclude nothing)."""
    cols = tf.range(tf.shape(score_chunk)[1], dtype=self_index.dtype)
    is_self = tf.equal(cols[None, :], self_index[:, None])
    return tf.where(is_self, tf.constant(-np.inf, score_chunk.dtype), score_chunk)


def positive_thresholds(s, pos_idx):
    """Positive scores ascending [c, P] (+inf padded) and R [c, 1], from the scores ``s``
    and the positives' gallery indices ``pos_idx`` [c, P] (-1: padding)."""
    valid = pos_idx >= 0
    num_pos = tf.reduce_sum(tf.cast(valid, tf.int32), axis=1, keepdims=True)
    pos_s = tf.gather(s, tf.maximum(pos_idx, 0), batch_dims=1)
    return tf.sort(tf.where(valid, pos_s, _INF), axis=1), num_pos


def count_at_least(values, thresholds):
    """int32 [R, P]: ``out[i, j] = #{n : values[i, n] >= thresholds[i, j]}``.

    ``values`` float [R, N], ``thresholds`` [R, P] of the same dtype; exact
    integer counts (IEEE comparisons: ±0 are equal, a NaN value reaches
    nothing and a NaN threshold is reached by nothing). Compares every pair and
    sums (it may hold the ``[R, P, N]`` comparisons in memory). Fast form:
    :mod:`tfdml.kernels.counting`.
    """
    values = tf.convert_to_tensor(values)
    thresholds = tf.convert_to_tensor(thresholds, values.dtype)
    return tf.reduce_sum(tf.cast(values[:, None, :] >= thresholds[:, :, None], tf.int32), axis=2)


def scores_and_thresholds(query, gallery, gallery_norms, pos_idx, self_index):
    """Scores [c, N] (self: -inf), positive scores ascending [c, P] (+inf padded), R [c, 1]."""
    s = exclude_self(scores(query, gallery, gallery_norms), self_index)
    thr, num_pos = positive_thresholds(s, pos_idx)
    return s, thr, num_pos


scores_and_thresholds_xla = tf.function(scores_and_thresholds, jit_compile=True, autograph=False)
