"""The shipped configs as a user runs them: each one on the bundled data trains from its
file with only its budget changed, and prints the raw-pixel baseline beside its figures."""

import os

import numpy as np
import pytest

from tfdml_app import build, config, fit, fit_loops

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "configs")

SHIPPED = sorted(name[:-5] for name in os.listdir(CONFIGS) if name.endswith(".yaml"))
#: Sources that need no file of the user's and no download (the package and scikit-learn
#: ship them); the other configs (TFDS benchmarks, your own folder) stop offline with a
#: clear message, tested with their sources.
BUNDLED_SOURCES = ("mnist5k", "digits")


def load(name, overrides=()):
    return config.load(os.path.join(CONFIGS, f"{name}.yaml"), list(overrides))


ON_BUNDLED_DATA = [name for name in SHIPPED if load(name)["data"]["source"] in BUNDLED_SOURCES]


def test_the_bundled_data_configs_are_found():
    assert "default" in ON_BUNDLED_DATA and "xbm_contrastive_memory" in ON_BUNDLED_DATA
    assert "cars196_margin" not in ON_BUNDLED_DATA and "folder_template" not in ON_BUNDLED_DATA


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_config_builds_its_loss(name):
    """Validation alone does not catch wiring errors between a config and a loss's
    constructor (the ℓ_k config once failed on a seed argument the loss does not take)."""
    cfg = load(name)
    loss = build.build_loss(cfg, num_classes=5, num_examples=100)
    losses = fit_loops.losses_lib
    if cfg["loss"]["name"] == config.WEIGHTED_SUM:
        assert type(loss) is losses.WeightedSumLoss
        assert [type(t) for t in loss.terms] == [losses.LOSSES[t["name"]] for t in cfg["loss"]["terms"]]
    else:
        assert type(loss) is losses.LOSSES[cfg["loss"]["name"]]


#: The configs whose whole run (training, the per-epoch and the final evaluation, the raw-pixel
#: baseline) takes its own path: each batch design, the memory, the learned sampler, the two
#: views with a projection head, a weighted sum of losses, the smart-mining refresh. The others
#: differ from these by their loss and model only, which the step test below runs; their whole
#: runs are slow ones
#: (TFDML_SLOW=1). The main job's (configs/default.yaml) is one of those: by default
#: tests/test_doc_examples.py runs it whole as the README's first command, `train.py --config
#: configs/default.yaml`, with the same budget and with its plots and SavedModel.
WHOLE_RUN_BY_DEFAULT = ("hong_balanced_group", "hong_balanced_prandom", "xbm_contrastive_memory",
                        "duan_dsn_triplet", "simclr_nt_xent", "proxy_anchor_multi_similarity",
                        "harwood_smart_mining")


#: Configs whose one step is slow (the pretrained EfficientNet embeds the 2,500 test images at
#: 96 pixels): run with TFDML_SLOW=1; tests/test_train.py trains that backbone from a config.
SLOW = ("mnist_efficientnet_lite0",)


@pytest.mark.parametrize("name", [n for n in ON_BUNDLED_DATA if n not in SLOW + WHOLE_RUN_BY_DEFAULT])
def test_every_bundled_data_config_takes_a_training_step_on_its_data(name):
    """Each config on the bundled data, as shipped: its design fits the training split it
    names (a design that asks for more classes than the split has fails here), and its model
    and loss take one training step on the design's first batch with a finite loss. The
    configs of :data:`WHOLE_RUN_BY_DEFAULT` take theirs in their whole run by default
    (test_every_bundled_data_config_trains_as_written), which validates the design on the
    same split and trains the same model one step."""
    from tfdml_app import data

    cfg = load(name)
    train = data.build_source(cfg).split(cfg["data"]["train_split"])
    train, _ = data.split_validation(cfg, train)
    design = data.build_design(cfg)
    design.validate(train)
    model = build.build_model(cfg, data.input_shape_for(cfg, train.image_shape),
                              int(train.num_classes), int(train.num_examples))
    x, y = next(iter(data.train_dataset(cfg, design, train)))
    logs = model.train_on_batch(x, y, return_dict=True)
    assert np.isfinite(logs["loss"])
    assert cfg["evaluation"]["baseline"] == "raw_pixels", (
        f"configs/{name}.yaml does not score the raw-pixel baseline: set evaluation.baseline: raw_pixels")


def test_the_whole_runs_by_default_are_shipped_configs():
    assert set(WHOLE_RUN_BY_DEFAULT) <= set(ON_BUNDLED_DATA)


def test_the_main_job_runs_whole_in_the_readme_s_first_command():
    """The main job's whole run is a default test only as the README's first command, which
    tests/test_doc_examples.py runs: that command must stay in the README's first bash block."""
    import re

    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        first = re.search(r"^```bash\n(.*?)^```", f.read(), flags=re.S | re.M).group(1)
    assert "train.py --config configs/default.yaml" in first, first


@pytest.mark.parametrize("name", [n if n in WHOLE_RUN_BY_DEFAULT else pytest.param(n, marks=pytest.mark.slow)
                                  for n in ON_BUNDLED_DATA])
def test_every_bundled_data_config_trains_as_written(name, tmp_path):
    """One step of the config as shipped, on the data it names (not a stand-in: a design
    that asks for more classes than the bundled data's training split has must fail
    here), only the budget and the output folder overridden; the run scores the raw-pixel
    baseline next to the model, which its summary prints. The plots and the SavedModel,
    which no config changes, are left out (tests/test_train.py writes them). A config's whole
    run outside :data:`WHOLE_RUN_BY_DEFAULT` is a slow test; the main job's runs by default
    in tests/test_doc_examples.py (the README's first command)."""
    cfg = load(name, [f"output_dir={tmp_path}", "training.epochs=1", "training.steps_per_epoch=1",
                      "evaluation.plots=false", "export.saved_model=false"])
    result = fit.run(cfg, verbose=0)
    assert np.isfinite(result["history"]["loss"]).all()
    assert 0.0 <= result["metrics"]["recall@1"] <= 1.0
    assert cfg["evaluation"]["baseline"] == "raw_pixels", (
        f"configs/{name}.yaml does not score the raw-pixel baseline: set evaluation.baseline: raw_pixels")
    assert set(result["baseline"]["metrics"]) >= {"recall@1", "map@r"}
