"""EmbeddingModel's projection head (SimCLR, Chen et al. 2020 §2.1 and §4.2: g(·) maps the
representation h to z = g(h), the loss applies to z, g is thrown away after training): the
loss scores the head's output, ``predict`` and the exported SavedModel give the embeddings
without it, and its weights are trained and restored by every save route."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdml
from tfdml import callbacks, losses, models, projection_widths
from tfdml.projection_head import build_projection_head

IN, D, HIDDEN, OUT, N = 6, 4, 8, 3, 16  # the head's output (3) differs from the embedding (4)


def _data():
    x = np.random.default_rng(0).normal(size=(N, IN)).astype("float32")
    return x, (np.arange(N) // 2).astype("int64")  # instance ids: two views each, side by side


@keras.saving.register_keras_serializable(package="tfdml_test")
class RecordingNTXent(losses.NTXentLoss):
    """NT-Xent that keeps the last embeddings it scored (eagerly: jit_compile=False)."""

    seen = None

    def call(self, y_true, y_pred):
        RecordingNTXent.seen = y_pred
        return super().call(y_true, y_pred)


def _model(seed=1, loss=None, head=(HIDDEN, OUT), jit_compile=False, with_input=True):
    keras.utils.set_random_seed(seed)
    layers = [keras.layers.Dense(D, name="embedding")]
    encoder = keras.Sequential(([keras.Input((IN,))] if with_input else []) + layers)
    model = models.EmbeddingModel(encoder, projection_head=None if head is None else list(head))
    model.compile(optimizer="sgd", loss=loss or losses.NTXentLoss(temperature=0.5), jit_compile=jit_compile)
    return model


@pytest.fixture(scope="module")
def trained():
    model = _model(loss=RecordingNTXent(temperature=0.5))
    model.fit(*_data(), batch_size=8, epochs=2, shuffle=False, verbose=0)
    return model


def _head_values(model):
    return [v.numpy().copy() for v in model.projection_head.weights]


def _assert_same_head(model, other):
    a, b = _head_values(model), _head_values(other)
    assert len(a) == len(b) == 7  # dense0 kernel, bn0 γ β mean variance, output kernel and bias
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_the_head_is_dense_batch_norm_relu_then_linear():
    """g(h) = W2 ReLU(BN(W1 h)) + b2, checked in NumPy from the layers' weights (inference:
    BN with its moving statistics)."""
    head = build_projection_head([HIDDEN, OUT])
    h = np.random.default_rng(1).normal(size=(5, D)).astype("float32")
    head.build((None, D))
    w1, gamma, beta, mean, var, w2, b2 = [v.numpy() for v in head.weights]
    bn = head.layers[1]
    for v, value in zip(head.weights[1:5], [1.5, -0.2, 0.3, 2.0]):  # not the identity BN of init
        v.assign(np.full(v.shape, value, "float32"))
    gamma, beta, mean, var = 1.5, -0.2, 0.3, 2.0
    want = np.maximum(gamma * (h @ w1 - mean) / np.sqrt(var + bn.epsilon) + beta, 0.0) @ w2 + b2
    np.testing.assert_allclose(head(h, training=False).numpy(), want, rtol=1e-5, atol=1e-6)
    assert not head.layers[0].use_bias and head.layers[-1].units == OUT


def test_the_loss_scores_the_head_output_and_predict_the_embeddings(trained):
    x, y = _data()
    assert RecordingNTXent.seen.shape[-1] == OUT  # the loss saw the head's width, not D
    embeddings = trained.predict(x, verbose=0)
    assert embeddings.shape == (N, D)
    np.testing.assert_allclose(embeddings, trained.encoder(x).numpy(), rtol=1e-6)
    # compute_loss of the test step: the loss of g(h) with BN in inference mode
    h = trained.encoder(x)
    want = losses.NTXentLoss(temperature=0.5)(y, trained.projection_head(h, training=False))
    got = trained.compute_loss(x=x, y=y, y_pred=h, training=False)
    np.testing.assert_allclose(float(got), float(want), rtol=1e-6)
    assert abs(float(got) - float(losses.NTXentLoss(temperature=0.5)(y, h))) > 1e-4  # not the loss of h


def test_the_head_is_trained(trained):
    fresh = _model()
    assert fresh.projection_head.built  # built with the encoder's known size: ready to restore into
    moved = [not np.allclose(a, b) for a, b in zip(_head_values(trained), _head_values(fresh))]
    assert all(moved)  # kernels, bias, γ, β and the moving statistics all changed


def test_the_exported_saved_model_is_the_encoder_without_the_head(trained, tmp_path):
    x, _ = _data()
    trained.export(str(tmp_path / "export"), verbose=False)
    served = tf.saved_model.load(str(tmp_path / "export"))
    out = served.signatures["serving_default"](tf.constant(x))
    (value,) = out.values()
    assert value.shape == (N, D)
    np.testing.assert_allclose(value.numpy(), trained.encoder(x).numpy(), rtol=1e-5, atol=1e-6)
    saved = {v.name for v in served.variables}
    assert not any("projection_head" in name for name in saved), saved


def test_save_weights_and_load_weights_restore_the_head(trained, tmp_path):
    path = str(tmp_path / "m.weights.h5")
    trained.save_weights(path)
    fresh = _model(seed=2)
    fresh.build((None, IN))  # Keras loads weights into a built model only
    fresh.load_weights(path)
    _assert_same_head(fresh, trained)


def test_tf_train_checkpoint_restores_the_head(trained, tmp_path):
    path = tf.train.Checkpoint(model=trained).save(str(tmp_path / "ckpt"))
    assert any("projection_head" in name for name, _ in tf.train.list_variables(path))
    fresh = _model(seed=2)
    tf.train.Checkpoint(model=fresh).restore(path).assert_existing_objects_matched()
    _assert_same_head(fresh, trained)


def test_a_keras_file_reloads_with_its_head(trained, tmp_path):
    path = str(tmp_path / "m.keras")
    trained.save(path)
    loaded = tfdml.load_model(path)
    assert loaded.projection_widths == (HIDDEN, OUT)
    assert loaded.get_config()["projection_head"] == [HIDDEN, OUT]
    _assert_same_head(loaded, trained)


def test_a_model_without_a_head_keeps_its_config_and_scores_the_embeddings():
    model = _model(head=None, loss=RecordingNTXent(temperature=0.5))
    assert model.projection_head is None and model.get_config()["projection_head"] is None
    model.fit(*_data(), batch_size=8, epochs=1, shuffle=False, verbose=0)
    assert RecordingNTXent.seen.shape[-1] == D


@pytest.mark.parametrize("jit_compile", [True, "loss"])
def test_fit_under_xla_with_an_unknown_batch_size(jit_compile):
    model = _model(jit_compile=jit_compile, with_input=False)
    x, y = _data()
    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)  # batch dimension None
    assert batches.element_spec[0].shape[0] is None
    model.build((None, IN))
    before = _head_values(model)
    history = model.fit(batches, epochs=1, verbose=0).history["loss"]
    assert np.isfinite(history).all() and min(history) > 0
    assert all(not np.allclose(a, b) for a, b in zip(before, _head_values(model)))  # trained under XLA
    assert model.predict(x, verbose=0).shape == (N, D)


def test_a_memory_is_sized_by_the_head_output():
    model = _model(loss=losses.TripletLoss(sampler="semi_hard", memory={"size": 8}))
    memory = model._metric_loss.memory
    assert memory.built and memory.embeddings.shape[-1] == OUT


def test_the_objective_on_a_sample_scores_the_head_output(trained):
    x, y = _data()
    callback = callbacks.LossOnSample((x, y), losses.NTXentLoss(temperature=0.5))
    callback.set_model(trained)
    want = losses.NTXentLoss(temperature=0.5)(y, trained.projection_head(trained.encoder(x), training=False))
    np.testing.assert_allclose(callback.value(), float(want), rtol=1e-5)


@pytest.mark.parametrize("widths, problem", [
    ([-1], "not positive integers (-1)"),
    ([128, 0], "not positive integers (0)"),
    ([64.0], "not positive integers (64.0)"),
    ([True], "not positive integers (True)"),
    ([], "must be a list of positive layer widths"),
    (64, "must be a list of positive layer widths"),
])
def test_bad_widths_are_refused_naming_the_form(widths, problem):
    with pytest.raises(ValueError) as err:
        models.EmbeddingModel(keras.Sequential([keras.Input((IN,)), keras.layers.Dense(D)]), projection_head=widths)
    assert problem in str(err.value) and "e.g. [128, 64]" in str(err.value)
    assert projection_widths.widths_problem(widths) is not None


def test_the_learned_sampler_model_refuses_a_head():
    from tfdml import dsn

    with pytest.raises(ValueError, match="projection_head is not supported"):
        dsn.DSNEmbeddingModel(keras.Sequential([keras.Input((IN,)), keras.layers.Dense(D)]),
                              projection_head=[HIDDEN, OUT])
