# Over 400 lines: the three designs share one plan and one drawing core (DesignPlan, Design), kept beside them.
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
"""

import inspect
import logging

import numpy as np
import tensorflow as tf
from tfdml.registry import Registry

__all__ = [
    "Design",
    "DesignPlan",
    "GroupDesign",
    "PRandomDesign",
    "MPerClassDesign",
    "DESIGNS",
    "get_design",
    "register",
]

log = logging.getLogger(__name__)

# Batches drawn together in one tf.data element (vectorised over a leading
# axis, then unbatched) amortise tf.data's per-element cost. The chunk size is
# a function of the design and the split only (fewer batches per chunk when
# classes are large, to bound the per-chunk noise tensor), so a seed still
# fixes the stream.
_MAX_CHUNK = 64
_CHUNK_ELEMENTS = 1 << 20


def _labels_of(split_or_labels):
    labels = getattr(split_or_labels, "labels", split_or_labels)
    labels = np.asarray(labels)
    if labels.ndim != 1:
        labels = labels.reshape(-1)
    if labels.size == 0:
        raise ValueError("The training split has no examples; a batch design needs labelled examples.")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"Labels must be integer class ids, got dtype {labels.dtype}.")
    return labels.astype(np.int32)


def _positive_int(value, name, minimum=1, why=""):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}{why}, got {value!r}.")
    return int(value)


class DesignPlan:
    """What a design needs from a split, computed once in NumPy by ``validate``.

    Attributes: ``labels`` [N_all] (int32, the split's labels), ``class_size``
    [N_all] (float32, N_c of each example's class in the split), ``classes``
    (the sorted class ids), ``sizes`` [L_all], ``order`` (example indices
    grouped by class), ``offsets`` [L_all], ``eligible`` (dense ids of the
    classes the design draws from), ``num_examples`` and ``num_classes`` (N
    and L of the weights), ``w_pos`` and ``w_neg``, and ``chunk`` (batches
    drawn per tf.data element, set by ``Design.validate``).
    """

    def __init__(self, labels, eligible_mask):
        self.labels = labels
        self.classes, dense, counts = np.unique(labels, return_inverse=True, return_counts=True)
        self.dense = dense.astype(np.int32)
        self.sizes = counts.astype(np.int32)
        self.class_size = self.sizes[self.dense].astype(np.float32)
        self.order = np.argsort(self.dense, kind="stable").astype(np.int32)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int32)
        self.eligible = np.flatnonzero(eligible_mask(self.sizes)).astype(np.int32)
        self.num_classes = int(len(self.eligible))
        self.num_examples = int(self.sizes[self.eligible].sum())
        self.w_pos = None
        self.w_neg = None
        self.w_triplet = None  # designs whose batches hold triplets (tfdml.importance)
        self.w_memory = None  # designs with independent batches (tfdml.importance.memory_pair_weights)

    @property
    def max_size(self):
        return int(self.sizes[self.eligible].max())


class Design:
    """Base class: ``batch_size``, ``validate(split)``, ``index_batches``, ``batches``."""

    name = None
    batch_size = None
    #: True when a batch holds m examples (``self.m``) of each of its classes (group,
    #: m-per-class): what a learned sampler draws its tuples from.
    grouped_by_class = False
    #: True when a batch is isolated pairs marked by ``pair_id`` (p-random): a loss or
    #: sampler that needs tuples would score nothing on it.
    pairs_only = False
    #: True when every batch is drawn independently of the others, so that a cross-batch
    #: memory's composition gives its pairs' sampling probability: the design writes the
    #: ``w_memory`` column (:func:`tfdml.importance.memory_pair_weights`).
    independent_batches = False
    #: Config keys that name a constructor argument differently, e.g. ``{"n": "classes_per_batch"}``.
    config_aliases = {}

    @classmethod
    def from_config(cls, config):
        """The design made from ``config``, a dict whose keys name the constructor's
        arguments, directly or through :attr:`config_aliases` (a direct name wins).
        Keys the constructor does not take are ignored, so a config's whole ``design``
        section (``name``, m, n, p, pairs) makes any design, and
        ``type(d).from_config(d.get_config())`` remakes ``d``."""
        params = {
            name for name, param in inspect.signature(cls.__init__).parameters.items()
            if name != "self" and param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)
        }
        kwargs = {}
        for key, value in config.items():
            arg = cls.config_aliases.get(key, key)
            if arg in params and not (arg != key and arg in config):
                kwargs[arg] = value
        return cls(**kwargs)

    # -- to implement -----------------------------------------------------
    def _plan(self, labels):  # -> DesignPlan with w_pos / w_neg set
        raise NotImplementedError

    def _draw(self, plan, consts, key, extra):
        """Draw K = ``plan.chunk`` batches: (example_id [K, B], pair_id [K, B] or None)."""
        raise NotImplementedError

    def _chunks(self, plan, seed):
        """Dataset of (chunk index, extra [K, ...]) fed to ``_draw``."""
        return tf.data.Dataset.counter().map(lambda c: (c, tf.zeros([plan.chunk], tf.int32)))

    def get_config(self):
        raise NotImplementedError

    # -- shared -------------------------------------------------------------
    def validate(self, split_or_labels):
        """Check the design against a training split; return its :class:`DesignPlan`.

        Raises ``ValueError`` when the split cannot feed the design.
        """
        plan = self._plan(_labels_of(split_or_labels))
        per_batch = self.batch_size * (plan.max_size if hasattr(self, "m") else 8)
        plan.chunk = int(max(1, min(_MAX_CHUNK, _CHUNK_ELEMENTS // per_batch)))
        return plan

    def weights(self, split_or_labels):
        """``(w_pos, w_neg)``: the design constants of the columns (Hong Eq. 24 / 25)."""
        plan = self.validate(split_or_labels)
        return plan.w_pos, plan.w_neg

    def _index_dataset(self, plan, seed, with_step=False):
        seed = int(seed)
        consts = {
            "labels": tf.constant(plan.labels),
            "class_size": tf.constant(plan.class_size),
            "order": tf.constant(plan.order),
            "offsets": tf.constant(plan.offsets),
            "sizes": tf.constant(plan.sizes),
            "eligible": tf.constant(plan.eligible),
        }
        w_pos = tf.constant(plan.w_pos, tf.float32)
        w_neg = tf.constant(plan.w_neg, tf.float32)
        w_triplet = None if plan.w_triplet is None else tf.constant(plan.w_triplet, tf.float32)
        w_memory = None if plan.w_memory is None else tf.constant(plan.w_memory, tf.float32)
        batch = self.batch_size
        base = tf.constant([seed, 0x5EED], tf.int64)

        def make(chunk, extra):
            key = tf.random.experimental.stateless_fold_in(base, chunk)
            example_id, pair_id = self._draw(plan, consts, key, extra)
            # A design knows its batch size: static shapes (checked), so that
            # model.fit traces (and XLA compiles) one step for the batch size.
            example_id = tf.ensure_shape(example_id, [plan.chunk, batch])
            if pair_id is not None:
                pair_id = tf.ensure_shape(pair_id, [plan.chunk, batch])
            cols = {
                "label": tf.gather(consts["labels"], example_id),
                "class_size": tf.gather(consts["class_size"], example_id),
                "w_pos": tf.fill([plan.chunk, batch], w_pos),
                "w_neg": tf.fill([plan.chunk, batch], w_neg),
                "example_id": example_id,
            }
            if pair_id is not None:
                cols["pair_id"] = pair_id
            if w_triplet is not None:
                cols["w_triplet"] = tf.fill([plan.chunk, batch], w_triplet)
            if w_memory is not None:
                cols["w_memory"] = tf.fill([plan.chunk, batch], w_memory)
            return cols

        ds = self._chunks(plan, seed).map(make, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
        if with_step:
            ds = tf.data.Dataset.zip(tf.data.Dataset.counter(), ds)
        return ds

    def index_batches(self, split_or_labels, seed=0):
        """Infinite dataset of column dicts only (no images): ``example_id`` is
        the index of the example in the split; for benchmarks and tests."""
        plan = self.validate(split_or_labels)
        return self._index_dataset(plan, seed)

    def batches(self, split, seed=0, transform=None, prefetch=True):
        """Infinite dataset of ``(x [B, H, W, C], columns)`` from ``split``.

        ``split`` is a :class:`pipelines.sources.Split` (its ``load`` gathers
        or decodes images). ``transform(images, seed)`` (e.g. from
        :mod:`pipelines.augment`) is applied to each batch with a stateless
        seed derived from ``(seed, step)``.

        Shapes are static (``element_spec`` fully defined): B = ``batch_size``,
        every column is [B], and x keeps the split's (or the transform's)
        static image size, as the loaders and :mod:`pipelines.augment` give.
        """
        if not hasattr(split, "load"):
            raise ValueError(
                "batches() needs a Split from pipelines.sources (with .load); for labels only "
                "use index_batches()."
            )
        plan = self.validate(split)

        augment_base = tf.constant([int(seed), 0xA06], tf.int64)

        def gather(step, cols):
            x = split.load(cols["example_id"])
            if transform is not None:
                x = transform(x, seed=tf.random.experimental.stateless_fold_in(augment_base, step))
            if x.shape.rank is not None:  # keep the static batch size through a transform
                x = tf.ensure_shape(x, [self.batch_size] + [None] * (x.shape.rank - 1))
            return x, cols

        ds = self._index_dataset(plan, seed, with_step=True)
        ds = ds.map(gather, num_parallel_calls=tf.data.AUTOTUNE)
        return ds.prefetch(tf.data.AUTOTUNE) if prefetch else ds

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


_WARNED = set()


def _warn_left_out(plan, m, design):
    """Log (once per design and label set) how many classes a group design leaves out."""
    left = len(plan.sizes) - plan.num_classes
    key = (design, len(plan.labels), len(plan.sizes), left)
    if left and key not in _WARNED:
        _WARNED.add(key)
        log.warning(
            "%s: %d of %d classes have fewer than m=%d examples and are left out of the design "
            "(the weights use the remaining N=%d examples, L=%d classes).",
            design, left, len(plan.sizes), m, plan.num_examples, plan.num_classes,
        )


def _group_weights(plan, m, n):
    """Hong Eq. 25 (normalising constant 1): (w_pos, w_neg)."""
    big_n, big_l = plan.num_examples, plan.num_classes
    pairs = big_n * (big_n - 1.0)
    w_pos = big_l * (m * n - 1.0) / ((m - 1.0) * pairs)
    w_neg = big_l * (big_l - 1.0) * (m * n - 1.0) / (m * (n - 1.0) * pairs)
    return w_pos, w_neg


def _top_k_subset(key, chunk, population, count):
    """[chunk, count] distinct uniform indices of [0, population): top of i.i.d. 64-bit keys."""
    bits = tf.random.stateless_uniform(
        [chunk, population], key, dtype=tf.int64, minval=None, maxval=None
    )
    return tf.math.top_k(bits, count, sorted=False).indices


def _distinct_uniform(key, chunk, population, count):
    """[chunk, count] uniformly random count-subsets of [0, population), one per row.

    Small populations (< 4·count): the top ``count`` of i.i.d. random keys
    over the whole population. Large ones (SOP: 11,318 classes): the first
    ``count`` distinct values among 2·count i.i.d. uniform draws, which by
    symmetry is a uniformly random subset, at O(count²) instead of
    O(population) per batch; a row with fewer than ``count`` distinct draws
    (rare) takes an independent top-k draw instead, which keeps it uniform.
    (Integer draws come from 64-bit keys: bias below population / 2**64.)
    """
    k_fast, k_slow = tf.unstack(tf.random.experimental.stateless_split(key, 2))
    if population < 4 * count:
        return _top_k_subset(k_slow, chunk, population, count)
    width = 2 * count
    draws = tf.random.stateless_uniform(
        [chunk, width], k_fast, minval=0, maxval=population, dtype=tf.int64
    )
    position = tf.range(width)
    earlier = position[:, None] > position[None, :]
    repeat = tf.reduce_any(tf.equal(draws[:, :, None], draws[:, None, :]) & earlier, axis=-1)
    rank = tf.where(repeat, width + position, position)
    first = tf.math.top_k(-rank, count, sorted=True).indices  # first `count` new values
    subset = tf.cast(tf.gather(draws, first, batch_dims=1), tf.int32)
    enough = tf.reduce_sum(tf.cast(~repeat, tf.int32), axis=-1) >= count
    return tf.cond(
        tf.reduce_all(enough),
        lambda: subset,
        lambda: tf.where(enough[:, None], subset, _top_k_subset(k_slow, chunk, population, count)),
    )


def _draw_m_per_class(plan, consts, key, classes, m):
    """m distinct uniform examples of each class in ``classes`` [K, n] (dense ids) -> [K, n·m].

    Top m of i.i.d. uniform keys over each class's positions (padding masked).
    """
    sizes = tf.gather(consts["sizes"], classes)
    width = plan.max_size
    shape = tf.concat([tf.shape(classes), [width]], 0)
    noise = tf.random.stateless_uniform(shape, key, dtype=tf.float64)
    # Positions beyond a class's size get -1 so top_k never picks them.
    valid = tf.range(width) < sizes[..., None]
    noise = tf.where(valid, noise, -tf.ones_like(noise))
    pos = tf.math.top_k(noise, m, sorted=False).indices
    flat = tf.gather(consts["offsets"], classes)[..., None] + pos
    return tf.reshape(tf.gather(consts["order"], flat), [plan.chunk, -1])


def _group_plan(labels, m, n, design):
    """Checks and Eq. 25 weights shared by the group and m-per-class designs."""
    plan = DesignPlan(labels, lambda sizes: sizes >= m)
    largest = int(plan.sizes.max())
    if largest < m:
        raise ValueError(
            f"m={m} is larger than every class (the largest has {largest} examples); "
            f"use m <= {largest}."
        )
    if plan.num_classes < n:
        if plan.num_classes >= 2:
            fix = f"use n <= {plan.num_classes} or a smaller m"
        else:  # n >= 2 always: only a smaller m lets a second class in
            second = int(np.sort(plan.sizes)[-2]) if len(plan.sizes) > 1 else 0
            fix = (f"use m <= {second} so that two classes qualify" if second >= 2
                   else "the split needs two classes with at least two examples each")
        raise ValueError(
            f"n={n} classes per batch, but only {plan.num_classes} classes have at least m={m} "
            f"examples; {fix}."
        )
    _warn_left_out(plan, m, design)
    plan.w_pos, plan.w_neg = _group_weights(plan, m, n)
    sizes = plan.sizes[plan.eligible].astype(np.float64)
    triplets = float(np.sum(sizes * (sizes - 1.0) * (plan.num_examples - sizes)))
    # W_apn = w_triplet·N_a(N_a−1)·N_n (derivation: tfdml.importance).
    plan.w_triplet = plan.num_classes * (plan.num_classes - 1.0) / triplets
    return plan


def _split_batch_arg(m, count, batch_size, count_name):
    """Resolve ``count`` (classes per batch) from ``batch_size`` when that is given."""
    if (count is None) == (batch_size is None):
        raise ValueError(f"Give exactly one of {count_name} and batch_size.")
    if batch_size is not None:
        batch_size = _positive_int(batch_size, "batch_size")
        if batch_size % m:
            raise ValueError(
                f"batch_size={batch_size} is not divisible by m={m}; use a multiple of m "
                f"(e.g. {m * max(2, batch_size // m)})."
            )
        count = batch_size // m
    return count


class GroupDesign(Design):
    """Hong §4.2 (m, n)-group design: n classes, m examples each, all ordered pairs.

    ``GroupDesign(m, n)`` or ``GroupDesign(m, batch_size=B)`` (n = B / m).
    Needs m ≥ 2 and n ≥ 2 (Eq. 9 / 25 divide by m−1 and n−1). Classes with
    fewer than m examples are left out (see the module docstring). Columns:
    label, class_size, w_pos, w_neg (Eq. 25), example_id, w_triplet and
    w_memory (the memory pairs' constant N(N−1)·(mn/L)², see the module
    docstring: batches are drawn independently). The batch is grouped by
    class: rows [k·m, (k+1)·m) share a class.
    """

    name = "group"
    grouped_by_class = True
    independent_batches = True

    def __init__(self, m, n=None, batch_size=None):
        self.m = _positive_int(m, "m", 2, " (a class needs two examples in a batch to give a positive pair)")
        n = _split_batch_arg(self.m, n, batch_size, "n")
        self.n = _positive_int(n, "n", 2, " (a batch needs two classes to give negative pairs, Eq. 25 divides by n-1)")
        self.batch_size = self.m * self.n

    def get_config(self):
        return {"m": self.m, "n": self.n}

    def _plan(self, labels):
        plan = _group_plan(labels, self.m, self.n, repr(self))
        inclusion = self.batch_size / plan.num_classes  # π_i·N_i (module docstring)
        plan.w_memory = plan.num_examples * (plan.num_examples - 1.0) * inclusion ** 2
        return plan

    def _draw(self, plan, consts, key, extra):
        k_class, k_example = tf.unstack(tf.random.experimental.stateless_split(key, 2))
        pick = _distinct_uniform(k_class, plan.chunk, plan.num_classes, self.n)
        classes = tf.gather(consts["eligible"], pick)
        return _draw_m_per_class(plan, consts, k_example, classes, self.m), None


class MPerClassDesign(Design):
    """FaceNet / balanced-classes batches: classes without replacement across an epoch.

    ``MPerClassDesign(m, classes_per_batch)`` or ``MPerClassDesign(m,
    batch_size=B)``. Each epoch is a fresh uniform permutation of the
    eligible classes (N_c ≥ m), independent of the previous epochs; its first
    ``floor(L / classes_per_batch) · classes_per_batch`` classes are cut into
    ``floor(L / classes_per_batch)`` blocks, one per batch, and the last
    ``L mod classes_per_batch`` classes of the permutation are dropped for that
    epoch (not carried over to the next one). So every class appears at most
    once per epoch, and in a given epoch with the same probability
    ``floor(L / n) · n / L`` (n = classes_per_batch) as any other class.
    Examples: m per class without replacement. Weights: Eq. 25 with
    n = classes_per_batch (exact; see the module docstring).
    """

    name = "m_per_class"
    grouped_by_class = True
    config_aliases = {"n": "classes_per_batch"}

    def __init__(self, m, classes_per_batch=None, batch_size=None):
        self.m = _positive_int(m, "m", 2, " (a class needs two examples in a batch to give a positive pair)")
        n = _split_batch_arg(self.m, classes_per_batch, batch_size, "classes_per_batch")
        self.classes_per_batch = _positive_int(
            n, "classes_per_batch", 2, " (a batch needs two classes to give negative pairs)"
        )
        self.batch_size = self.m * self.classes_per_batch

    def get_config(self):
        return {"m": self.m, "classes_per_batch": self.classes_per_batch}

    def _plan(self, labels):
        # Same constraints and weights as the (m, n)-group design.
        return _group_plan(labels, self.m, self.classes_per_batch, repr(self))

    def batches_per_epoch(self, split_or_labels):
        """Batches in one pass over the (eligible) classes: floor(L / classes_per_batch)."""
        return self.validate(split_or_labels).num_classes // self.classes_per_batch

    def _chunks(self, plan, seed):
        n = self.classes_per_batch
        blocks = plan.num_classes // n
        eligible = tf.constant(plan.eligible)
        epoch_base = tf.constant([int(seed), 0xE90C], tf.int64)

        def epoch(e):
            key = tf.random.experimental.stateless_fold_in(epoch_base, e)
            bits = tf.random.stateless_uniform(
                [plan.num_classes], key, dtype=tf.int64, minval=None, maxval=None
            )
            perm = tf.argsort(bits)[: blocks * n]
            return tf.reshape(tf.gather(eligible, perm), [blocks, n])

        # The stream is infinite: drop_remainder drops nothing and keeps the shape static.
        class_blocks = tf.data.Dataset.counter().map(epoch).unbatch().batch(plan.chunk, drop_remainder=True)
        return tf.data.Dataset.zip(tf.data.Dataset.counter(), class_blocks)

    def _draw(self, plan, consts, key, extra):
        return _draw_m_per_class(plan, consts, key, extra, self.m), None


class PRandomDesign(Design):
    """Hong §4.1 p-random design: independent positive (prob. p) / negative pairs.

    ``PRandomDesign(p, pairs)`` or ``PRandomDesign(p, batch_size=B)`` (pairs =
    B / 2). Rows 2k and 2k+1 hold pair k (``pair_id`` = k); the pair is
    ordered (first, second) as drawn. Classes with one example are left out
    of the positive class draw (w_pos uses L⁺, see the module docstring).
    Columns: label, class_size, w_pos, w_neg (Eq. 24), pair_id, example_id.
    """

    name = "p_random"
    pairs_only = True

    def __init__(self, p=0.5, pairs=None, batch_size=None):
        if isinstance(p, bool) or not isinstance(p, (int, float, np.floating)) or not 0.0 < float(p) < 1.0:
            raise ValueError(
                f"p must be a probability strictly between 0 and 1 (Eq. 24 divides by p and 1-p), got {p!r}."
            )
        self.p = float(p)
        if (pairs is None) == (batch_size is None):
            raise ValueError("Give exactly one of pairs and batch_size.")
        if batch_size is not None:
            batch_size = _positive_int(batch_size, "batch_size", 2)
            if batch_size % 2:
                raise ValueError(f"batch_size={batch_size} is odd; a p-random batch holds pairs, use an even size.")
            pairs = batch_size // 2
        self.pairs = _positive_int(pairs, "pairs")
        self.batch_size = 2 * self.pairs

    def get_config(self):
        return {"p": self.p, "pairs": self.pairs}

    def _plan(self, labels):
        plan = DesignPlan(labels, lambda sizes: np.ones_like(sizes, dtype=bool))
        plan.positive = np.flatnonzero(plan.sizes >= 2).astype(np.int32)
        if len(plan.sizes) < 2:
            raise ValueError(
                "The p-random design needs at least 2 classes for negative pairs; the split has "
                f"{len(plan.sizes)}."
            )
        if len(plan.positive) == 0:
            raise ValueError(
                "The p-random design needs a class with at least 2 examples for positive pairs; "
                "every class of the split has one example."
            )
        big_n, big_l, l_pos = plan.num_examples, plan.num_classes, len(plan.positive)
        pairs = big_n * (big_n - 1.0)
        plan.w_pos = l_pos / (self.p * pairs)
        plan.w_neg = big_l * (big_l - 1.0) / ((1.0 - self.p) * pairs)
        return plan

    def _draw(self, plan, consts, key, extra):
        count = self.pairs
        positive_classes = tf.constant(plan.positive)
        u = tf.random.stateless_uniform([8, plan.chunk, count], key, dtype=tf.float64)

        def below(x, k):  # uniform integer in [0, k) from x ~ U[0, 1)
            k = tf.cast(k, tf.float64)
            return tf.cast(tf.minimum(tf.floor(x * k), k - 1.0), tf.int32)

        sizes, offsets, order = consts["sizes"], consts["offsets"], consts["order"]
        # Positive: uniform class among those with >= 2 examples, ordered pair of distinct examples.
        pc = tf.gather(positive_classes, below(u[0], len(plan.positive)))
        n_pc = tf.gather(sizes, pc)
        a = below(u[1], n_pc)
        b = below(u[2], n_pc - 1)
        b = b + tf.cast(b >= a, tf.int32)
        pos_first = tf.gather(offsets, pc) + a
        pos_second = tf.gather(offsets, pc) + b
        # Negative: ordered pair of distinct uniform classes, one uniform example each.
        num_classes = len(plan.sizes)
        c1 = below(u[3], num_classes)
        c2 = below(u[4], num_classes - 1)
        c2 = c2 + tf.cast(c2 >= c1, tf.int32)
        neg_first = tf.gather(offsets, c1) + below(u[5], tf.gather(sizes, c1))
        neg_second = tf.gather(offsets, c2) + below(u[6], tf.gather(sizes, c2))
        is_positive = u[7] < self.p
        first = tf.gather(order, tf.where(is_positive, pos_first, neg_first))
        second = tf.gather(order, tf.where(is_positive, pos_second, neg_second))
        example_id = tf.reshape(tf.stack([first, second], axis=-1), [plan.chunk, 2 * count])
        pair_id = tf.tile(tf.repeat(tf.range(count, dtype=tf.int32), 2)[None, :], [plan.chunk, 1])
        return example_id, pair_id


def _check_design(name, obj):
    if not (isinstance(obj, type) and issubclass(obj, Design)):
        raise ValueError(f"A batch design is a subclass of pipelines.designs.Design; {name!r} is {obj!r}.")


#: name → :class:`Design` subclass, in registration order.
DESIGNS = Registry("batch design", check=_check_design)
DESIGNS.update({
    "group": GroupDesign,
    "p_random": PRandomDesign,
    "m_per_class": MPerClassDesign,
})


def register(name):
    """Class decorator: make a :class:`Design` subclass the batch design named ``name``
    (:data:`DESIGNS`, :func:`get_design`, configs' ``design.name``, made with
    :meth:`Design.from_config`)."""
    return DESIGNS.register(name)


def get_design(name, **kwargs):
    """Build a design from its name and constructor arguments: ``get_design("group", m=4, n=16)``."""
    return DESIGNS.build(name, **kwargs)
