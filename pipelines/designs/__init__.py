"""Batch designs: seedable tf.data streams of training batches with importance columns.

A design turns a training split into an infinite stream of batches

    (x [B, ...], {"label", "class_size", "w_pos", "w_neg"[, "pair_id"], "example_id"
                  [, "w_triplet"][, "w_memory"]})

following the batch contract of docs/design.md. Every batch is drawn by stateless
TensorFlow ops keyed by ``(seed, step)``: the same seed gives the same batches,
with no Python code per batch.

Designs (Hong et al., "Deep Metric Learning via Weighted Contrastive Loss", §4):

* :class:`GroupDesign` ``(m, n)`` — §4.2: n classes uniformly without
  replacement, m examples of each uniformly without replacement; all
  ordered pairs of the batch are scored. Pair distribution Q: Eq. 9.
* :class:`PRandomDesign` ``(p, pairs)`` — §4.1: each pair is positive with
  probability p (a uniform class, then a uniform ordered pair of distinct
  examples of it) or negative (two distinct uniform classes, one uniform
  example of each). A batch holds ``pairs`` pairs, marked by ``pair_id``;
  only the two ordered pairs inside a pair are scored. Q: Eq. 8.
* :class:`MPerClassDesign` ``(m, classes_per_batch)`` — FaceNet batches (Wu et
  al. §5) with the balanced classes of the draft (§5.1, Eq. 13–14, "without
  replacement"): each epoch is a fresh uniform permutation of the classes cut
  into blocks of ``classes_per_batch`` classes (a leftover block smaller than
  that is dropped), m examples per class without replacement. Every class
  appears once per epoch.

Importance columns (Hong §5.2). With N examples and L classes in the training
split and P_U(i, j) = 1 / (N(N−1)) the uniform distribution on ordered pairs,
W_ij = P_U(i, j) / Q(i, j) factorises as W_ij = w_pos·N_i(N_i−1) (positive)
and W_ij = w_neg·N_i·N_j (negative), where the design writes into every row

    p-random (Eq. 24):          w_pos = L⁺ / (p N(N−1))
                                w_neg = L(L−1) / ((1−p) N(N−1))
    group, m-per-class (Eq. 25): w_pos = L(mn−1) / ((m−1) N(N−1))
                                w_neg = L(L−1)(mn−1) / (m(n−1) N(N−1))

Group and m-per-class batches also carry ``w_triplet`` = L(L−1)/T (T = the
number of ordered triplets of the split), the constant of the triplet weights
W_apn = w_triplet·N_a(N_a−1)·N_n derived in :mod:`tfdml.importance`.

Group batches alone carry ``w_memory`` = N(N−1)·(mn/L)², the constant of the weights
of a cross-batch memory's pairs (:func:`tfdml.importance.memory_pair_weights`): with
π_i = mn/(L N_i) the probability that example i is in a batch, N(N−1)·π_i·π_j =
w_memory/(N_i N_j). Those weights need the memory's batches to be independent of the
current one, which holds for the group design (every batch drawn afresh) and not for
m-per-class (classes without replacement within an epoch) nor p-random (isolated
pairs, which a memory refuses), so these carry no ``w_memory``.

For pairs, W equals Eq. 24 / Eq. 25 exactly: the normalising constant is 1 (the
factor 1/(N(N−1)) of P_U is kept). E_Q[W] = 1, and the mini-batch loss of
Eq. 23 (the mean of W_ij·ℓ_ij over the batch's scored ordered pairs) is an
unbiased estimate of the full loss Eq. 10 divided by N(N−1), the mean loss over
all ordered pairs of the training split. :func:`tfdml.importance.pair_weights`
turns the columns into the [B, B] matrix.

Small classes, reflected exactly in the weights:

* p-random: classes with a single example have no positive pair; they are
  left out of the *positive* class draw only, so L⁺ is the number of classes
  with N_c ≥ 2 (L⁺ = L, Eq. 24 as printed, when every class has two
  examples). They still take part in negative pairs.
* group and m-per-class: a class with fewer than m examples cannot give m
  distinct examples; such classes are left out of the design, and N, L above
  are the number of examples and classes of the *eligible* classes (N_c ≥ m).
  The estimate is then unbiased for the loss over the eligible examples'
  pairs (pairs touching a left-out class have Q = 0 and no weight can
  restore them). A warning says how many classes were left out.

Why m-per-class has the group weights: a block of a uniformly random
permutation is marginally a uniformly random n-subset of the classes, so each
batch, taken alone, is distributed exactly as an (m, n)-group batch and its
pair distribution is Eq. 9 (batches of one epoch are dependent, which does not
change an expectation). The weights are therefore Eq. 25 with
n = classes_per_batch.

Modules: :mod:`~pipelines.designs.base` (:class:`Design`, the drawing core shared by every
design, and :class:`DesignPlan`), :mod:`~pipelines.designs.checks` (the arguments and the
split a design refuses), :mod:`~pipelines.designs.draws` (stateless draws of distinct
classes and examples), one module per design (:mod:`~pipelines.designs.group`: group and
m-per-class; :mod:`~pipelines.designs.p_random`; :mod:`~pipelines.designs.two_views`, every
image twice for the losses of two views; :mod:`~pipelines.designs.smart_mining`, triplets whose
negatives come from a table of mined neighbours) and :mod:`~pipelines.designs.registry`
(:data:`DESIGNS`, :func:`register`, :func:`get_design`). Every public name is importable
from here.
"""

from pipelines.designs.base import Design, DesignPlan
from pipelines.designs.group import GroupDesign, MPerClassDesign
from pipelines.designs.p_random import PRandomDesign
from pipelines.designs.smart_mining import SmartMiningDesign
from pipelines.designs.registry import DESIGNS, get_design, register
from pipelines.designs.two_views import TwoViewDesign

__all__ = [
    "Design",
    "DesignPlan",
    "GroupDesign",
    "PRandomDesign",
    "MPerClassDesign",
    "TwoViewDesign",
    "SmartMiningDesign",
    "DESIGNS",
    "get_design",
    "register",
]
