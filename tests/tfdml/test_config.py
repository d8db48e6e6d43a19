"""Config validation: every bad input names the key, the value and the choices."""

import glob
import os

import pytest

from tfdml import config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_defaults_validate():
    cfg = config.validate({})
    assert cfg["loss"]["name"] == "margin" and cfg["design"]["name"] == "m_per_class"


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "configs", "*.yaml"))))
def test_shipped_configs_validate(path):
    config.load(path)


def test_unknown_key_names_key_and_suggests():
    with pytest.raises(config.ConfigError, match=r"'training.epoch'.*did you mean 'epochs'"):
        config.validate({"training": {"epoch": 3}})
    with pytest.raises(config.ConfigError, match=r"Unknown config key 'dat'"):
        config.validate({"dat": {}})


def test_wrong_type_names_expected_type():
    with pytest.raises(config.ConfigError, match=r"training.epochs must be int, got 'three'"):
        config.validate({"training": {"epochs": "three"}})
    with pytest.raises(config.ConfigError, match=r"boolean"):
        config.validate({"training": {"epochs": True}})


def test_unknown_names_list_choices():
    with pytest.raises(config.ConfigError, match=r"loss.name = 'tripplet'.*did you mean 'triplet'.*choose one of"):
        config.validate({"loss": {"name": "tripplet"}})
    with pytest.raises(config.ConfigError, match=r"design.name = 'groups'.*m_per_class"):
        config.validate({"design": {"name": "groups"}})


def test_impossible_combinations():
    with pytest.raises(config.ConfigError, match=r"p_random.*triplet"):
        config.validate({"design": {"name": "p_random"}, "loss": {"name": "triplet"}})
    with pytest.raises(config.ConfigError, match=r"loss.sampler = 'top_k' does not fit loss.name = 'margin'"):
        config.validate({"loss": {"name": "margin", "sampler": "top_k"}})
    with pytest.raises(config.ConfigError, match=r"design.p = 1.5"):
        config.validate({"design": {"name": "p_random", "p": 1.5}, "loss": {"name": "contrastive"}})
    with pytest.raises(config.ConfigError, match=r"design.m = 1"):
        config.validate({"design": {"m": 1}})
    with pytest.raises(config.ConfigError, match=r"unknown \['recal'\]"):
        config.validate({"evaluation": {"metrics": ["recal"]}})


def test_overrides_are_parsed_as_yaml():
    cfg = config.load(None, ["training.epochs=2", "loss.options={alpha: 0.3}", "output_dir=/tmp/x"])
    assert cfg["training"]["epochs"] == 2
    assert cfg["loss"]["options"] == {"alpha": 0.3}
    with pytest.raises(config.ConfigError, match="key=value"):
        config.load(None, ["training.epochs"])


def test_missing_file_is_clear(tmp_path):
    with pytest.raises(config.ConfigError, match="does not exist"):
        config.load(str(tmp_path / "nope.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(config.ConfigError, match="not valid YAML"):
        config.load(str(bad))


def test_schema_names_match_the_registries():
    """The config's choices are the names the libraries actually register."""
    from tfdml import losses, metrics, samplers

    assert set(config.LOSSES) == set(losses.LOSSES)
    assert set(config.SAMPLERS) - {"none"} - set(config.LEARNED_SAMPLERS) == set(samplers.SAMPLERS)
    assert set(config.METRICS) == set(metrics.METRICS)


def test_data_choices_match_the_pipelines():
    from pipelines import designs, sources

    assert set(config.DESIGNS) == set(designs.DESIGNS)
    assert set(config.SOURCES) == set(sources.SOURCES)


def test_unknown_baseline_lists_choices():
    with pytest.raises(config.ConfigError, match=r"evaluation.baseline = 'pixels'.*raw_pixels"):
        config.validate({"evaluation": {"baseline": "pixels"}})
    assert config.validate({"evaluation": {"baseline": "raw_pixels"}})["evaluation"]["baseline"] == "raw_pixels"
