"""The drawing core every batch design shares: :class:`DesignPlan` (what a design needs
from a split) and :class:`Design` (the seeded tf.data stream of column dicts and images)."""

import inspect

import numpy as np
import tensorflow as tf

from pipelines.designs.checks import labels_of

__all__ = ["Design", "DesignPlan"]

# Batches drawn together in one tf.data element (vectorised over a leading
# axis, then unbatched) amortise tf.data's per-element cost. The chunk size is
# a function of the design and the split only (fewer batches per chunk when
# classes are large, to bound the per-chunk noise tensor), so a seed still
# fixes the stream.
_MAX_CHUNK = 64
_CHUNK_ELEMENTS = 1 << 20


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
    #: True when every image of a batch appears twice, as two views under independent
    #: augmentation (rows sharing an ``example_id``): what the losses of two views read.
    two_views = False
    #: True when the batches read a table of mined neighbours the model side refreshes
    #: (``neighbours`` and ``hard_fraction`` variables, :mod:`pipelines.designs.smart_mining`).
    mined_table = False
    #: True when every batch is drawn independently of the others, so that a cross-batch
    #: memory's composition gives its pairs' sampling probability: the design writes the
    #: ``w_memory`` column (:func:`tfdml.importance.memory_pair_weights`).
    independent_batches = False
    #: Config keys that name a constructor argument differently, e.g. ``{"n": "classes_per_batch"}``.
    config_aliases = {}
    #: The design's own parameters in a config (``design.options``): name (a constructor
    #: argument or a :attr:`config_aliases` key) -> ``{"default": value, "doc": text}`` and its
    #: valid range: ``"min"`` (an integer >= it) or ``"between"`` ((low, high), a number
    #: strictly between them), with ``"why"``, the reason of the bound. The config reads
    #: names, defaults and ranges from here (``tfdml.builtin_names.DESIGN_OPTIONS`` holds
    #: those of the built-in designs, for the checks made before TensorFlow is imported).
    config_options = {}

    @classmethod
    def option_names(cls):
        """The names ``design.options`` may hold: :attr:`config_options`, the constructor's
        arguments and their :attr:`config_aliases`."""
        params = [name for name, param in inspect.signature(cls.__init__).parameters.items()
                  if name != "self" and param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)]
        names = list(cls.config_options)
        for name in params + list(cls.config_aliases):
            if name not in names:
                names.append(name)
        return tuple(names)

    @classmethod
    def from_config(cls, config):
        """The design made from ``config``, a dict whose keys name the constructor's
        arguments, directly or through :attr:`config_aliases` (a direct name wins).
        Keys the constructor does not take are ignored, and
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
        plan = self._plan(labels_of(split_or_labels))
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
        # Designs without importance weights (two views) leave w_pos / w_neg None: no such columns.
        w_pos = None if plan.w_pos is None else tf.constant(plan.w_pos, tf.float32)
        w_neg = None if plan.w_neg is None else tf.constant(plan.w_neg, tf.float32)
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
            }
            if w_pos is not None:
                cols["w_pos"] = tf.fill([plan.chunk, batch], w_pos)
                cols["w_neg"] = tf.fill([plan.chunk, batch], w_neg)
            cols["example_id"] = example_id
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
