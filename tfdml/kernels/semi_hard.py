"""Fast form of the semi-hard selection of :class:`tfdml.samplers.SemiHardSampler`.

``compare_or_sort(dist, labels, pos, neg, widths, sort_above)`` returns what the
sampler's reference path returns: ``(nearest, found)`` [B, M] (B anchors, M candidates,
the anchors first; ``labels`` the M candidates'), ``found[a, p]`` where
(a, p) is a candidate positive pair with a candidate negative n farther than the
positive (D_an > D_ap), ``nearest[a, p]`` the nearest such n (lowest index on ties)
where ``found``. Two paths give that selection, every slot included; the run-time
choice (:func:`plan`, a ``tf.switch_case``) depends on P = (size of the largest class
of an anchor among the candidates) − 1, the most positives an anchor can have:

* compare (P ≤ ``sort_above``, integer labels; the usual batch of m examples per
  class): one sort of the B labels groups the classes (O(B log B)); each anchor's
  class mates are compared with all its negatives K at a time (K from ``widths``, the
  smallest holding P; above the last, ⌈P / K⌉ steps of a ``tf.while_loop``): a
  masked arg-min over a [B, K, M] tensor (first minimum = lower index on ties), whose
  B·K answers are scattered to their columns. O(B·M·P) work, no row sort;
* sort (larger classes, or labels that are not integers): one stable row-wise order
  of the distances (negatives ranked before other columns at equal distance;
  :func:`tfdml.kernels.chosen.stable_order`) and a running count, O(B·M log M).

Both are vectorised with fixed shapes and compile under XLA; no [B, M, M] tensor.
The CPU table puts ``sort_above`` near the crossovers measured in graph mode and
under XLA (``python benchmarks/bench_semi_hard.py --crossover``; RESULTS,
"Semi-hard sampler").
"""

import tensorflow as tf

from tfdml import kernels, primitives, xla
from tfdml.kernels import chosen

FORMS = ("compare_or_sort",)


def nearest_beyond(dist, labels, pos, neg, reference):
    """``(nearest, found)`` [B, M] of the semi-hard rule in the form the table chooses for
    ``"semi_hard"`` (:func:`compare_or_sort` with its parameters), or ``reference(dist, pos,
    neg)``: the sampler's reference path, passed in (the sampler imports this module), which
    never asks the table."""
    choice = kernels.choose("semi_hard")
    if choice.form == "compare_or_sort":
        return compare_or_sort(dist, labels, pos, neg, **choice.params)
    return reference(dist, pos, neg)


def compare_or_sort(dist, labels, pos, neg, widths, sort_above):
    """``(nearest, found)`` [B, M] of the semi-hard rule by the compare or the sort path.
    Under XLA the inputs pass :func:`tfdml.xla.opaque_to_constant_analysis` first: the
    paths' ``tf.switch_case`` would otherwise have tf2xla interpret the distances' HLO."""
    if xla.is_compiling():
        dist, labels, pos, neg = xla.opaque_to_constant_analysis(dist, labels, pos, neg)
    size = tf.shape(dist)[0]
    inf = tf.constant(float("inf"), dist.dtype)
    neg_dist = tf.where(neg, dist, -inf)  # D_an on the candidate negatives, -inf elsewhere
    int_labels = _integer_labels(labels)
    if int_labels is None:
        nearest, found = _by_sorting(dist, neg)
    else:
        layout = _class_layout(int_labels)
        others = tf.reduce_max(layout[3][:size]) - 1  # the anchors' classes among the candidates
        branches = [
            (lambda k=k: _by_comparing(dist, neg_dist, layout, k, loop=k == widths[-1])) for k in widths
        ] + [lambda: _by_sorting(dist, neg)]
        nearest, found = tf.switch_case(_branch(others, widths, sort_above), branches)
    return nearest, tf.logical_and(pos, found)


def plan(labels, compiled=None):
    """Which path :func:`compare_or_sort` takes for these labels, as a scalar int32 tensor,
    with the parameters :func:`tfdml.kernels.choose` gives ``"semi_hard"`` in the mode
    (``compiled``: True for XLA, False for graph mode, None: the mode being traced).

    ``i < len(widths)``: the compare path, ``widths[i]`` positives per step;
    ``len(widths)``: the sort path; -1: the chosen form is the reference path. Decided
    by P = (size of the largest class) − 1 against ``sort_above``; labels that are not
    integers always sort."""
    choice = kernels.choose("semi_hard", mode=None if compiled is None else ("xla" if compiled else "graph"))
    if choice.form != "compare_or_sort":
        return tf.constant(-1, tf.int32)
    widths = choice.params["widths"]
    labels = _integer_labels(tf.reshape(tf.convert_to_tensor(labels), [-1]))
    if labels is None:
        return tf.constant(len(widths), tf.int32)
    _, _, _, count = _class_layout(labels)
    return _branch(tf.reduce_max(count) - 1, widths, choice.params["sort_above"])


def _branch(others, widths, sort_above):
    """The branch of :func:`plan` for P = ``others``: the smallest width holding P, or sort."""
    index = tf.constant(0, tf.int32)
    for k in widths[:-1]:
        index = index + tf.cast(others > k, tf.int32)
    return tf.where(others > sort_above, tf.constant(len(widths), tf.int32), index)


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
    class's run starts at ``start[i]`` and holds ``count[i]`` examples.

    ``start`` and the run's end come from one binary search of the sorted labels for
    ``label − 1`` and ``label`` (for integers, x < v exactly when x ≤ v − 1; the least
    label of the dtype, where v − 1 would wrap, starts at 0): one loop to compile, not two."""
    order = tf.argsort(labels, stable=True)
    where = primitives.invert_permutation_rows(order[None, :])[0]
    sorted_labels = tf.gather(labels, order)[None, :]
    size = tf.shape(labels)[0]
    below, end = tf.split(chosen.count_less_equal(sorted_labels, tf.concat([labels - 1, labels], 0)[None, :])[0],
                          2 * [size])
    start = tf.where(labels == labels.dtype.min, 0, below)
    return order, where, start, end - start


def _by_comparing(dist, neg_dist, layout, width, loop):
    """Compare path: ``(n*, found)`` [B, M], meaningful where ``pos``.

    Step c takes, for every anchor a, its class mates number c·K … c·K + K − 1
    (in index order, a itself skipped), compares their distances D_ap with every
    D_an and keeps the nearest negative beyond (:func:`_first_beyond`, over a
    [B, K, M] comparison; lower index on ties); the B·K answers are scattered to their
    columns. One step when P ≤ K (not ``loop``), else ⌈P / K⌉ steps of a ``tf.while_loop``."""
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
        d_ap = primitives.gather_rows(dist, column)
        nearest = _first_beyond(neg_dist, d_ap)
        # -1: no negative beyond, or no class mate in this slot; such a slot writes to the
        # anchor's own column (never a positive), so no column is written twice with
        # different values.
        nearest = tf.where(tf.logical_and(mate, primitives.gather_rows(neg_dist, nearest) > d_ap), nearest, -1)
        column = tf.where(mate, column, rows)
        return c + 1, tf.tensor_scatter_nd_update(
            semi_hard, tf.stack([rows, column], axis=-1), nearest
        )

    semi_hard = tf.fill(tf.shape(dist), -1)
    if not loop:  # P <= K: a single step
        _, semi_hard = step(0, semi_hard)
    else:
        steps = (tf.reduce_max(count) - 1 + width - 1) // width
        _, semi_hard = tf.while_loop(lambda c, _: c < steps, step, (tf.constant(0, tf.int32), semi_hard))
    return semi_hard, semi_hard >= 0


def _first_beyond(neg_dist, d_ap):
    """[B, K] int32: for every anchor a and distance ``d_ap[a, k]``, the column n with the
    smallest ``neg_dist[a, n] > d_ap[a, k]`` (lowest index on ties); meaningless where no
    column is beyond. An arg-min over the masked [B, K, M] comparison
    (:func:`tfdml.kernels.chosen.first_argmin`)."""
    inf = tf.constant(float("inf"), neg_dist.dtype)
    beyond = neg_dist[:, None, :] > d_ap[:, :, None]
    return chosen.first_argmin(tf.where(beyond, neg_dist[:, None, :], inf), axis=2)


def _by_sorting(dist, neg):
    """Sort path: ``(n*, found)`` [B, M] for every column, from one stable row sort."""
    size, columns = tf.shape(dist)[0], tf.shape(dist)[1]
    num_neg = tf.reduce_sum(tf.cast(neg, tf.int32), axis=1)
    # 1-2. Each row's columns ordered by (D_aj, negatives first, index).
    order = chosen.stable_order(dist, first=neg)
    # 3. At the sorted position of each column, the number of negatives at or before it:
    #    for a positive p this is |{n : D_an <= D_ap}|, the rank of n*_ap among the negatives.
    sorted_neg = primitives.gather_rows(neg, order)
    below = chosen.running_count(tf.cast(sorted_neg, tf.int32))
    # 4. The negatives in increasing distance: by_rank[a, t] = column of the t-th negative.
    slot = tf.where(sorted_neg, below - 1, columns)  # non-negatives go to a spare slot
    flat_slot = tf.reshape(slot + (tf.range(size) * (columns + 1))[:, None], [-1])
    by_rank = tf.math.unsorted_segment_max(tf.reshape(order, [-1]), flat_slot, size * (columns + 1))
    by_rank = tf.reshape(by_rank, tf.stack([size, columns + 1]))
    # 5. Back to columns: first[a, p] = rank of the first negative beyond D_ap.
    first = primitives.gather_rows(below, primitives.invert_permutation_rows(order))
    found = first < num_neg[:, None]
    return primitives.gather_rows(by_rank, tf.minimum(first, columns - 1)), found
