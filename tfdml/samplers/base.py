"""Base class and selection types shared by every in-graph sampler.

A sampler looks at a [B, M] matrix of the batch's B anchors against M candidates,
the batch first (M = B: the batch alone; a distance, except for
:class:`~tfdml.samplers.TopKMisplacedSampler`, which takes similarity
scores), the labels and the candidate-pair mask of
:func:`tfdml.masks.candidate_mask`, and returns a fixed-shape selection that a
loss turns into its pair, triplet or set terms:

* ``kind == "pairs"``: :class:`PairSelection`, two [B, M] float32 matrices of
  multiplicities (0 = not selected, the diagonal is always 0);
* ``kind == "triplets"``: :class:`TripletSelection`, [T] int32 indices of
  anchor, positive and negative plus a [T] bool mask of the valid slots, where
  T is a fixed function of B; the indices of invalid slots are in range but
  meaningless;
* ``kind == "sets"``: :class:`SetSelection`, two [B, M] bool matrices, row a
  holding query a's misplaced positive set P and negative set N (Lu et al.
  2019, §3.3).

Selections never carry gradients: the matrix is wrapped in
``tf.stop_gradient`` before anything is computed from it. Everything is
vectorised with fixed shapes and compiles under ``tf.function(jit_compile=True)``.
Random draws use stateless philox bits, so a seed gives the same selection
with and without XLA.
"""

import collections

import tensorflow as tf

from tfdml import masks, primitives
from tfdml.kernels import chosen

PairSelection = collections.namedtuple("PairSelection", ["pos_weight", "neg_weight"])
PairSelection.__doc__ = """Selected pairs as [B, M] float32 multiplicities (0 = not selected; column a of row a 0)."""

TripletSelection = collections.namedtuple(
    "TripletSelection", ["anchor", "positive", "negative", "mask"]
)
TripletSelection.__doc__ = """[T] int32 anchor / positive / negative indices and a [T] bool mask of valid slots."""


class GridTripletSelection(TripletSelection):
    """A :class:`TripletSelection` of T = B·M slots laid out as the grid of ordered pairs
    of B anchors and M candidates (M = B for the batch alone): slot a·M + p holds anchor
    a and positive p (one negative per pair, as the semi-hard and distance weighted
    samplers choose). A loss may then read D_ap as the [B, M] matrix itself instead of
    gathering it (:func:`tfdml.losses.triplet.anchor_positive`),
    which under XLA saves a B² gather and, in the gradient, a B² scatter."""

    __slots__ = ()

SetSelection = collections.namedtuple("SetSelection", ["positive", "negative"])
SetSelection.__doc__ = """[B, M] bool: row a = query a, columns = its misplaced sets P (positive) and N (negative)."""

KINDS = ("pairs", "triplets", "sets")


def _prepare(dist, labels, candidates):
    """Stopped float matrix, flat labels and the candidate mask (the anchors' own columns removed).

    ``dist`` is [B, M]: row a is anchor a, column j candidate j, and the first B
    candidates are the anchors themselves in the same order (M = B: the batch against
    itself; M > B: the batch followed by other candidates, e.g. a cross-batch memory,
    :mod:`tfdml.memory`). ``labels`` are the M candidates' labels (the anchors' are
    the first B); ``candidates`` is [B, M]. Column a of row a is never a candidate."""
    dist = tf.convert_to_tensor(dist)
    if not dist.dtype.is_floating:
        dist = tf.cast(dist, tf.float32)
    elif dist.dtype not in (tf.float32, tf.float64):  # float16 / bfloat16: order-preserving upcast
        dist = tf.cast(dist, tf.float32)
    dist = tf.stop_gradient(dist)
    if dist.shape.rank is not None and dist.shape.rank != 2:
        raise ValueError(
            f"A sampler needs a [B, M] matrix of the batch against its candidates, got shape {dist.shape}; "
            "compute it with tfdml.distances.pairwise(embeddings)."
        )
    if dist.shape.rank == 2 and None not in dist.shape.as_list() and dist.shape[0] > dist.shape[1]:
        raise ValueError(
            f"A sampler needs a [B, M] matrix of B anchors against M >= B candidates (the batch "
            f"first), got shape {dist.shape}."
        )
    labels = tf.reshape(tf.convert_to_tensor(labels), [-1])
    if None not in (labels.shape[0], dist.shape[-1]) and labels.shape[0] != dist.shape[-1]:
        raise ValueError(
            f"A sampler needs one label per candidate column: got {labels.shape[0]} labels for a "
            f"matrix of shape {dist.shape} (the labels of the M candidates, the anchors' first)."
        )
    own = tf.eye(tf.shape(dist)[0], tf.shape(dist)[1], dtype=tf.bool)
    if candidates is None:
        candidates = tf.logical_not(own)
    else:
        candidates = tf.logical_and(tf.cast(tf.convert_to_tensor(candidates), tf.bool), tf.logical_not(own))
    return dist, labels, candidates


def split_candidates(labels, candidates):
    """``(positive, negative)`` [B, M] bool masks: candidate pairs of equal / different label
    (:func:`tfdml.masks.split_by_label`; ``labels`` are the M candidates', anchors first)."""
    return masks.split_by_label(labels, candidates)


def check_seed(seed, owner):
    """The seed as a shape-[2] integer tensor accepted by the stateless random ops."""
    if seed is None:
        raise ValueError(
            f"{owner} draws random numbers and needs seed=, a shape-[2] int32 tensor for the "
            "stateless random ops (e.g. keras.random.SeedGenerator(1).next(), or "
            "tf.random.split of a base seed per step), so that a run can be replayed."
        )
    seed = tf.convert_to_tensor(seed)
    if not seed.dtype.is_integer:
        raise ValueError(f"{owner}: seed must be an integer tensor of shape [2], got dtype {seed.dtype.name}.")
    if seed.shape.rank is not None and seed.shape.as_list() != [2] and None not in seed.shape.as_list():
        raise ValueError(f"{owner}: seed must have shape [2], got {seed.shape}.")
    if seed.dtype in (tf.int64, tf.uint32, tf.uint64):
        return tf.cast(seed, tf.int64)
    return tf.cast(seed, tf.int32)


def valid_triplets(selection):
    """The valid slots of a :class:`TripletSelection` only, in slot order (a shape known at
    run time: for graph mode and eager, not for XLA).

    A sampler's fixed T is an upper bound (semi-hard: T = B², of which B·(m − 1) are
    valid with m examples per class); a loss that computes on the valid slots alone does
    B·(m − 1) gathers instead of B², in its gradient too. The same triplets, so the
    same loss (the sum of the same terms in the same order, zeros left out)."""
    keep = tf.reshape(tf.where(selection.mask), [-1])
    return TripletSelection(
        tf.gather(selection.anchor, keep),
        tf.gather(selection.positive, keep),
        tf.gather(selection.negative, keep),
        tf.ones(tf.shape(keep), tf.bool),
    )


def compact_grid(selection, width):
    """``(narrow, widest)``: a :class:`GridTripletSelection`'s valid slots, at most
    ``width`` per anchor, as a TripletSelection of fixed T = B·width, and the largest
    number of valid slots of any anchor (a scalar tensor).

    For XLA, which needs fixed shapes: ``narrow`` holds every valid triplet, in slot
    order, exactly when ``widest <= width``; the caller picks it or the full grid
    with a ``tf.cond`` (``MetricLoss.over_triplets``, which takes ``width`` from the
    kernels table's ``"triplet_slots"``). Anchor a's k-th valid column is found by
    binary lifting on the running count of its row (:func:`tfdml.kernels.chosen.row_columns`)."""
    size, columns = grid_shape(selection)
    column, count = chosen.row_columns(tf.reshape(selection.mask, tf.stack([size, columns])), width)
    k = tf.range(width)[None, :]
    negative = primitives.gather_rows(tf.reshape(selection.negative, tf.stack([size, columns])), column)
    narrow = TripletSelection(
        tf.repeat(tf.range(size), width),
        tf.reshape(column, [-1]),
        tf.reshape(negative, [-1]),
        tf.reshape(k < count[:, None], [-1]),
    )
    return narrow, tf.reduce_max(count)


def grid_shape(selection):
    """``(B, M)`` (scalar int32 tensors) of a :class:`GridTripletSelection` of B anchors
    and M candidates: its positives run through the M columns of every anchor."""
    columns = tf.maximum(tf.reduce_max(selection.positive) + 1, 1)
    return tf.shape(selection.mask)[0] // columns, columns


def uniform01(shape, seed):
    """Uniform floats in [0, 1) with 24 random bits, identical with and without XLA.

    ``tf.random.stateless_uniform`` with a float dtype gives different numbers
    under ``jit_compile`` than eagerly (TF 2.21, CPU), while its raw uint32
    philox bits agree; so the float is built here from the top 24 bits.
    """
    bits = tf.random.stateless_uniform(
        shape, seed, minval=None, maxval=None, dtype=tf.uint32, alg="philox"
    )
    return tf.cast(tf.bitwise.right_shift(bits, 8), tf.float32) * (1.0 / (1 << 24))


def uniform_int(shape, seed, maxval):
    """Uniform int32 in [0, maxval) from philox bits (identical with and without XLA).

    ``maxval`` may be a scalar tensor; a value below 1 is treated as 1.
    """
    maxval = tf.maximum(tf.cast(maxval, tf.int32), 1)
    return tf.random.stateless_uniform(
        shape, seed, minval=0, maxval=maxval, dtype=tf.int32, alg="philox"
    )


def check_positive_int(value, name, owner, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}.")
    value = int(value)
    if value < 1:
        raise ValueError(f"{owner}: {name} must be a positive integer, got {value}.")
    return value


class Sampler:
    """Base class of the in-graph samplers.

    Subclasses set ``kind`` (``"pairs"``, ``"triplets"`` or ``"sets"``) and
    ``needs_seed``, and implement :meth:`sample`; ``needs_tuples`` follows
    from the kind. Calling a sampler:

    ``sampler(dist, labels, candidates=None, seed=None, embedding_dim=None)``

    * ``dist``: [B, M] float matrix of B anchors against M ≥ B candidates, the
      anchors first (M = B: the batch against itself). A DISTANCE (larger = farther) for every
      sampler except :class:`~tfdml.samplers.TopKMisplacedSampler`, which takes
      SCORES (larger = closer; Lu et al.'s ŝ of Eq. 4).
    * ``labels``: [M] integer class ids of the candidates (the anchors' first).
    * ``candidates``: [B, M] bool mask (:func:`tfdml.masks.candidate_mask` for M = B);
      ``None`` means all off-diagonal pairs. Only candidate pairs are selected;
      the diagonal is never selected, whatever the mask says.
    * ``seed``: shape-[2] integer tensor for the stateless random ops, required
      when ``needs_seed``.
    * ``embedding_dim``: the embedding dimension n (distance weighted sampling).

    The matrix is wrapped in ``tf.stop_gradient``: selections carry no gradient.
    Distances (scores) are assumed finite.
    """

    kind = None
    needs_seed = False
    #: The loss distance the sampler's rule assumes (``None``: any). A loss
    #: built with another distance refuses the sampler.
    requires_distance = None
    #: True when the rule assumes unit-norm embeddings (checked by configs
    #: against ``model.normalize``).
    requires_unit_sphere = False

    @property
    def needs_tuples(self):
        """True unless the sampler selects single pairs: a triplet or a set
        needs an anchor with both a positive and a negative candidate, which a
        batch of isolated pairs (the p-random design) never has."""
        return self.kind != "pairs"

    @tf.autograph.experimental.do_not_convert
    def __call__(self, dist, labels, candidates=None, seed=None, embedding_dim=None):
        """The selection (see the class); plain TensorFlow, not converted by autograph
        inside a caller's ``tf.function`` (as :meth:`tfdml.losses.MetricLoss.__call__`)."""
        dist, labels, candidates = _prepare(dist, labels, candidates)
        if self.needs_seed:
            seed = check_seed(seed, type(self).__name__)
        return self.sample(dist, labels, candidates, seed=seed, embedding_dim=embedding_dim)

    def sample(self, dist, labels, candidates, seed=None, embedding_dim=None):
        """The selection from prepared inputs (stopped float matrix, flat labels, bool mask)."""
        raise NotImplementedError

    def input_checks(self):
        """The :class:`~tfdml.input_checks.InputCheck` s the batch's target columns must
        pass for this sampler's rule to apply (e.g. :class:`~tfdml.samplers.NPairSampler`'s
        two examples per class); a loss with this sampler applies them with its own
        (:meth:`tfdml.losses.MetricLoss.input_checks`). None by default."""
        return []

    def xla_is_slower(self, labels):
        """Whether, for a batch with these labels, this sampler's XLA form is measured
        slower than its graph form: a scalar bool tensor, or None (never for such labels,
        known while tracing, e.g. from a static batch size). With
        ``jit_compile="loss"`` a batch answered True runs its loss without XLA
        (:class:`tfdml.models.CompiledLoss`); the selection is the same in both forms."""
        return None

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __eq__(self, other):
        return type(self) is type(other) and self.get_config() == other.get_config()

    def __hash__(self):
        return hash((type(self).__name__, tuple(sorted(self.get_config().items()))))

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"
