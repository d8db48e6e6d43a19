"""Per-layer learning-rate multipliers (Duan et al. §4: a 10× learning rate for the head)."""

import keras
import numpy as np
import pytest

from tfdml import losses, models, optimizers


def _model(optimizer):
    keras.utils.set_random_seed(0)
    encoder = models.build_encoder(models.mlp((6,), width=8, depth=1), embedding_dim=4)
    model = models.EmbeddingModel(encoder)
    model.compile(optimizer=optimizer, loss=losses.ContrastiveLoss(margin=1.0))
    return model


def _one_step_deltas(optimizer):
    model = _model(optimizer)
    x = np.random.default_rng(0).normal(size=(8, 6)).astype("float32")
    y = np.repeat(np.arange(4), 2)
    before = {v.path: v.numpy().copy() for v in model.trainable_variables}
    model.train_on_batch(x, y)
    return {v.path: v.numpy() - before[v.path] for v in model.trainable_variables}


def test_sgd_head_moves_exactly_ten_times_further():
    """Plain SGD: Δw = -lr·m·g, so the head's step is 10× the step without multiplier."""
    plain = _one_step_deltas(keras.optimizers.SGD(0.1))
    scaled = _one_step_deltas(optimizers.SGD(0.1, lr_multipliers={"embedding": 10.0}))
    for path in plain:
        factor = 10.0 if path.startswith("embedding/") else 1.0
        np.testing.assert_allclose(scaled[path], factor * plain[path], rtol=1e-4, atol=1e-6)  # deltas of O(1) weights: float32 rounding
    assert np.abs(plain["embedding/kernel"]).max() > 0


def test_adam_first_step_is_scaled_too():
    plain = _one_step_deltas(keras.optimizers.Adam(1e-2))
    scaled = _one_step_deltas(optimizers.Adam(1e-2, lr_multipliers={"embedding": 10.0}))
    np.testing.assert_allclose(scaled["embedding/kernel"], 10 * plain["embedding/kernel"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(scaled["dense0/kernel"], plain["dense0/kernel"], rtol=1e-4, atol=1e-6)  # deltas of O(1) weights: float32 rounding


def test_serialisation_round_trip_and_errors():
    opt = optimizers.AdamW(1e-3, weight_decay=0.01, lr_multipliers={"embedding": 10})
    again = keras.optimizers.deserialize(keras.optimizers.serialize(opt))
    assert isinstance(again, optimizers.AdamW) and again.lr_multipliers == {"embedding": 10.0}
    with pytest.raises(ValueError, match="> 0"):
        optimizers.Adam(lr_multipliers={"embedding": 0})
