"""Every kind of part is added the same way: a module registers a sampler, a batch design,
a data source and a metric through their registries, and ``train.py --import`` trains
and evaluates with them."""

import json
import os
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE = "tests.tfdml_app.extension_module"


def test_train_py_trains_with_a_sampler_a_design_a_source_and_a_metric_registered_by_an_imported_module(
        tmp_path, monkeypatch, capsys):
    import tfdml
    import train
    from pipelines import designs, sources

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        "seed: 1\n"
        "data: {source: extension_source, options: {classes: 10, per_class: 8}}\n"
        "design: {name: extension_design, m: 4, n: 2, options: {note: own}}\n"
        "model: {backbone: mlp, backbone_options: {width: 8}, embedding_dim: 4}\n"
        "loss: {name: margin, sampler: extension_sampler}\n"
        "training: {epochs: 1, steps_per_epoch: 2}\n"
        "evaluation: {metrics: [recall, extension_metric], ks: [1], baseline: null}\n")
    out = tmp_path / "run"
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        code = train.main(["--import", MODULE, "--config", str(cfg), "--quiet", "--set", f"output_dir={out}"])
        assert code == 0, capsys.readouterr().err
        assert (out / "finished.json").exists()
        assert sys.modules[MODULE].USED == {"sampler", "design own", "source", "metric"}
        resolved = yaml.safe_load((out / "config.yaml").read_text())
        assert (resolved["data"]["source"], resolved["design"]["name"], resolved["loss"]["sampler"]) == (
            "extension_source", "extension_design", "extension_sampler")
        record = json.loads((out / "metrics.json").read_text())
        assert record["info"]["data"]["source"] == "extension_source"
        assert list(record["metrics"])[:2] == ["recall@1", "extension_metric"]
        assert record["metrics"]["extension_metric"] == pytest.approx(1.0, abs=1e-5)  # unit-norm embeddings
    finally:
        tfdml.samplers.SAMPLERS.pop("extension_sampler", None)
        designs.DESIGNS.pop("extension_design", None)
        sources.SOURCES.pop("extension_source", None)
        tfdml.metrics.METRICS.pop("extension_metric", None)
        sys.modules.pop(MODULE, None)


def test_the_application_makes_every_registered_design_from_its_config_section():
    from pipelines import designs
    from tfdml_app import config, data

    expected = {"group": {"m": 3, "n": 4}, "p_random": {"p": 0.25, "pairs": 6},
                "m_per_class": {"m": 3, "classes_per_batch": 4}, "two_views": {"images": 4},
                "smart_mining": {"anchors": 4, "k": 10, "hard_fraction": 0.5, "refresh_every": 1,
                                 "step": 0.05, "approximate": None}}
    for name in designs.DESIGNS:
        cfg = config.validate({"design": {"name": name, "m": 3, "n": 4, "p": 0.25, "pairs": 6},
                               "loss": {"name": "contrastive", "sampler": "by_loss"}})
        design = data.build_design(cfg)
        assert type(design) is designs.DESIGNS[name] and design.get_config() == expected[name]


def test_design_options_the_design_does_not_take_are_refused_naming_its_arguments():
    from tfdml_app import config

    for check in (config.validate, lambda raw: config.check_structure(raw, names=True)):
        with pytest.raises(config.ConfigError, match=r"design.options has 'spread', which is not an option of the "
                                                     r"group design.*; valid: m, n, batch_size"):
            check({"design": {"name": "group", "options": {"spread": 2}}})
