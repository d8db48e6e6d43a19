"""Importance weights of pairs from a batch's columns (Hong et al., §5.2).

For the p-random (Eq. 24) and (m, n)-group (Eq. 25) batch designs the weight
W_ij = P_U(i, j) / Q(i, j) factorises as

    W_ij = w_pos · N_i (N_i − 1)   if y_i = y_j
    W_ij = w_neg · N_i · N_j       otherwise

where N_c is the size of class c in the training split and (w_pos, w_neg) are
constants of the design that the pipeline writes into every row:

    p-random  (Eq. 24):  w_pos = L / (p N(N−1)),            w_neg = L(L−1) / ((1−p) N(N−1))
    group     (Eq. 25):  w_pos = L(mn−1) / ((m−1) N(N−1)),  w_neg = L(L−1)(mn−1) / (m(n−1) N(N−1))

(the pipeline may drop the common factor 1/(N(N−1)) and say so; a loss that
averages with these weights is then off by that one constant).

Triplets (not in the papers: derived here, and tested for unbiasedness in
tests/pipelines/test_pipeline_unbiased.py). Let P_U be uniform on the T
ordered triplets (a, p, n) of the training split, y_a = y_p ≠ y_n:

    T = Σ_c N_c (N_c − 1)(N − N_c).

The (m, n)-group design (and m-per-class, whose batches have the same
marginal law) puts a given triplet in a batch with probability

    π_apn = [n(n−1) / (L(L−1))] · [m(m−1) / (N_a(N_a−1))] · [m / N_n]

(both classes drawn, a and p among the m draws of their class, n among the
m of its own), and a batch holds B_T = nm · (m−1) · (n−1)m ordered triplets.
The mean over the batch's triplets of W·ℓ is unbiased for the mean over all
T triplets when W = B_T / (T π_apn), i.e.

    W_apn = L(L−1) · N_a(N_a−1) · N_n / T = w_triplet · N_a(N_a−1) · N_n,
    w_triplet = L(L−1) / T,

with N, L, N_c over the design's eligible classes, as for pairs. The
p-random design scores isolated pairs and has no triplets (no column).
With a sampler that keeps one triplet per positive pair (semi-hard,
distance weighted), the weights correct the design only: the sampler's
choice stays part of the objective (Wu et al.'s point).

Pairs with a cross-batch memory (:mod:`tfdml.memory`; derived here, tested in
tests/tfdml/test_memory.py): see :func:`memory_pair_weights`.
"""

import tensorflow as tf

from tfdml import targets as targets_lib


def pair_weights(targets):
    """[B, B] float32 matrix of W_ij (Hong Eq. 24 / 25) from the batch columns.

    ``targets`` is a :class:`tfdml.targets.Targets` or anything
    :func:`tfdml.targets.unpack` accepts. Returns ``None`` when the batch has
    no importance columns (plain labels): callers then weight all pairs by 1.
    """
    t = targets_lib.unpack(targets)
    if not targets_lib.has_importance(t):
        return None
    n = t.class_size
    same = tf.equal(t.label[:, None], t.label[None, :])
    # w_pos and w_neg are per-row copies of one design constant; take row i's.
    positive = t.w_pos[:, None] * (n * (n - 1.0))[:, None] * tf.ones_like(n)[None, :]
    negative = t.w_neg[:, None] * n[:, None] * n[None, :]
    return tf.where(same, positive, negative)


def triplet_weights(targets, anchor, positive, negative):
    """[T] float32 W_apn = w_triplet·N_a(N_a−1)·N_n of the triplets (indices into the batch).

    ``None`` when the batch carries no ``w_triplet`` column (plain labels, or a
    design without triplets): callers then weight all triplets by 1.
    ``positive`` is not needed by the formula (N_p = N_a) and is accepted so
    callers pass a selection as it is.
    """
    del positive
    t = targets_lib.unpack(targets)
    if t.w_triplet is None or t.class_size is None:
        return None
    n = t.class_size
    anchor = tf.cast(anchor, tf.int32)
    n_a = tf.gather(n, anchor)
    return tf.gather(t.w_triplet, anchor) * n_a * (n_a - 1.0) * tf.gather(n, tf.cast(negative, tf.int32))


def memory_pair_weights(targets, memory_labels, memory_class_size, usable):
    """W [B, B + K] of the pairs of a batch against itself and a cross-batch memory, and
    the fixed denominator C of their mean; ``None`` without importance columns.

    A step scores each ordered pair (i, j), i ≠ j, of the batch once and each
    (anchor i of the batch, memory row holding j ≠ i) once. Let E_ij be the
    expected number of times (i, j) is scored in a step. For any fixed C,

        E[ (1/C) Σ_occurrences W_ij ℓ_ij ] = (1/C) Σ_(i,j) W_ij E_ij ℓ_ij
                                          = (1/(N(N−1))) Σ_(i,j) ℓ_ij

    when W_ij = C / (N(N−1) E_ij): the mean loss over all ordered pairs of the split
    (Hong et al. Eq. 10 over N(N−1), the target of Eq. 23). The denominator is a fixed C,
    not the number of scored pairs, which a memory makes random (an anchor never
    pairs with a memory row of its own example); here C = B(B−1) + B·F, its mean
    up to those exclusions, with F the memory rows in use.

    E_ij has two terms. Within the batch, P(i and j in the batch) = B(B−1)·Q_ij
    with Q the (m, n)-group design's pair distribution (Hong et al. Eq. 9), so
    N(N−1)·P = B(B−1) / W^H_ij, W^H the batch weights of Eq. 25
    (:func:`pair_weights`). Against the memory: the memory holds F/B whole
    earlier batches, each drawn independently of the current one, and each holds
    example j at most once with probability π_j = mn/(L N_j) (n of L classes,
    m of N_j examples); so the expected count is π_i · (F/B) · π_j. In all

        N(N−1) E_ij = B(B−1) / W^H_ij + (F/B) · w_memory / (N_i N_j),
        w_memory = N(N−1) · (mn/L)²           (the design's ``w_memory`` column)
        W_ij = (B(B−1) + B·F) / (N(N−1) E_ij)

    for every occurrence of (i, j), in the batch or against the memory. With an
    empty memory (F = 0) W = W^H. It holds when (a) batches are independent (the
    (m, n)-group design; not m-per-class, whose classes are drawn without
    replacement within an epoch: only the group design writes ``w_memory``), and
    (b) the memory holds whole batches (K a multiple of B, so F is too): a batch's
    rows are grouped by class, so which examples a partly overwritten batch keeps
    is not a uniform share of it.

    Args:
      targets: the batch's :class:`tfdml.targets.Targets` (or what ``unpack`` takes).
      memory_labels: [K] labels of the memory's rows.
      memory_class_size: [K] N_c of the memory's rows (0 for empty rows).
      usable: [K] bool, the rows in use this step (filled and past the warm-up).

    Raises ``ValueError`` when the batch has the importance columns but no
    ``w_memory`` (a design whose memory composition gives no Q), or when the
    static K is not a multiple of the static B; with an unknown batch size, a K
    that is not a multiple of B gives NaN weights.
    """
    t = targets_lib.unpack(targets)
    if not targets_lib.has_importance(t):
        return None
    if t.w_memory is None:
        raise ValueError(
            "Importance weights with a cross-batch memory: the batch has no 'w_memory' column. "
            "The weights of memory pairs are derived for the (m, n)-group design only, whose "
            "batches are independent, so the memory's composition gives each pair's sampling "
            "probability; m-per-class batches of one epoch are dependent (classes without "
            "replacement) and p-random gives isolated pairs. Use design 'group', or "
            "importance=False with a memory."
        )
    size = memory_labels.shape[0]
    static_batch = t.label.shape[0]
    if size is not None and static_batch is not None and (static_batch == 0 or size % static_batch):
        raise ValueError(
            f"Importance weights with a cross-batch memory: the memory size {size} must be a "
            f"multiple of the batch size {static_batch}, so that the memory holds whole batches "
            "of the design (a partly overwritten batch keeps some of its class groups, not a "
            f"uniform share of its examples); use size {max(1, size // max(static_batch, 1)) * static_batch}."
        )
    n_i = t.class_size
    batch = tf.cast(tf.shape(t.label)[0], tf.float32)
    used = tf.concat([tf.ones_like(n_i, tf.bool), tf.cast(usable, tf.bool)], axis=0)  # [M]
    n_all = tf.concat([n_i, tf.cast(memory_class_size, tf.float32)], axis=0)
    n_all = tf.where(used, n_all, tf.ones_like(n_all))  # empty rows: weight 0 below
    labels = tf.concat([tf.cast(t.label, tf.int64), tf.cast(memory_labels, tf.int64)], axis=0)
    same = tf.equal(tf.cast(t.label, tf.int64)[:, None], labels[None, :])
    hong = tf.where(same, (t.w_pos * n_i * (n_i - 1.0))[:, None] * tf.ones_like(n_all)[None, :],
                    (t.w_neg * n_i)[:, None] * n_all[None, :])
    filled = tf.reduce_sum(tf.cast(usable, tf.float32))
    batch_pairs = batch * (batch - 1.0)
    expected = (tf.math.divide_no_nan(batch_pairs, hong)
                + (filled / batch) * t.w_memory[:, None] / (n_i[:, None] * n_all[None, :]))
    denominator = batch_pairs + batch * filled
    weights = tf.where(used[None, :], tf.math.divide_no_nan(denominator, expected), 0.0)
    whole = tf.equal(tf.math.floormod(tf.cast(tf.shape(memory_labels)[0], tf.float32), batch), 0.0)
    weights = tf.where(whole, weights, tf.constant(float("nan")))
    return weights, denominator
