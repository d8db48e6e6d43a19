"""``model.cascade`` and ``loss.name: hdc`` in a config (Yuan, Yang & Zhang 2017, HDC §3):
the cascade's levels are the loss's (stated once, in ``model.cascade``); what the config alone
decides is refused before TensorFlow with the library's messages; a run builds K level heads,
each at the head learning rate, trains under XLA and exports the concatenation."""

import os

import numpy as np
import pytest

from tfdml_app import config, config_checks

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _raw(loss=None, **model):
    return {"loss": loss or {"name": "hdc"}, "model": {"embedding_dim": 12, "cascade": {"levels": 3}, **model}}


REFUSED = [
    ({"loss": {"name": "hdc"}}, r"loss.name = 'hdc' trains the levels of a cascade encoder, but model.cascade is "
                                r"null: set model.cascade, e.g. \{levels: 3, layers: auto\}"),
    (_raw({"name": "hdc", "options": {"levels": 3}}),
     r"loss.options has 'levels': a run sets it to the number of levels of model.cascade.*remove levels"),
    (_raw(cascade={"levels": 2, "layers": ["relu0", "relu1", "relu2"]}),
     r"has levels = 2 but names 3 layers: with named layers K is their number; remove levels"),
    (_raw(cascade={"levels": 0}), r"levels = 0: it must be a positive integer"),
    (_raw(cascade={"layers": "last"}), r"layers = 'last': it must be 'auto' or a list of layer names"),
    (_raw(cascade={"depth": 3}), r"has 'depth', which a cascade does not take"),
    (_raw(embedding_dim=64), r"model.embedding_dim = 64 does not divide into the 3 levels of model.cascade.*"
                             r"use a multiple of 3, e.g. 63"),
    (_raw(normalize=False), r"model.normalize = false with model.cascade: the cascade L2-normalises each level"),
    (_raw(projection_head=[6]), r"loss.name = 'hdc' splits what it scores into the cascade's levels, but "
                                r"model.projection_head = \[6\].*remove model.projection_head"),
    ({"loss": {"name": "weighted_sum", "terms": [{"name": "contrastive"}, {"name": "hdc"}]}},
     r"loss.terms\[1\].name = 'hdc' trains the levels of a cascade encoder, but model.cascade is null"),
]


@pytest.mark.parametrize("raw, message", REFUSED)
def test_refused_before_tensorflow_and_by_the_library_alike(raw, message):
    with pytest.raises(config.ConfigError, match=message):
        config_checks.check_structure(raw, names=True)
    with pytest.raises(config.ConfigError, match=message):
        config.validate(raw)


def test_the_loss_takes_its_levels_from_the_cascade():
    named = config.validate(_raw(cascade={"layers": ["relu0", "relu2"]}))
    assert named["model"]["cascade"] == {"levels": 2, "layers": ["relu0", "relu2"]}
    assert config.build_loss(named, 4).levels == 2
    auto = config.validate(_raw(cascade={}))  # K: the library's default, layers: auto
    from tfdml import cascade_spec, losses

    assert auto["model"]["cascade"] == {"levels": cascade_spec.DEFAULT_LEVELS, "layers": cascade_spec.AUTO}
    built = config.build_loss(auto, 4)
    assert type(built) is losses.HDCLoss and built.levels == cascade_spec.DEFAULT_LEVELS
    # A cascade trained by another loss: its concatenation is the embedding that loss scores.
    assert config.validate(_raw({"name": "contrastive"}))["model"]["cascade"]["levels"] == 3
    # The reference documents the key from the schema (one source of truth).
    assert cascade_spec.CASCADE_FORM in open(os.path.join(ROOT, "docs", "config.md"), encoding="utf-8").read()


def _small(tmp_path, **overrides):
    raw = {
        "seed": 1,
        "output_dir": str(tmp_path),
        "data": {"source": "digits"},
        "design": {"name": "m_per_class", "options": {"m": 4, "n": 4}},
        # digits are 8×8: the small CNN has two resolutions (8×8, then 4×4), so two levels.
        "model": {"backbone": "small_cnn", "backbone_options": {"width": 4}, "embedding_dim": 8,
                  "cascade": {"levels": 2}},
        "loss": {"name": "hdc", "options": {"filter_percentage": 0.5}},
        "optimizer": {"head_lr_multiplier": 10.0},
        "training": {"epochs": 1, "steps_per_epoch": 2},
        "evaluation": {"metrics": ["recall"], "ks": [1], "plots": False},
        "export": {"saved_model": True},
    }
    for key, value in overrides.items():
        section, name = key.split(".")
        raw[section][name] = value
    return config.validate(raw)


def test_every_level_head_gets_the_head_learning_rate(tmp_path):
    from tfdml_app import build

    cfg = _small(tmp_path)
    model = build.build_model(cfg, (8, 8, 1), num_classes=4, num_examples=100)
    heads = [model.encoder.get_layer(f"embedding_{k}") for k in (1, 2)]
    assert [h.units for h in heads] == [4, 4] and model.loss.levels == 2
    for head in heads:
        for variable in head.trainable_variables:
            assert model.optimizer.multiplier(variable) == 10.0, variable.path
    others = [v for v in model.encoder.trainable_variables if not v.path.startswith("embedding_")]
    assert others and all(model.optimizer.multiplier(v) == 1.0 for v in others)


@pytest.mark.parametrize("jit_compile", [True, "loss"])
def test_a_run_trains_under_xla_and_exports_the_concatenation(tmp_path, jit_compile):
    import tensorflow as tf

    import tfdml
    from tfdml_app import fit

    cfg = _small(tmp_path, **{"training.jit_compile": jit_compile})
    result = fit.run(cfg, verbose=0)
    assert np.isfinite(result["history"]["loss"]).all()
    model = tfdml.load_model(os.path.join(tmp_path, "model.keras"), compile=False)
    x = np.random.default_rng(0).uniform(size=(5, 8, 8, 1)).astype(np.float32)
    expected = model.predict(x, verbose=0)
    loaded = tf.saved_model.load(os.path.join(tmp_path, "saved_model"))  # kept: its variables live with it
    served = loaded.serve(tf.constant(x)).numpy()
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-6)
    assert served.shape == (5, 8)
    for block in np.split(served, 2, axis=1):  # the two levels, each of unit norm
        np.testing.assert_allclose(np.linalg.norm(block, axis=1), 1.0, rtol=1e-5)
