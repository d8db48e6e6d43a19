"""Cross-batch memory (Wang et al. 2020, "Cross-Batch Memory for Embedding Learning", XBM).

Mining is limited by what one batch holds. XBM keeps the embeddings of the last
batches in a queue and mines the anchors of the current batch against the batch
*and* the queue (Wang et al. §3.2, Algorithm 1): once the embedding drifts slowly
(their §3.1, "slow drift"), a past embedding is a good stand-in for the current one,
and the memory multiplies the negatives an anchor sees at the cost of B·K more
distances.

:class:`CrossBatchMemory` is that queue as the state of a tfdml loss
(``MetricLoss(memory=...)``): a fixed-size FIFO of K rows in non-trainable variables

* ``embeddings`` [K, d] (stored without gradient: the memory is a constant of the step),
* ``labels`` [K] int64 and ``example_ids`` [K] int64 (the ``example_id`` column of the
  batch contract, :mod:`tfdml.targets`),
* ``class_sizes`` [K] float32 (the ``class_size`` column, 0 for a batch without it: the
  importance weights of memory pairs read N_j, :func:`tfdml.importance.memory_pair_weights`),
* ``filled`` (rows holding an entry, ≤ K), ``position`` (the next row written) and
  ``steps`` (training calls seen), int64 scalars.

A training call of the loss mines with B anchors (the batch) against M = B + K
candidates (the batch, then the memory's rows, :func:`tfdml.samplers.base._prepare`):
memory row k is a candidate of anchor a when it holds an entry (k < ``filled``), the
warm-up is over (``steps ≥ warmup_steps``) and its example is not a's own
(``example_ids[k] ≠ example_id[a]``: a memory entry never pairs with its own
example). After the loss the batch is written at ``position`` (the oldest rows are
overwritten, wrap-around modulo K; of a batch larger than K its last K rows), from
the first call after the warm-up on (Wang et al. start the memory after a warm-up:
the first embeddings drift fast). Every shape is fixed by K and d, so a step
compiles once under XLA whatever the batch size.

Evaluation does not touch it: :class:`tfdml.models.EmbeddingModel` computes the test
loss with the memory :meth:`~CrossBatchMemory.paused` (the batch alone, nothing
written). Under a distribution strategy the model gives the loss the global batch
(all-gathered), so every replica writes the same rows (variables aggregated
``only_first_replica``). The memory's variables are weights of the model (saved by
``save_weights``, ``model.save``, ``tf.train.Checkpoint`` and backups, restored on
resume) and not of its exported encoder.
"""

import contextlib

import keras
import tensorflow as tf

from tfdml import importance as importance_lib
from tfdml.candidates import Candidates


@keras.saving.register_keras_serializable(package="tfdml")
class CrossBatchMemory(keras.layers.Layer):
    """A FIFO of the last K embeddings, labels and example ids (Wang et al. 2020, XBM).

    Args:
      size: K, the number of rows (Wang et al. Table 1 / Fig. 4 use up to the
        training split's size).
      warmup_steps: training calls of the loss before the memory is filled and used
        (Wang et al. start it after a warm-up of 1k iterations on their benchmarks;
        0: from the first call).
      embedding_dim: d; ``None`` builds the variables when the
        :class:`~tfdml.models.EmbeddingModel` that trains the loss learns its encoder's
        output size (compiled with an encoder that has a ``keras.Input``, or built),
        so that weights and checkpoints restore into them; else at the first call.
    """

    def __init__(self, size, warmup_steps=0, embedding_dim=None, **kwargs):
        super().__init__(**kwargs)
        self.size = _check_int("size", size, 1)
        self.warmup_steps = _check_int("warmup_steps", warmup_steps, 0)
        self.embedding_dim = None if embedding_dim is None else _check_int("embedding_dim", embedding_dim, 1)
        self._paused = False
        if self.embedding_dim is not None:
            self.build_for(self.embedding_dim)

    def build_for(self, embedding_dim):
        """Create the variables for embeddings of dimension ``embedding_dim``."""
        if self.built:
            if int(embedding_dim) != self.embedding_dim:
                raise ValueError(
                    f"CrossBatchMemory holds embeddings of dimension {self.embedding_dim}, got "
                    f"embeddings of dimension {embedding_dim}; build the loss for this model."
                )
            return
        self.embedding_dim = int(embedding_dim)

        def state(name, shape, dtype):
            return self.add_weight(shape=shape, initializer="zeros", dtype=dtype, trainable=False,
                                   aggregation="only_first_replica", name=name)

        self.embeddings = state("embeddings", (self.size, self.embedding_dim), "float32")
        self.labels = state("labels", (self.size,), "int64")
        self.example_ids = state("example_ids", (self.size,), "int64")
        self.class_sizes = state("class_sizes", (self.size,), "float32")
        self.filled = state("filled", (), "int64")
        self.position = state("position", (), "int64")
        self.steps = state("steps", (), "int64")
        self.built = True

    def build(self, input_shape=None):  # built by build_for
        pass

    def call(self, inputs):  # pragma: no cover - never used as a layer in a model
        return inputs

    # -- state ----------------------------------------------------------------------
    @contextlib.contextmanager
    def paused(self):
        """Within: the loss sees the batch alone and nothing is written (evaluation).
        Decided while tracing: a function traced inside keeps it."""
        previous, self._paused = self._paused, True
        try:
            yield self
        finally:
            self._paused = previous

    @property
    def is_paused(self):
        return self._paused

    def reset(self):
        """Empty the memory and restart its warm-up."""
        for variable in (self.embeddings, self.labels, self.example_ids, self.class_sizes, self.filled,
                         self.position, self.steps):
            variable.assign(tf.zeros_like(variable))

    # -- the step ---------------------------------------------------------------------
    def candidates(self, targets, embeddings, batch_candidates, importance=False):
        """The :class:`tfdml.candidates.Candidates` of a batch (its [B, d] ``embeddings`` and
        :class:`tfdml.targets.Targets`): the batch (``batch_candidates`` [B, B]), then the
        memory's rows in use (filled and past the warm-up). With ``importance`` they carry
        the pairs' weights and denominator of :func:`tfdml.importance.memory_pair_weights`
        (none when the batch has no importance columns)."""
        self._ensure_built(embeddings)
        ids = _example_ids(targets)
        if targets.pair_id is not None:
            raise ValueError(
                "A cross-batch memory cannot serve a batch of isolated pairs (a 'pair_id' column, "
                "the p-random design): it would pair every anchor with past examples the design "
                "never pairs it with. Use a group or m-per-class design, or no memory."
            )
        active = self.steps >= self.warmup_steps
        rows = tf.range(self.size, dtype=tf.int64)
        usable = tf.logical_and(rows < self.filled, active)  # [K]
        other = tf.not_equal(ids[:, None], self.example_ids[None, :])  # [B, K]
        memory_mask = tf.logical_and(other, usable[None, :])
        mask = tf.concat([tf.cast(batch_candidates, tf.bool), memory_mask], axis=1)
        labels = tf.concat([tf.cast(targets.label, tf.int64), self.labels], axis=0)
        stored = tf.stop_gradient(tf.cast(self.embeddings, embeddings.dtype))
        weighted = None
        if importance:
            weighted = importance_lib.memory_pair_weights(targets, labels[tf.shape(targets.label)[0]:],
                                                          self.class_sizes, usable)
        return Candidates(stored, labels, mask, *(weighted if weighted is not None else (None, None)))

    def update(self, targets, embeddings):
        """Write the batch (its last K rows when B > K) at ``position`` once the warm-up is
        over, and count the call. Returns the assign ops (for control dependencies)."""
        self._ensure_built(embeddings)
        ids = _example_ids(targets)
        labels = tf.cast(targets.label, tf.int64)
        class_sizes = (tf.zeros_like(labels, tf.float32) if targets.class_size is None
                       else tf.cast(targets.class_size, tf.float32))
        batch = tf.cast(tf.shape(embeddings)[0], tf.int64)
        size = tf.constant(self.size, tf.int64)
        written = tf.minimum(batch, size)
        active = self.steps >= self.warmup_steps
        # Row k receives batch row B − n + ((k − position) mod K) when that offset is < n.
        offset = tf.math.floormod(tf.range(self.size, dtype=tf.int64) - self.position, size)
        takes = tf.logical_and(offset < written, active)
        source = tf.clip_by_value(batch - written + offset, 0, tf.maximum(batch - 1, 0))
        source = tf.cast(source, tf.int32)

        def merged(variable, values):
            fresh = tf.gather(tf.cast(values, variable.dtype), source)
            keep = tf.reshape(takes, [-1] + [1] * (variable.shape.rank - 1))
            return tf.where(keep, fresh, variable)

        ops = [
            self.embeddings.assign(merged(self.embeddings, tf.stop_gradient(embeddings))),
            self.labels.assign(merged(self.labels, labels)),
            self.example_ids.assign(merged(self.example_ids, ids)),
            self.class_sizes.assign(merged(self.class_sizes, class_sizes)),
            self.filled.assign(tf.where(active, tf.minimum(self.filled + written, size), self.filled)),
            self.position.assign(tf.where(active, tf.math.floormod(self.position + written, size),
                                          self.position)),
            self.steps.assign_add(tf.constant(1, tf.int64)),
        ]
        return [op for op in ops if op is not None]

    def load_own_variables(self, store):
        """Keras' loading of the saved state (``load_weights``, ``.keras``). A file saved
        while the memory had no variables yet (built without ``embedding_dim``, before its
        first batch: then the model built it at its first batch only) holds none: that
        memory was empty, and this one is emptied to match."""
        if self.built and len(store.keys()) == 0:
            self.reset()
            return
        super().load_own_variables(store)

    def _ensure_built(self, embeddings):
        dim = embeddings.shape[-1]
        if dim is None:
            raise ValueError("CrossBatchMemory needs embeddings of a known dimension [B, d].")
        if not self.built:
            with tf.init_scope():
                self.build_for(dim)
        else:
            self.build_for(dim)  # checks the dimension

    def get_config(self):
        config = super().get_config()
        config.update(size=self.size, warmup_steps=self.warmup_steps, embedding_dim=self.embedding_dim)
        return config


def _example_ids(targets):
    if targets.example_id is None:
        raise ValueError(
            "A cross-batch memory needs the 'example_id' column of the batch contract (the index "
            "of each example in the training split, tfdml.targets) so that a memory entry never "
            "pairs with its own example. Train a tfdml.models.EmbeddingModel (a plain keras.Model "
            "refuses a dict of targets for its one output) on y = {'label': ..., 'example_id': ...}, "
            "e.g. the batches of a design of pipelines.designs; or use no memory."
        )
    return tf.cast(targets.example_id, tf.int64)


def _check_int(name, value, lowest):
    if isinstance(value, bool) or not hasattr(value, "__index__") or int(value) < lowest:
        raise ValueError(f"CrossBatchMemory: {name} must be an integer >= {lowest}, got {value!r}.")
    return int(value)


def get(memory, name=None):
    """A :class:`CrossBatchMemory` from ``None`` (none), a dict of its arguments
    (``{"size": 4096, "warmup_steps": 1000}``, a config's ``loss.memory``) or an instance."""
    if memory is None or isinstance(memory, CrossBatchMemory):
        return memory
    if isinstance(memory, dict):
        known = {"size", "warmup_steps", "embedding_dim"}
        unknown = sorted(set(memory) - known)
        if unknown:
            raise ValueError(f"memory: unknown option(s) {unknown}; a memory takes {sorted(known)}.")
        if "size" not in memory:
            raise ValueError("memory: give its size, e.g. {'size': 4096, 'warmup_steps': 1000}.")
        return CrossBatchMemory(**memory, name=name)
    raise ValueError(
        f"memory must be None, a dict such as {{'size': 4096, 'warmup_steps': 1000}} or a "
        f"CrossBatchMemory, got {memory!r}."
    )
