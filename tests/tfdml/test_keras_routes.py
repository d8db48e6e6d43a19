"""The routes a Keras user takes to train with a tfdml loss, and what each one gives.

* A loss with learned state (proxies, Wu's β) under a plain ``keras.Model``: Keras
  trains the model's own variables only, so the loss refuses the route with one
  error naming ``tfdml.models.EmbeddingModel`` (unless the model tracks the
  state itself), in every ``jit_compile`` mode.
* A loss with ``lr_multipliers`` compiled into ``EmbeddingModel``: an optimizer
  named by a string gets them, a ``tfdml.optimizers`` one gets the missing ones,
  and a plain Keras optimizer, which cannot apply them, is refused with the fix.
* A cross-batch memory without ``example_id``: the error leads to a route that
  takes the dict of targets.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdml import losses, models, optimizers

C, D, B = 4, 3, 8
X = np.random.default_rng(0).normal(size=(B, 5)).astype("float32")
Y = np.repeat(np.arange(C), 2).astype("int64")

#: Losses whose state Keras would have to train: the proxies and class weights, Wu's β0 / β_class,
#: DAML's generator.
LEARNED = {
    "proxy_anchor": lambda: losses.ProxyAnchorLoss(num_classes=C, embedding_dim=D, seed=0),
    "proxy_nca": lambda: losses.ProxyNCALoss(num_classes=C, embedding_dim=D, seed=0),
    "margin": lambda: losses.MarginLoss(num_classes=C, sampler=None),
    # the class weights of the classification family (K = 2 centres per class)
    "soft_triple": lambda: losses.SoftTripleLoss(num_classes=C, embedding_dim=D, centers_per_class=2, seed=0),
    # DAML's hard negative generator
    "daml": lambda: losses.DAMLLoss(embedding_dim=D, seed=0),
}


def _encoder():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((5,))
    return keras.Model(inputs, keras.layers.UnitNormalization()(keras.layers.Dense(D)(inputs)))


@pytest.mark.parametrize("jit_compile", [False, True, "auto"])
@pytest.mark.parametrize("name", sorted(LEARNED))
def test_plain_keras_model_refuses_a_loss_with_learned_state(name, jit_compile):
    model = _encoder()
    loss = LEARNED[name]()
    state = [v.numpy().copy() for layer in loss.parameter_layers for v in layer.trainable_variables]
    model.compile(optimizer="sgd", loss=loss, jit_compile=jit_compile)
    with pytest.raises(ValueError, match=rf"{type(loss).__name__} .*plain keras.Model.*"
                                         r"tfdml\.models\.EmbeddingModel\(encoder\)"):
        model.fit(X, Y, batch_size=B, epochs=1, verbose=0)
    for before, layer_vars in zip(state, [v for layer in loss.parameter_layers for v in layer.trainable_variables]):
        np.testing.assert_array_equal(before, layer_vars.numpy())


def test_plain_keras_model_that_tracks_the_state_itself_trains_it():
    """A model that holds the loss's layers (so Keras trains their variables) is not refused."""
    model = _encoder()
    loss = LEARNED["proxy_anchor"]()
    model.loss_state = loss.parameter_layers
    model.compile(optimizer=optimizers.SGD(0.1, lr_multipliers=loss.lr_multipliers), loss=loss,
                  jit_compile=False)
    before = loss.proxy_layer.proxies.numpy().copy()
    model.fit(X, Y, batch_size=B, epochs=1, verbose=0)
    assert not np.array_equal(before, loss.proxy_layer.proxies.numpy())


def test_a_loss_without_learned_state_still_trains_a_plain_keras_model():
    model = _encoder()
    model.compile(optimizer="sgd", loss=losses.TripletLoss(sampler="hard"), jit_compile=False)
    history = model.fit(X, Y, batch_size=B, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def _proxy_step(optimizer, multiplier):
    """How far one step moves the proxies (largest |change|) and the encoder's kernel."""
    loss = losses.ProxyAnchorLoss(num_classes=C, embedding_dim=D, seed=0, proxy_lr_multiplier=multiplier)
    model = models.EmbeddingModel(_encoder())
    model.compile(optimizer=optimizer() if callable(optimizer) else optimizer, loss=loss, jit_compile=False)
    model.build((None, 5))
    kernel = model.encoder.layers[1].kernel
    p0, k0 = loss.proxy_layer.proxies.numpy().copy(), kernel.numpy().copy()
    model.train_on_batch(X, Y)
    return (np.abs(loss.proxy_layer.proxies.numpy() - p0).max(), np.abs(kernel.numpy() - k0).max(), model)


@pytest.mark.parametrize("optimizer", ["adam", "adamw", "sgd"])
def test_an_optimizer_named_by_a_string_takes_the_loss_multipliers(optimizer):
    """Adam's first step moves every variable by about its learning rate whatever the gradient,
    so the proxies move about 100× as far as with multiplier 1, the network as far."""
    scaled_proxies, scaled_kernel, model = _proxy_step(optimizer, 100.0)
    plain_proxies, plain_kernel, _ = _proxy_step(optimizer, 1.0)
    assert isinstance(model.optimizer, optimizers.LRMultipliers)
    assert 50 < scaled_proxies / plain_proxies < 200
    assert 0.5 < scaled_kernel / plain_kernel < 2


def test_a_tfdml_optimizer_gets_the_missing_multipliers_and_keeps_its_own():
    opt = optimizers.Adam(1e-3, lr_multipliers={"embedding": 10.0})
    loss = LEARNED["proxy_anchor"]()
    model = models.EmbeddingModel(_encoder())
    model.compile(optimizer=opt, loss=loss)
    assert model.optimizer is opt
    assert opt.lr_multipliers == {"embedding": 10.0, loss.proxy_layer.name: 100.0}
    mine = optimizers.Adam(1e-3, lr_multipliers={loss.proxy_layer.name: 3.0})
    models.EmbeddingModel(_encoder()).compile(optimizer=mine, loss=loss)
    assert mine.lr_multipliers == {loss.proxy_layer.name: 3.0}


@pytest.mark.parametrize("opt", [lambda: keras.optimizers.Adam(1e-3), lambda: keras.optimizers.RMSprop(1e-3)])
def test_a_plain_keras_optimizer_is_refused_with_the_fix(opt):
    loss = LEARNED["proxy_nca"]()
    model = models.EmbeddingModel(_encoder())
    with pytest.raises(ValueError, match=r"ProxyNCALoss.*lr_multipliers.*"
                                         r"tfdml\.optimizers\.Adam\(learning_rate, lr_multipliers=loss\.lr_multipliers\)"):
        model.compile(optimizer=opt(), loss=loss)
    # Without multipliers a plain Keras optimizer is all it needs.
    loss = losses.ProxyNCALoss(num_classes=C, embedding_dim=D, proxy_lr_multiplier=1.0)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss)


def test_memory_without_example_id_names_a_route_that_takes_the_dict():
    loss = losses.ContrastiveLoss(memory={"size": 16})
    model = _encoder()
    model.compile(optimizer="sgd", loss=loss, jit_compile=False)
    with pytest.raises(ValueError, match=r"'example_id'.*tfdml\.models\.EmbeddingModel"):
        model.fit(X, Y, batch_size=B, epochs=1, verbose=0)
    # Following the advice trains.
    model = models.EmbeddingModel(_encoder())
    model.compile(optimizer="sgd", loss=losses.ContrastiveLoss(memory={"size": 16}), jit_compile=False)
    y = {"label": Y, "example_id": np.arange(B, dtype="int64")}
    history = model.fit(tf.data.Dataset.from_tensors((X, y)).repeat(2), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
