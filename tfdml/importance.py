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
