# Over 400 lines: EmbeddingModel's train step and the CompiledLoss it runs are one piece (gather, non-finite count).
"""Embedding models: a backbone, an embedding head, and a train step that
mines on the *global* batch under ``tf.distribute``.

:class:`EmbeddingModel` wraps any Keras encoder (inputs -> [B, d] embeddings)
and adds what plain ``keras.Model.fit`` lacks for metric learning:

* ``y`` may be the batch-contract dict of DESIGN.md (label, class_size,
  w_pos, w_neg, pair_id, example_id). Keras' compile-loss insists that ``y``
  and the model's outputs have one structure; here the loss receives ``y``
  as it is.
* The loss's own state (Wu et al. 2017 §4: the learned margins β0, β_class,
  β_img of :class:`tfdml.losses.MarginLoss`; a sampler's seed) lives in the
  layers listed by ``loss.parameter_layers``. ``compile`` tracks them, so the
  optimizer trains them and every save route restores them: ``save_weights`` /
  ``load_weights``, ``model.save`` / :func:`tfdml.load_model`, and
  ``tf.train.Checkpoint`` (Keras keeps them in a list, which TensorFlow's
  checkpoints do not walk; the model also holds them in a ``tf.Module`` they do).
  A state layer sized by the embeddings (a cross-batch memory built without
  ``embedding_dim``) is built as soon as the encoder's output size is known, when
  the model is compiled or built, so that a fresh model has its variables to
  restore into.
* Non-finite embeddings stop training even when the loss would hide them
  (a mask, a ``where``, a max or a ReLU kernel can turn NaN into a finite
  number, and whether it does depends on the CPU's kernels): the train step
  counts them in the ``nonfinite_embeddings`` metric and makes the step's
  loss NaN, so that any NaN guard (``keras.callbacks.TerminateOnNaN``, the
  one of ``train.py``) sees it.
* A training batch without a positive pair, for a loss that then scores nothing
  (``loss.needs_positive_pairs``: multi-similarity's mining, triplets), is counted in
  the step's logs (:data:`NO_POSITIVES_LOG`, summed over the epoch) and warned about
  once per ``fit``.
* Invalid targets stop training too: a tfdml loss lists the conditions its
  target columns must meet (:meth:`tfdml.losses.base.MetricLoss.input_checks`:
  labels inside ``[0, num_classes)`` for β_class, finite non-negative
  importance weights, ...). XLA drops in-graph asserts, so the train and test
  steps count the rows that break each condition, the loss of such a batch is
  NaN with zero gradient, and right after the step (before the next one)
  :meth:`EmbeddingModel.raise_for_invalid_inputs` raises
  :class:`tfdml.errors.InvalidInputError` naming the column, the valid values
  and the fix, in every ``jit_compile`` mode and under distribution strategies.
* Under a distribution strategy each replica sees a slice of the global
  batch; mining on a slice silently changes the objective (the semi-hard
  negative of an anchor may sit on another replica, m-per-class groups are
  cut apart). ``compute_loss`` all-gathers embeddings and target columns
  across replicas first, so every replica evaluates the loss of the global
  batch, and scales it by 1 / replicas: the gradient that reaches a replica's
  embeddings through the all-gather is summed over replicas, and the
  optimizer sums replica gradients, so the applied gradient equals the
  single-device gradient of the same global batch.
* ``compile(jit_compile="loss")`` compiles the loss and its sampler with XLA
  and leaves the encoder to TensorFlow's own kernels (``jit_compile=True``
  compiles the whole train step, encoder included; ``False`` nothing). On a
  CPU, XLA's convolutions are slower than oneDNN's while its fused
  elementwise code is faster for the [B, B] work of mining and pair terms.
"""

import contextlib
import sys
import warnings

import keras
import tensorflow as tf
from tensorflow.python.eager import record as _tf_record

from tfdml import backbones as backbones_lib
from tfdml.backbones.scratch import mlp, small_cnn  # noqa: F401 (tfdml.models.small_cnn / mlp)
from tfdml import errors, kernels, replica_gather
from tfdml import masks as masks_lib
from tfdml import optimizers as optimizers_lib
from tfdml import targets as targets_lib
from tfdml.losses import base as loss_base
from tfdml.losses import input_checks as loss_input_checks
from tfdml.losses import routes as loss_routes

#: The backbones built here, always trained from scratch (all names: :data:`tfdml.backbones.BACKBONES`).
BACKBONES = backbones_lib.SCRATCH


def get_backbone(name, input_shape, **kwargs):
    """A backbone by name: :func:`tfdml.backbones.get_backbone`."""
    return backbones_lib.get_backbone(name, input_shape=input_shape, **kwargs)


#: The Keras dtype policies :func:`dtype_policy_scope` builds an encoder under (the
#: config's ``model.dtype_policy``): ``"float32"``, or ``"mixed_bfloat16"``: bfloat16
#: compute with float32 variables (needs no loss scaling, unlike ``"mixed_float16"``).
DTYPE_POLICIES = ("float32", "mixed_bfloat16")
#: The dtype policy that :func:`resolve_dtype_policy` picks for this machine.
AUTO_DTYPE_POLICY = "auto"
#: What :func:`dtype_policy_scope` and the config's ``model.dtype_policy`` accept.
DTYPE_POLICY_CHOICES = (AUTO_DTYPE_POLICY,) + DTYPE_POLICIES


def resolve_dtype_policy(policy, jit_compile=False):
    """The dtype policy an encoder is built under: ``policy`` itself, or for ``"auto"`` the
    one the kernels table (:mod:`tfdml.kernels`, entry ``"dtype_policy"``) gives this device
    in the mode its encoder runs: ``"xla"`` when ``jit_compile`` compiles the whole train
    step (``True``), else ``"graph"`` (``False`` and ``"loss"``: TensorFlow's kernels run the
    encoder). Today that is ``"mixed_bfloat16"`` on a CPU with bfloat16 instructions outside
    XLA, else ``"float32"``. ValueError for a name not in :data:`DTYPE_POLICY_CHOICES`."""
    if policy not in DTYPE_POLICY_CHOICES:
        raise ValueError(f"dtype policy {policy!r} is not supported; use one of: {', '.join(DTYPE_POLICY_CHOICES)}.")
    if policy != AUTO_DTYPE_POLICY:
        return policy
    choice = kernels.choose("dtype_policy", mode="xla" if jit_compile is True else "graph")
    return "float32" if choice.is_reference else choice.form


@contextlib.contextmanager
def dtype_policy_scope(policy, jit_compile=False):
    """Keras' global dtype policy set to ``policy`` (one of :data:`DTYPE_POLICY_CHOICES`;
    ``"auto"`` as :func:`resolve_dtype_policy` resolves it for ``jit_compile``) inside the
    block, and the previous one restored after it, also when the block raises.

    The layers created inside keep the policy: build the backbone and
    :func:`build_encoder` inside, the loss and the model that wraps the encoder outside.
    Raises ValueError for another name."""
    policy = resolve_dtype_policy(policy, jit_compile)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def build_encoder(backbone, embedding_dim=128, normalize=True, name="encoder"):
    """``backbone`` followed by a linear embedding head (Dense to ``embedding_dim``).

    With ``normalize=True`` the embeddings are L2-normalised (Wu et al. 2017
    §3: embeddings on the unit sphere, which distance weighted sampling
    assumes). The head layer is named ``embedding`` so that it can be given its
    own learning rate.

    The head computes in the variable dtype of Keras' global dtype policy: under
    ``mixed_bfloat16`` (:func:`dtype_policy_scope`) the backbone computes in
    bfloat16 and the head in float32, so the embeddings that the loss, the
    metrics and the exports see are float32 (as Keras' mixed precision guide
    keeps a model's outputs).
    """
    head_dtype = keras.config.dtype_policy().variable_dtype
    inputs = keras.Input(shape=backbone.input_shape[1:], name="input")
    features = backbone(inputs)
    emb = keras.layers.Dense(embedding_dim, name="embedding", dtype=head_dtype)(features)
    if normalize:
        emb = keras.layers.UnitNormalization(name="l2_normalize", dtype=head_dtype)(emb)
    return keras.Model(inputs, emb, name=name)


def nonfinite_rows(embeddings):
    """The number of rows of ``embeddings`` [B, d] holding a NaN or an Inf (int32)."""
    finite = tf.reduce_all(tf.math.is_finite(embeddings), axis=-1)
    return tf.reduce_sum(tf.cast(tf.logical_not(finite), tf.int32))


def with_additional_losses(loss, extra_losses):
    """``loss`` plus the model's ``add_loss`` / regulariser terms, each summed and a
    non-float one cast to floatx, as ``keras.Model.compute_loss`` adds them (public
    ops only, instead of Keras' private ``_aggregate_additional_loss``)."""
    for extra in extra_losses:
        extra = tf.convert_to_tensor(extra)
        if not extra.dtype.is_floating:
            extra = tf.cast(extra, keras.backend.floatx())
        loss = loss + tf.cast(tf.reduce_sum(extra), loss.dtype)
    return loss


def nan_unless_finite(loss, bad_rows):
    """``loss``, or NaN when ``bad_rows`` > 0: a loss of non-finite embeddings is
    not a number, whatever its formula made of them."""
    return tf.where(bad_rows > 0, tf.constant(float("nan"), loss.dtype), loss)


#: Name of the metric that counts non-finite embedding rows in a training epoch.
NONFINITE_METRIC = "nonfinite_embeddings"
#: Name of the log entry that counts the training batches of an epoch without a positive
#: pair, for a loss that scores nothing on one (``loss.needs_positive_pairs``); in the
#: logs from the first such batch on.
NO_POSITIVES_LOG = "batches_without_positive_pairs"

#: ``jit_compile`` value of :meth:`EmbeddingModel.compile` that compiles the
#: loss and its sampler only (the encoder keeps TensorFlow's kernels).
LOSS_ONLY = "loss"
#: What ``EmbeddingModel.compile(jit_compile=...)`` and the config's
#: ``training.jit_compile`` accept: nothing compiled, the whole train step,
#: or the loss and its sampler only.
JIT_COMPILE_CHOICES = (False, True, LOSS_ONLY)


def resolve_auto_jit_compile(jit_compile):
    """What ``EmbeddingModel.compile(jit_compile="auto")`` (Keras' default) compiles.

    Keras' "auto" compiles the whole train step with XLA whenever the layers
    allow it, on CPU too. On a CPU, XLA's convolutions are slower than
    TensorFlow's (oneDNN) kernels while its fused [B, B] mining code is faster
    (``benchmarks/RESULTS.md``, "XLA modes"), so without a GPU "auto" compiles
    the loss and its sampler only (:data:`LOSS_ONLY`), in one replica; with
    several replicas on CPU nothing (XLA cannot place the mirrored variables of
    split CPU devices). With a GPU it stays Keras' "auto". Any other value is
    returned as it is."""
    if jit_compile != "auto" or tf.config.list_physical_devices("GPU"):
        return jit_compile
    if tf.distribute.has_strategy() and tf.distribute.get_strategy().num_replicas_in_sync > 1:
        return False
    return LOSS_ONLY


class CompiledLoss:
    """A loss and its gradient as one XLA computation, inside a train step that is
    not compiled (``EmbeddingModel.compile(jit_compile="loss")``).

    Compiling the loss alone as a ``tf.function(jit_compile=True)`` and letting
    the train step's tape differentiate through it does not work: TensorFlow
    then splits the function into a forward and a backward function, and the
    forward one hands the intermediates of a ``tf.cond`` or ``tf.while_loop``
    (the distance refinement, the semi-hard sort path) to the backward one as
    optionals and tensor lists, which XLA cannot compile. So the compiled
    function computes the value *and* its gradients with respect to the
    embeddings and the loss's trainable variables (``parameter_layers``), and
    the train step sees the surrogate

        value + Σ_t ⟨stop_gradient(∂value/∂t), t − stop_gradient(t)⟩

    which equals ``value`` and whose gradient with respect to every t is the
    compiled gradient. The loss must keep its trainable state in
    ``parameter_layers`` (as every tfdml loss does); a loss with no trainable
    state needs nothing.

    Compiling only what gains: a loss may say, per batch, that its XLA form is
    slower than its graph form (``loss.xla_is_slower(y)``, a scalar bool tensor;
    a tfdml loss asks its sampler, :meth:`tfdml.samplers.base.Sampler.xla_is_slower`,
    which a custom sampler may answer: say, one that sorts with XLA's slow CPU sort
    above some class size; the built-in samplers never do). A ``tf.cond`` then runs that
    batch's value and gradients as the same function without XLA; both forms give
    the same loss. A loss without the method, or answering None, always runs compiled.
    """

    def __init__(self, loss, variables):
        self.loss = loss
        self.variables = variables
        # autograph=False: the loss is plain TensorFlow (as keras.losses.Loss.__call__,
        # which autograph leaves unconverted); converting it would only cost tracing time.
        self._value_and_gradients = tf.function(self._value_and_gradients_fn, jit_compile=True,
                                                reduce_retracing=True, autograph=False)
        self._value = tf.function(self._value_fn, jit_compile=True, reduce_retracing=True, autograph=False)
        # The same functions without XLA, for the batches where the loss reports XLA slower.
        self._graph_value_and_gradients = tf.function(self._value_and_gradients_fn,
                                                      reduce_retracing=True, autograph=False)
        self._graph_value = tf.function(self._value_fn, reduce_retracing=True, autograph=False)

    def _value_fn(self, y, y_pred):
        return self.loss(y, y_pred)

    def _xla_is_slower(self, y):
        """The loss's scalar bool answer for this batch, or None (always compile)."""
        ask = getattr(self.loss, "xla_is_slower", None)
        return None if ask is None else ask(y)

    def _runner(self, compiled_fn, graph_fn, y, y_pred):
        """A callable running ``compiled_fn(y, y_pred)``, or ``graph_fn`` where the loss
        reports XLA slower. Both are traced here, before the caller stops recording:
        traced while recording is stopped, their own tapes would record nothing."""
        compiled = compiled_fn.get_concrete_function(y, y_pred)
        slower = self._xla_is_slower(y)
        if slower is None:
            return lambda: compiled(y, y_pred)
        graph = graph_fn.get_concrete_function(y, y_pred)
        return lambda: tf.cond(slower, lambda: graph(y, y_pred), lambda: compiled(y, y_pred))

    def _value_and_gradients_fn(self, y, y_pred):
        variables = self.variables()
        with tf.GradientTape() as tape:
            tape.watch(y_pred)
            value = self.loss(y, y_pred)
        sources = [y_pred] + variables
        grads = tape.gradient(value, sources)
        return value, [tf.zeros_like(s) if g is None else tf.convert_to_tensor(g)  # β_class:
                       for s, g in zip(sources, grads)]                          # IndexedSlices

    def __call__(self, y, y_pred, training=True):
        if not training:
            return self._runner(self._value, self._graph_value, y, y_pred)()
        variables = self.variables()
        # Hidden from the train step's tape: a recorded call would be split into a
        # forward and a backward function, which is what XLA cannot compile (see
        # above). TensorFlow's own GradientTape.stop_recording does this for one
        # tape; here the tape is Keras', so the module function behind it is used
        # (private API; guarded by tests/tfdml/test_models.py::test_private_keras_api_we_rely_on).
        run = self._runner(self._value_and_gradients, self._graph_value_and_gradients, y, y_pred)
        with _tf_record.stop_recording():
            value, grads = run()
        surrogate = value
        for tensor, grad in zip([y_pred] + variables, grads):
            tensor = tf.convert_to_tensor(tensor)
            link = tf.reduce_sum(tf.stop_gradient(grad) * (tensor - tf.stop_gradient(tensor)))
            surrogate = surrogate + tf.cast(link, value.dtype)
        return surrogate


def _variables_exist(layer):
    """Whether ``layer`` has created all its variables: it is built, or it made them in
    ``__init__`` and has no ``build`` that could add more (a loss's state layer is never
    called, so Keras never marks it built)."""
    return layer.built or (bool(layer.weights) and type(layer).build is keras.layers.Layer.build)


@keras.saving.register_keras_serializable(package="tfdml")
class EmbeddingModel(keras.Model):
    """A Keras model whose output is an embedding, trained by a tfdml loss.

    Args:
      encoder: a Keras model mapping inputs to [B, d] embeddings (e.g. from
        :func:`build_encoder`).
      gather_replicas: mine on the global batch under a distribution strategy
        (see the module docstring). Turn off only to reproduce per-replica
        mining.

    Usage::

        model = tfdml.models.EmbeddingModel(encoder)
        model.compile(optimizer="adam", loss=tfdml.losses.MarginLoss(num_classes=100))
        model.fit(dataset_of_x_and_targets, ...)
    """

    #: The train and test steps count the loss's input checks and raise after the step
    def __init__(self, encoder, gather_replicas=True, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(encoder, keras.Model) and not isinstance(encoder, keras.layers.Layer):
            raise ValueError(
                f"EmbeddingModel needs a Keras model or layer as encoder, got {type(encoder).__name__}."
            )
        self.encoder = encoder
        self.gather_replicas = gather_replicas
        self._metric_loss = None
        self._loss_call = None
        self.jit_compile_loss = False
        self.jit_compile_requested = "auto"
        self.loss_parameters = []
        self._loss_state = _LossState([])
        self.nonfinite_tracker = keras.metrics.Sum(name=NONFINITE_METRIC, dtype="int32")
        self._set_input_checks([])
        self._set_positive_pair_counter(False)

    def call(self, inputs, training=False):
        return self.encoder(inputs, training=training)

    def fit(self, x=None, y=None, *args, **kwargs):
        """``keras.Model.fit``. A ``tf.data.Dataset`` is consumed as it comes (its
        order is the batch design's), so ``shuffle`` defaults to False for one: Keras
        ignores it for datasets and warns about its own default of True. A ``fit`` that
        raises releases its input iterators as the exception passes (Keras leaves them
        in a reference cycle for a later garbage collection)."""
        if isinstance(x, tf.data.Dataset) and len(args) < 7:  # shuffle not positional
            kwargs.setdefault("shuffle", False)
        try:
            return super().fit(x, y, *args, **kwargs)
        except BaseException as err:
            try:
                _release_epoch_iterators(self, err.__traceback__, sys._getframe())
            except Exception:  # noqa: BLE001 - the fit's own error is the one to raise
                pass
            raise

    def build_optimizer(self):
        """Create the optimizer's variables now when every layer has its own; called when
        the train function is made (``fit``, ``train_on_batch``). Keras otherwise creates
        them inside the first trace of the train step under the default strategy, and
        ``tf.function`` then traces the step a second time: the first ``fit`` of every
        model would pay its trace twice."""
        optimizer = getattr(self, "optimizer", None)
        if optimizer is None or optimizer.built or not all(
                _variables_exist(layer) for layer in self._flatten_layers(include_self=False)):
            return  # built already, or Keras builds it in the first trace
        with self.distribute_strategy.scope():
            optimizer.build(self.trainable_variables)

    def export(self, filepath, format="tf_saved_model", verbose=None, input_signature=None,
               **kwargs):
        """``keras.Model.export`` of the embedding function alone: the encoder (what
        :meth:`call` computes), without the loss's state in ``parameter_layers``
        (proxies, learned margins, sampler seeds), which serving does not use."""
        return self.encoder.export(filepath, format=format, verbose=verbose,
                                   input_signature=input_signature, **kwargs)

    def compile(self, optimizer="adam", loss=None, **kwargs):
        """Like ``keras.Model.compile``; ``loss`` is a tfdml loss (or any
        ``loss(y_true, y_pred)`` callable) that receives ``y`` unchanged.
        ``jit_compile`` also takes ``"loss"`` (:data:`LOSS_ONLY`): the loss and
        its sampler run as one XLA computation inside an otherwise uncompiled
        train step. The default, ``"auto"``, is resolved by
        :func:`resolve_auto_jit_compile` (on a CPU: ``"loss"``).

        A loss's ``lr_multipliers`` (a proxy loss's ``proxy_lr_multiplier``) reach the
        optimizer: :func:`tfdml.optimizers.with_loss_multipliers` turns ``"adam"`` /
        ``"adamw"`` / ``"sgd"`` into their :mod:`tfdml.optimizers` variants, adds them to a
        ``tfdml.optimizers`` optimizer and refuses another optimizer, naming the fix."""
        if loss is None:
            raise ValueError("EmbeddingModel.compile needs a loss, e.g. tfdml.losses.MarginLoss().")
        requested = kwargs.get("jit_compile", "auto")
        if isinstance(requested, str) and requested not in ("auto", LOSS_ONLY):
            raise ValueError(
                f"jit_compile={requested!r}: use True (the whole train step), False, 'auto' "
                f"or {LOSS_ONLY!r} (the loss and its sampler only)."
            )
        self.jit_compile_requested = requested
        jit_compile = self.resolve_jit_compile(requested)
        kwargs["jit_compile"] = jit_compile
        self.jit_compile_loss = jit_compile == LOSS_ONLY
        if self.jit_compile_loss:
            kwargs["jit_compile"] = False
        layers = list(getattr(loss, "parameter_layers", []) or [])
        # Track the loss's state layers (learned margins, sampler seeds) before
        # compile so the optimizer and checkpoints see them. A model loaded
        # from a .keras file is already built (and its state locked) when it
        # is re-compiled; Keras itself unlocks the same way to untrack state
        # (private API with no public equivalent; guarded by
        # tests/tfdml/test_models.py::test_private_keras_api_we_rely_on).
        was_locked = self._tracker.locked
        self._tracker.unlock()
        self.loss_parameters = layers
        if was_locked:
            self._tracker.lock()
        # The same layers for tf.train.Checkpoint, which walks TensorFlow trackables
        # (a tf.Module wraps its list as one) and not Keras' tracked list above; Keras'
        # own saving (.weights.h5, .keras) ignores a tf.Module.
        self._loss_state = _LossState(layers)
        self._build_loss_state()
        optimizer = optimizers_lib.with_loss_multipliers(optimizer, loss)
        super().compile(optimizer=optimizer, loss=loss, **kwargs)
        self._metric_loss = loss
        self._loss_call = loss
        checks = getattr(loss, "input_checks", None)
        self._set_input_checks(checks() if callable(checks) else [])
        self._set_positive_pair_counter(getattr(loss, "needs_positive_pairs", False))
        if self.jit_compile_loss:
            self._loss_call = CompiledLoss(loss, lambda: [
                v for layer in self.loss_parameters for v in layer.trainable_variables])
        # The structure check of Keras' compile-loss rejects a dict of target
        # columns for a single output; compute_loss calls the loss directly.
        # (Private attribute, no public switch; guarded by the same test.)
        self._compile_loss = None

    def _set_input_checks(self, checks):
        """The loss's :class:`~tfdml.losses.input_checks.InputCheck` s and one counter of broken rows
        per check of the global batch (float32, equal on every replica). Neither is tracked
        (not a weight, not in checkpoints, not in the logs)."""
        counts = None
        if checks:
            with self.distribute_strategy.scope():
                counts = tf.Variable(tf.zeros([len(checks)], tf.float32), trainable=False,
                                     name="invalid_inputs",
                                     aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        object.__setattr__(self, "_input_checks", list(checks))
        object.__setattr__(self, "_invalid_input_counts", counts)

    def _set_positive_pair_counter(self, needed):
        """When ``needed`` (the loss's ``needs_positive_pairs``), a counter of the training
        batches without a positive pair (float32, equal on every replica, not tracked)."""
        counter = None
        if needed:
            with self.distribute_strategy.scope():
                counter = tf.Variable(0.0, trainable=False, name=NO_POSITIVES_LOG,
                                      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        object.__setattr__(self, "_no_positive_batches", counter)
        object.__setattr__(self, "_warned_no_positives", False)

    @staticmethod
    def _add_counts(variable, counts, global_batch):
        """Add ``counts`` to ``variable``: of the global batch when ``global_batch``, else of
        this replica's slice (summed over replicas here, so every replica, and every worker,
        counts the same)."""
        context = tf.distribute.get_replica_context()
        if not global_batch and context is not None and context.num_replicas_in_sync > 1:
            counts = context.all_reduce(tf.distribute.ReduceOp.SUM, counts)
        variable.assign_add(counts)

    def _count_invalid_inputs(self, y, global_batch):
        """Add the rows of ``y`` that break each input check to the counters."""
        if self._invalid_input_counts is None:
            return
        views = loss_input_checks.check_views(self._input_checks, y)
        counts = tf.stack([tf.cast(check.invalid_rows(view), tf.float32)
                           for check, view in zip(self._input_checks, views)])
        self._add_counts(self._invalid_input_counts, counts, global_batch)

    def _count_batch_without_positive_pairs(self, y, global_batch):
        """Add 1 to the counter when the batch ``y`` holds no positive candidate pair."""
        if self._no_positive_batches is None:
            return
        targets = targets_lib.unpack(y)
        positive, _ = masks_lib.pair_masks(targets.label, targets.pair_id)
        self._add_counts(self._no_positive_batches, 1.0 - tf.cast(tf.reduce_any(positive), tf.float32),
                         global_batch)

    def reset_metrics(self):
        """Keras' metrics, and the count of batches without a positive pair (per epoch)."""
        super().reset_metrics()
        if getattr(self, "_no_positive_batches", None) is not None:
            with self.distribute_strategy.scope():
                self._no_positive_batches.assign(0.0)

    def report_batches_without_positive_pairs(self, logs):
        """``logs`` with :data:`NO_POSITIVES_LOG` when the epoch so far had training batches
        without a positive pair (and a warning, once per ``fit``): the loss scored nothing on
        them. Called after every train function call of ``fit``."""
        if self._no_positive_batches is None:
            return logs
        with self.distribute_strategy.scope():
            count = int(self._no_positive_batches.read_value().numpy())
        if not count:
            return logs
        if not self._warned_no_positives:
            object.__setattr__(self, "_warned_no_positives", True)
            owner = type(self._metric_loss).__name__
            warnings.warn(
                f"{owner}: {count} training batch{'' if count == 1 else 'es'} had no positive pair (no "
                f"two examples of one class), on which {owner} scores nothing (loss 0, no gradient); "
                f"the logs count them per epoch as {NO_POSITIVES_LOG!r}. Feed batches with several "
                "examples of each class, e.g. the batches of a design of pipelines.designs "
                "(MPerClassDesign, GroupDesign).", stacklevel=2)
        return {**logs, NO_POSITIVES_LOG: count}

    def reset_invalid_input_counts(self):
        """Zero the counters of :meth:`raise_for_invalid_inputs` (done when ``fit`` and
        ``evaluate`` start: rows counted by other calls of :meth:`compute_loss` are not theirs)."""
        if self._invalid_input_counts is not None:
            with self.distribute_strategy.scope():
                self._invalid_input_counts.assign(tf.zeros_like(self._invalid_input_counts))

    def raise_for_invalid_inputs(self, where="of the last training batch"):
        """Raise :class:`tfdml.errors.InvalidInputError` when the steps since the last call
        counted rows that break an input check of the loss (and reset the counters).
        Called after every train and test function call of ``fit`` / ``evaluate``, and by
        :func:`tfdml.distributed.train_loop` after every step."""
        if self._invalid_input_counts is None:
            return
        with self.distribute_strategy.scope():
            counts = self._invalid_input_counts.read_value().numpy()
        if not counts.any():
            return
        self.reset_invalid_input_counts()
        owner = type(self._metric_loss).__name__
        messages = [str(check.error(owner, count, where))
                    for check, count in zip(self._input_checks, counts) if count > 0]
        raise errors.InvalidInputError(" ".join(messages))

    def _checked(self, function, where, training=False):
        """``function`` (Keras' train or test function) followed by :meth:`raise_for_invalid_inputs`
        (and, in training, :meth:`report_batches_without_positive_pairs`)."""
        if function is None or getattr(function, "_raises_for_invalid_inputs", False):
            return function

        def checked(iterator):
            logs = function(iterator)
            self.raise_for_invalid_inputs(where)
            return self.report_batches_without_positive_pairs(logs) if training else logs

        checked._raises_for_invalid_inputs = True
        return checked

    def make_train_function(self, force=False):
        self.reset_invalid_input_counts()  # counts from calls outside fit are not fit's
        object.__setattr__(self, "_warned_no_positives", False)  # once per fit
        self.build_optimizer()
        super().make_train_function(force)
        self.train_function = self._checked(self.train_function, "of the last training batch", training=True)
        return self.train_function

    def make_test_function(self, force=False):
        self.reset_invalid_input_counts()
        super().make_test_function(force)
        self.test_function = self._checked(self.test_function, "of the last evaluation batch")
        return self.test_function

    def resolve_jit_compile(self, requested):
        """What XLA compiles for ``compile(jit_compile=requested)``."""
        return resolve_auto_jit_compile(requested)

    def get_compile_config(self):
        config = super().get_compile_config()
        if config:  # what the user asked for: "auto" is resolved again where the model loads
            config["jit_compile"] = self.jit_compile_requested
        return config

    def compile_from_config(self, config):
        """Re-compile from a saved compile config (``.keras`` loading), which
        also re-attaches the loss's parameter layers before weights load."""
        config = keras.saving.deserialize_keras_object(config)
        self.compile(**config)
        if getattr(self, "optimizer", None) is not None and self.built:
            self.optimizer.build(self.trainable_variables)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if self._metric_loss is None:
            raise ValueError("Call compile(loss=...) before training or evaluating.")
        if y is None:
            raise ValueError(
                "The dataset gives no targets: metric-learning losses need labels, "
                "as (x, labels) or (x, {'label': ..., ...})."
            )
        bad_rows = nonfinite_rows(y_pred)  # this replica's rows; the metric sums replicas
        self.nonfinite_tracker.update_state(bad_rows)
        replicas = 1
        if self.gather_replicas:
            y, y_pred, replicas = replica_gather.gather_across_replicas(y, y_pred)
            if replicas > 1:  # every replica's loss must see every replica's rows
                bad_rows = nonfinite_rows(y_pred)
        self._count_invalid_inputs(y, global_batch=replicas > 1)
        if training:
            self._count_batch_without_positive_pairs(y, global_batch=replicas > 1)
        memory = getattr(self._metric_loss, "memory", None)
        # A cross-batch memory (tfdml.memory) serves training only: evaluation scores the batch.
        paused = memory.paused() if memory is not None and not training else contextlib.nullcontext()
        with paused, loss_routes.run_by_embedding_model():
            value = self._loss_value(y, y_pred, sample_weight, replicas, training)
        loss = nan_unless_finite(value, bad_rows)
        if replicas > 1:
            loss = loss / tf.cast(replicas, loss.dtype)
        return with_additional_losses(loss, self.losses)

    def _loss_value(self, y, y_pred, sample_weight, replicas, training):
        if sample_weight is None and self.jit_compile_loss:
            return self._loss_call(y, y_pred, training=training)
        if sample_weight is None:
            return self._metric_loss(y, y_pred)
        if isinstance(self._metric_loss, keras.losses.Loss) and replicas == 1:
            # A Keras loss applies its own rule (a tfdml loss refuses, naming the fix).
            return self._metric_loss(y, y_pred, sample_weight=sample_weight)
        # A plain function, or weights of this replica's rows only: never dropped.
        loss_base.refuse_sample_weight(getattr(self._metric_loss, "__name__", "This loss"))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "encoder": keras.saving.serialize_keras_object(self.encoder),
                "gather_replicas": self.gather_replicas,
            }
        )
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        encoder = keras.saving.deserialize_keras_object(
            config.pop("encoder"), custom_objects=custom_objects
        )
        return cls(encoder=encoder, **config)

    def build(self, input_shape):
        if not self.encoder.built:
            self.encoder.build(input_shape)
        super().build(input_shape)
        self._build_loss_state(input_shape)

    def load_weights(self, filepath, *args, **kwargs):
        """``keras.Model.load_weights``, refusing a loss whose state layers have no variables
        to load into yet (a cross-batch memory built without ``embedding_dim``, in a model
        whose encoder's output size is unknown): Keras would skip them silently."""
        if self.built:
            pending = [layer.name for layer in self._unbuilt_state_layers()]
            if pending:
                raise ValueError(
                    f"load_weights: the loss's state layer(s) {pending} have no variables yet (their "
                    "size follows the embeddings, and this model's encoder gives no output size before "
                    "its first batch), so their saved state would be skipped. Build the loss with the "
                    "embedding size, e.g. memory={'size': K, 'embedding_dim': d}, or give the encoder a "
                    "keras.Input.")
        return super().load_weights(filepath, *args, **kwargs)

    def _unbuilt_state_layers(self):
        """The loss's state layers sized by the embeddings (a ``build_for(embedding_dim)``
        method) that have no variables yet."""
        return [layer for layer in self.loss_parameters
                if not layer.built and callable(getattr(layer, "build_for", None))]

    def _build_loss_state(self, input_shape=None):
        """Build the loss's state layers sized by the embeddings (those with a
        ``build_for(embedding_dim)`` method, e.g. a cross-batch memory built without
        ``embedding_dim``) once the encoder's output size is known, so that their
        variables exist before weights or a checkpoint are restored into them."""
        pending = self._unbuilt_state_layers()
        if not pending:
            return
        dim = _output_size(self.encoder, input_shape)
        if dim is None:
            return  # built at the first batch
        with self.distribute_strategy.scope():
            for layer in pending:
                layer.build_for(dim)


class _LossState(tf.Module):
    """The loss's state layers as a TensorFlow trackable (``layers``, in the order of
    ``loss.parameter_layers``): what ``tf.train.Checkpoint`` of the model saves them under."""

    def __init__(self, layers):
        super().__init__(name="loss_state")
        self.layers = list(layers)


def _output_size(encoder, input_shape=None):
    """The last dimension of ``encoder``'s output (for inputs of ``input_shape`` when
    given), or None when it is not known yet."""
    try:
        shape = encoder.compute_output_shape(input_shape) if input_shape is not None else encoder.output_shape
    except (AttributeError, ValueError, TypeError, NotImplementedError):
        return None
    if not isinstance(shape, (tuple, list)) or not shape or isinstance(shape[0], (tuple, list)):
        return None  # no output yet, or several
    return None if shape[-1] is None else int(shape[-1])


def _release_epoch_iterators(model, traceback, fit_frame):
    """Reset the Keras epoch iterators of a ``fit`` (running in ``fit_frame``) that raised
    the exception of ``traceback``.

    Each epoch iterator holds a suspended generator that refers back to it: left as it
    is, that cycle keeps the tf.data iterator alive after the exception is dropped, until
    a full garbage collection, whose destruction of the iterator then waits for its
    autotuning thread, the longer the later. The iterators are found in the frames
    between the one that raised and ``fit_frame`` (Keras filters its own frames out of
    the traceback, not out of the frames' chain), never above it: an enclosing ``fit``
    keeps its own. ``reset`` drops the generator and the iterator. The validation
    iterator, which Keras keeps on the model until a ``fit`` ends, is dropped too (the
    next ``fit`` or ``evaluate`` makes a new one)."""
    from keras.src.trainers.epoch_iterator import EpochIterator

    while traceback is not None and traceback.tb_next is not None:
        traceback = traceback.tb_next
    below, frame = [], traceback.tb_frame if traceback is not None else None
    while frame is not None and frame is not fit_frame:
        below.append(frame)
        frame = frame.f_back
    for frame in below if frame is fit_frame else []:  # only what ran below this fit
        for value in list(frame.f_locals.values()):
            if isinstance(value, EpochIterator):
                value.reset()
    if getattr(model, "_eval_epoch_iterator", None) is not None:
        model._eval_epoch_iterator.reset()
        model._eval_epoch_iterator = None
