"""ProxyNCA (Movshovitz-Attias et al. 2017 §3) and Proxy-Anchor (Kim et al. 2020 Eq. 4):
NumPy brute force of value and gradient (embeddings and proxies), hand cases, degenerate
batches, label checks, XLA, serialisation, the proxies' learning rate, saving and export."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdml
from tfdml import errors, losses, models, optimizers

C, D = 5, 4


def unit(v):
    return v / np.linalg.norm(v)


def proxy_nca_reference(e, p, labels, sx=3.0, sp=3.0):
    """Movshovitz-Attias et al. §3 (Proxy-NCA), looped: mean_i [d(x_i, p_y) + log Σ_{z≠y} exp(−d(x_i, p_z))]."""
    total = 0.0
    for i, y in enumerate(labels):
        x = sx * unit(e[i])
        d = [np.sum((x - sp * unit(p[z])) ** 2) for z in range(len(p))]
        total += -math.log(math.exp(-d[y]) / sum(math.exp(-d[z]) for z in range(len(p)) if z != y))
    return total / len(labels)


def proxy_anchor_reference(e, p, labels, alpha=32.0, delta=0.1):
    """Kim et al. Eq. 4, looped over proxies and examples."""
    cos = lambda x, q: unit(x) @ unit(q)  # noqa: E731
    present = sorted(set(int(y) for y in labels))
    pos = sum(math.log(1 + sum(math.exp(-alpha * (cos(e[i], p[c]) - delta))
                               for i in range(len(e)) if labels[i] == c)) for c in present)
    neg = sum(math.log(1 + sum(math.exp(alpha * (cos(e[i], p[c]) + delta))
                               for i in range(len(e)) if labels[i] != c)) for c in range(len(p)))
    return pos / len(present) + neg / len(p)


REFERENCES = {"proxy_nca": proxy_nca_reference, "proxy_anchor": proxy_anchor_reference}


def make(name, **kwargs):
    kwargs.setdefault("num_classes", C)
    kwargs.setdefault("embedding_dim", D)
    kwargs.setdefault("seed", 0)
    return losses.get(name, **kwargs)


def value_and_grads(loss, labels, e):
    e = tf.convert_to_tensor(e)
    with tf.GradientTape() as tape:
        tape.watch(e)
        value = loss(labels, e)
    ge, gp = tape.gradient(value, [e, loss.proxy_layer.proxies])
    return value.numpy(), ge.numpy(), tf.convert_to_tensor(gp).numpy()


LABELS = {
    "mixed": np.array([0, 0, 1, 3, 3, 3, 1], np.int64),  # class 2 and 4 absent, 1 twice
    "one_class": np.array([2, 2, 2], np.int64),
    "singleton": np.array([4], np.int64),
}


@pytest.mark.parametrize("case", sorted(LABELS))
@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_value_and_gradients_equal_the_numpy_brute_force(name, case, ref):
    """Value and gradient w.r.t. the embeddings AND the proxies (central differences of the
    looped equation in float64) on a mixed batch, a batch of one class, a single example."""
    labels = LABELS[case]
    rng = np.random.default_rng(3)
    e = rng.normal(size=(len(labels), D))
    # alpha 4 keeps Proxy-Anchor's exponentials in a range where differences are exact enough
    loss = make(name, dtype="float64", **({"alpha": 4.0} if name == "proxy_anchor" else {}))
    p = loss.proxy_layer.proxies.numpy().astype(np.float64)
    kwargs = {"alpha": 4.0} if name == "proxy_anchor" else {}
    reference = REFERENCES[name]
    value, ge, gp = value_and_grads(loss, labels, e)
    assert value == pytest.approx(reference(e, p, labels, **kwargs), rel=1e-9)

    np.testing.assert_allclose(ge, ref.central_gradient(lambda x: reference(x, p, labels, **kwargs), e), atol=1e-6)
    np.testing.assert_allclose(gp, ref.central_gradient(lambda q: reference(e, q, labels, **kwargs), p), atol=1e-6)
    assert np.abs(gp).max() > 1e-4


def _set_proxies(loss, p):
    loss.proxy_layer.proxies.assign(np.asarray(p, np.float32))


def test_hand_computed_proxy_nca():
    """x = p_0 (distance 0), p_1 ⟂ x (distance 3² + 3² = 18): L = 0 + log e^{−18} = −18."""
    loss = make("proxy_nca", num_classes=2, embedding_dim=2)
    _set_proxies(loss, [[1.0, 0.0], [0.0, 1.0]])
    assert loss(np.array([0]), np.array([[2.0, 0.0]], np.float32)).numpy() == pytest.approx(-18.0, abs=1e-5)


def test_hand_computed_proxy_anchor():
    """One example of class 0 on p_0, p_1 ⟂: P⁺ = {p_0}: log(1 + e^{−32·0.9}); p_0 has no
    negative (log 1), p_1 the example at s = 0: log(1 + e^{32·0.1}), over |P| = 2."""
    loss = make("proxy_anchor", num_classes=2, embedding_dim=2)
    _set_proxies(loss, [[1.0, 0.0], [0.0, 1.0]])
    expected = math.log1p(math.exp(-28.8)) + math.log1p(math.exp(3.2)) / 2
    assert loss(np.array([0]), np.array([[1.0, 0.0]], np.float32)).numpy() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_degenerate_batches_are_finite(name):
    """Identical embeddings, an embedding on its proxy, a zero embedding, large scales."""
    loss = make(name)
    p = loss.proxy_layer.proxies.numpy()
    for labels, e in [(np.array([1, 1, 1]), np.tile(p[1], (3, 1))),
                      (np.array([0, 2]), np.zeros((2, D), np.float32)),
                      (np.array([3]), p[3:4])]:
        value, ge, gp = value_and_grads(loss, labels, e.astype(np.float32))
        assert np.isfinite(value) and np.all(np.isfinite(ge)) and np.all(np.isfinite(gp))
    big = make(name, **({"embedding_scale": 30.0, "proxy_scale": 30.0} if name == "proxy_nca"
                        else {"alpha": 200.0}))
    value, ge, gp = value_and_grads(big, np.array([0, 0, 1]), np.random.default_rng(0).normal(size=(3, D)))
    assert np.isfinite(value) and np.all(np.isfinite(ge)) and np.all(np.isfinite(gp))


def test_proxy_anchor_one_class_batch_scores_absent_proxies_by_their_negatives_only():
    """P⁺ is the batch's classes only: a one-class batch averages its positive term over one
    proxy, and its own proxy has no negatives (log 1 = 0), so no gradient reaches it from
    the negative term."""
    loss = make("proxy_anchor", alpha=4.0)
    e = np.random.default_rng(1).normal(size=(3, D)).astype(np.float32)
    labels = np.array([2, 2, 2])
    p = loss.proxy_layer.proxies.numpy().astype(np.float64)
    assert loss(labels, e).numpy() == pytest.approx(proxy_anchor_reference(e, p, labels, alpha=4.0), rel=1e-5)
    positive, negative, present = loss.proxy_terms(tf.constant(labels), tf.constant(e), tf.constant(p, tf.float32))
    assert present.numpy().tolist() == [0, 0, 1, 0, 0] and negative.numpy()[2] == 0.0


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_labels_are_the_contiguous_column_and_large_ids_are_refused(name):
    """int64 ids (2**40 + k, 2**32 + 1 which int32 would read as 1) never index a proxy:
    they are refused; the contiguous labels a source maps them to are scored."""
    loss = make(name)
    e = np.random.default_rng(0).normal(size=(3, D)).astype(np.float32)
    for labels in (np.array([2**40, 2**40 + 1, 2**40], np.int64), np.array([0, 2**32 + 1, 1], np.int64),
                   np.array([0, C, 1]), np.array([-1, 0, 1])):
        with pytest.raises(errors.InvalidInputError, match=rf"'label' column must lie in \[0, num_classes={C}\)"):
            loss({"label": labels}, e)
        assert np.isnan(tf.function(lambda y, x: loss(y, x), jit_compile=True)({"label": labels}, e).numpy())
    ids = np.array([2**40 + 7, 2**40 + 3, 2**40 + 7], np.int64)
    _, contiguous = np.unique(ids, return_inverse=True)
    assert loss({"label": contiguous.astype(np.int64)}, e).numpy() == pytest.approx(
        loss(np.array([1, 0, 1]), e).numpy())


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_xla_equals_eager_with_an_unknown_batch(name):
    loss = make(name)
    e = np.random.default_rng(2).normal(size=(7, D)).astype(np.float32)
    labels = LABELS["mixed"]
    eager = value_and_grads(loss, labels, e)
    spec = (tf.TensorSpec([None], tf.int64), tf.TensorSpec([None, D], tf.float32))
    fn = tf.function(lambda y, x: value_and_grads_graph(loss, y, x), jit_compile=True, input_signature=spec)
    for a, b in zip(eager, fn(tf.constant(labels), tf.constant(e))):
        np.testing.assert_allclose(b.numpy(), a, rtol=1e-4, atol=1e-5 * np.abs(a).max())


def value_and_grads_graph(loss, y, e):
    with tf.GradientTape() as tape:
        tape.watch(e)
        value = loss(y, e)
    ge, gp = tape.gradient(value, [e, loss.proxy_layer.proxies])
    return value, ge, tf.convert_to_tensor(gp)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_constructor_refuses_what_the_loss_has_no_meaning_for(name):
    with pytest.raises(ValueError, match="needs num_classes .* and embedding_dim"):
        losses.get(name)
    with pytest.raises(ValueError, match="replace the mining of tuples: it takes no sampler"):
        make(name, sampler="semi_hard")
    with pytest.raises(ValueError, match="no importance-weighted form"):
        make(name, importance=True)
    with pytest.raises(ValueError, match="takes no distance"):
        make(name, distance="cosine")
    with pytest.raises(ValueError, match="proxy_lr_multiplier must be a number > 0"):
        make(name, proxy_lr_multiplier=0)
    with pytest.raises(ValueError, match="num_classes must be an int"):
        make(name, num_classes=2.5)
    with pytest.raises(ValueError, match="embeddings have size 3"):
        make(name)(np.array([0]), np.ones((1, 3), np.float32))
    if name == "proxy_nca":
        with pytest.raises(ValueError, match="num_classes must be an int >= 2"):
            make(name, num_classes=1)
        with pytest.raises(ValueError, match="'active' .* means nothing"):
            make(name, tuple_reduction="mean_active")
    else:
        with pytest.raises(ValueError, match="leave tuple_reduction at 'mean'"):
            make(name, tuple_reduction="sum")


def test_paper_defaults():
    anchor = make("proxy_anchor")
    assert (anchor.alpha, anchor.delta, anchor.proxy_lr_multiplier) == (32.0, 0.1, 100.0)
    assert anchor.proxy_layer.stddev == pytest.approx(math.sqrt(2.0 / C))
    nca = make("proxy_nca")
    assert (nca.embedding_scale, nca.proxy_scale, nca.proxy_lr_multiplier) == (3.0, 3.0, 100.0)
    # the proxies are a function of the seed
    np.testing.assert_array_equal(make("proxy_nca", seed=4).proxy_layer.proxies.numpy(),
                                  make("proxy_nca", seed=4).proxy_layer.proxies.numpy())


def _model(loss, multipliers=True):
    keras.utils.set_random_seed(0)
    encoder = models.build_encoder(keras.Sequential([keras.Input((6,)), keras.layers.Dense(8)]), D)
    model = models.EmbeddingModel(encoder)
    opt = optimizers.Adam(1e-2, lr_multipliers=loss.lr_multipliers) if multipliers else "adam"
    model.compile(optimizer=opt, loss=loss, jit_compile=False)
    model.build((None, 6))
    return model


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(20, 6)).astype(np.float32), np.repeat(np.arange(C), 4)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_keras_file_keeps_the_loss_and_its_proxies_and_the_export_has_none(name, tmp_path):
    loss = make(name, proxy_lr_multiplier=10.0)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert type(restored) is type(loss) and restored.get_config() == loss.get_config()
    model = _model(loss)
    x, y = _data()
    before = loss.proxy_layer.proxies.numpy().copy()
    model.fit(x, y, batch_size=10, epochs=1, verbose=0)
    trained = loss.proxy_layer.proxies.numpy()
    assert not np.allclose(before, trained)
    model.save(str(tmp_path / "m.keras"))
    loaded = tfdml.load_model(str(tmp_path / "m.keras"))
    assert loaded.loss.get_config() == loss.get_config()
    np.testing.assert_array_equal(loaded.loss.proxy_layer.proxies.numpy(), trained)
    assert loaded.optimizer.lr_multipliers == loss.lr_multipliers
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-6)
    # EmbeddingModel.export (train.py's saved_model/): the embedding function only.
    model.export(str(tmp_path / "saved_model"), verbose=False)
    served = tf.saved_model.load(str(tmp_path / "saved_model"))
    assert not any("proxies" in v.name for v in served.variables)
    assert (C, D) not in {tuple(v.shape) for v in served.variables}
    np.testing.assert_allclose(served.serve(tf.constant(x)).numpy(), model.predict(x, verbose=0), atol=1e-6)


def test_the_proxies_take_their_learning_rate_multiplier():
    """SGD without momentum: one step moves a proxy by lr × multiplier × its gradient, the
    network by lr × its gradient."""
    loss = make("proxy_anchor", proxy_lr_multiplier=100.0)
    keras.utils.set_random_seed(0)
    encoder = keras.Sequential([keras.Input((6,)), keras.layers.Dense(D)])
    model = models.EmbeddingModel(encoder)
    model.compile(optimizer=optimizers.SGD(1e-3, lr_multipliers=loss.lr_multipliers), loss=loss,
                  jit_compile=False)
    model.build((None, 6))
    x, y = _data()
    kernel = encoder.layers[-1].kernel
    with tf.GradientTape() as tape:
        value = loss(y, model(x))
    g_kernel, g_proxies = tape.gradient(value, [kernel, loss.proxy_layer.proxies])
    k0, p0 = kernel.numpy().copy(), loss.proxy_layer.proxies.numpy().copy()
    model.fit(x, y, batch_size=20, epochs=1, verbose=0, shuffle=False)
    np.testing.assert_allclose(k0 - kernel.numpy(), 1e-3 * g_kernel.numpy(), rtol=1e-4, atol=3e-7)
    np.testing.assert_allclose(p0 - loss.proxy_layer.proxies.numpy(), 0.1 * tf.convert_to_tensor(g_proxies).numpy(),
                               rtol=1e-4, atol=3e-7)


@pytest.mark.parametrize("jit_compile", [True, "auto", False])
def test_fit_with_a_label_outside_the_proxies_raises_and_trains_nothing(jit_compile):
    loss = make("proxy_nca")
    keras.utils.set_random_seed(0)
    encoder = keras.Sequential([keras.Input((6,)), keras.layers.Dense(D), keras.layers.UnitNormalization()])
    model = models.EmbeddingModel(encoder)
    model.compile(optimizer=optimizers.SGD(0.1, lr_multipliers=loss.lr_multipliers), loss=loss,
                  jit_compile=jit_compile)
    model.build((None, 6))
    x, y = _data()
    before = [v.numpy().copy() for v in model.trainable_variables]
    assert any(v is loss.proxy_layer.proxies for v in model.trainable_variables)
    with pytest.raises(errors.InvalidInputError,
                       match=rf"ProxyNCALoss: the 'label' column must lie in \[0, num_classes={C}\)"):
        model.fit(x, {"label": y + 2**40}, batch_size=20, epochs=1, verbose=0)
    for a, v in zip(before, model.trainable_variables):
        np.testing.assert_array_equal(a, v.numpy())
