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
