"""Margin based loss with learned boundary β (Wu et al. 2017 §4)."""

import keras
import numpy as np
import tensorflow as tf

from tfdml import targets as targets_lib
from tfdml import input_checks
from tfdml.losses import arguments, base


def _check_count(name, value):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int or None, got {value!r}.")
    return int(value)


@keras.saving.register_keras_serializable(package="tfdml")
class MarginParameters(keras.layers.Layer):
    """The learned boundaries of the margin loss, β(i) = β0 + β_class_{c(i)} + β_img_i.

    Real variables created (and the layer built) in ``__init__``: ``beta0`` (a
    scalar, trainable if ``learn_beta0``), ``beta_class`` ([num_classes], if
    ``num_classes``) and ``beta_img`` ([num_examples], if ``num_examples``),
    initialised as in Wu et al. 2017 §5: β0 = 1.2, β_class = β_img = 0.
    """

    def __init__(self, beta0=1.2, num_classes=None, num_examples=None, learn_beta0=True, **kwargs):
        super().__init__(**kwargs)
        self.initial_beta0 = float(beta0)
        self.num_classes = _check_count("num_classes", num_classes)
        self.num_examples = _check_count("num_examples", num_examples)
        self.learn_beta0 = bool(learn_beta0)
        self.beta0 = self.add_weight(
            name="beta0",
            shape=(),
            initializer=keras.initializers.Constant(self.initial_beta0),
            trainable=self.learn_beta0,
        )
        self.beta_class = None
        if self.num_classes is not None:
            self.beta_class = self.add_weight(
                name="beta_class", shape=(self.num_classes,), initializer="zeros"
            )
        self.beta_img = None
        if self.num_examples is not None:
            self.beta_img = self.add_weight(
                name="beta_img", shape=(self.num_examples,), initializer="zeros"
            )
        self.built = True

    def input_checks(self):
        """The :class:`~tfdml.input_checks.InputCheck` s of the indices into β_class and β_img:
        ``label`` in [0, num_classes), ``example_id`` in [0, num_examples)."""
        checks = []
        if self.beta_class is not None:
            checks.append(input_checks.index_check("label", "num_classes", self.num_classes, "classes"))
        if self.beta_img is not None:
            checks.append(input_checks.index_check("example_id", "num_examples", self.num_examples,
                                           "training examples"))
        return checks

    def beta(self, labels, example_id=None, dtype=tf.float32):
        """β(i) for each example of the batch, a [B] tensor. Eagerly an index outside
        :meth:`input_checks` raises :class:`tfdml.errors.InvalidInputError`; in a graph its
        β is that of index 0 (:meth:`~tfdml.input_checks.InputCheck.clean`), and the loss is NaN."""
        labels = tf.reshape(labels, [-1])
        if self.beta_img is not None:
            if example_id is None:
                raise ValueError(
                    "MarginLoss(num_examples=...) learns one β_img per training example and "
                    "needs the batch-contract dict with an 'example_id' column (see tfdml.targets)."
                )
            example_id = tf.reshape(example_id, [-1])
        targets = targets_lib.Targets(*([None] * len(targets_lib.COLUMNS)))._replace(
            label=tf.cast(labels, tf.int64),
            example_id=None if example_id is None else tf.cast(example_id, tf.int64))
        for check in self.input_checks():
            if tf.executing_eagerly():
                check.raise_if_broken("MarginLoss", targets)
            targets = check.clean(targets)
        value = tf.cast(self.beta0, dtype) * tf.ones(tf.shape(labels), dtype)
        if self.beta_class is not None:
            value = value + tf.gather(tf.cast(self.beta_class, dtype), targets.label)
        if self.beta_img is not None:
            value = value + tf.gather(tf.cast(self.beta_img, dtype), targets.example_id)
        return value

    def call(self, labels, example_id=None):
        return self.beta(labels, example_id)

    def get_config(self):
        config = super().get_config()
        config.update(
            beta0=self.initial_beta0,
            num_classes=self.num_classes,
            num_examples=self.num_examples,
            learn_beta0=self.learn_beta0,
        )
        return config


def margin_terms(dist, beta, alpha):
    """Per-pair terms ``(positive, negative)`` [B, B] of Wu et al. §4's margin loss:
    (α + (D_ij − β_i))_+ for y_ij = +1 and (α − (D_ij − β_i))_+ for y_ij = −1,
    with ``beta`` [B] the boundary β(i) of each row's anchor."""
    shifted = dist - beta[:, None]
    return tf.nn.relu(alpha + shifted), tf.nn.relu(alpha - shifted)


@keras.saving.register_keras_serializable(package="tfdml")
class MarginLoss(base.MetricLoss):
    """Wu et al. 2017 §4, margin based loss:

        ℓ(i, j) = (α + y_ij (D_ij − β(i)))_+,   y_ij ∈ {−1, +1},
        β(i) = β0 + β_class_{c(i)} + β_img_i,

    minimised jointly over the embedding and the β's with the ν-regulariser
    Σ_(i,j) ℓ(i, j) + ν β(i). The β's are trainable variables of the
    :class:`MarginParameters` layer in ``parameter_layers``: a model that
    tracks that layer trains and checkpoints them.

    Pairs come from the sampler (default distance weighted sampling, §4: every
    positive pair of the batch and, for each end of it, one negative drawn with
    Pr(n | a) ∝ min(λ, q(D_an)^-1)); a triplet selection (a, p, n) gives the
    positive pair (a, p) and the negative pair (a, n), each with β(a).
    ``sampler=None`` uses all candidate pairs.

    Reduction (Wu et al.'s reference code; ``tuple_reduction="mean_active"``):

        ( Σ_pairs ℓ(i, j) + ν Σ_pairs β(i) ) / max(1, #{pairs with ℓ > 0})

    with pairs counted with multiplicity. The ν term is added once per selected
    pair, as in the paper's objective above (the reference code adds ν β(a)
    once per triplet, i.e. half as much for the same ν).

    Args:
      alpha: margin α > 0 (0.2 in §5).
      beta0: initial β0 (1.2 in §5).
      nu: ν ≥ 0, weight of the β regulariser.
      num_classes: number of classes for β_class (labels must lie in
        [0, num_classes)); None = no class term.
      num_examples: size of the training split for β_img, indexed by the
        ``example_id`` column; None = no per-example term.
      learn_beta0: train β0 (else it stays fixed at ``beta0``).
      distance: pairwise distance D (euclidean; distance weighted sampling
        assumes euclidean distances of unit-length embeddings).
      sampler: pair / triplet sampler (default ``"distance_weighted"``).
      seed: seed of the sampler's stream.
      importance: weight each pair term (and its ν β(i)) by the batch design's
        W_ij = P_U/Q (Hong et al. Eq. 23–25); the default reduction becomes
        ``"mean"`` (a constant denominator, as Eq. 23), under which the
        all-pairs mini-batch loss is unbiased for the loss over all pairs of
        the training split (tested). Not in Wu et al.: Hong's weights applied
        to Wu's pair term.
    """

    sampler_kinds = ("pairs", "triplets")
    memory_refusal = None  # pair / triplet terms of the [B, M] matrix: a memory adds candidates
    supports_importance = True
    default_tuple_reduction = "mean_active"

    def __init__(
        self,
        alpha=0.2,
        beta0=1.2,
        nu=0.0,
        num_classes=None,
        num_examples=None,
        learn_beta0=True,
        sampler="distance_weighted",
        **kwargs,
    ):
        super().__init__(sampler=sampler, **kwargs)
        self.alpha = arguments.check_positive("alpha", alpha)
        self.nu = arguments.check_positive("nu", nu, allow_zero=True)
        try:
            beta0 = float(beta0)
        except (TypeError, ValueError):
            raise ValueError(f"beta0 must be a number, got {beta0!r}.") from None
        self.margin_parameters = MarginParameters(
            beta0=beta0,
            num_classes=num_classes,
            num_examples=num_examples,
            learn_beta0=learn_beta0,
            name=f"{self.name}_parameters",
        )

    @property
    def parameter_layers(self):
        return [self.margin_parameters] + super().parameter_layers

    def input_checks(self):
        return super().input_checks() + self.margin_parameters.input_checks()

    def compute(self, targets, embeddings, candidates=None):
        dist = self.distances(embeddings, candidates)
        pairs = self.pair_weights(dist, targets, embeddings, candidates)
        beta = self.margin_parameters.beta(targets.label, targets.example_id, dist.dtype)
        positive, negative = margin_terms(dist, beta, self.alpha)
        counts = tf.stack([pairs.pos_weight, pairs.neg_weight])
        w = self.importance_weights(targets, dist.dtype, candidates)
        per_pair = pairs.pos_weight + pairs.neg_weight
        if w is not None:  # ν β(i) belongs to the pair's term: weighted with it
            per_pair = per_pair * w
        regulariser = self.nu * tf.reduce_sum(per_pair * beta[:, None])
        return self.reduce(tf.stack([positive, negative]), counts, extra=regulariser,
                           weights=None if w is None else tf.stack([w, w]), candidates=candidates)

    def get_config(self):
        config = super().get_config()
        params = self.margin_parameters
        config.update(
            alpha=self.alpha,
            beta0=params.initial_beta0,
            nu=self.nu,
            num_classes=params.num_classes,
            num_examples=params.num_examples,
            learn_beta0=params.learn_beta0,
        )
        return config
