"""A loss's state (proxies, learned margins β, DAML's generator, the PDDM unit, a sampler's seed
stream, a cross-batch memory built without ``embedding_dim``) survives every way Keras and TensorFlow save a
trained EmbeddingModel: ``save_weights`` / ``load_weights``, ``tf.train.Checkpoint`` and
``tf.train.CheckpointManager``, ``model.save`` + ``tfdml.load_model``, and a custom loop
resumed from a CheckpointManager."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdml
from tfdml import distributed, losses, models

D, CLASSES, N = 4, 5, 20


def _data():
    r = np.random.default_rng(3)
    x = r.normal(size=(N, 6)).astype(np.float32)
    y = {"label": (np.arange(N) // 2 % CLASSES).astype(np.int64), "example_id": np.arange(N, dtype=np.int64)}
    return x, y


def _dataset():
    return tf.data.Dataset.from_tensor_slices(_data()).batch(10)


LOSSES = {
    # β0, β_class, the distance-weighted sampler's seed stream and a memory without embedding_dim
    "margin_memory": lambda: losses.MarginLoss(num_classes=CLASSES, seed=3, memory={"size": 12}),
    # DAML's hard negative generator and its random sampler's seed stream
    "daml": lambda: losses.DAMLLoss(embedding_dim=D, seed=3),
    # the generator of DAML's N-pair and lifted forms (the same layer, another objective)
    "daml_npair": lambda: losses.DAMLLoss(embedding_dim=D, seed=3, form="npair", sampler="npair"),
    "daml_lifted": lambda: losses.DAMLLoss(embedding_dim=D, seed=3, form="lifted"),
    "proxy_anchor": lambda: losses.ProxyAnchorLoss(num_classes=CLASSES, embedding_dim=D, seed=3),
    # the learned PDDM similarity unit beside the embedding
    "pddm": lambda: losses.PDDMLoss(embedding_dim=D, units=5, hidden_units=3, seed=3),
    # K = 2 centres per class: the class weights of the classification family
    "soft_triple": lambda: losses.SoftTripleLoss(num_classes=CLASSES, embedding_dim=D, centers_per_class=2, seed=3),
    "triplet_memory": lambda: losses.TripletLoss(sampler="semi_hard", memory={"size": 12}),
}


def _model(loss, seed=1, strategy=None, optimizer="sgd"):
    with (strategy or tf.distribute.get_strategy()).scope():
        keras.utils.set_random_seed(seed)
        encoder = keras.Sequential([keras.Input((6,)), keras.layers.Dense(D, name="embedding"),
                                    keras.layers.UnitNormalization()])
        model = models.EmbeddingModel(encoder)
        model.compile(optimizer=optimizer, loss=LOSSES[loss](), jit_compile=False)
    return model


def _trained(loss):
    model = _model(loss)
    model.fit(_dataset(), epochs=1, verbose=0)
    return model


def _loss_state(model):
    """The loss's variables in order (their paths carry the uniquified names of the loss)."""
    return [(v.path, v.numpy().copy()) for layer in model.loss_parameters for v in layer.weights]


def _assert_same_loss_state(restored, saved):
    state, expected = _loss_state(restored), _loss_state(saved)
    assert len(state) == len(expected) > 0
    for (_, value), (path, want) in zip(state, expected):
        assert value.dtype == want.dtype, path
        np.testing.assert_array_equal(value, want, err_msg=path)


def _assert_state_is_trained(model):
    memory = getattr(model._metric_loss, "memory", None)
    if memory is not None:
        assert int(memory.filled.numpy()) == 12
    seed = getattr(model._metric_loss, "_seed_state", None)
    if seed is not None:
        assert seed.generator.state.numpy().any()


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_save_weights_and_load_weights_restore_the_loss_state(tmp_path, loss):
    model = _trained(loss)
    _assert_state_is_trained(model)
    path = str(tmp_path / "m.weights.h5")
    model.save_weights(path)
    fresh = _model(loss, seed=2)
    fresh.build((None, 6))  # Keras loads weights into a built model only
    fresh.load_weights(path)
    _assert_same_loss_state(fresh, model)


def _model_without_input(encoder_layers=None, with_input=False):
    keras.utils.set_random_seed(1)
    layers = encoder_layers or [keras.layers.Dense(D), keras.layers.UnitNormalization()]
    layers = [keras.Input((6,))] + layers if with_input else layers
    model = models.EmbeddingModel(keras.Sequential(layers))  # no keras.Input: no output size yet
    model.compile(optimizer="sgd", loss=LOSSES["triplet_memory"](), jit_compile=False)
    return model


def test_a_memory_without_embedding_dim_is_built_with_the_model_and_loads_its_weights(tmp_path):
    model = _trained("triplet_memory")
    path = str(tmp_path / "m.weights.h5")
    model.save_weights(path)
    fresh = _model_without_input()
    assert not fresh._metric_loss.memory.built
    fresh.build((None, 6))
    assert fresh._metric_loss.memory.built
    fresh.load_weights(path)
    _assert_same_loss_state(fresh, model)


@keras.saving.register_keras_serializable(package="tfdml_test")
class NoOutputShape(keras.layers.Dense):
    """A layer that cannot tell its output shape before it runs."""

    def compute_output_shape(self, input_shape):
        raise NotImplementedError


def test_load_weights_into_a_memory_of_unknown_size_is_refused(tmp_path):
    model = _trained("triplet_memory")
    path = str(tmp_path / "m.weights.h5")
    model.save_weights(path)
    fresh = _model_without_input([NoOutputShape(D)])
    fresh.build((None, 6))
    with pytest.raises(ValueError, match="embedding_dim"):
        fresh.load_weights(path)


def test_weights_saved_before_the_memory_had_variables_load_as_an_empty_memory(tmp_path):
    """A file saved while a memory without embedding_dim had no variables yet (before its
    first batch) holds none of them: that memory was empty, and it loads as one."""
    early = _model_without_input([NoOutputShape(D)])
    early.build((None, 6))
    assert not early._metric_loss.memory.built
    path = str(tmp_path / "early.weights.h5")
    early.save_weights(path)
    model = _model_without_input([NoOutputShape(D)], with_input=True)
    model.fit(*_data(), batch_size=10, epochs=1, verbose=0)
    memory = model._metric_loss.memory
    assert int(memory.filled.numpy()) == 12
    model.load_weights(path)
    assert all(not v.numpy().any() for v in memory.weights)
    for a, b in zip(model.encoder.weights, early.encoder.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_a_checkpoint_restored_before_the_memory_exists_reaches_it_when_it_is_built(tmp_path):
    model = _trained("triplet_memory")
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    built = _model_without_input()
    tf.train.Checkpoint(model=built).restore(path)
    built.build((None, 6))  # the memory is built here and receives its saved state
    _assert_same_loss_state(built, model)
    lazy = _model_without_input()
    tf.train.Checkpoint(model=lazy).restore(path)
    x, y = _data()
    lazy.fit(x[:10], {k: v[:10] for k, v in y.items()}, batch_size=10, epochs=1, verbose=0)  # built at this batch
    saved = model._metric_loss.memory
    assert int(lazy._metric_loss.memory.steps.numpy()) == int(saved.steps.numpy()) + 1


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_tf_train_checkpoint_restores_the_loss_state(tmp_path, loss):
    model = _trained(loss)
    _assert_state_is_trained(model)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(tmp_path), max_to_keep=1)
    path = manager.save()
    saved = {name for name, _ in tf.train.list_variables(path)}
    assert len(saved) > len(model.trainable_variables) + 2  # more than the optimizer's view
    fresh = _model(loss, seed=2)
    tf.train.Checkpoint(model=fresh).restore(manager.latest_checkpoint).assert_existing_objects_matched()
    _assert_same_loss_state(fresh, model)
    for a, b in zip(fresh.encoder.weights, model.encoder.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_keras_file_and_load_model_restore_the_loss_state(tmp_path, loss):
    model = _trained(loss)
    path = str(tmp_path / "m.keras")
    model.save(path)
    _assert_same_loss_state(tfdml.load_model(path), model)


def test_custom_loop_resumed_from_a_checkpoint_manager_equals_uninterrupted(tmp_path):
    """Adam: its moments are restored too (created after the restore, when the loop builds it)."""
    strategy = tf.distribute.get_strategy()
    dataset = tf.data.Dataset.from_tensor_slices(_data()).repeat().batch(10)

    def loop(model, epochs, initial_epoch=0):
        return distributed.train_loop(model, strategy, dataset, 10, epochs=epochs, steps_per_epoch=2,
                                      initial_epoch=initial_epoch, verbose=0)

    uninterrupted = _model("margin_memory", optimizer="adam")
    loop(uninterrupted, 2)
    first = _model("margin_memory", optimizer="adam")
    loop(first, 1)
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=first, optimizer=first.optimizer), str(tmp_path), max_to_keep=1)
    manager.save()
    resumed = _model("margin_memory", seed=2, optimizer="adam")
    checkpoint = tf.train.Checkpoint(model=resumed, optimizer=resumed.optimizer)
    checkpoint.restore(manager.latest_checkpoint)
    _assert_same_loss_state(resumed, first)
    loop(resumed, 2, initial_epoch=1)
    _assert_same_loss_state(resumed, uninterrupted)
    for a, b in zip(resumed.encoder.weights, uninterrupted.encoder.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)


def _assert_every_replica_holds(model, saved, strategy):
    """Every replica's copy of ``model``'s loss variables equals ``saved``'s (a model on one
    device or under ``strategy``: its first replica)."""
    restored = [v for layer in model.loss_parameters for v in layer.weights]
    expected = [v for layer in saved.loss_parameters for v in layer.weights]
    assert len(restored) == len(expected) > 0
    for a, b in zip(restored, expected):
        local = strategy.experimental_local_results(a.value)
        assert len(local) == strategy.num_replicas_in_sync == 2
        for replica in local:
            np.testing.assert_array_equal(replica.numpy(), b.numpy(), err_msg=a.path)


#: The state a mirrored model carries across devices: learned margins, a sampler's seed
#: stream and a memory (margin_memory); proxies (proxy_anchor); the PDDM unit (pddm).
MIRRORED_LOSSES = ("margin_memory", "proxy_anchor", "pddm")


@pytest.fixture(scope="module", params=MIRRORED_LOSSES)
def mirrored_trained(request, mirrored_strategy):
    """``(loss name, a model trained one epoch under MirroredStrategy on two logical CPUs)``."""
    model = _model(request.param, strategy=mirrored_strategy)
    model.fit(_dataset(), epochs=1, verbose=0)
    _assert_state_is_trained(model)
    return request.param, model


def test_save_weights_of_a_mirrored_model_load_on_one_device_and_back(tmp_path, mirrored_trained,
                                                                     mirrored_strategy):
    loss, model = mirrored_trained
    path = str(tmp_path / "mirrored.weights.h5")
    model.save_weights(path)
    single = _model(loss, seed=2)
    single.build((None, 6))
    single.load_weights(path)
    _assert_same_loss_state(single, model)
    back_path = str(tmp_path / "single.weights.h5")
    single.save_weights(back_path)
    mirrored = _model(loss, seed=2, strategy=mirrored_strategy)
    mirrored.build((None, 6))
    mirrored.load_weights(back_path)
    _assert_every_replica_holds(mirrored, model, mirrored_strategy)


def test_a_checkpoint_manager_of_a_mirrored_model_restores_on_one_device_and_back(tmp_path, mirrored_trained,
                                                                                  mirrored_strategy):
    loss, model = mirrored_trained
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(tmp_path / "mirrored"), max_to_keep=1)
    manager.save()
    single = _model(loss, seed=2)
    tf.train.Checkpoint(model=single).restore(manager.latest_checkpoint).assert_existing_objects_matched()
    single.build((None, 6))
    _assert_same_loss_state(single, model)
    back = tf.train.CheckpointManager(tf.train.Checkpoint(model=single), str(tmp_path / "single"), max_to_keep=1)
    back.save()
    mirrored = _model(loss, seed=2, strategy=mirrored_strategy)
    tf.train.Checkpoint(model=mirrored).restore(back.latest_checkpoint).assert_existing_objects_matched()
    mirrored.build((None, 6))
    _assert_every_replica_holds(mirrored, model, mirrored_strategy)
    for a, b in zip(mirrored.encoder.weights, model.encoder.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_tf_train_checkpoint_restores_a_mirrored_model_on_every_replica(tmp_path, mirrored_trained,
                                                                       mirrored_strategy):
    loss, model = mirrored_trained
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    fresh = _model(loss, seed=2, strategy=mirrored_strategy)
    tf.train.Checkpoint(model=fresh).restore(path).assert_existing_objects_matched()
    _assert_every_replica_holds(fresh, model, mirrored_strategy)
