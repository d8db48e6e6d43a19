"""Advice that the run prints works: the settings the summary and the design's
error suggest, applied to the main job on the bundled data, pass the config's
validation, hold out a validation split of several classes and fit the design."""

import os
import re

import numpy as np
import pytest

from tfdml_app import advice, config, data, fit, fit_loops, summary
from tfdml_app.errors import ExperimentError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAIN_JOB = os.path.join(ROOT, "configs", "default.yaml")
#: The main job in seconds: one step, no plots, no SavedModel, no baseline.
QUICK = ["training.epochs=1", "training.steps_per_epoch=1", "evaluation.plots=false",
         "export.saved_model=false", "evaluation.baseline=null"]


def suggested_settings(text):
    """The ``--set key=value`` settings that ``text`` suggests."""
    return re.findall(r"--set (\S+=[^\s)]+)", text)


def assert_works(settings, extra=()):
    """The main job with ``settings`` validates, holds out a validation split of
    several classes, and its design fits the training classes left."""
    cfg = config.load(MAIN_JOB, [*extra, *settings])
    train_split = data.build_source(cfg).split(cfg["data"]["train_split"])
    train_split, val_split = data.split_validation(cfg, train_split)
    assert val_split is not None and val_split.num_classes >= 2, settings
    data.build_design(cfg).validate(train_split)


def test_the_design_error_of_a_validation_split_names_settings_that_work(tmp_path):
    """Holding out 20% of the main job's 5 training classes leaves 4, fewer than its
    design's n = 5: the error says so and names settings that keep a validation split."""
    cfg = config.load(MAIN_JOB, [*QUICK, f"output_dir={tmp_path}", "data.validation.fraction=0.2"])
    with pytest.raises(ExperimentError, match="only 4 classes") as error:
        fit.run(cfg, verbose=0)
    settings = suggested_settings(str(error.value))
    assert settings, str(error.value)
    assert_works(settings, extra=["data.validation.fraction=0.2"])


def test_the_summary_line_of_a_run_without_validation_suggests_settings_that_work():
    """The line of the summary on the kept model, for the main job (no validation split)."""
    cfg = config.load(MAIN_JOB)
    whole_train = data.build_source(cfg).split(cfg["data"]["train_split"])
    kept = {"epoch": 4, "epochs": 4, "selected_by": "the last epoch's model"}
    line = fit_loops.best_checkpoint_note(cfg, None, kept, advice.validation_split(cfg, whole_train))
    settings = suggested_settings(line)
    assert settings, line
    assert_works(settings)


def test_advice_is_left_out_when_no_validation_split_fits_the_design():
    """Two training classes: holding out whole classes leaves one, fewer than design.options.n = 2,
    and holding out examples leaves fewer than design.options.m of each: nothing to suggest."""
    cfg = config.load(MAIN_JOB, ["design.options.n=2", "design.options.m=4"])
    train_split = data.build_source(cfg).split("train")
    four_each = np.concatenate([np.flatnonzero(train_split.labels == c)[:4] for c in (0, 1)])
    two_classes = train_split.subset(four_each, "train")
    assert two_classes.num_classes == 2
    assert advice.validation_split(cfg, two_classes) is None
    line = fit_loops.best_checkpoint_note(cfg, None, None, None)
    assert "--set" not in line and "no checkpoint is selected on test data" in line


@pytest.mark.slow
def test_the_summary_of_the_main_job_suggests_a_validation_split_that_runs(tmp_path):
    """The main job has no validation split; its summary's advice is run as printed."""
    cfg = config.load(MAIN_JOB, [*QUICK, f"output_dir={tmp_path / 'main'}"])
    text = summary.summary(cfg, fit.run(cfg, verbose=0))
    settings = suggested_settings(text)
    assert settings, text
    assert_works(settings)
    advised = config.load(MAIN_JOB, [*QUICK, f"output_dir={tmp_path / 'advised'}", *settings])
    text = summary.summary(advised, fit.run(advised, verbose=0))
    assert "on the validation split (5 classes" in text, text


def test_the_early_stopping_error_of_the_main_job_names_settings_that_work():
    """Early stopping needs a validation split; the config error says how to hold one out,
    and on the main job (5 training classes, n = 5) the whole of its advice works."""
    patience = ["training.early_stopping_patience=2"]
    with pytest.raises(config.ConfigError, match="needs a validation split") as error:
        config.load(MAIN_JOB, patience)
    settings = suggested_settings(str(error.value))
    assert settings, str(error.value)
    assert_works(settings, extra=patience)
