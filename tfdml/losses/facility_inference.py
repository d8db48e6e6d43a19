"""Loss-augmented inference of the facility-location clustering loss, in plain TensorFlow.

Song, Jegelka, Rathod, Murphy, CVPR 2017, "Deep Metric Learning via Facility Location":

* §3.1, the facility-location score of a set S of medoids:
  ``F(X, S) = −Σ_i min_{j ∈ S} d(x_i, x_j)``; g(S) assigns each example to its nearest
  medoid (a medoid to itself).
* §3.2, the structured margin ``Δ(g(S), y*) = 1 − NMI(g(S), y*)``.
* §3.3, loss-augmented inference: ``max_{|S| = K} F(X, S) + γ Δ(g(S), y*)`` (K classes in
  the batch), approximated greedily: K times, add the example that maximises the
  objective of S ∪ {j}.
* §3.4, refinement: swap each cluster's medoid for the member of that cluster that
  maximises the cluster's own facility score ``−Σ_{i in the cluster} d(x_i, x_m)`` plus
  γ Δ of the whole assignment with m in its place, one cluster after the other, with the
  clusters taken from the assignment at the start of each refinement step.

Fixed shapes: B examples, up to B medoid slots (slot s holds the s-th medoid, −1 when
unused) and up to B classes, so XLA compiles one program per batch size; the number of
classes K is a tensor and the loops are ``tf.while_loop``. Everything here works on
distances held constant (``tf.stop_gradient``): the loss differentiates F with the medoids
these functions choose.

NMI of every candidate at once. Adding candidate j (or putting candidate m in slot s)
moves a set of examples into one slot; with f(x) = x log x, the mutual information of an
assignment with cell counts N_sc, slot sizes a_s and class sizes b_c over n examples is
``(Σ f(N_sc) + f(n) − Σ f(a_s) − Σ f(b_c)) / n`` and the entropies are
``log n − Σ f(a_s) / n`` and ``log n − Σ f(b_c) / n``. A move changes only the cells and
slots its examples leave plus the one slot they enter, so every candidate's sums follow
from two [B, B] × [B, B] products of counts (:func:`candidate_nmi`).
"""

import tensorflow as tf

from tfdml import masks, primitives

NMI_AVERAGES = ("geometric", "arithmetic")
_COUNT = tf.float32  # counts up to B are exact in float32 (B < 2^24)
_WIDE = tf.float64   # entropies: candidates' NMI differ by far less than float32 rounds


def dense_class_ids(labels):
    """int32 [B] class indices 0..K−1 in order of first appearance, and K (int32)."""
    labels = tf.reshape(labels, [-1])
    size = tf.shape(labels)[0]
    first = primitives.first_argmax(tf.cast(masks.same_label(labels), tf.int32), axis=1)
    is_first = tf.equal(first, tf.range(size))
    rank = tf.cumsum(tf.cast(is_first, tf.int32)) - 1
    return tf.gather(rank, first), tf.reduce_sum(tf.cast(is_first, tf.int32))


def _xlogx(x):
    return tf.where(x > 0, x * tf.math.log(tf.where(x > 0, x, tf.ones_like(x))), tf.zeros_like(x))


def _nmi_from_sums(sum_cells, sum_slots, sum_classes, n, average):
    """NMI from Σ f(N_sc), Σ f(a_s), Σ f(b_c) (f(x) = x log x) over ``n`` examples."""
    log_n = tf.math.log(n)
    mi = tf.maximum((sum_cells + n * log_n - sum_slots - sum_classes) / n, 0.0)
    h_slots = tf.maximum(log_n - sum_slots / n, 0.0)
    h_classes = tf.maximum(log_n - sum_classes / n, 0.0)
    if average == "geometric":
        denominator = tf.sqrt(h_slots * h_classes)
    else:
        denominator = 0.5 * (h_slots + h_classes)
    safe = tf.where(denominator > 0, denominator, tf.ones_like(denominator))
    return tf.clip_by_value(tf.where(denominator > 0, mi / safe, tf.zeros_like(mi)), 0.0, 1.0)


class BatchClasses:
    """The batch's classes as the inference needs them: one-hot [B, B], K, Σ f(b_c)."""

    def __init__(self, labels):
        self.ids, self.count = dense_class_ids(labels)
        self.size = tf.shape(self.ids)[0]
        self.one_hot = tf.one_hot(self.ids, self.size, dtype=_COUNT)
        self.n = tf.cast(self.size, _WIDE)
        self.sum_f = tf.reduce_sum(_xlogx(tf.cast(tf.reduce_sum(self.one_hot, axis=0), _WIDE)))


def candidate_nmi(moved, assign, classes, average):
    """[J] NMI(g, y*) of J candidate assignments, each the base assignment ``assign``
    (int32 [B] slots, −1 for an example in no slot yet) with the examples ``moved[j]``
    (bool [J, B]) moved into one new slot. A single class gives 1 (the clustering, one
    slot, matches it); every example in the new slot with K ≥ 2 classes gives 0."""
    size = classes.size
    moved_c = tf.cast(moved, _COUNT)
    placed = assign >= 0
    cell = assign * size + classes.ids
    both = placed[:, None] & placed[None, :]
    same_cell = tf.cast(tf.equal(cell[:, None], cell[None, :]) & both, _COUNT)
    same_slot = tf.cast(tf.equal(assign[:, None], assign[None, :]) & both, _COUNT)
    cell_size = tf.cast(tf.reduce_sum(same_cell, axis=0), _WIDE)  # [B]: example's cell / slot size
    slot_size = tf.cast(tf.reduce_sum(same_slot, axis=0), _WIDE)
    leaving_cell = tf.cast(tf.matmul(moved_c, same_cell), _WIDE)  # [J, B]: of its cell, how many leave
    leaving_slot = tf.cast(tf.matmul(moved_c, same_slot), _WIDE)
    leaves = tf.cast(moved & placed[None, :], _WIDE)

    def changed(before, leaving):
        # Σ over the cells (slots) left of f(size − leaving) − f(size): each example of such a
        # cell adds 1/leaving of its cell's change.
        share = tf.where(leaves > 0, leaving, tf.ones_like(leaving))
        return tf.reduce_sum(leaves * (_xlogx(before[None, :] - leaving) - _xlogx(before)[None, :]) / share, axis=1)

    def base_sum(sizes):
        placed_w = tf.cast(placed, _WIDE)
        return tf.reduce_sum(placed_w * _xlogx(sizes) / tf.where(placed, sizes, tf.ones_like(sizes)))

    entering = tf.cast(tf.matmul(moved_c, classes.one_hot), _WIDE)  # [J, C]: the new slot's cells
    new_slot = tf.reduce_sum(entering, axis=1)
    sum_cells = base_sum(cell_size) + changed(cell_size, leaving_cell) + tf.reduce_sum(_xlogx(entering), axis=1)
    sum_slots = base_sum(slot_size) + changed(slot_size, leaving_slot) + _xlogx(new_slot)
    nmi = _nmi_from_sums(sum_cells, sum_slots, classes.sum_f, classes.n, average)
    nmi = tf.where(tf.equal(new_slot, classes.n), tf.zeros_like(nmi), nmi)
    return tf.where(classes.count == 1, tf.ones_like(nmi), nmi)


def assignment(dist, medoids):
    """g(S): int32 [B] slot of each example's nearest medoid (the lowest slot on a tie), a
    medoid in its own slot. ``medoids`` int32 [B], −1 for unused slots."""
    used = medoids >= 0
    to_medoids = tf.gather(dist, tf.maximum(medoids, 0), axis=1)  # [B, slots]
    to_medoids = tf.where(used[None, :], to_medoids, tf.fill(tf.shape(to_medoids), to_medoids.dtype.max))
    nearest = primitives.first_argmin(to_medoids, axis=1)
    slots = tf.range(tf.shape(medoids)[0])
    own = tf.equal(tf.range(tf.shape(dist)[0])[:, None], medoids[None, :]) & used[None, :]  # [B, slots]
    own_slot = primitives.first_argmax(tf.cast(own, tf.int32), axis=1)
    return tf.where(tf.reduce_any(own, axis=1), tf.gather(slots, own_slot), nearest)


def nmi_of_assignment(assign, classes, average):
    """NMI(g, y*) of a complete assignment (int32 [B] slots)."""
    size = classes.size
    cells = tf.math.unsorted_segment_sum(tf.ones([size], _WIDE), assign * size + classes.ids, size * size)
    slots = tf.math.unsorted_segment_sum(tf.ones([size], _WIDE), assign, size)
    nmi = _nmi_from_sums(tf.reduce_sum(_xlogx(cells)), tf.reduce_sum(_xlogx(slots)), classes.sum_f,
                         classes.n, average)
    nmi = tf.where(tf.equal(tf.reduce_max(slots), classes.n), tf.zeros_like(nmi), nmi)
    return tf.where(classes.count == 1, tf.ones_like(nmi), nmi)


def greedy_medoids(dist, classes, gamma, average):
    """§3.3: K medoids chosen one at a time, each maximising F(X, S ∪ {j}) + γ Δ; int32 [B]
    (slot → example, −1 beyond K)."""
    size = classes.size
    dist_t = tf.transpose(dist)  # [candidate j, example i] = d(x_i, x_j)
    eye = tf.eye(size, dtype=tf.bool)
    gamma = tf.cast(gamma, _WIDE)

    def step(t, medoids, assign, nearest):
        is_medoid = tf.reduce_any(tf.equal(tf.range(size)[:, None], medoids[None, :]), axis=1)
        moved = ((dist_t < nearest[None, :]) & ~is_medoid[None, :]) | eye
        facility = -tf.reduce_sum(tf.cast(tf.minimum(nearest[None, :], dist_t), _WIDE), axis=1)
        score = facility + gamma * (1.0 - candidate_nmi(moved, assign, classes, average))
        score = tf.where(is_medoid, tf.fill(tf.shape(score), _WIDE.min), score)
        chosen = primitives.first_argmax(score)
        row = tf.gather(moved, chosen)
        medoids = tf.tensor_scatter_nd_update(medoids, [[t]], [chosen])
        assign = tf.where(row, t, assign)
        nearest = tf.where(row, tf.gather(dist_t, chosen), nearest)
        return t + 1, medoids, assign, nearest

    start = (tf.constant(0), -tf.ones([size], tf.int32), -tf.ones([size], tf.int32),
             tf.fill([size], dist.dtype.max))
    return tf.while_loop(lambda t, *_: t < classes.count, step, start)[1]


def refine_medoids(dist, medoids, classes, gamma, average, steps):
    """§3.4: ``steps`` rounds; each takes the clusters of the current assignment and, slot by
    slot, puts in the member m maximising −Σ_{i in the cluster} d(x_i, x_m) + γ Δ(g)."""
    size = classes.size
    examples = tf.range(size)
    slots = tf.range(size)
    gamma = tf.cast(gamma, _WIDE)

    def update_slot(s, medoids, clusters):
        used = (medoids >= 0) & tf.not_equal(slots, s)
        to_others = tf.gather(dist, tf.maximum(medoids, 0), axis=1)
        to_others = tf.where(used[None, :], to_others, tf.fill(tf.shape(to_others), dist.dtype.max))
        other_nearest = tf.reduce_min(to_others, axis=1)
        other_slot = primitives.first_argmin(to_others, axis=1)
        own = tf.equal(examples[:, None], medoids[None, :]) & used[None, :]
        other_medoid = tf.reduce_any(own, axis=1)
        base = tf.where(other_medoid, tf.gather(slots, primitives.first_argmax(tf.cast(own, tf.int32), axis=1)),
                        other_slot)
        to_candidate = tf.transpose(dist)  # [candidate m, example i]
        closer = (to_candidate < other_nearest[None, :]) | (
            tf.equal(to_candidate, other_nearest[None, :]) & (s < other_slot)[None, :])
        moved = (closer & ~other_medoid[None, :]) | tf.eye(size, dtype=tf.bool)
        member = tf.equal(clusters, s)
        within = -tf.reduce_sum(tf.cast(tf.where(member[:, None], dist, tf.zeros_like(dist)), _WIDE), axis=0)
        score = within + gamma * (1.0 - candidate_nmi(moved, base, classes, average))
        score = tf.where(member, score, tf.fill(tf.shape(score), _WIDE.min))
        best = primitives.first_argmax(score)
        return s + 1, tf.tensor_scatter_nd_update(medoids, [[s]], [best]), clusters

    for _ in range(steps):
        clusters = assignment(dist, medoids)
        medoids = tf.while_loop(lambda s, *_: s < classes.count, update_slot, (tf.constant(0), medoids, clusters))[1]
    return medoids


def oracle_medoids(dist, labels):
    """§3.2's oracle: int32 [B] the medoid of each example's class, the member j minimising
    Σ_{i in the class} d(x_i, x_j) (the lowest index on a tie)."""
    same = masks.same_label(labels)
    within = tf.reduce_sum(tf.where(same, dist, tf.zeros_like(dist)), axis=0)  # [j]
    per_row = tf.where(same, tf.broadcast_to(within[None, :], tf.shape(dist)),
                       tf.fill(tf.shape(dist), dist.dtype.max))
    return primitives.first_argmin(per_row, axis=1)
