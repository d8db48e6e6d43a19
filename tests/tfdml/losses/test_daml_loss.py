"""DAMLLoss against brute-force NumPy written from Duan et al. 2018 (DAML): the generator's
objective J_gen, the whole objective J = J_gen + λ J_m and the metric objective of DAML (tri)
(the paper's equation numbers were not readable, see the loss's docstring):

    J_gen = Σ_t ‖x̃⁻ − x‖² + λ₁ ‖x̃⁻ − x⁻‖² + λ₂ [D(x̃⁻, x)² − D(x⁺, x)² − α]_+,
    J_m   = Σ_t [D(x, x⁺)² − D(x, x̃⁻)² + α]_+   (DAML (tri))
            (+ real_weight Σ_t [D(x, x⁺)² − D(x, x⁻)² + α]_+, tfdml's option),
    J     = J_gen + λ J_m,   x̃⁻ = G([x, x⁺, x⁻]),

each Σ_t a mean over the sampler's triplets; the generator's weights get ∂J_gen only, the
embeddings λ ∂J_m only. The other forms of J_m: test_daml_forms.py."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdml import losses, models, samplers
from tfdml.losses import daml

D = 6
WEIGHTS = dict(margin=0.3, metric_weight=0.7, reg_weight=0.5, adv_weight=2.0, real_weight=0.25)


def np_generator(params, a, p, n):
    """G([x, x⁺, x⁻]) for one triplet: three dense layers, ReLU after the first two (loops
    over the units)."""
    h = np.concatenate([a, p, n])
    for i, (kernel, bias) in enumerate(params):
        out = np.array([sum(h[k] * kernel[k, j] for k in range(len(h))) + bias[j] for j in range(kernel.shape[1])])
        h = np.maximum(out, 0.0) if i < len(params) - 1 else out
    return h


def sq(u, v):
    return float(sum((u[k] - v[k]) ** 2 for k in range(len(u))))


def np_objectives(e, triplets, params, margin, metric_weight, reg_weight, adv_weight, real_weight,
                  synthetic=None, adv=None):
    """(J_gen, J_m) as means over ``triplets`` [(a, p, n)]; ``synthetic`` fixes x̃⁻ per triplet
    (else G of ``params``); ``adv`` replaces the adversarial term (for the wrong-formula test)."""
    if not triplets:
        return 0.0, 0.0
    j_gen = j_m = 0.0
    for t, (a, p, n) in enumerate(triplets):
        s = np_generator(params, e[a], e[p], e[n]) if synthetic is None else synthetic[t]
        d_ap, d_as, d_an = sq(e[a], e[p]), sq(e[a], s), sq(e[a], e[n])
        adv_term = max(d_as - d_ap - margin, 0.0) if adv is None else adv(d_ap, d_as, margin)
        j_gen += d_as + reg_weight * sq(s, e[n]) + adv_weight * adv_term
        j_m += max(d_ap - d_as + margin, 0.0) + real_weight * max(d_ap - d_an + margin, 0.0)
    return j_gen / len(triplets), metric_weight * j_m / len(triplets)


def np_daml(e, triplets, params, **weights):
    return sum(np_objectives(e, triplets, params, **weights))


def params_of(loss):
    g = loss.generator
    return [(k.numpy().astype(np.float64), b.numpy().astype(np.float64)) for k, b in zip(g.kernels, g.biases)]


def selected(ref, sampler, labels, e):
    return ref.triplet_list(samplers.get(sampler)(ref.pairwise(e).astype(np.float32), labels))


@pytest.mark.parametrize("sampler", ["hard", "semi_hard"])
@pytest.mark.parametrize("seed", [0, 1])
def test_value_matches_the_reference(ref, sampler, seed):
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=seed)
    loss = ref.shifted_daml_generator(losses.DAMLLoss(embedding_dim=D, sampler=sampler, seed=seed, **WEIGHTS))
    triplets = selected(ref, sampler, labels, e)
    assert triplets
    expected = np_daml(e.astype(np.float64), triplets, params_of(loss), **WEIGHTS)
    np.testing.assert_allclose(float(loss(labels, e)), expected, rtol=1e-5)


def test_the_triplets_of_an_n_pair_batch_match_the_reference(ref):
    """With the ``npair`` sampler (two examples per class): DAML on the N-pair batch's triplets
    (x_i, x_i⁺, x_j⁺), j ≠ i."""
    labels = np.array([0, 1, 0, 2, 1, 2], np.int32)
    e = ref.embeddings(len(labels), seed=8)
    loss = ref.shifted_daml_generator(losses.DAMLLoss(embedding_dim=D, sampler="npair", **WEIGHTS))
    triplets = selected(ref, "npair", labels, e)
    assert len(triplets) == 6
    expected = np_daml(e.astype(np.float64), triplets, params_of(loss), **WEIGHTS)
    np.testing.assert_allclose(float(loss(labels, e)), expected, rtol=1e-5)


def test_random_triplets_of_the_same_seed_match_the_reference(ref):
    """The default sampler: its triplets drawn with the loss's first seed of the stream."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=2)
    loss = losses.DAMLLoss(embedding_dim=D, seed=5, **WEIGHTS)
    twin = losses.SeedState(5, name="twin_seed")
    selection = samplers.get("random_triplets")(ref.pairwise(e).astype(np.float32), labels, seed=twin.next())
    expected = np_daml(e.astype(np.float64), ref.triplet_list(selection), params_of(loss), **WEIGHTS)
    np.testing.assert_allclose(float(loss(labels, e)), expected, rtol=1e-5)


def test_hand_case(ref):
    """x = (0, 0), x⁺ = (1, 0), x⁻ = (0, 2), x̃⁻ = (0, 1) (a constant generator), α = 0.5,
    λ = λ₁ = λ₂ = w_real = 1, hard sampler (one triplet per positive pair, both directions):

    anchor 0: D²(x, x⁺) = 1, D²(x, x̃⁻) = 1, D²(x, x⁻) = 4, ‖x̃⁻ − x⁻‖² = 1:
      J_hard = 1, J_reg = 1, J_adv = [1 − 1 − 0.5]_+ = 0, J_m = [1 − 1 + 0.5]_+ + [1 − 4 + 0.5]_+ = 0.5;
    anchor 1 (x = (1, 0), x⁺ = (0, 0), hardest negative (0, 2): D² = 5): D²(x, x̃⁻) = 2:
      J_hard = 2, J_reg = 1, J_adv = [2 − 1 − 0.5]_+ = 0.5, J_m = [1 − 2 + 0.5]_+ + 0 = 0.
    Mean: J_gen = (2 + 3.5) / 2 = 2.75, J_m = 0.25, J = 3. Without the real triplets
    (real_weight 0, the default): J_m = 0.5 / 2 = 0.25 too (the real terms are 0 here)."""
    e = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]], np.float32)
    labels = np.array([0, 0, 1])
    loss = losses.DAMLLoss(embedding_dim=2, sampler="hard", margin=0.5, real_weight=1.0)
    ref.constant_daml_generator(loss, [0.0, 1.0])
    assert float(loss(labels, e)) == pytest.approx(3.0, rel=1e-6)
    default = losses.DAMLLoss(embedding_dim=2, sampler="hard", margin=0.5)
    ref.constant_daml_generator(default, [0.0, 1.0])
    assert float(default(labels, e)) == pytest.approx(3.0, rel=1e-6)
    sums = losses.DAMLLoss(embedding_dim=2, sampler="hard", margin=0.5, tuple_reduction="sum")
    ref.constant_daml_generator(sums, [0.0, 1.0])
    assert float(sums(labels, e)) == pytest.approx(6.0, rel=1e-6)


def test_a_wrong_formula_is_caught(ref, monkeypatch):
    """The reference tells the terms from their likely slips, and the test fails on a library
    whose adversarial term has the metric's sign (the generator helping the embedding)."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=4)
    loss = ref.shifted_daml_generator(losses.DAMLLoss(embedding_dim=D, sampler="hard", **WEIGHTS))
    triplets, params = selected(ref, "hard", labels, e), params_of(loss)
    got = float(loss(labels, e))
    assert got == pytest.approx(np_daml(e.astype(np.float64), triplets, params, **WEIGHTS), rel=1e-5)
    for wrong in (lambda d_ap, d_as, m: max(d_ap - d_as + m, 0.0), lambda d_ap, d_as, m: max(d_as - d_ap + m, 0.0)):
        wrong_value = sum(np_objectives(e.astype(np.float64), triplets, params, adv=wrong, **WEIGHTS))
        assert abs(got - wrong_value) > 1e-3

    right = daml.daml_terms

    def metric_sign(anchor, positive, negative, synthetic, margin):
        terms = right(anchor, positive, negative, synthetic, margin)
        d_ap, d_as = daml.squared_distance(anchor, positive), daml.squared_distance(anchor, synthetic)
        return {**terms, "adv": tf.nn.relu(d_ap - d_as + margin)}

    monkeypatch.setattr(daml, "daml_terms", metric_sign)
    assert abs(float(loss(labels, e)) - got) > 1e-3


def _value_and_gradients(loss, labels, e):
    x = tf.constant(e)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = loss(labels, x)
    grads = tape.gradient(value, [x] + loss.generator.trainable_variables)
    return value, tf.convert_to_tensor(grads[0]), [tf.convert_to_tensor(g) for g in grads[1:]]


@pytest.mark.parametrize("sampler", ["hard", "semi_hard"])
def test_gradients_reach_each_parameter_set_from_its_own_objective(ref, sampler):
    """∂J/∂x = λ ∂J_m/∂x with x̃⁻ held fixed, and ∂J/∂θ_G = ∂J_gen/∂θ_G with the embeddings
    held fixed: central finite differences of the float64 reference."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=5).astype(np.float64)
    loss = ref.shifted_daml_generator(losses.DAMLLoss(embedding_dim=D, sampler=sampler, hidden_units=5, seed=3,
                                                      dtype="float64", **WEIGHTS))
    triplets, params = selected(ref, sampler, labels, e), params_of(loss)
    synthetic = [np_generator(params, e[a], e[p], e[n]) for a, p, n in triplets]
    _, grad_e, grad_g = _value_and_gradients(loss, labels, e)

    def metric_of(flat):
        return np_objectives(flat.reshape(e.shape), triplets, params, synthetic=synthetic, **WEIGHTS)[1]

    numeric = ref.central_gradient(metric_of, e.ravel()).reshape(e.shape)
    np.testing.assert_allclose(grad_e.numpy(), numeric, rtol=1e-5, atol=1e-8)
    assert np.abs(numeric).max() > 1e-3

    shapes = [w.shape for pair in params for w in pair]
    sizes = [int(np.prod(s)) for s in shapes]

    def gen_of(flat):
        parts = np.split(flat, np.cumsum(sizes)[:-1])
        ws = [part.reshape(s) for part, s in zip(parts, shapes)]
        return np_objectives(e, triplets, list(zip(ws[0::2], ws[1::2])), **WEIGHTS)[0]

    flat = np.concatenate([w.ravel() for pair in params for w in pair])
    numeric = np.split(ref.central_gradient(gen_of, flat), np.cumsum(sizes)[:-1])
    order = [v.path for v in loss.generator.trainable_variables]
    expected_order = [v.path for pair in zip(loss.generator.kernels, loss.generator.biases) for v in pair]
    by_path = dict(zip(order, grad_g))
    for path, want in zip(expected_order, numeric):
        np.testing.assert_allclose(by_path[path].numpy().ravel(), want, rtol=1e-5, atol=1e-8, err_msg=path)
    assert max(np.abs(g).max() for g in numeric) > 1e-3


def test_with_metric_weight_zero_the_embeddings_get_no_gradient(ref):
    """λ = 0: J_gen alone, which reads the embeddings through stop_gradient, so the
    embeddings get exactly zero while the generator still learns."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=6)
    weights = {**WEIGHTS, "metric_weight": 0.0}
    _, grad_e, grad_g = _value_and_gradients(losses.DAMLLoss(embedding_dim=D, sampler="hard", seed=1, **weights),
                                             labels, e)
    assert np.all(grad_e.numpy() == 0.0)
    assert max(float(tf.reduce_max(tf.abs(g))) for g in grad_g) > 0.0


@pytest.mark.parametrize("labels, e", [
    (np.array([7]), np.ones((1, D), np.float32)),                                  # one example
    (np.array([1, 1, 1]), np.zeros((3, D), np.float32)),                           # one class, identical points
    (np.array([0, 1, 2]), np.eye(3, D, dtype=np.float32)),                         # one example per class
])
@pytest.mark.parametrize("sampler", ["random_triplets", "hard", "semi_hard"])
def test_degenerate_batches_give_zero_and_zero_gradients(labels, e, sampler):
    loss = losses.DAMLLoss(embedding_dim=D, sampler=sampler, seed=0)
    value, grad_e, grad_g = _value_and_gradients(loss, labels, e)
    assert float(value) == 0.0
    assert np.all(grad_e.numpy() == 0.0)
    assert all(np.all(g.numpy() == 0.0) for g in grad_g)


def test_xla_with_an_unknown_batch_equals_eager(ref):
    loss = losses.DAMLLoss(embedding_dim=D, sampler="hard", seed=2, **WEIGHTS)
    spec = [tf.TensorSpec([None], tf.int64), tf.TensorSpec([None, D], tf.float32)]

    def value_grad(y, e):
        with tf.GradientTape() as tape:
            tape.watch(e)
            value = loss(y, e)
        grads = tape.gradient(value, [e] + loss.generator.trainable_variables)
        return value, [tf.convert_to_tensor(g) for g in grads]

    jitted = tf.function(value_grad, input_signature=spec, jit_compile=True)
    for case in ("mixed", "one_class", "no_positive"):
        labels = tf.constant(ref.LABELS[case].astype(np.int64))
        e = tf.constant(ref.embeddings(len(ref.LABELS[case]), seed=3))
        want_v, want_g = value_grad(labels, e)
        got_v, got_g = jitted(labels, e)
        np.testing.assert_allclose(got_v.numpy(), want_v.numpy(), rtol=1e-5, atol=1e-7)
        for got, want in zip(got_g, want_g):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-6)


def test_an_invalid_label_is_counted_under_xla():
    """The id check holds under XLA (no assert): the value is NaN with zero gradient."""
    loss = losses.DAMLLoss(embedding_dim=D, sampler="hard")
    y = {"label": tf.constant([0, 0, 1, 1], tf.int32), "example_id": tf.constant([0.0, 1.5, 2.0, 3.0])}
    fn = tf.function(lambda e: loss(y, e), jit_compile=True)
    assert np.isnan(float(fn(tf.constant(np.eye(4, D, dtype=np.float32)))))


def test_the_defaults_are_the_papers_objective():
    """The metric learns from the synthetic negatives alone (the paper's J_m(θ_f; x, x⁺, x̃⁻)),
    in the triplet form."""
    loss = losses.DAMLLoss(embedding_dim=D)
    assert (loss.form, loss.real_weight) == ("triplet", 0.0)


def test_config_round_trip_and_registry():
    loss = losses.get("daml", embedding_dim=D, seed=4, hidden_units=7, sampler="semi_hard", form="lifted", **WEIGHTS)
    assert isinstance(loss, losses.DAMLLoss)
    config = loss.get_config()
    again = losses.DAMLLoss.from_config(config)
    assert again.get_config() == config
    assert (again.embedding_dim, again.hidden_units, again.margin, again.form) == (D, 7, WEIGHTS["margin"], "lifted")
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert isinstance(restored, losses.DAMLLoss) and restored.get_config() == config
    layer = loss.generator
    assert daml.HardNegativeGenerator.from_config(layer.get_config()).get_config() == layer.get_config()


@pytest.mark.parametrize("kwargs, message", [
    ({}, "needs embedding_dim"),
    ({"embedding_dim": D, "tuple_reduction": "mean_active"}, "use 'mean'"),
    ({"embedding_dim": D, "sampler": None}, "needs a triplet sampler"),
    ({"embedding_dim": D, "sampler": "random"}, "triplets"),
    ({"embedding_dim": D, "distance": "cosine"}, "distance='euclidean'"),
    ({"embedding_dim": D, "memory": {"size": 8}}, "cannot use a cross-batch memory"),
    ({"embedding_dim": D, "margin": 0.0}, "margin"),
    ({"embedding_dim": D, "adv_weight": -1.0}, "adv_weight"),
    ({"embedding_dim": 0}, "embedding_dim must be an int >= 1"),
    ({"embedding_dim": D, "form": "quadruplet"}, "J_m is one of 'triplet', 'contrastive', 'npair', 'lifted'"),
])
def test_bad_arguments_are_refused_naming_the_fix(kwargs, message):
    with pytest.raises(ValueError, match=message):
        losses.DAMLLoss(**kwargs)


def test_embeddings_of_another_size_are_refused():
    with pytest.raises(ValueError, match="build the loss with the model's embedding_dim"):
        losses.DAMLLoss(embedding_dim=3)(np.array([0, 0, 1]), np.eye(3, 4, dtype=np.float32))


def _model(loss):
    keras.utils.set_random_seed(0)
    encoder = keras.Sequential([keras.Input((5,)), keras.layers.Dense(D, name="embedding"),
                                keras.layers.UnitNormalization()])
    model = models.EmbeddingModel(encoder)
    model.compile(optimizer="sgd", loss=loss, jit_compile=False)
    return model


def _batch():
    x = np.random.default_rng(0).normal(size=(12, 5)).astype(np.float32)
    return x, np.repeat(np.arange(4), 3)


def test_fit_trains_the_generator_and_the_encoder_keeps_it_out():
    model = _model(losses.DAMLLoss(embedding_dim=D, seed=0))
    before = [v.numpy().copy() for v in model._metric_loss.generator.weights]
    model.fit(*_batch(), batch_size=12, epochs=2, verbose=0)
    after = [v.numpy() for v in model._metric_loss.generator.weights]
    assert any(np.abs(a - b).max() > 0 for a, b in zip(after, before))
    generator_ids = {id(v) for v in model._metric_loss.generator.weights}
    assert not generator_ids & {id(v) for v in model.encoder.weights}


def test_a_plain_keras_model_is_refused():
    """Keras would never train the generator of a loss given to a plain Model."""
    encoder = keras.Sequential([keras.Input((5,)), keras.layers.Dense(D)])
    encoder.compile(optimizer="sgd", loss=losses.DAMLLoss(embedding_dim=D))
    with pytest.raises(ValueError, match="EmbeddingModel"):
        encoder.fit(*_batch(), batch_size=12, epochs=1, verbose=0)
