"""DE-DSP training (Duan et al. 2019, §3.2, Algorithm 1) as a Keras model.

:class:`DSNEmbeddingModel` is an :class:`tfdml.models.EmbeddingModel` whose
``train_step`` runs one iteration of Algorithm 1 on a *pool* (one batch of
the pipeline, e.g. ``MPerClassDesign(m, classes_per_batch)``):

    for k = 1..K:                                          (lines 4–9)
        sample M tuples from the pool with the policy p(x_s | X; η)
        embed only the selected examples (training mode), score them:
            S = L_emb of each tuple (triplet Eq. 2 / N-pair Eq. 9)
        update η with REINFORCE on the mini-batch (Eq. 8, footnote 1)
    update θ with L_emb of the K·M tuples (line 10)

The K forward passes of the embedding network serve both as the scores of
line 7 (θ is only updated at line 10, so they are the scores under the current
θ) and as the forward pass of the θ update, recorded on one gradient tape:
the embedding network runs once per selected example. K is a Python int and
the K mini-batches are unrolled when the step is traced (no Python work per
step at run time); the step compiles with ``jit_compile=True``.

The DSN (a :class:`~tfdml.dsn.network.SamplerNetwork`), its optimizer
(``dsn_optimizer`` of :meth:`compile`) and the random stream of its draws are
part of the model: ``model.save`` / ``save_weights`` / checkpoints save them
and loading restores them, so training resumes with the same policy (§4.2:
η is carried over between steps, never re-initialised). With ``seed`` fixed
(and the encoder's weights fixed, e.g. by ``keras.utils.set_random_seed``)
a run is reproducible.

The embedding loss is a compiled :class:`tfdml.losses.TripletLoss` (its
``margin``, ``squared``, ``distance`` and ``tuple_reduction`` are used; its
``sampler`` is not: the DSN selects the triplets) or
:class:`tfdml.losses.NPairLoss` (``l2_reg``, ``tuple_reduction``). ``evaluate``
computes the compiled loss (with its own sampler) on whole batches, as
:class:`~tfdml.models.EmbeddingModel` does.

Pre-training of the DSN (Algorithm 1, line 2) is :meth:`pretrain_sampler`:
DSN updates on pools with the embedding network fixed.

Distribution strategies with more than one replica are not supported (each
replica would select from its own slice of the pool); compile raises.
"""

import keras
import tensorflow as tf

from tfdml import models
from tfdml import targets as targets_lib
from tfdml.dsn import policy as policy_lib
from tfdml.dsn import pool as pool_lib
from tfdml.dsn import reinforce, scoring
from tfdml.losses import SeedState
from tfdml.losses import base as loss_base

#: The metrics of ``DSNEmbeddingModel(diagnostics=True)`` (see ``DSNEmbeddingModel._diagnose``):
#: the policy's entropy and the uniform policy's (nats), the mean loss term of the tuples
#: the policy picks and of uniform ones over the same candidates.
DIAGNOSTICS = ("dsn_entropy", "dsn_uniform_entropy", "dsn_picked_loss", "dsn_uniform_loss")
#: XORed into the step's seed for the diagnostics' own draws.
_DIAGNOSTICS_STREAM = (0, 0x2545F491)


@keras.saving.register_keras_serializable(package="tfdml")
class DSNEmbeddingModel(models.EmbeddingModel):
    """An embedding model trained with a learned sampling policy (DE-DSP).

    Args:
      encoder: Keras model mapping inputs to [B, d] embeddings.
      sampler: the DSN: ``"triplet"`` / ``"npair"`` (built with
        ``sampler_options``), a :class:`~tfdml.dsn.network.SamplerNetwork`,
        or its serialised config.
      tuples_per_minibatch: M, tuples per DSN mini-batch (triplets; for
        N-pair, N = the number of classes of one N-pair batch).
      minibatches: K, DSN mini-batches per embedding batch (Algorithm 1).
      seed: int seed of the DSN's draws (anchors, gallery, policy samples) and
        of its weight initialisation (``None``: drawn).
      baseline: ``"mean"`` (footnote 1) or ``"none"``: see
        :func:`tfdml.dsn.reinforce.reinforce_loss`.
      sampler_options: keyword arguments of the network when ``sampler`` is a
        kind (:func:`~tfdml.dsn.policy.network_options`: ``width``, ``depth``, ``trunk``, ...).
      diagnostics: also report whether the policy collapses, against the uniform
        policy over the same candidates (:data:`DIAGNOSTICS`): its entropy and the
        loss of the tuples it picks. Costs two inference passes over the selected
        and the uniform tuples per mini-batch; training itself is unchanged.

    Usage::

        model = DSNEmbeddingModel(encoder, sampler="triplet", tuples_per_minibatch=16,
                                  minibatches=4, seed=0)
        model.compile(optimizer="adam", loss=tfdml.losses.TripletLoss(margin=0.2),
                      dsn_optimizer=keras.optimizers.Adam(1e-3))
        model.fit(pools, steps_per_epoch=..., epochs=...)  # pools: (x [P, ...], labels or dict)
    """

    def __init__(
        self,
        encoder,
        sampler="triplet",
        tuples_per_minibatch=16,
        minibatches=4,
        seed=None,
        baseline="mean",
        sampler_options=None,
        diagnostics=False,
        **kwargs,
    ):
        kwargs.pop("gather_replicas", None)
        if kwargs.pop("projection_head", None) is not None:
            raise ValueError("DSNEmbeddingModel: projection_head is not supported: the sampler network "
                             "and the loss score the embeddings themselves; use EmbeddingModel for a head.")
        super().__init__(encoder, gather_replicas=False, **kwargs)
        self.tuples_per_minibatch = _check_int(tuples_per_minibatch, "tuples_per_minibatch")
        self.minibatches = _check_int(minibatches, "minibatches")
        if baseline not in reinforce.BASELINES:
            raise ValueError(
                f"DSNEmbeddingModel: unknown baseline {baseline!r}; choose one of "
                f"{', '.join(reinforce.BASELINES)}."
            )
        self.baseline = baseline
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"DSNEmbeddingModel: seed must be an int or None, got {seed!r}.")
        self.seed = seed
        self.sampler_options = dict(sampler_options or {})
        if isinstance(sampler, str):
            options = dict(self.sampler_options)
            options.setdefault("seed", seed)
            try:
                sampler = policy_lib.get(sampler, **options)
            except (TypeError, ValueError) as err:
                raise ValueError(
                    f"DSNEmbeddingModel: sampler_options {self.sampler_options!r}: {err} "
                    f"(valid: {', '.join(policy_lib.network_options())})."
                ) from None
        elif self.sampler_options:
            raise ValueError(
                "DSNEmbeddingModel: sampler_options only apply when sampler is a kind "
                f"({', '.join(policy_lib.KINDS)}); configure the network object instead."
            )
        self.sampler = policy_lib.get(sampler)
        self.sampler_seed = SeedState(seed, name="dsn_seed")
        self.dsn_optimizer = None
        self.reward_tracker = keras.metrics.Mean(name="dsn_score")
        self.dsn_loss_tracker = keras.metrics.Mean(name="dsn_loss")
        if not isinstance(diagnostics, bool):
            raise ValueError(f"DSNEmbeddingModel: diagnostics must be true or false, got {diagnostics!r}.")
        self.diagnostics = diagnostics
        self.diagnostics_trackers = [keras.metrics.Mean(name=name) for name in DIAGNOSTICS] if diagnostics else []

    # -- compile / build -----------------------------------------------------
    def compile(self, optimizer="adam", loss=None, dsn_optimizer="adam", **kwargs):
        """``loss``: a :class:`~tfdml.losses.TripletLoss` for the triplet DSN, a
        :class:`~tfdml.losses.NPairLoss` for the N-pair DSN. ``dsn_optimizer``:
        the DSN's own optimizer (name, config or instance)."""
        expected = scoring.LOSS_FOR_KIND[self.sampler.kind]
        if not isinstance(loss, expected):
            raise ValueError(
                f"DSNEmbeddingModel with a {self.sampler.kind} sampler network needs "
                f"loss=tfdml.losses.{expected.__name__}(...), got {type(loss).__name__}."
            )
        if kwargs.get("jit_compile") == models.LOSS_ONLY:
            raise ValueError(
                f"DSNEmbeddingModel takes jit_compile True (the whole step, sampler network "
                f"included) or False, not {models.LOSS_ONLY!r}: its loss and sampler are one step."
            )
        strategy = tf.distribute.get_strategy()
        if strategy.num_replicas_in_sync > 1:
            raise ValueError(
                "DSNEmbeddingModel does not support distribution strategies with several replicas "
                "(each replica would select tuples from its own slice of the pool); train on one device."
            )
        super().compile(optimizer=optimizer, loss=loss, **kwargs)
        self.dsn_optimizer = keras.optimizers.get(dsn_optimizer)
        self._dsn_compile = keras.saving.serialize_keras_object(self.dsn_optimizer)
        if self.built:
            self._build_optimizers()

    def resolve_jit_compile(self, requested):
        """Keras' own meaning: "auto" may compile the whole step, sampler network included
        (the loss and the sampler are one step here, so there is no loss-only mode)."""
        return requested

    def get_compile_config(self):
        config = super().get_compile_config()
        if config is not None and self.dsn_optimizer is not None:
            config["dsn_optimizer"] = self._dsn_compile
        return config

    def compile_from_config(self, config):
        config = keras.saving.deserialize_keras_object(config)
        self.compile(**config)
        if self.built:
            self._build_optimizers()

    def build(self, input_shape):
        super().build(input_shape)
        if not self.sampler.built:
            self.sampler.build(input_shape)
        if self.compiled and self.dsn_optimizer is not None:
            self._build_optimizers()

    def embedding_variables(self):
        """Trainable variables of θ (everything trainable except the DSN)."""
        dsn = {id(v) for v in self.sampler.trainable_variables}
        return [v for v in self.trainable_variables if id(v) not in dsn]

    def _build_optimizers(self):
        if not self.optimizer.built:
            self.optimizer.build(self.embedding_variables())
        if not self.dsn_optimizer.built:
            self.dsn_optimizer.build(self.sampler.trainable_variables)

    # -- Algorithm 1 ---------------------------------------------------------
    def _tuple_terms(self, x, choice, training):
        """:func:`tfdml.dsn.scoring.tuple_terms` of ``choice`` with this model's encoder and loss."""
        return scoring.tuple_terms(self.encoder, self._metric_loss, self.sampler.kind, x, choice,
                                   self.tuples_per_minibatch, training)

    def _minibatch(self, x, features, labels, noise, diagnostics_noise=None):
        """Lines 5–8 of Algorithm 1: (per-tuple loss terms, mask, extras, dsn loss, mean score,
        non-finite rows, diagnostics [4] or None)."""
        dsn_vars = self.sampler.trainable_variables
        with tf.GradientTape() as dsn_tape:
            choice = self.sampler.select(features, labels, self.tuples_per_minibatch, noise=noise)
            with dsn_tape.stop_recording():
                terms, extra, emb = self._tuple_terms(x, choice, training=True)
            dsn_loss = reinforce.reinforce_loss(
                choice.log_prob, tf.stop_gradient(terms), choice.mask, self.baseline
            )
        grads = dsn_tape.gradient(dsn_loss, dsn_vars)
        self.dsn_optimizer.apply(grads, dsn_vars)
        score = scoring.masked_mean(tf.stop_gradient(terms), choice.mask)
        diagnosed = None if diagnostics_noise is None else self._diagnose(x, labels, choice, diagnostics_noise)
        return terms, choice.mask, extra, dsn_loss, score, models.nonfinite_rows(emb), diagnosed

    def _diagnose(self, x, labels, choice, noise):
        """Whether the policy collapsed, against the uniform policy over the same candidates
        (:meth:`~tfdml.dsn.network.SamplerNetwork.uniform_choice`, the same anchors or
        gallery): [4] = the entropy of the policy's choices given the first element (nats,
        the Monte-Carlo estimate −mean log p of the sampled tuples), the uniform policy's,
        the mean loss term of the tuples the policy picked and of the uniform ones, both
        with the embedding network in inference mode (no batch-statistics updates, so
        training is the same with and without diagnostics)."""
        uniform = self.sampler.uniform_choice(labels, choice, noise)
        picked = self._tuple_terms(x, choice, training=False)[0]
        drawn = self._tuple_terms(x, uniform, training=False)[0]
        values = [-scoring.masked_mean(choice.log_prob, choice.mask), -scoring.masked_mean(uniform.log_prob, uniform.mask),
                  scoring.masked_mean(picked, choice.mask), scoring.masked_mean(drawn, uniform.mask)]
        return tf.stop_gradient(tf.stack([tf.cast(v, tf.float32) for v in values]))

    def _algorithm(self, x, y):
        if isinstance(x, (dict, list, tuple)):
            raise ValueError(
                "DSNEmbeddingModel needs the pool as one input tensor x [P, ...] "
                f"(got {type(x).__name__}); the DSN gathers the selected examples from it."
            )
        if y is None:
            raise ValueError(
                "DSNEmbeddingModel needs labels: give the pools as (x, labels) or (x, {'label': ...})."
            )
        labels = targets_lib.unpack(y).label
        features = self.sampler.features(x)
        # All draws of the step at once (one philox kernel), then K unrolled mini-batches.
        seed = self.sampler_seed.next()
        noise = pool_lib.draw_noise(
            seed,
            self.sampler.noise_rows(self.tuples_per_minibatch),
            tf.shape(labels)[0],
            batch_shape=(self.minibatches,),
        )
        # The diagnostics' uniform draws come from a stream of their own: the policy's
        # draws are the same with and without them.
        diagnostics_noise = [None] * self.minibatches
        if self.diagnostics:
            diagnostics_noise = pool_lib.draw_noise(
                tf.bitwise.bitwise_xor(seed, tf.constant(_DIAGNOSTICS_STREAM, tf.int32)),
                self.sampler.uniform_noise_rows(self.tuples_per_minibatch),
                tf.shape(labels)[0],
                batch_shape=(self.minibatches,),
            )
        results = []
        for k in range(self.minibatches):
            results.append(self._minibatch(x, features, labels, noise[k], diagnostics_noise[k]))
        terms = tf.concat([r[0] for r in results], axis=0)
        mask = tf.concat([r[1] for r in results], axis=0)
        loss = scoring.embedding_loss(self._metric_loss, self.sampler.kind, terms, mask, [r[2] for r in results])
        dsn_loss = tf.add_n([r[3] for r in results]) / len(results)
        score = tf.add_n([r[4] for r in results]) / len(results)
        bad_rows = tf.add_n([r[5] for r in results])
        diagnosed = tf.add_n([r[6] for r in results]) / len(results) if self.diagnostics else None
        return models.nan_unless_finite(loss, bad_rows), dsn_loss, score, bad_rows, diagnosed

    def _ensure_built(self, x):
        # Keras builds a model without a strategy only when the train function is
        # traced by calling it on x; this step never calls the model itself.
        if not self.built:
            self.build((None,) + tuple(x.shape[1:]))
        self._build_optimizers()

    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        if sample_weight is not None:
            loss_base.refuse_sample_weight("DSNEmbeddingModel")
        self._ensure_built(x)
        emb_vars = self.embedding_variables()
        with tf.GradientTape() as tape:
            loss, dsn_loss, score, bad_rows, diagnosed = self._algorithm(x, y)
            total = models.with_additional_losses(loss, self.losses)
        grads = tape.gradient(total, emb_vars)
        self.optimizer.apply(grads, emb_vars)  # line 10
        # Keras' own "loss" metric (private, but the one Model.metrics reports as
        # "loss"; a second public Mean named "loss" would clash with it in the
        # logs). tests/tfdml/test_models.py::test_private_keras_api_we_rely_on
        # fails with a clear message if Keras renames it.
        self._loss_tracker.update_state(total)
        self.dsn_loss_tracker.update_state(dsn_loss)
        self.reward_tracker.update_state(score)
        self.nonfinite_tracker.update_state(bad_rows)
        for k, tracker in enumerate(self.diagnostics_trackers):
            tracker.update_state(diagnosed[k])
        shown = ("loss", "dsn_loss", "dsn_score", models.NONFINITE_METRIC, *DIAGNOSTICS)
        return {m.name: m.result() for m in self.metrics if m.name in shown}

    def test_step(self, data):
        # evaluate(): the compiled loss on the whole batch (EmbeddingModel); no DSN terms.
        logs = super().test_step(data)
        return {k: v for k, v in logs.items() if k not in ("dsn_loss", "dsn_score", *DIAGNOSTICS)}

    def pretrain_sampler(self, dataset, steps, verbose=0):
        """Algorithm 1, line 2: ``steps`` pools of DSN-only updates (K mini-batches each),
        with the embedding network fixed. Returns the mean score S per pool (a list)."""
        steps = _check_int(steps, "steps")
        if self.dsn_optimizer is None:
            raise ValueError("Call compile(...) before pretrain_sampler.")
        iterator = iter(dataset)
        first = next(iterator)
        x, y, _ = keras.utils.unpack_x_y_sample_weight(first)
        self._ensure_built(tf.convert_to_tensor(x))

        @tf.function(jit_compile=self.jit_compile is True, reduce_retracing=True)
        def step(x, y):
            return self._algorithm(x, y)[2]

        scores = [float(step(x, y))]
        for i in range(1, steps):
            x, y, _ = keras.utils.unpack_x_y_sample_weight(next(iterator))
            scores.append(float(step(x, y)))
            if verbose:
                print(f"pretrain_sampler {i + 1}/{steps}: mean score {scores[-1]:.4f}")
        return scores

    # -- serialisation -------------------------------------------------------
    def get_config(self):
        config = super().get_config()
        config.pop("gather_replicas", None)
        config.pop("projection_head", None)
        config.update(
            sampler=keras.saving.serialize_keras_object(self.sampler),
            tuples_per_minibatch=self.tuples_per_minibatch,
            minibatches=self.minibatches,
            seed=self.seed,
            baseline=self.baseline,
            diagnostics=self.diagnostics,
        )
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        encoder = keras.saving.deserialize_keras_object(config.pop("encoder"), custom_objects=custom_objects)
        sampler = keras.saving.deserialize_keras_object(config.pop("sampler"), custom_objects=custom_objects)
        return cls(encoder=encoder, sampler=sampler, **config)


def _check_int(value, name):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"DSNEmbeddingModel: {name} must be an integer >= 1, got {value!r}.")
    return value
