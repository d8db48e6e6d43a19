"""Semi-hard negative mining (FaceNet; Wu et al. 2017, §3)."""

import keras
import tensorflow as tf

from tfdml import xla
from tfdml.samplers import base, ordering

FALLBACKS = ("hardest_inside", "drop")

# The compare path handles an anchor's positives K at a time: one [B, K, B] comparison per
# step, K chosen from these widths by the largest class (the last width repeats).
WIDTHS = (1, 2, 3, 4)
# Above this many other members in the largest class the sort path is taken: about where it
# becomes cheaper (`python benchmarks/bench_semi_hard.py --crossover`), in graph mode and
# under XLA (where the row sort is a sorting network, samplers.ordering).
SORT_ABOVE = 40
SORT_ABOVE_XLA = 64


def plan(labels, compiled=None):
    """Which path :class:`SemiHardSampler` takes for these labels, as a scalar int32 tensor.

    ``i < len(WIDTHS)``: the compare path, ``WIDTHS[i]`` positives per step;
    ``len(WIDTHS)``: the sort path. Decided by P = (size of the largest class) − 1,
    the most positives any anchor can have, against :func:`sort_above` for the mode
    (``compiled``: True for XLA; None: the mode being traced); labels that are not
    integers always sort.
    """
    labels = _integer_labels(tf.reshape(tf.convert_to_tensor(labels), [-1]))
    if labels is None:
        return tf.constant(len(WIDTHS), tf.int32)
    _, _, _, count = _class_layout(labels)
    return _branch(tf.reduce_max(count) - 1, compiled)


def sort_above(compiled=None):
    """The largest P the compare path takes: :data:`SORT_ABOVE_XLA` while tracing for XLA
    (``compiled=None``: :func:`tfdml.xla.is_compiling`), else :data:`SORT_ABOVE`."""
    if compiled is None:
        compiled = xla.is_compiling()
    return SORT_ABOVE_XLA if compiled else SORT_ABOVE


def _branch(others, compiled=None):
    """The branch of :func:`plan` for P = ``others``: the smallest width holding P, or sort."""
    index = tf.constant(0, tf.int32)
    for k in WIDTHS[:-1]:
        index = index + tf.cast(others > k, tf.int32)
    return tf.where(others > sort_above(compiled), tf.constant(len(WIDTHS), tf.int32), index)


def _integer_labels(labels):
    """Labels as int32 / int64 for the class layout, or None (only the sort path applies)."""
    if labels.dtype in (tf.int32, tf.int64):
        return labels
    if labels.dtype in (tf.int8, tf.int16, tf.uint8, tf.uint16):
        return tf.cast(labels, tf.int32)
    if labels.dtype == tf.uint32:
        return tf.cast(labels, tf.int64)
    return None


def _class_layout(labels):
    """The batch grouped by class: ``order`` lists the examples by (label, index), so each
    class is a contiguous run; example i sits at position ``where[i]`` of ``order``, its
    class's run starts at ``start[i]`` and holds ``count[i]`` examples."""
    order = tf.argsort(labels, stable=True)
    where = base.invert_permutation_rows(order[None, :])[0]
    sorted_labels = tf.gather(labels, order)[None, :]
    start = base.count_less_equal(sorted_labels, labels[None, :], strict=True)[0]
    end = base.count_less_equal(sorted_labels, labels[None, :])[0]
    return order, where, start, end - start


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
      FaceNet's and TensorFlow's semi-hard triplet loss (ties: lower index).
      The triplet is valid whenever the anchor has at least one candidate
      negative.
    * ``"drop"``: the slot is masked out.

    Returns :class:`~tfdml.samplers.TripletSelection` with T = B·M (B anchors, M
    candidates; M = B for the batch alone): slot ``a * M + p`` holds (a, p, n*_ap)
    for every ordered pair; ``mask`` is true
    where (a, p) is a candidate positive pair and a negative was chosen.
    Invalid slots hold the anchor's hardest-inside negative (an index in range).

    Two paths give the same selection, every slot included; the run-time
    choice (:func:`plan`, a ``tf.switch_case``) depends on P = (size of the
    largest class in the batch) − 1, the most positives an anchor can have:

    * compare (P ≤ ``SORT_ABOVE`` = 40 in graph mode, P ≤ ``SORT_ABOVE_XLA`` = 64
      under XLA, integer labels; the usual batch of m
      examples per class): one sort of the B labels groups the classes
      (O(B log B)); each anchor's class mates are compared with all its
      negatives K at a time (K = 1, 2, 3 or 4, the smallest width holding P;
      above 4, ⌈P / 4⌉ steps of a ``tf.while_loop``): a masked arg-min over a
      [B, K, B] tensor (first minimum = lower index on ties), whose B·K
      answers are scattered to their columns. O(B²·P) work, no row sort;
    * sort (larger classes, or labels that are not integers): one stable
      row-wise order of the distances (negatives ranked before other columns at
      equal distance; :func:`~tfdml.samplers.ordering.stable_order`: TensorFlow's
      sort in graph mode, a bitonic sorting network under XLA, whose own CPU sort
      is slower) and a cumulative count, O(B² log B).

    ``SORT_ABOVE`` and ``SORT_ABOVE_XLA`` sit near the crossovers measured in
    graph mode and under XLA on a CPU (``python benchmarks/bench_semi_hard.py
    --crossover``; RESULTS, "Semi-hard sampler"). The threshold is chosen while
    tracing (:func:`tfdml.xla.is_compiling`).
    Both paths are vectorised with fixed shapes and compile under XLA; no
    [B, B, B] tensor. Distances must be finite.
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
        size, columns = tf.shape(dist)[0], tf.shape(dist)[1]
        pos, neg = base.split_candidates(labels, candidates)
        inf = tf.constant(float("inf"), dist.dtype)
        num_neg = tf.reduce_sum(tf.cast(neg, tf.int32), axis=1)
        neg_dist = tf.where(neg, dist, -inf)  # D_an on the candidate negatives, -inf elsewhere
        int_labels = _integer_labels(labels)
        if int_labels is None:
            semi_hard, found = _by_sorting(dist, neg)
        else:
            layout = _class_layout(int_labels)
            others = tf.reduce_max(layout[3][:size]) - 1
            branches = [
                (lambda k=k: _by_comparing(dist, pos, neg_dist, layout, k)) for k in WIDTHS
            ] + [lambda: _by_sorting(dist, neg)]
            semi_hard, found = tf.switch_case(_branch(others), branches)
        found = tf.logical_and(pos, found)
        # The least violating negative (largest D_an, lower index on ties); also fills
        # the invalid slots with an index in range.
        hardest_inside = base.first_argmax(neg_dist, axis=1)
        negative = tf.where(found, semi_hard, hardest_inside[:, None])
        if self.fallback == "hardest_inside":
            valid = tf.logical_and(pos, (num_neg > 0)[:, None])
        else:
            valid = found
        anchor = tf.repeat(tf.range(size, dtype=tf.int32), columns)
        positive = tf.tile(tf.range(columns, dtype=tf.int32), [size])
        return base.GridTripletSelection(
            anchor, positive, tf.reshape(negative, [-1]), tf.reshape(valid, [-1])
        )

    def get_config(self):
        return {"fallback": self.fallback}


def _by_comparing(dist, pos, neg_dist, layout, width):
    """Compare path: ``(n*, found)`` [B, M], meaningful where ``pos``.

    Step c takes, for every anchor a, its class mates number c·K … c·K + K − 1
    (in index order, a itself skipped), compares their distances D_ap with every
    D_an and keeps the nearest negative beyond (:func:`_first_beyond`, over a
    [B, K, B] comparison; lower index on ties); the B·K answers are scattered to their
    columns. One step when P ≤ K, else ⌈P / K⌉ steps of a ``tf.while_loop``."""
    order, where, start, count = layout
    size = tf.shape(dist)[0]
    # The anchors are the first B candidates: their places in the layout of all M.
    where, start, count = where[:size], start[:size], count[:size]
    own = where - start  # offset of each anchor within its class's run
    rows = tf.broadcast_to(tf.range(size)[:, None], tf.stack([size, width]))
    offsets = tf.range(width, dtype=tf.int32)

    def step(c, semi_hard):
        k = c * width + offsets[None, :]
        mate = k < count[:, None] - 1  # slot k holds a class mate of the anchor
        members = tf.minimum(start[:, None] + k + tf.cast(k >= own[:, None], tf.int32),
                             tf.shape(order)[0] - 1)
        column = tf.gather(order, members)  # [B, K]: the class mates of this step
        d_ap = base.gather_rows(dist, column)
        nearest = _first_beyond(neg_dist, d_ap)
        # -1: no negative beyond, or no class mate in this slot; such a slot writes to the
        # anchor's own column (never a positive), so no column is written twice with
        # different values.
        nearest = tf.where(tf.logical_and(mate, base.gather_rows(neg_dist, nearest) > d_ap), nearest, -1)
        column = tf.where(mate, column, rows)
        return c + 1, tf.tensor_scatter_nd_update(
            semi_hard, tf.stack([rows, column], axis=-1), nearest
        )

    semi_hard = tf.fill(tf.shape(pos), -1)
    if width < WIDTHS[-1]:  # P <= K: a single step
        _, semi_hard = step(0, semi_hard)
    else:
        steps = (tf.reduce_max(count) - 1 + width - 1) // width
        _, semi_hard = tf.while_loop(lambda c, _: c < steps, step, (tf.constant(0, tf.int32), semi_hard))
    return semi_hard, semi_hard >= 0


def _first_beyond(neg_dist, d_ap):
    """[B, K] int32: for every anchor a and distance ``d_ap[a, k]``, the column n with the
    smallest ``neg_dist[a, n] > d_ap[a, k]`` (lowest index on ties); meaningless where no
    column is beyond. An arg-min over the masked [B, K, B] comparison
    (:func:`~tfdml.samplers.base.first_argmin`: under XLA two fused reductions)."""
    inf = tf.constant(float("inf"), neg_dist.dtype)
    beyond = neg_dist[:, None, :] > d_ap[:, :, None]
    return base.first_argmin(tf.where(beyond, neg_dist[:, None, :], inf), axis=2)


def _by_sorting(dist, neg):
    """Sort path: ``(n*, found)`` [B, M] for every column, from one stable row sort."""
    size, columns = tf.shape(dist)[0], tf.shape(dist)[1]
    num_neg = tf.reduce_sum(tf.cast(neg, tf.int32), axis=1)
    # 1-2. Each row's columns ordered by (D_aj, negatives first, index).
    order = ordering.stable_order(dist, first=neg)
    # 3. At the sorted position of each column, the number of negatives at or before it:
    #    for a positive p this is |{n : D_an <= D_ap}|, the rank of n*_ap among the negatives.
    sorted_neg = base.gather_rows(neg, order)
    below = base.running_count(tf.cast(sorted_neg, tf.int32))
    # 4. The negatives in increasing distance: by_rank[a, t] = column of the t-th negative.
    slot = tf.where(sorted_neg, below - 1, columns)  # non-negatives go to a spare slot
    flat_slot = tf.reshape(slot + (tf.range(size) * (columns + 1))[:, None], [-1])
    by_rank = tf.math.unsorted_segment_max(tf.reshape(order, [-1]), flat_slot, size * (columns + 1))
    by_rank = tf.reshape(by_rank, tf.stack([size, columns + 1]))
    # 5. Back to columns: first[a, p] = rank of the first negative beyond D_ap.
    first = base.gather_rows(below, base.invert_permutation_rows(order))
    found = first < num_neg[:, None]
    return base.gather_rows(by_rank, tf.minimum(first, columns - 1)), found
