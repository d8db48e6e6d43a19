"""``model.projection_head`` in a config: checked before TensorFlow with the library's
message, built into the run's EmbeddingModel (the loss's embedding size is the head's
output), refused with the learned sampler, and restored when a killed run resumes."""

import os

import keras
import numpy as np
import pytest

from tfdml_app import config, config_checks, loss_config

HEAD = [16, 6]


def _raw(out="runs/head", **model):
    return {
        "seed": 3,
        "output_dir": str(out),
        "data": {"source": "digits"},
        "design": {"name": "two_views", "options": {"n": 8}},
        "model": {"backbone": "mlp", "backbone_options": {"width": 8}, "embedding_dim": 8,
                  "projection_head": list(HEAD), **model},
        "loss": {"name": "nt_xent", "options": {"temperature": 0.5}},
        "training": {"epochs": 2, "steps_per_epoch": 2},
        "evaluation": {"metrics": ["recall"], "ks": [1], "plots": False},
        "export": {"saved_model": False},
    }


@pytest.mark.parametrize("value, problem", [
    ([64, -1], "model.projection_head = [64, -1] has widths that are not positive integers (-1)"),
    ([], "model.projection_head = [] must be a list of positive layer widths"),
    ("64", "model.projection_head must be list or null, got '64'"),
])
def test_a_bad_head_is_refused_before_tensorflow_and_by_validation(value, problem):
    raw = _raw(projection_head=value)
    for check in (lambda: config_checks.check_structure(raw, names=True), lambda: config.validate(raw)):
        with pytest.raises(config.ConfigError) as err:
            check()
        assert problem in str(err.value)


def test_the_library_refuses_what_the_config_refuses_with_the_same_form():
    from tfdml import models, projection_widths

    with pytest.raises(ValueError, match=r"projection_head=\[64, -1\] has widths"):
        models.EmbeddingModel(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]), projection_head=[64, -1])
    assert projection_widths.WIDTHS_FORM in projection_widths.widths_problem([64, -1])


def test_a_head_with_the_learned_sampler_is_refused():
    raw = _raw(projection_head=[8, 4])
    raw.update(design={"name": "m_per_class", "options": {"m": 4, "n": 4}}, loss={"name": "triplet"}, learned_sampler={})
    for check in (lambda: config_checks.check_structure(raw, names=True), lambda: config.validate(raw)):
        with pytest.raises(config.ConfigError, match="model.projection_head .* with learned_sampler"):
            check()


def test_the_loss_is_sized_by_the_head_output():
    cfg = config.validate({"model": {"embedding_dim": 8, "projection_head": [16, 6]},
                           "loss": {"name": "proxy_anchor"}})
    assert loss_config.loss_embedding_dim(cfg) == 6
    assert config.build_loss(cfg, 4).embedding_dim == 6
    assert loss_config.loss_embedding_dim(config.validate({"model": {"embedding_dim": 8}})) == 8


def test_the_run_builds_the_head(tmp_path):
    from tfdml_app import build

    cfg = config.validate(_raw(tmp_path))
    model = build.build_model(cfg, (8, 8, 1), num_classes=10, num_examples=100)
    assert model.projection_widths == tuple(HEAD) and model.projection_head.built
    assert model.predict(np.zeros((2, 8, 8, 1), "float32"), verbose=0).shape == (2, 8)


class _KillAfterEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == 1:
            raise KeyboardInterrupt("simulated kill")


def _head_weights(model_path):
    from tfdml import load_model

    model = load_model(model_path)
    return [v.numpy() for v in model.projection_head.weights]


@pytest.mark.slow
def test_a_resumed_run_restores_the_head(tmp_path):
    """Kill after epoch 1 of 2 and rerun: the head's weights (its batch normalisation's moving
    statistics included) equal an uninterrupted run's, and the export has no head."""
    from tfdml_app import fit

    straight = config.validate(_raw(tmp_path / "straight"))
    fit.run(straight, verbose=0)
    resumed = config.validate(_raw(tmp_path / "resumed"))
    with pytest.raises(KeyboardInterrupt):
        fit.run(resumed, verbose=0, callbacks=[_KillAfterEpoch()])
    assert fit.completed_epochs(os.path.join(resumed["output_dir"], "backup")) == 1
    assert fit.run(resumed, verbose=0)["resumed_from_epoch"] == 1
    a = _head_weights(os.path.join(straight["output_dir"], "model.keras"))
    b = _head_weights(os.path.join(resumed["output_dir"], "model.keras"))
    assert len(a) == 7
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, atol=1e-6)
