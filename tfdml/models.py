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
* A projection head (``projection_head=[...]``, :mod:`tfdml.projection_head`; SimCLR §2.1)
  maps the embeddings to what the loss scores, after the gather across replicas (its batch
  normalisation sees the global batch). ``call`` (``predict``, evaluation) and :meth:`export`
  give the embeddings without it; its weights are saved by every save route, never exported.
* ``compile(jit_compile="loss")`` compiles the loss and its sampler with XLA
  and leaves the encoder to TensorFlow's own kernels (``jit_compile=True``
  compiles the whole train step, encoder included; ``False`` nothing). On a
  CPU, XLA's convolutions are slower than oneDNN's while its fused
  elementwise code is faster for the [B, B] work of mining and pair terms.
"""

import contextlib
import sys

import keras
import tensorflow as tf

from tfdml import backbones as backbones_lib
from tfdml.backbones.scratch import mlp, small_cnn  # noqa: F401 (tfdml.models.small_cnn / mlp)
from tfdml import keras_shims, loss_state, replica_gather
from tfdml import optimizers as optimizers_lib
from tfdml.dtype_policies import (  # noqa: F401 (tfdml.models.DTYPE_POLICY_CHOICES, ...)
    AUTO_DTYPE_POLICY, DTYPE_POLICIES, DTYPE_POLICY_CHOICES, dtype_policy_scope, resolve_dtype_policy)
from tfdml.compiled_loss import (  # noqa: F401 (tfdml.models.JIT_COMPILE_CHOICES)
    JIT_COMPILE_CHOICES, LOSS_ONLY, CompiledLoss, resolve_auto_jit_compile)
from tfdml.losses import base as loss_base
from tfdml.losses import routes as loss_routes
from tfdml.model_counters import NO_POSITIVES_LOG, BatchCounters  # noqa: F401 (tfdml.models.NO_POSITIVES_LOG)
from tfdml.projection_head import ProjectionHeadMixin

#: The backbones built here, always trained from scratch (all names: :data:`tfdml.backbones.BACKBONES`).
BACKBONES = backbones_lib.SCRATCH


def get_backbone(name, input_shape, **kwargs):
    """A backbone by name: :func:`tfdml.backbones.get_backbone`."""
    return backbones_lib.get_backbone(name, input_shape=input_shape, **kwargs)


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


def _variables_exist(layer):
    """Whether ``layer`` has created all its variables: it is built, or it made them in
    ``__init__`` and has no ``build`` that could add more (a loss's state layer is never
    called, so Keras never marks it built)."""
    return layer.built or (bool(layer.weights) and type(layer).build is keras.layers.Layer.build)


@keras.saving.register_keras_serializable(package="tfdml")
class EmbeddingModel(BatchCounters, ProjectionHeadMixin, keras.Model):
    """A Keras model whose output is an embedding, trained by a tfdml loss.

    Args:
      encoder: a Keras model mapping inputs to [B, d] embeddings (e.g. from
        :func:`build_encoder`).
      gather_replicas: mine on the global batch under a distribution strategy
        (see the module docstring). Turn off only to reproduce per-replica
        mining.
      projection_head: the widths of a projection head applied to the embeddings for the
        loss only (:func:`tfdml.projection_head.build_projection_head`; ``[128, 64]``: a
        hidden layer of 128, an output of 64 that the loss sees), or None: no head.

    Usage::

        model = tfdml.models.EmbeddingModel(encoder)
        model.compile(optimizer="adam", loss=tfdml.losses.MarginLoss(num_classes=100))
        model.fit(dataset_of_x_and_targets, ...)
    """

    #: The train and test steps count the loss's input checks and raise after the step
    def __init__(self, encoder, gather_replicas=True, projection_head=None, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(encoder, keras.Model) and not isinstance(encoder, keras.layers.Layer):
            raise ValueError(
                f"EmbeddingModel needs a Keras model or layer as encoder, got {type(encoder).__name__}."
            )
        self.encoder = encoder
        self.gather_replicas = gather_replicas
        self._set_projection_head(projection_head)
        self._metric_loss = None
        self._loss_call = None
        self.jit_compile_loss = False
        self.jit_compile_requested = "auto"
        self.loss_parameters = []
        self._loss_state = loss_state.LossState([])
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
                keras_shims.release_epoch_iterators(self, err.__traceback__, sys._getframe())
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
        :meth:`call` computes), without the projection head and the loss's state in
        ``parameter_layers`` (proxies, learned margins, sampler seeds), which serving does
        not use."""
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
        self._loss_state = loss_state.LossState(layers)
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
        y_pred = self.loss_inputs(y_pred, training=training)
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
                "projection_head": None if self.projection_widths is None else list(self.projection_widths),
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
        self._build_projection_head(input_shape)
        super().build(input_shape)
        self._build_loss_state(input_shape)

    def load_weights(self, filepath, *args, **kwargs):
        """``keras.Model.load_weights``, refusing a loss whose state layers have no variables
        to load into yet (a cross-batch memory built without ``embedding_dim``, in a model
        whose encoder's output size is unknown): Keras would skip them silently
        (:func:`tfdml.loss_state.refuse_unbuilt`)."""
        if self.built:
            loss_state.refuse_unbuilt(self.loss_parameters)
        return super().load_weights(filepath, *args, **kwargs)

    def _build_loss_state(self, input_shape=None):
        """Build the loss's state layers sized by what the loss scores once that size is
        known (:func:`tfdml.loss_state.build_sized_by_embeddings`)."""
        loss_state.build_sized_by_embeddings(self.loss_parameters, self.loss_input_size(input_shape),
                                             self.distribute_strategy)
