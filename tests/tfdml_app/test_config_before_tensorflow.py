"""train.py refuses a bad config value before TensorFlow is imported: ranges, the names
of the built-in parts, the names in loss.options, loss.sampler_options and
learned_sampler, and the fit of the sampler to the loss (tfdml_app.config_checks.
check_structure with names=True, on tfdml.builtin_names), with the messages of the
library's validation. (tests/test_train.py runs one config error of each kind through
train.py's entry function in a fresh interpreter.)"""

import os
import subprocess
import sys

import pytest

from tfdml import builtin_names
from tfdml_app import config, loss_config, sampler_fit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))



#: Runs train.py as ``python train.py`` does (its ``__main__``), then reports its exit
#: status and whether TensorFlow had been imported.
_SCRIPT = """
import runpy, sys
for setting in sys.argv[1:]:
    sys.argv = ["train.py", "--config", "configs/default.yaml", "--set", setting]
    try:
        runpy.run_path("train.py", run_name="__main__")
    except SystemExit as exit:
        print(exit.code, "tensorflow" in sys.modules)
"""

#: One bad value of each kind: a range of the schema, a loss option's and a sampler
#: option's value (tfdml.option_rules), with the message each gets.
BAD_VALUES = {
    "training.epochs=-1": "Config error: training.epochs must be >= 1, got -1.",
    "loss.options.alpha=-1": "Config error: loss.options for 'margin': alpha must be a number > 0, got -1.",
    "loss.sampler_options.cutoff=2": ("Config error: loss.sampler_options for 'distance_weighted': cutoff must be "
                                      "a number in [0, 2), got 2."),
    "model.cascade={levels: 0}": ("Config error: model.cascade = {'levels': 0} has levels = 0: it must be a "
                                  "positive integer"),
}


def test_the_script_refuses_bad_values_without_importing_tensorflow():
    """``python train.py --config configs/default.yaml --set <bad value>`` for each of
    BAD_VALUES, one after the other in one fresh interpreter: each exits with status 2
    and its message, and TensorFlow is still not imported after the last."""
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, *BAD_VALUES], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    for setting, message in BAD_VALUES.items():
        assert message in proc.stderr, (setting, proc.stderr[-3000:])
    assert proc.stdout.split() == ["2", "False"] * len(BAD_VALUES), proc.stderr[-3000:]


def _combinations():
    for loss in builtin_names.LOSSES:
        for sampler in (*builtin_names.SAMPLERS, loss_config.NO_SAMPLER, None):
            yield loss, sampler, {}
        yield loss, None, {"cutoff": 0.5}
        yield loss, "random", {"num_pairs": 4}
        yield loss, "random", {"num_triplets": 4}


def _outcome(check):
    try:
        return "accepted", check()
    except config.ConfigError as err:
        return "refused", str(err)


@pytest.mark.parametrize("loss, sampler, options", list(_combinations()))
def test_the_sampler_checks_on_the_builtin_facts_are_those_on_the_library(loss, sampler, options):
    """What check_structure decides before TensorFlow, the library's classes decide the
    same way, with the same message, for every built-in loss and sampler."""
    section = {"name": loss, "sampler": sampler, "sampler_options": options, "options": {}}
    before = _outcome(lambda: sampler_fit.check_sampler(section, sampler_fit.builtin_facts()))
    assert before == _outcome(lambda: sampler_fit.check_sampler(section, sampler_fit.library_facts()))
    if before[0] == "refused":  # refused before TensorFlow: validate refuses it too, with that message
        with pytest.raises(config.ConfigError) as err:
            config.validate({"loss": section})
        assert str(err.value) == before[1]
