"""WeightedSumLoss: Σ_t w_t L_t, each term running as it does alone (value, gradient, seeds,
checks), and the terms' learned state trained, saved and restored as one loss's."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdml
from tfdml import errors, losses, models, optimizers

C, D = 5, 4


def batch(seed=0, n=12):
    rng = np.random.default_rng(seed)
    e = rng.normal(size=(n, D))
    return np.repeat(np.arange(C), 3)[:n], (e / np.linalg.norm(e, axis=1, keepdims=True)).astype(np.float32)


def grad(loss, y, e):
    x = tf.constant(e)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = loss(y, x)
    return float(value), tape.gradient(value, x).numpy()


def test_value_and_gradient_are_the_weighted_sum_of_the_terms():
    y, e = batch()
    a = losses.ContrastiveLoss(margin=0.7)
    b = losses.TripletLoss(sampler="hard", margin=0.3)
    total = losses.WeightedSumLoss([a, b], weights=[0.5, 2.0])
    (va, ga), (vb, gb), (vt, gt) = grad(a, y, e), grad(b, y, e), grad(total, y, e)
    np.testing.assert_allclose(vt, 0.5 * va + 2.0 * vb, rtol=1e-6)
    np.testing.assert_allclose(gt, 0.5 * ga + 2.0 * gb, rtol=1e-5, atol=1e-7)
    assert abs(vt - (va + vb)) > 1e-3  # the weights matter


def test_hand_case():
    """Labels 0, 0, 1 at unit distance from each other (an equilateral triangle of side 1):
    contrastive (squared, α = 2) pairs: 2 positive pairs of D² = 1, 4 negative of (2 − 1)² = 1,
    mean 1; with α = 1 the negatives give 0 and the mean is 2/6."""
    e = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, np.sqrt(3) / 2]], np.float32)
    total = losses.WeightedSumLoss([losses.ContrastiveLoss(margin=2.0, name="c2"),
                                    losses.ContrastiveLoss(margin=1.0, name="c1")], weights=[3.0, 6.0])
    np.testing.assert_allclose(float(total([0, 0, 1], e)), 3.0 * 1.0 + 6.0 * (2 / 6), rtol=1e-6)


def test_a_random_sampler_term_draws_the_stream_it_draws_alone():
    y, e = batch(1)
    alone = losses.ContrastiveLoss(sampler="random", seed=7)
    inside = losses.WeightedSumLoss([losses.ContrastiveLoss(sampler="random", seed=7), losses.MultiSimilarityLoss()],
                                    weights=[1.0, 0.0])
    for _ in range(3):
        np.testing.assert_allclose(float(inside(y, e)), float(alone(y, e)), rtol=1e-6)


def test_config_round_trip():
    total = losses.WeightedSumLoss([losses.MultiSimilarityLoss(), losses.CircleLoss(m=0.4, gamma=80.0)], weights=[1.0, 0.25])
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(total))
    assert type(again) is losses.WeightedSumLoss and again.weights == [1.0, 0.25]
    assert [type(t) for t in again.terms] == [losses.MultiSimilarityLoss, losses.CircleLoss]
    assert again.terms[1].gamma == 80.0
    y, e = batch(2)
    np.testing.assert_allclose(float(again(y, e)), float(total(y, e)), rtol=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    ({"losses": []}, "list of at least one"),
    ({"losses": losses.ContrastiveLoss()}, "list of at least one"),
    ({"losses": [losses.ContrastiveLoss(), losses.TripletLoss()], "weights": [1.0]}, "one weight per loss"),
    ({"losses": [losses.ContrastiveLoss()], "weights": [-1.0]}, ">= 0"),
    ({"losses": [losses.ContrastiveLoss()], "weights": [float("nan")]}, ">= 0"),
    ({"losses": ["contrastive"]}, "tfdml.losses.get"),
    ({"losses": [{"class_name": "tfdml>ContrastiveLoss", "config": {"name": "c"}},
                 {"class_name": "tfdml>TripletLoss", "config": {"name": "c"}}]}, "named 'c'"),
    ({"losses": [3]}, "loss objects"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        losses.WeightedSumLoss(**kwargs)


def test_the_terms_input_checks_hold():
    total = losses.WeightedSumLoss([losses.ContrastiveLoss(), losses.ProxyNCALoss(num_classes=C, embedding_dim=D)])
    y, e = batch()
    with pytest.raises(errors.InvalidInputError, match="num_classes"):
        total(y + 10, e)
    with pytest.raises(errors.InvalidInputError):
        total(y + 0.5, e)


def _model(loss, jit_compile):
    keras.utils.set_random_seed(0)
    encoder = keras.Sequential([keras.Input((6,)), keras.layers.Dense(D), keras.layers.UnitNormalization()])
    model = models.EmbeddingModel(encoder)
    model.compile(optimizer="adam", loss=loss, jit_compile=jit_compile)
    return model


@pytest.mark.parametrize("jit_compile", [True, False])
def test_fit_trains_the_proxies_of_one_term_and_a_keras_file_restores_them(jit_compile, tmp_path):
    proxy = losses.ProxyAnchorLoss(num_classes=C, embedding_dim=D, proxy_lr_multiplier=10.0, seed=1)
    total = losses.WeightedSumLoss([proxy, losses.MultiSimilarityLoss()], weights=[1.0, 0.5])
    assert total.lr_multipliers == proxy.lr_multipliers and total.parameter_layers == proxy.parameter_layers
    model = _model(total, jit_compile)
    assert isinstance(model.optimizer, optimizers.Adam) and model.optimizer.lr_multipliers == proxy.lr_multipliers
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(20, 6)).astype(np.float32), np.repeat(np.arange(C), 4)
    before = proxy.proxy_layer.proxies.numpy().copy()
    history = model.fit(x, y, batch_size=10, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    trained = proxy.proxy_layer.proxies.numpy()
    assert not np.allclose(before, trained)
    model.save(str(tmp_path / "m.keras"))
    loaded = tfdml.load_model(str(tmp_path / "m.keras"))
    assert type(loaded.loss) is losses.WeightedSumLoss and loaded.loss.weights == [1.0, 0.5]
    np.testing.assert_array_equal(loaded.loss.terms[0].proxy_layer.proxies.numpy(), trained)


def test_a_tf_train_checkpoint_restores_every_term_s_state(tmp_path):
    """tf.train.Checkpoint(model=...), as a custom loop with a CheckpointManager saves: the
    proxies of the term that has them come back exactly."""
    proxy = losses.ProxyAnchorLoss(num_classes=C, embedding_dim=D, seed=2)
    total = losses.WeightedSumLoss([losses.MultiSimilarityLoss(), proxy])
    model = _model(total, False)
    model.build((None, 6))
    saved = proxy.proxy_layer.proxies.numpy().copy()
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    proxy.proxy_layer.proxies.assign(tf.zeros_like(proxy.proxy_layer.proxies))
    tf.train.Checkpoint(model=model).restore(path).assert_existing_objects_matched()
    np.testing.assert_array_equal(proxy.proxy_layer.proxies.numpy(), saved)
