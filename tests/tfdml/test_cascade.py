"""The HDC cascade encoder (Yuan, Yang & Zhang 2017, §3: embeddings at several depths of one
backbone, concatenated for retrieval) with HDCLoss: built from the small CNN and a nested
``keras.applications`` backbone, trained by ``fit`` with ``jit_compile=True``, saved and
loaded, exported without anything of the loss."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdml
from tfdml import backbones, cascade, losses, models


def _small():
    return models.small_cnn((16, 16, 1), width=4)


def test_auto_taps_the_end_of_each_stage():
    backbone = _small()
    assert cascade.stage_ends(backbone, 3) == ["relu0", "relu1", "relu2"]
    encoder = cascade.build_cascade_encoder(backbone, levels=3, embedding_dim=12)
    out = encoder(np.random.default_rng(0).normal(size=(5, 16, 16, 1)).astype(np.float32)).numpy()
    assert out.shape == (5, 12)
    for block in np.split(out, 3, axis=1):  # each level L2-normalised on its own
        np.testing.assert_allclose(np.linalg.norm(block, axis=1), 1.0, rtol=1e-5)
    assert [encoder.get_layer(f"embedding_{k}").units for k in (1, 2, 3)] == [4, 4, 4]


def test_named_layers_of_a_nested_application():
    backbone = backbones.get_backbone("mobilenet_v2", input_shape=(32, 32, 3), weights=None)
    names = ["block_3_project_BN", "block_6_project_BN", "out_relu"]
    encoder = cascade.build_cascade_encoder(backbone, layers=names, embedding_dim=6)
    assert encoder(np.zeros((2, 32, 32, 3), np.float32)).shape == (2, 6)
    auto = cascade.build_cascade_encoder(backbone, levels=2, embedding_dim=6)
    assert auto(np.zeros((1, 32, 32, 3), np.float32)).shape == (1, 6)


def test_errors_name_the_fix():
    with pytest.raises(ValueError, match="no layers named"):
        cascade.build_cascade_encoder(_small(), layers=["conv9"], embedding_dim=4)
    with pytest.raises(ValueError, match="fewer than levels=5"):
        cascade.build_cascade_encoder(_small(), levels=5)
    with pytest.raises(ValueError, match="does not divide into 3 levels"):
        cascade.build_cascade_encoder(_small(), levels=3, embedding_dim=10)
    with pytest.raises(ValueError, match="list of layer names or 'auto'"):
        cascade.build_cascade_encoder(_small(), layers="relu2")


def _data(n=48, seed=0):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(6), n // 6).astype(np.int32)
    x = (rng.normal(size=(n, 16, 16, 1)) + y[:, None, None, None] * 0.3).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(n, seed=1).batch(12, drop_remainder=False), x


def test_fit_with_xla_save_load_and_export(tmp_path):
    keras.utils.set_random_seed(0)
    data, x = _data()
    model = models.EmbeddingModel(cascade.build_cascade_encoder(_small(), levels=3, embedding_dim=12))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=losses.HDCLoss(levels=3), jit_compile=True)
    history = model.fit(data, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    before = model.predict(x, verbose=0)
    path = str(tmp_path / "hdc.keras")
    model.save(path)
    restored = tfdml.load_model(path)
    np.testing.assert_allclose(restored.predict(x, verbose=0), before, rtol=1e-5, atol=1e-6)
    assert isinstance(restored.loss, losses.HDCLoss) and restored.loss.levels == 3
    model.save_weights(str(tmp_path / "w.weights.h5"))
    fresh = models.EmbeddingModel(cascade.build_cascade_encoder(_small(), levels=3, embedding_dim=12))
    fresh.compile(optimizer="adam", loss=losses.HDCLoss(levels=3))
    fresh.build((None, 16, 16, 1))
    fresh.load_weights(str(tmp_path / "w.weights.h5"))
    np.testing.assert_allclose(fresh.predict(x, verbose=0), before, rtol=1e-5, atol=1e-6)
    export = str(tmp_path / "export")
    model.export(export)
    served = tf.saved_model.load(export)
    np.testing.assert_allclose(served.serve(tf.constant(x)).numpy(), before, rtol=1e-5, atol=1e-6)


def _compiled(jit_compile, seed=0):
    keras.utils.set_random_seed(seed)
    model = models.EmbeddingModel(cascade.build_cascade_encoder(_small(), levels=3, embedding_dim=12))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=losses.HDCLoss(levels=3), jit_compile=jit_compile)
    model.build((None, 16, 16, 1))
    return model


def test_jit_compile_auto_and_the_checkpoint_route_resume_the_same_next_step(tmp_path):
    """``jit_compile="auto"`` (Keras' default: resolved by tfdml.models), trained an epoch,
    written with ``tf.train.Checkpoint``; a fresh model restored from it takes the same next
    step as the original (weights and Adam's slots of every level head restored)."""
    data, x = _data()
    model = _compiled("auto")
    model.fit(data, epochs=1, verbose=0)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    path = checkpoint.write(str(tmp_path / "ckpt"))
    fresh = _compiled("auto", seed=7)
    fresh.optimizer.build(fresh.trainable_variables)
    tf.train.Checkpoint(model=fresh, optimizer=fresh.optimizer).read(path).assert_consumed()
    np.testing.assert_array_equal(fresh.predict(x, verbose=0), model.predict(x, verbose=0))
    batch = next(iter(data))
    model.train_on_batch(*batch)
    fresh.train_on_batch(*batch)
    for a, b in zip(model.trainable_variables, fresh.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7, err_msg=a.path)
    assert {f"embedding_{k}" for k in (1, 2, 3)} <= {v.path.split("/")[0] for v in fresh.trainable_variables}


def test_auto_layers_on_efficientnet_lite0_without_weights():
    backbone = backbones.get_backbone("efficientnet_lite0", input_shape=(64, 64, 3), weights=None)
    encoder = cascade.build_cascade_encoder(backbone, levels=3, embedding_dim=12)
    taps = encoder.get_layer("encoder_taps")
    assert [tuple(t.shape[1:3]) for t in taps.outputs] == [(8, 8), (4, 4), (2, 2)]  # the last three stages
    out = encoder(np.random.default_rng(0).uniform(size=(2, 64, 64, 3)).astype(np.float32)).numpy()
    assert out.shape == (2, 12)
    for block in np.split(out, 3, axis=1):
        np.testing.assert_allclose(np.linalg.norm(block, axis=1), 1.0, rtol=1e-5)
