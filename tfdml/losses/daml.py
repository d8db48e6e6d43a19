"""DAML: Duan, Zheng, Lin, Lu, Zhou, CVPR 2018, "Deep Adversarial Metric Learning": a
generator of synthetic hard negatives, trained adversarially with the embedding (the metric
objectives of its four forms: :mod:`tfdml.losses.daml_forms`).

* :class:`HardNegativeGenerator`: the generator G, a three-layer perceptron from the
  concatenated [anchor, positive, negative] embeddings to a synthetic negative.
* :func:`daml_terms`: the per-triplet terms of the generator's objective.
* :class:`DAMLLoss`: the loss that owns the generator (in ``parameter_layers``, as proxy
  losses own their proxies), forms its triplets through a triplet sampler and returns
  both objectives in one scalar whose gradients reach each parameter set from its own
  objective only.
"""

import keras
import tensorflow as tf

from tfdml.losses import arguments, base, daml_forms
from tfdml.losses.daml_forms import squared_distance
from tfdml.losses.proxies import check_size


@keras.saving.register_keras_serializable(package="tfdml")
class HardNegativeGenerator(keras.layers.Layer):
    """The hard negative generator G of DAML: x̃⁻ = G([x, x⁺, x⁻]), three fully connected
    layers (ReLU after the first two, linear output) from the concatenated anchor,
    positive and negative embeddings ([T, 3d]) to one synthetic negative ([T, d]).

    Its variables are created (and the layer built) in ``__init__`` from ``embedding_dim``
    and ``hidden_units``, drawn with Glorot-uniform kernels from ``seed`` and zero biases,
    so that a fresh loss has them to restore into. It computes in the dtype of its inputs
    (the variables are cast to it)."""

    def __init__(self, embedding_dim, hidden_units=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.embedding_dim = check_size("embedding_dim", embedding_dim, 1, "the size of an embedding")
        if hidden_units is None:
            hidden_units = 2 * self.embedding_dim
        self.hidden_units = check_size("hidden_units", hidden_units, 1, "the width of the generator's hidden layers")
        self.seed = seed
        widths = [3 * self.embedding_dim, self.hidden_units, self.hidden_units, self.embedding_dim]
        for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
            init_seed = None if seed is None else int(seed) + i
            # one attribute per variable: what tf.train.Checkpoint walks
            setattr(self, f"kernel_{i}", self.add_weight(
                name=f"kernel_{i}", shape=(fan_in, fan_out),
                initializer=keras.initializers.GlorotUniform(seed=init_seed)))
            setattr(self, f"bias_{i}", self.add_weight(name=f"bias_{i}", shape=(fan_out,), initializer="zeros"))
        self.built = True

    @property
    def kernels(self):
        """The three [fan_in, fan_out] kernels, input layer first."""
        return [getattr(self, f"kernel_{i}") for i in range(3)]

    @property
    def biases(self):
        """The three biases, input layer first."""
        return [getattr(self, f"bias_{i}") for i in range(3)]

    def call(self, anchor, positive, negative):
        h = tf.concat([anchor, positive, negative], axis=-1)
        last = len(self.kernels) - 1
        for i, (kernel, bias) in enumerate(zip(self.kernels, self.biases)):
            h = tf.matmul(h, tf.cast(kernel, h.dtype)) + tf.cast(bias, h.dtype)
            if i < last:
                h = tf.nn.relu(h)
        return h

    def get_config(self):
        config = super().get_config()
        config.update(embedding_dim=self.embedding_dim, hidden_units=self.hidden_units, seed=self.seed)
        return config


@tf.custom_gradient
def take_rows(params, indices):
    """``tf.gather(params, indices)`` of the rows of a [N, d] tensor, whose gradient is the
    dense [N, d] segment sum of the rows' gradients rather than ``IndexedSlices``: the
    embeddings' gradient of a loss that reads them only through gathers then passes the
    model's cross-replica gather (:mod:`tfdml.replica_gather`) as a tensor."""
    def grad(upstream):
        return tf.math.unsorted_segment_sum(upstream, indices, tf.shape(params)[0]), None

    return tf.gather(params, indices), grad


def daml_terms(anchor, positive, negative, synthetic, margin):
    """Per-triplet terms [T] of the generator's objective J_gen, for triplets (x, x⁺, x⁻) and
    the generator's synthetic negatives x̃⁻ (rows of four [T, d] tensors), D² the squared
    Euclidean distance and α the margin:

    * ``"hard"``: ‖x̃⁻ − x‖², J_hard (a synthetic negative near its anchor is hard);
    * ``"reg"``: ‖x̃⁻ − x⁻‖², J_reg (near the real negative it stays a negative);
    * ``"adv"``: [D²(x̃⁻, x) − D²(x⁺, x) − α]_+, J_adv (the generator is penalised while its
      negative still satisfies the metric's triplet constraint by the margin α; it goes to
      0 once D²(x, x̃⁻) ≤ D²(x, x⁺) − α, a violating negative).

    Pure: no stop-gradient here (:meth:`DAMLLoss.compute` routes the gradients)."""
    d_as = squared_distance(anchor, synthetic)
    return {
        "hard": d_as,
        "reg": squared_distance(synthetic, negative),
        "adv": tf.nn.relu(d_as - squared_distance(anchor, positive) - margin),
    }


@keras.saving.register_keras_serializable(package="tfdml")
class DAMLLoss(base.MetricLoss):
    """Deep adversarial metric learning (Duan, Zheng, Lin, Lu, Zhou, CVPR 2018):

        x̃⁻_t  = G(θ_g; x⁻_t, x_t, x⁺_t)
        J_gen = Σ_t ‖x̃⁻_t − x_t‖² + λ₁ ‖x̃⁻_t − x⁻_t‖² + λ₂ [D(x̃⁻_t, x_t)² − D(x⁺_t, x_t)² − α]_+
              =        J_hard     + λ₁       J_reg      + λ₂                 J_adv
        J     = J_gen + λ J_m(θ_f; x, x⁺, x̃⁻)

    over the triplets t = (x, x⁺, x⁻) of the ``sampler``, with x̃⁻ the synthetic negative of
    :class:`HardNegativeGenerator`, D the Euclidean distance of the embeddings and J_m the
    metric objective of the chosen ``form`` on the synthetic negatives
    (:mod:`tfdml.losses.daml_forms`): ``"triplet"``, DAML (tri),
    J_m = Σ_t [D(x_t, x⁺_t)² − D(x_t, x̃⁻_t)² + α]_+; ``"contrastive"``, DAML (cont),
    J_m = Σ_i D(x_i, x⁺_i)² + Σ_j [α − D(x_j, x̃⁻_j)²]_+; ``"npair"``, DAML (N-pair) and
    ``"lifted"``, DAML (lifted), the N-pair and lifted structured losses with the synthetic
    negatives in place of the real ones. The generator wants a negative near the anchor
    (J_hard), near the real negative so that it stays one (J_reg), and violating the metric's
    triplet constraint (J_adv is zero once D(x, x̃⁻)² ≤ D(x, x⁺)² − α); the embedding learns
    to keep the synthetic negatives beyond its positives.

    Source: the objectives J_gen, J = J_gen + λ J_m and the triplet and contrastive J_m as
    the paper writes them (read in readers' notes that restate its equations; the
    equations' numbers could not be read, so none is cited). The paper's own N-pair and
    lifted J_m could not be read: those forms follow its general objective
    J_m(θ_f; x, x⁺, x̃⁻), the form's loss on the synthetic negatives. The paper's metric
    learns from the synthetic negatives alone: ``real_weight`` (default 0) adds the form's
    loss on the real negatives, a tfdml option. The values of λ, λ₁, λ₂ and α used in the
    paper's experiments could not be read either: the defaults (λ = λ₁ = λ₂ = 1, α = 0.2
    for embeddings of unit norm) are tfdml's.

    Where tfdml differs from the paper, on purpose:

    * Space. The paper's G produces features in the input space of the metric network f
      (the CNN's features), J_hard and J_reg are measured there and D(x, y) = ‖f(x) − f(y)‖
      is the learned metric. A loss sees the embeddings only, so here G works on the
      embeddings: J_hard, J_reg and J_adv are all measured in the embedding space, and the
      metric that J_adv attacks is the embeddings' Euclidean distance.
    * Input order. G reads the concatenation [x, x⁺, x⁻] (the paper writes G(x⁻, x, x⁺)):
      a permutation of the first layer's rows, the same family of functions.
    * Schedule. The paper pre-trains the metric, then trains G against the fixed metric,
      then trains both jointly. Here both parameter sets learn from the first step; a
      pre-trained metric comes from a model trained first with the form's plain loss, and
      ``metric_weight=0`` trains G alone against a metric that stays fixed.
    * Reduction. Each objective is averaged over its tuples (``tuple_reduction="mean"``,
      the default; ``"sum"`` sums them as the paper's Σ does): J_gen over the triplets,
      J_m over the form's tuples (triplets; anchors for ``"npair"``; ordered positive
      pairs for ``"lifted"``). A batch without a valid triplet gives 0 and zero gradients.

    Gradients (one optimizer, one step; :class:`tfdml.models.EmbeddingModel` trains both
    parameter sets): the returned value is J_gen + λ J_m, computed so that

    * the generator's weights receive ∂J_gen/∂θ_G only: J_gen reads the triplet's
      embeddings through ``tf.stop_gradient`` (its adversarial term reads the metric with
      the embeddings frozen), and J_m reads x̃⁻ through ``tf.stop_gradient``;
    * the embeddings (and with them the encoder) receive λ ∂J_m/∂x only: J_gen's
      embeddings are stopped, so it sends nothing to them.

    Each parameter set therefore descends its own objective in the same step: the
    generator's J_gen and the encoder's λ J_m, the paper's joint training.

    The generator is learned state beside the encoder, like the proxies of a proxy loss:
    in ``parameter_layers``, trained, saved and resumed by every route (``save_weights``,
    ``tf.train.Checkpoint``, ``.keras`` files, the app's backups) and never part of the
    exported encoder.

    Args:
      embedding_dim: size d of the embeddings (``train.py`` passes the model's).
      margin: the margin α > 0 (of J_adv and of J_m).
      metric_weight: λ ≥ 0, the weight of J_m in J.
      reg_weight: λ₁ ≥ 0, the weight of J_reg in J_gen.
      adv_weight: λ₂ ≥ 0, the weight of J_adv in J_gen.
      real_weight: ≥ 0, the weight of the form's loss on the real negatives, added to J_m
        (0, the paper's: the metric learns from the synthetic negatives alone).
      form: the metric objective J_m, one of ``"triplet"``, ``"contrastive"``, ``"npair"``
        (use it with ``sampler="npair"``: Sohn's N-pair batches) or ``"lifted"``.
      hidden_units: width of G's two hidden layers (default 2·d).
      sampler: a triplet sampler (name or object) giving the tuples (x, x⁺, x⁻); the
        default ``"random_triplets"`` keeps the easy negatives that DAML turns into hard
        ones.
      seed: seed of G's initialisation and of a random sampler's stream.
      **kwargs: ``tuple_reduction``, ``name``, ``reduction``, ``dtype`` of
        :class:`~tfdml.losses.MetricLoss`.
    """

    sampler_kinds = ("triplets",)
    sampler_required = True
    needs_tuples = True
    fixed_distance = "euclidean"
    default_tuple_reduction = "mean"

    def __init__(self, embedding_dim=None, margin=0.2, metric_weight=1.0, reg_weight=1.0, adv_weight=1.0,
                 real_weight=0.0, form="triplet", hidden_units=None, sampler="random_triplets", seed=None,
                 **kwargs):
        super().__init__(sampler=sampler, seed=seed, **kwargs)
        owner = type(self).__name__
        if embedding_dim is None:
            raise ValueError(f"{owner} learns a generator of embeddings and needs embedding_dim (the size "
                             "of an embedding); train.py passes it.")
        if self.tuple_reduction not in ("mean", "sum"):
            raise ValueError(f"{owner}(tuple_reduction={self.tuple_reduction!r}): its terms are averaged "
                             "over the selected triplets, each on its own; use 'mean' (the default) or 'sum'.")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be an int or None, got {seed!r}.")
        self.margin = arguments.check_positive("margin", margin)
        self.metric_weight = arguments.check_positive("metric_weight", metric_weight, allow_zero=True)
        self.reg_weight = arguments.check_positive("reg_weight", reg_weight, allow_zero=True)
        self.adv_weight = arguments.check_positive("adv_weight", adv_weight, allow_zero=True)
        self.real_weight = arguments.check_positive("real_weight", real_weight, allow_zero=True)
        if form not in daml_forms.FORMS:
            raise ValueError(f"{owner}(form={form!r}): the metric objective J_m is one of "
                             f"{', '.join(map(repr, daml_forms.FORMS))}.")
        self.form = form
        self.generator = HardNegativeGenerator(embedding_dim, hidden_units=hidden_units, seed=seed,
                                               dtype=self.dtype, name=f"{self.name}_generator")

    @property
    def embedding_dim(self):
        return self.generator.embedding_dim

    @property
    def hidden_units(self):
        return self.generator.hidden_units

    @property
    def parameter_layers(self):
        return [self.generator] + super().parameter_layers

    def compute(self, targets, embeddings):
        if embeddings.shape[-1] is not None and embeddings.shape[-1] != self.embedding_dim:
            raise ValueError(f"{type(self).__name__} has a generator of embeddings of size embedding_dim="
                             f"{self.embedding_dim}, but the embeddings have size {embeddings.shape[-1]}; "
                             "build the loss with the model's embedding_dim.")
        dist = self.distances(embeddings)
        selection = self.sample(dist, targets, embeddings)
        anchor, positive, negative = (take_rows(embeddings, index) for index in
                                      (selection.anchor, selection.positive, selection.negative))
        frozen = [tf.stop_gradient(x) for x in (anchor, positive, negative)]
        synthetic = tf.cast(self.generator(*frozen), embeddings.dtype)
        # J_gen: generator live, embeddings frozen; J_m: embeddings live, synthetic negatives frozen.
        gen = daml_terms(*frozen, synthetic, self.margin)
        j_gen = self.reduce(gen["hard"] + self.reg_weight * gen["reg"] + self.adv_weight * gen["adv"],
                            tf.cast(selection.mask, embeddings.dtype))
        j_m = self.metric_objective(anchor, positive, tf.stop_gradient(synthetic), selection, dist)
        if self.real_weight:
            j_m = j_m + self.real_weight * self.metric_objective(anchor, positive, negative, selection, dist)
        return j_gen + self.metric_weight * j_m

    def metric_objective(self, anchor, positive, negative, selection, dist):
        """J_m of the loss's ``form`` on the triplets' rows, reduced over its tuples."""
        terms, counts = daml_forms.metric_terms(self.form, anchor, positive, negative, selection, self.margin,
                                                tf.shape(dist)[0], dist)
        return self.reduce(terms, counts)

    def get_config(self):
        config = super().get_config()
        config.update(embedding_dim=self.embedding_dim, margin=self.margin, metric_weight=self.metric_weight,
                      reg_weight=self.reg_weight, adv_weight=self.adv_weight, real_weight=self.real_weight,
                      form=self.form, hidden_units=self.hidden_units)
        return config
