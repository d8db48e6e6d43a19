"""Properties every tfdml loss shares: finite values and gradients on degenerate batches,
XLA (jit_compile) equals eager, serialisation round trip, seeds, finite-difference gradients."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdml import losses, samplers
from tfdml import targets as targets_lib

HAS_TOP_K = hasattr(samplers, "TopKMisplacedSampler")

FACTORIES = {
    "contrastive": lambda: losses.ContrastiveLoss(),
    "contrastive_l2_random": lambda: losses.ContrastiveLoss(
        squared=False, sampler=samplers.RandomPairSampler(num_pairs=20), seed=1
    ),
    "triplet_semi_hard": lambda: losses.TripletLoss(),
    "triplet_l2_distance_weighted": lambda: losses.TripletLoss(
        squared=False, sampler="distance_weighted", seed=2
    ),
    "triplet_hard": lambda: losses.TripletLoss(sampler="hard"),
    "margin": lambda: losses.MarginLoss(num_classes=6, num_examples=20, seed=3),
    "weighted_contrastive": lambda: losses.WeightedContrastiveLoss(eta=0.5),
    "balanced_contrastive": lambda: losses.BalancedContrastiveLoss(lam=4.0, num_classes=6),
    "npair": lambda: losses.NPairLoss(),
    "precision_at_k": lambda: losses.PrecisionAtKLoss(k=3),
    "stable_contrast": lambda: losses.StableContrastLoss(seed=4),
    "robust_hard_contrastive": lambda: losses.RobustHardContrastiveLoss(),
    "histogram_random_pairs": lambda: losses.HistogramLoss(sampler=samplers.RandomPairSampler(num_pairs=40), seed=5),
    "angular_npair": lambda: losses.AngularLoss(combine_npair=True),
    "lifted_structured": lambda: losses.LiftedStructuredLoss(),
    "lifted_structured_hermans_semi_hard": lambda: losses.LiftedStructuredLoss(generalized=True, sampler="semi_hard"),
    "binomial_deviance_random": lambda: losses.BinomialDevianceLoss(sampler="random", seed=5),
    "binomial_deviance_importance": lambda: losses.BinomialDevianceLoss(balanced=False, importance=True),
    "multi_similarity": lambda: losses.MultiSimilarityLoss(),
    "circle": lambda: losses.CircleLoss(),
    "circle_semi_hard": lambda: losses.CircleLoss(m=0.4, gamma=80.0, sampler="semi_hard"),
    "global": lambda: losses.GlobalLoss(margin=2.0),
    "global_random_pairs": lambda: losses.GlobalLoss(margin=2.0, sampler=samplers.RandomPairSampler(num_pairs=40),
                                                     seed=6),
}
NAMES = [
    pytest.param(n, marks=pytest.mark.skipif(n == "precision_at_k" and not HAS_TOP_K, reason="no top_k sampler"))
    for n in FACTORIES
]


def batch(ref, case="mixed", seed=0, dim=6):
    labels = ref.LABELS[case]
    example_id = np.arange(len(labels), dtype=np.int32)
    return ref.importance_targets(labels, example_id=example_id), ref.embeddings(len(labels), dim, seed)


def _tape_value_and_grad(loss, y, e):
    with tf.GradientTape() as tape:
        tape.watch(e)
        value = loss(y, e)
    return value, tape.gradient(value, e)


def value_and_grad(loss, y, e):
    """Eagerly: the loss and its gradient with respect to the embeddings, as NumPy."""
    value, grad = _tape_value_and_grad(loss, y, tf.convert_to_tensor(e))
    return value.numpy(), grad.numpy()


def traced_value_and_grad(loss, y, e, jit_compile):
    """As :func:`value_and_grad`, traced in a tf.function (graph mode or, with
    ``jit_compile=True``, XLA)."""
    e = tf.convert_to_tensor(e)
    value, grad = tf.function(lambda: _tape_value_and_grad(loss, y, e), jit_compile=jit_compile)()
    return value.numpy(), grad.numpy()


@pytest.mark.parametrize("name", NAMES)
def test_identical_embeddings_finite(ref, name):
    y, _ = batch(ref)
    e = np.tile(np.eye(6, dtype=np.float32)[:1], (len(y["label"]), 1))
    value, grad = value_and_grad(FACTORIES[name](), y, e)
    assert np.isfinite(value) and value.shape == ()
    assert np.all(np.isfinite(grad))


@pytest.mark.parametrize("name", NAMES)
def test_no_active_tuple_gives_zero(ref, name):
    """Distinct labels, orthonormal embeddings (all negatives at √2 > every margin used):
    no tuple has a loss, so the loss is 0 with finite gradients."""
    labels = ref.LABELS["no_positive"]
    y = ref.importance_targets(labels, example_id=np.arange(len(labels)))
    e = np.eye(len(labels), 6, dtype=np.float32)
    value, grad = value_and_grad(FACTORIES[name](), y, e)
    assert value == pytest.approx(0.0, abs=1e-6)
    assert np.all(np.isfinite(grad))


@pytest.mark.parametrize("name", NAMES)
def test_jit_compile_equals_eager(ref, name):
    y, e = batch(ref, seed=1, dim=8)
    eager, jitted = FACTORIES[name](), FACTORIES[name]()
    fn = tf.function(lambda yy, ee: jitted(yy, ee), jit_compile=True)
    for _ in range(2):  # the second call uses the advanced seed
        np.testing.assert_allclose(fn(y, e).numpy(), eager(y, e).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_graph_and_xla_give_the_same_value_and_gradient(ref, name):
    """Graph mode computes triplet losses on the valid slots only (a run-time shape), XLA on
    every slot of the sampler's fixed T: same value and gradient. The two sum in different
    orders (XLA's fused reductions follow the CPU's vector width), so a gradient entry that
    is a sum of larger terms of both signs (the histogram loss's) may differ by rounding of
    those terms: the tolerance is relative to the largest entry, not to each one."""
    y, e = batch(ref, seed=5, dim=8)
    graph_value, graph_grad = traced_value_and_grad(FACTORIES[name](), y, e, jit_compile=False)
    xla_value, xla_grad = traced_value_and_grad(FACTORIES[name](), y, e, jit_compile=True)
    np.testing.assert_allclose(xla_value, graph_value, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(xla_grad, graph_grad, rtol=0, atol=1e-4 * max(np.abs(graph_grad).max(), 1e-2))


def test_triplet_selection_keeps_only_valid_slots_outside_xla(ref):
    """What makes graph mode fast: the semi-hard selection (T = B² slots) reaches the loss
    cut to its valid slots; under XLA it keeps its fixed shape."""
    y, e = batch(ref, seed=6, dim=8)
    loss = losses.TripletLoss()
    targets = targets_lib.unpack(y)
    size = len(y["label"])

    def slots(ee):
        selection = loss.sample(loss.distances(ee), targets, ee)
        return tf.shape(selection.anchor)[0], tf.reduce_sum(tf.cast(selection.mask, tf.int32))

    graph_slots, graph_valid = [int(v) for v in tf.function(slots)(tf.constant(e))]
    xla_slots, xla_valid = [int(v) for v in tf.function(slots, jit_compile=True)(tf.constant(e))]
    assert xla_slots == size * size and graph_slots == graph_valid == xla_valid < size * size


@pytest.mark.parametrize("name", NAMES)
def test_serialisation_round_trip(ref, name):
    loss = FACTORIES[name]()
    config = keras.saving.serialize_keras_object(loss)
    restored = keras.saving.deserialize_keras_object(config)
    assert type(restored) is type(loss)
    assert restored.get_config() == loss.get_config()
    y, e = batch(ref, seed=2, dim=8)
    np.testing.assert_allclose(restored(y, e).numpy(), loss(y, e).numpy(), rtol=1e-6)
    assert losses.get(config).get_config() == loss.get_config()


@pytest.mark.parametrize("name", NAMES)
def test_parameter_layers_and_seeds(ref, name):
    loss = FACTORIES[name]()
    layers = loss.parameter_layers
    assert all(isinstance(layer, keras.layers.Layer) for layer in layers)
    seeded = loss.sampler is not None and getattr(loss.sampler, "needs_seed", False)
    assert any(isinstance(layer, losses.SeedState) for layer in layers) == seeded
    assert any(isinstance(layer, losses.MarginParameters) for layer in layers) == (name == "margin")


def test_seed_determinism(ref):
    y, e = batch(ref, seed=3, dim=8)
    make = lambda s: losses.TripletLoss(squared=False, sampler="distance_weighted", seed=s)  # noqa: E731
    a, b, c = make(5), make(5), make(6)
    first = [a(y, e).numpy() for _ in range(3)]
    np.testing.assert_array_equal(first, [b(y, e).numpy() for _ in range(3)])
    assert len(set(first)) > 1  # the stream advances per call
    assert [c(y, e).numpy() for _ in range(3)] != first


def fd_check(ref, loss, y, e, eps=1e-6):
    e = np.asarray(e, np.float64)
    _, grad = value_and_grad(loss, y, e)
    fd = ref.central_gradient(lambda x: float(loss(y, x)), e, eps)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-7)
    return grad


def test_margin_gradient_finite_differences(ref):
    """Wu §4 margin loss (ν > 0, class and image β): embeddings and β0 vs central differences."""
    labels = np.array([0, 0, 1, 1, 1, 2], np.int32)
    y = {"label": labels, "example_id": np.arange(6, dtype=np.int32)}
    e = ref.embeddings(6, dim=3, seed=5)
    loss = losses.MarginLoss(alpha=0.4, nu=0.2, num_classes=3, num_examples=6, sampler="semi_hard", dtype="float64")
    loss.margin_parameters.beta_class.assign([0.1, -0.3, 0.2])
    loss.margin_parameters.beta0.assign(1.0)
    grad = fd_check(ref, loss, y, e)
    assert np.abs(grad).max() > 1e-3
    beta0 = loss.margin_parameters.beta0
    with tf.GradientTape() as tape:
        value = loss(y, e)
    analytic = tape.gradient(value, beta0).numpy()

    def at(b):
        beta0.assign(b)
        return float(loss(y, e))

    # β0 is a float32 variable and the loss is piecewise linear in it: a wider step.
    numeric = (at(1.0 + 1e-3) - at(1.0 - 1e-3)) / 2e-3
    np.testing.assert_allclose(analytic, numeric, rtol=1e-3)


def test_triplet_l2_gradient_finite_differences(ref):
    """Wu §4 ℓ2 triplet loss on semi-hard triplets vs central differences (float64)."""
    labels = np.array([0, 0, 0, 1, 1, 2, 2], np.int32)
    e = ref.embeddings(7, dim=3, seed=6)
    grad = fd_check(ref, losses.TripletLoss(margin=0.5, squared=False, dtype="float64"), labels, e)
    assert np.abs(grad).max() > 1e-3


@pytest.mark.skipif(not HAS_TOP_K, reason="no top_k sampler")
def test_precision_at_k_gradient_finite_differences(ref):
    """Lu et al. ℓ_k (Eq. 5 with ŝ of Eq. 4, cosine similarity) vs central differences."""
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 2], np.int32)
    e = ref.embeddings(8, dim=3, seed=7, normalize=False)
    grad = fd_check(ref, losses.PrecisionAtKLoss(k=2, gamma=0.3, dtype="float64"), labels, e)
    assert np.abs(grad).max() > 1e-3


def test_get_by_name():
    assert isinstance(losses.get("npair", l2_reg=0.1), losses.NPairLoss)
    with pytest.raises(ValueError, match="Unknown loss"):
        losses.get("nope")


@pytest.mark.parametrize("name", sorted(losses.LOSSES))
@pytest.mark.parametrize("reduction", ["none", None])
def test_a_per_sample_reduction_is_refused_not_ignored(name, reduction):
    """A tfdml loss is one scalar over tuples: Keras' reduction="none" (per-sample
    values) has no per-sample values to return, so it is refused with the way to the
    per-tuple values, instead of silently returning the scalar."""
    with pytest.raises(ValueError, match=r"reduction=.*tuple_reduction"):
        losses.get(name, reduction=reduction)


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "sum", "mean"])
def test_scalar_reductions_agree(ref, reduction):
    """The reductions that reduce a scalar to itself are accepted: hand check, all equal
    the default."""
    y, e = batch(ref)
    expected = losses.ContrastiveLoss()(y, e).numpy()
    np.testing.assert_allclose(losses.ContrastiveLoss(reduction=reduction)(y, e).numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("make", [lambda: losses.TripletLoss(), lambda: losses.StableContrastLoss(seed=4),
                                  lambda: losses.MarginLoss(num_classes=6, num_examples=20, sampler="semi_hard")],
                         ids=["triplet", "stable_contrast", "margin"])
def test_grid_selection_gives_the_loss_of_the_same_triplets_gathered(ref, make, monkeypatch):
    """Under XLA a GridTripletSelection's D_ap is read without a gather (and the margin
    loss's positive multiplicities without a scatter); the same selection as a plain
    TripletSelection, gathered, must give the same value and gradient."""
    y, e = batch(ref, seed=7, dim=8)

    def compiled(loss):
        return traced_value_and_grad(loss, y, e, jit_compile=True)

    grid_value, grid_grad = compiled(make())
    plain = make()
    sample = type(plain.sampler).sample

    def as_plain(self, *args, **kwargs):
        return samplers.TripletSelection(*sample(self, *args, **kwargs))

    monkeypatch.setattr(type(plain.sampler), "sample", as_plain)
    plain_value, plain_grad = compiled(plain)
    np.testing.assert_allclose(grid_value, plain_value, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(grid_grad, plain_grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("make", [lambda: losses.TripletLoss(),
                                  lambda: losses.TripletLoss(squared=False, sampler="distance_weighted", seed=2),
                                  lambda: losses.MarginLoss(num_classes=3, num_examples=60, sampler="semi_hard"),
                                  lambda: losses.StableContrastLoss(seed=4)],
                         ids=["triplet", "triplet_dw", "margin", "stable_contrast"])
@pytest.mark.parametrize("largest_class", [4, 24])
def test_xla_compacted_and_full_grid_equal_graph_mode(make, largest_class):
    """Under XLA a grid selection is compacted to 16 valid slots per anchor, or kept whole
    when an anchor has more (a class of 24 here): both equal graph mode."""
    rng = np.random.default_rng(largest_class)
    labels = np.concatenate([np.zeros(largest_class), np.repeat([1, 2], 4)]).astype(np.int32)
    e = rng.normal(size=(len(labels), 8)).astype(np.float32)
    e = tf.constant(e / np.linalg.norm(e, axis=1, keepdims=True))
    y = {"label": tf.constant(labels), "example_id": tf.range(len(labels))}
    graph_value, graph_grad = traced_value_and_grad(make(), y, e, jit_compile=False)
    xla_value, xla_grad = traced_value_and_grad(make(), y, e, jit_compile=True)
    assert graph_value > 0
    np.testing.assert_allclose(xla_value, graph_value, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(xla_grad, graph_grad, rtol=1e-4, atol=1e-6)


def test_losses_take_the_base_arguments_through_kwargs_and_refuse_what_they_fix():
    from tfdml_app import loss_config as config

    for cls in (losses.ContrastiveLoss, losses.TripletLoss, losses.MarginLoss, losses.StableContrastLoss,
                losses.RobustHardContrastiveLoss, losses.WeightedContrastiveLoss,
                losses.BalancedContrastiveLoss):
        params = config._init_parameters(cls)
        assert {"distance", "tuple_reduction", "name", "importance"} <= set(params), cls
    assert config._init_parameters(losses.TripletLoss)["sampler"].default == "semi_hard"
    assert config._init_parameters(losses.WeightedContrastiveLoss)["importance"].default is True
    with pytest.raises(ValueError, match="AngularLoss scores dot products .* and takes no distance; remove"):
        losses.AngularLoss(distance="cosine")
    with pytest.raises(ValueError, match="takes no squared; remove squared"):
        losses.WeightedContrastiveLoss(squared=False)
    with pytest.raises(ValueError, match="takes no eta; remove eta"):
        losses.BalancedContrastiveLoss(num_classes=3, eta=2.0)
    with pytest.raises(ValueError, match="takes no sampler"):
        losses.WeightedContrastiveLoss(sampler="hard")


class PythonIfLoss(losses.ContrastiveLoss):
    """A contrastive loss whose compute branches with a Python ``if`` on a tensor: only
    autograph could turn it into a graph."""

    def compute(self, targets, embeddings):
        if tf.reduce_sum(embeddings) > 0:
            return super().compute(targets, embeddings)
        return tf.constant(0.0)


class _PythonIfSampler(samplers.AllPairsSampler):
    def sample(self, dist, labels, candidates, seed=None, embedding_dim=None):
        if tf.reduce_sum(dist) > 0:
            return super().sample(dist, labels, candidates, seed=seed, embedding_dim=embedding_dim)
        return super().sample(dist, labels, candidates, seed=seed, embedding_dim=embedding_dim)


def test_losses_and_samplers_are_plain_tensorflow_not_converted_by_autograph(ref):
    """A loss or sampler called in a caller's tf.function is traced as written, as Keras traces
    keras.losses.Loss (converting every module of the library would only cost tracing time):
    a Python `if` on a tensor in a subclass is refused in graph mode, not silently converted."""
    y, e = batch(ref)

    @tf.function
    def loss_step(y, e):
        return PythonIfLoss()(y, e)

    @tf.function
    def sampler_step(d, labels):
        return _PythonIfSampler()(d, labels)

    with pytest.raises(TypeError, match="Python .?bool"):
        loss_step(y, e)
    with pytest.raises(TypeError, match="Python .?bool"):
        sampler_step(tf.ones([4, 4]), tf.constant([0, 0, 1, 1]))
    # Eagerly the same subclass runs: the contract is only that nothing converts it.
    assert np.isfinite(float(PythonIfLoss()(y, e)))


class _PrivateNameLoss(losses.ContrastiveLoss):
    """Keras names a loss after its class: here "__private_name_loss", which TensorFlow
    refuses as a root name scope."""


@pytest.mark.parametrize("name", [None, "_x", "my loss (v2)", "é"])
def test_any_class_or_given_name_traces_in_a_tf_function(ref, name):
    y, e = batch(ref)
    loss = _PrivateNameLoss() if name is None else losses.ContrastiveLoss(name=name)
    value = tf.function(lambda y, e: loss(y, e))(y, e)
    np.testing.assert_allclose(float(value), float(losses.ContrastiveLoss()(y, e)), rtol=1e-6)
