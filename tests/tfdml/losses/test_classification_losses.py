"""The classification family against its papers' equations, written here as loops in
float64: normalized softmax (Zhai & Wu 2019 §3), CosFace (Wang et al. 2018 Eq. 4), ArcFace
(Deng et al. 2019 Eq. 3), sub-center ArcFace (Deng et al. 2020 §3, max over K sub-centres)
and SoftTriple (Qian et al. 2019 §3: relaxed similarity, margin softmax, centre
regulariser). Value and gradient (embeddings and class weights), hand cases, near-miss
formulas, degenerate batches, label checks, XLA, serialisation, saving and export."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdml
from tests.tfdml.losses.test_proxy_losses import value_and_grads_graph
from tfdml import errors, losses, models, optimizers

C, D = 5, 4
NAMES = ("normalized_softmax", "cosface", "arcface", "sub_center_arcface", "soft_triple")
# Small scales keep central differences exact enough; K = 2 keeps the loops short.
SMALL = {"normalized_softmax": {"temperature": 0.5}, "cosface": {"scale": 4.0, "margin": 0.35},
         "arcface": {"scale": 4.0, "margin": 0.5}, "sub_center_arcface": {"scale": 4.0, "margin": 0.5, "centers_per_class": 2},
         "soft_triple": {"la": 4.0, "gamma": 0.5, "centers_per_class": 3, "tau": 0.5}}


def unit(v):
    return v / np.linalg.norm(v)


def cos(a, b):
    return float(unit(a) @ unit(b))


def softmax_nll(logits, y):
    """−log(e^{logits_y} / Σ_j e^{logits_j})."""
    return -logits[y] + np.logaddexp.reduce(logits)


def reference(name, e, w, labels, wrong=None, **kw):
    """The mean over the batch of each paper's per-example loss (plus SoftTriple's
    regulariser), looped over examples, classes and centres. ``wrong`` picks a near miss."""
    kw = {**SMALL[name], **kw}
    k = kw.get("centers_per_class", 1)
    total = 0.0
    for i, y in enumerate(labels):
        if name == "soft_triple":
            sims = []
            for c in range(C):
                s = np.array([cos(e[i], w[c * k + t]) for t in range(k)])
                if wrong == "hard_max":
                    sims.append(s.max())
                    continue
                p = np.exp(s / kw["gamma"]) / np.exp(s / kw["gamma"]).sum()
                sims.append(float(p @ s))
            logits = kw["la"] * np.array(sims)
            logits[y] = kw["la"] * (sims[y] - kw.get("margin", 0.01))
        else:
            cosines = np.array([max(cos(e[i], w[c * k + t]) for t in range(k)) if wrong != "mean_centres"
                                else np.mean([cos(e[i], w[c * k + t]) for t in range(k)]) for c in range(C)])
            if name == "normalized_softmax":
                scale = cosines * kw["temperature"] if wrong == "times_temperature" else cosines / kw["temperature"]
                logits = scale
            else:
                logits = kw["scale"] * cosines
                if name == "cosface":
                    target = cosines[y] - kw["margin"]
                elif wrong == "cosine_margin":
                    target = cosines[y] - kw["margin"]
                else:
                    target = math.cos(math.acos(cosines[y]) + kw["margin"])
                logits[y] = kw["scale"] * target
                if wrong == "margin_on_all":
                    logits = kw["scale"] * (cosines - kw["margin"])
        total += softmax_nll(logits, y)
    value = total / len(labels)
    if name == "soft_triple" and k > 1:
        reg = 0.0
        for c in range(C):
            for t in range(k):
                for s in range(t + 1, k):
                    diff = unit(w[c * k + s]) - unit(w[c * k + t])
                    reg += diff @ diff if wrong == "squared_norm" else np.linalg.norm(diff)
        value += kw["tau"] * reg / (C * k * (k - 1))
    return value


def make(name, **kwargs):
    kwargs = {**SMALL[name], **kwargs}
    kwargs.setdefault("num_classes", C)
    kwargs.setdefault("embedding_dim", D)
    kwargs.setdefault("seed", 0)
    return losses.get(name, **kwargs)


def value_and_grads(loss, labels, e):
    """The loss and its gradients w.r.t. the embeddings and the class weights, as tensors."""
    return value_and_grads_graph(loss, labels, tf.convert_to_tensor(e))


def weights_of(loss):
    return loss.proxy_layer.proxies.numpy().astype(np.float64)


LABELS = {
    "mixed": np.array([0, 0, 1, 3, 3, 3, 1], np.int64),  # classes 2 and 4 absent
    "one_class": np.array([2, 2, 2], np.int64),
    "singleton": np.array([4], np.int64),
}


@pytest.mark.parametrize("case", sorted(LABELS))
@pytest.mark.parametrize("name", NAMES)
def test_value_and_gradients_equal_the_numpy_brute_force(name, case, ref):
    """Value and gradient w.r.t. the embeddings AND the class weights (central differences of
    the looped equation in float64) on a mixed batch, a batch of one class, one example."""
    labels = LABELS[case]
    e = np.random.default_rng(3).normal(size=(len(labels), D))
    loss = make(name, dtype="float64")
    w = weights_of(loss)
    value, ge, gw = (t.numpy() for t in value_and_grads(loss, labels, e))
    assert value == pytest.approx(reference(name, e, w, labels), rel=1e-9)
    np.testing.assert_allclose(ge, ref.central_gradient(lambda x: reference(name, x, w, labels), e), atol=1e-6)
    np.testing.assert_allclose(gw, ref.central_gradient(lambda q: reference(name, e, q, labels), w), atol=1e-6)
    assert np.abs(gw).max() > 1e-4


@pytest.mark.parametrize("name, options", [
    ("normalized_softmax", {}), ("cosface", {"scale": 64.0}), ("arcface", {"scale": 64.0, "margin": 0.3}),
    ("sub_center_arcface", {"centers_per_class": 3}), ("soft_triple", {"la": 20.0, "gamma": 0.1, "margin": 0.2})])
def test_value_at_the_papers_scales(name, options):
    """The defaults' large scales (s = 64, 1/σ = 20, λ = 20, 1/γ = 10): the stable form equals
    the loops."""
    labels = LABELS["mixed"]
    e = np.random.default_rng(5).normal(size=(len(labels), D))
    kwargs = {"temperature": 0.05} if name == "normalized_softmax" else options
    loss = make(name, dtype="float64", **kwargs)
    assert float(loss(labels, e)) == pytest.approx(reference(name, e, weights_of(loss), labels, **kwargs), rel=1e-9)


WRONG = {"normalized_softmax": ["times_temperature"], "cosface": ["margin_on_all"],
         "arcface": ["cosine_margin", "margin_on_all"], "sub_center_arcface": ["mean_centres", "cosine_margin"],
         "soft_triple": ["hard_max", "squared_norm"]}


@pytest.mark.parametrize("name, wrong", [(n, w) for n in NAMES for w in WRONG[n]])
def test_a_wrong_formula_does_not_match(name, wrong):
    """The reference tells each paper's formula from a near miss (σ multiplied, not divided;
    the margin on every class; CosFace's cosine margin for ArcFace's angular one; the mean
    over sub-centres for the max; the hard max over centres for SoftTriple's soft max; the
    squared norm in its regulariser): the loss matches the right one only."""
    labels = LABELS["mixed"]
    e = np.random.default_rng(2).normal(size=(len(labels), D))
    loss = make(name, dtype="float64")
    w = weights_of(loss)
    got = float(loss(labels, e))
    assert got == pytest.approx(reference(name, e, w, labels), rel=1e-9)
    assert abs(got - reference(name, e, w, labels, wrong=wrong)) > 1e-3 * abs(got)


def _set_weights(loss, w):
    loss.proxy_layer.proxies.assign(np.asarray(w, loss.proxy_layer.proxies.dtype))


def test_hand_computed_margins():
    """x on w_0, w_1 ⟂ x: CosFace gives log(1 + e^{−s(1 − m)}); ArcFace (θ = 0) gives
    log(1 + e^{−s cos m}); at θ = π/2 ArcFace's target is cos(π/2 + m) = −sin m; the
    normalized softmax log(1 + e^{−1/σ})."""
    w = [[1.0, 0.0], [0.0, 1.0]]
    x = np.array([[3.0, 0.0]], np.float32)
    for name, kwargs, expected in [
            ("cosface", {"scale": 64.0, "margin": 0.35}, math.log1p(math.exp(-64 * 0.65))),
            ("arcface", {"scale": 4.0, "margin": 0.5}, math.log1p(math.exp(-4 * math.cos(0.5)))),
            ("normalized_softmax", {"temperature": 0.5}, math.log1p(math.exp(-2.0)))]:
        loss = losses.get(name, num_classes=2, embedding_dim=2, seed=0, **kwargs)
        _set_weights(loss, w)
        assert float(loss(np.array([0]), x)) == pytest.approx(expected, rel=1e-5)
    arc = losses.ArcFaceLoss(num_classes=2, embedding_dim=2, scale=4.0, margin=0.5, seed=0)
    _set_weights(arc, w)
    # label 1: θ_y = π/2, the other class at cos 1
    assert float(arc(np.array([1]), x)) == pytest.approx(math.log1p(math.exp(4 * (1 + math.sin(0.5)))), rel=1e-5)


def test_soft_triple_hand_case():
    """K = 2 centres per class, two classes in 2-D: class 0's centres (1, 0) and (0, 1),
    class 1's (−1, 0) twice; x = (1, 0) of class 0. S'_0 = (e^{1/γ}·1 + 1·0)/(e^{1/γ} + 1),
    S'_1 = −1; R: ‖(0,1) − (1,0)‖ = √2 for class 0, 0 for class 1, over C K (K − 1) = 4."""
    gamma, la, delta, tau = 0.5, 2.0, 0.1, 0.3
    loss = losses.SoftTripleLoss(num_classes=2, embedding_dim=2, centers_per_class=2, la=la, gamma=gamma,
                                 margin=delta, tau=tau, seed=0)
    _set_weights(loss, [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [-1.0, 0.0]])
    s0 = math.exp(1 / gamma) / (math.exp(1 / gamma) + 1)
    expected = math.log1p(math.exp(la * (-1 - (s0 - delta)))) + tau * math.sqrt(2) / 4
    assert float(loss(np.array([0]), np.array([[1.0, 0.0]], np.float32))) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_degenerate_batches_are_finite(name):
    """An embedding on its class weight (ArcFace's θ = 0, where arccos has no derivative),
    opposite to it (θ = π), identical embeddings, a zero embedding, the papers' scales;
    coinciding SoftTriple centres."""
    loss = make(name)
    w = loss.proxy_layer.proxies.numpy()
    k = loss.centers_per_class
    for labels, e in [(np.array([1, 1, 1]), np.tile(w[k], (3, 1))), (np.array([1]), -w[k:k + 1]),
                      (np.array([0, 2]), np.zeros((2, D), np.float32)), (np.array([3]), w[3 * k:3 * k + 1])]:
        value, ge, gw = (t.numpy() for t in value_and_grads(loss, labels, e.astype(np.float32)))
        assert np.isfinite(value) and np.all(np.isfinite(ge)) and np.all(np.isfinite(gw))
    default = losses.get(name, num_classes=C, embedding_dim=D, seed=0)
    value, ge, gw = (t.numpy() for t in value_and_grads(default, np.array([0, 0, 1]),
                                                        np.random.default_rng(0).normal(size=(3, D))))
    assert np.isfinite(value) and np.all(np.isfinite(ge)) and np.all(np.isfinite(gw))
    if name == "soft_triple":
        _set_weights(loss, np.repeat(w[:1], len(w), axis=0))  # every centre the same
        value, ge, gw = (t.numpy() for t in value_and_grads(loss, np.array([0, 1]), w[:2]))
        assert np.isfinite(value) and np.all(np.isfinite(gw))


@pytest.mark.parametrize("name", NAMES)
def test_labels_outside_the_classes_are_refused_also_under_xla(name):
    loss = make(name)
    e = np.random.default_rng(0).normal(size=(3, D)).astype(np.float32)
    for labels in (np.array([0, C, 1]), np.array([-1, 0, 1]), np.array([2**40, 0, 1], np.int64)):
        with pytest.raises(errors.InvalidInputError, match=rf"'label' column must lie in \[0, num_classes={C}\)"):
            loss({"label": labels}, e)
        assert np.isnan(tf.function(lambda y, x: loss(y, x), jit_compile=True)({"label": labels}, e).numpy())


@pytest.mark.parametrize("name", NAMES)
def test_xla_equals_eager_with_an_unknown_batch(name):
    loss = make(name)
    e = np.random.default_rng(2).normal(size=(7, D)).astype(np.float32)
    labels = LABELS["mixed"]
    eager = [t.numpy() for t in value_and_grads(loss, labels, e)]
    spec = (tf.TensorSpec([None], tf.int64), tf.TensorSpec([None, D], tf.float32))
    fn = tf.function(lambda y, x: value_and_grads(loss, y, x), jit_compile=True, input_signature=spec)
    for a, b in zip(eager, fn(tf.constant(labels), tf.constant(e))):
        np.testing.assert_allclose(b.numpy(), a, rtol=1e-4, atol=1e-5 * np.abs(a).max())


@pytest.mark.parametrize("name", NAMES)
def test_constructor_refuses_what_the_loss_has_no_meaning_for(name):
    with pytest.raises(ValueError, match="needs num_classes .* and embedding_dim"):
        losses.get(name)
    with pytest.raises(ValueError, match="it takes no sampler"):
        make(name, sampler="semi_hard")
    with pytest.raises(ValueError, match="no importance-weighted form"):
        make(name, importance=True)
    with pytest.raises(ValueError, match="takes no distance"):
        make(name, distance="cosine")
    with pytest.raises(ValueError, match="embeddings have size 3"):
        make(name)(np.array([0]), np.ones((1, 3), np.float32))
    if name in ("sub_center_arcface", "soft_triple"):
        with pytest.raises(ValueError, match="centers_per_class must be an int >= 1"):
            make(name, centers_per_class=0)
    else:
        with pytest.raises(ValueError, match="learns one vector per class; remove centers_per_class"):
            make(name, centers_per_class=2)
    with pytest.raises(ValueError, match="learns one vector per class"):
        losses.ProxyAnchorLoss(num_classes=C, embedding_dim=D, centers_per_class=2)
    if name in ("arcface", "sub_center_arcface"):
        with pytest.raises(ValueError, match="radians"):
            make(name, margin=4.0)


def test_paper_defaults():
    get = lambda name: losses.get(name, num_classes=C, embedding_dim=D)  # noqa: E731
    assert get("normalized_softmax").temperature == 0.05
    assert (get("cosface").scale, get("cosface").margin) == (64.0, 0.35)
    assert (get("arcface").scale, get("arcface").margin) == (64.0, 0.5)
    sub = get("sub_center_arcface")
    assert (sub.centers_per_class, sub.scale, sub.margin) == (3, 64.0, 0.5)
    assert sub.proxy_layer.proxies.shape == (3 * C, D)
    st = get("soft_triple")
    assert (st.centers_per_class, st.la, st.gamma, st.margin, st.tau, st.proxy_lr_multiplier) == (
        10, 20.0, 0.1, 0.01, 0.2, 100.0)
    assert st.proxy_layer.proxies.shape == (10 * C, D)
    assert all(get(n).proxy_lr_multiplier == 1.0 for n in NAMES[:4])


def _model(loss):
    keras.utils.set_random_seed(0)
    encoder = models.build_encoder(keras.Sequential([keras.Input((6,)), keras.layers.Dense(8)]), D)
    model = models.EmbeddingModel(encoder)
    model.compile(optimizer=optimizers.Adam(1e-2, lr_multipliers=loss.lr_multipliers), loss=loss,
                  jit_compile=False)
    model.build((None, 6))
    return model


@pytest.mark.parametrize("name", NAMES)
def test_keras_file_keeps_the_loss_and_its_class_weights_and_the_export_has_none(name, tmp_path):
    loss = make(name, proxy_lr_multiplier=10.0)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert type(restored) is type(loss) and restored.get_config() == loss.get_config()
    assert restored.proxy_layer.proxies.shape == loss.proxy_layer.proxies.shape
    model = _model(loss)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(20, 6)).astype(np.float32), np.repeat(np.arange(C), 4)
    before = loss.proxy_layer.proxies.numpy().copy()
    model.fit(x, y, batch_size=10, epochs=1, verbose=0)
    trained = loss.proxy_layer.proxies.numpy()
    assert not np.allclose(before, trained)
    model.save(str(tmp_path / "m.keras"))
    loaded = tfdml.load_model(str(tmp_path / "m.keras"))
    assert loaded.loss.get_config() == loss.get_config()
    np.testing.assert_array_equal(loaded.loss.proxy_layer.proxies.numpy(), trained)
    assert loaded.optimizer.lr_multipliers == loss.lr_multipliers
    model.export(str(tmp_path / "saved_model"), verbose=False)
    served = tf.saved_model.load(str(tmp_path / "saved_model"))
    assert not any("proxies" in v.name for v in served.variables)
    np.testing.assert_allclose(served.serve(tf.constant(x)).numpy(), model.predict(x, verbose=0), atol=1e-6)


def test_fit_trains_each_loss():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(C), 4)
    x = (rng.normal(size=(20, 6)) + 2.0 * np.eye(6)[labels]).astype(np.float32)
    for name in NAMES:
        loss = losses.get(name, num_classes=C, embedding_dim=D, seed=0)
        model = _model(loss)
        history = model.fit(x, labels, batch_size=20, epochs=6, shuffle=False, verbose=0).history["loss"]
        assert np.all(np.isfinite(history)) and history[-1] < history[0], name
