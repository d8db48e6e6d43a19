"""train.py refuses a bad config value before TensorFlow is imported: ranges, the names
of the built-in parts, the names in loss.options and loss.sampler_options, and the fit
of the sampler to the loss (tfdml_app.config_checks.check_structure with names=True, on
tfdml.builtin_names). Each case runs in a fresh interpreter, so that what this test
session imported does not count."""

import json
import os
import subprocess
import sys

import pytest

from tfdml import builtin_names
from tfdml_app import config, loss_config, sampler_fit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Calls train.py's entry function and reports its exit status, its error line and
#: whether TensorFlow had been imported when it returned.
_RUN = """
import contextlib, io, json, sys
from tfdml_app import train_cli
err = io.StringIO()
with contextlib.redirect_stderr(err):
    status = train_cli.main(sys.argv[1:])
print(json.dumps({"status": status, "stderr": err.getvalue(), "tensorflow": "tensorflow" in sys.modules}))
"""


def _train(*overrides):
    argv = ["--config", os.path.join("configs", "default.yaml")]
    for text in overrides:
        argv += ["--set", text]
    proc = subprocess.run([sys.executable, "-c", _RUN, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("override, message", [
    ("training.epochs=-1", "training.epochs must be >= 1, got -1."),
    ("loss.name=marginn", "loss.name = 'marginn' is not valid (did you mean 'margin'?)"),
    ("loss.sampler=semihard", "loss.sampler = 'semihard' is not valid (did you mean 'semi_hard'?)"),
    ("loss.options={alfa: 0.2}", "loss.options has 'alfa', which is not an option of margin (did you mean 'alpha'?)"),
    ("loss.sampler=top_k", "loss.sampler = 'top_k' does not fit loss.name = 'margin': it selects sets"),
    ("loss.sampler_options={cutof: 0.5}",
     "loss.sampler_options has 'cutof', which is not an option of distance_weighted (did you mean 'cutoff'?)"),
    ("loss.options={distance: cosine}",
     "loss.sampler = 'distance_weighted' does not fit loss.name = 'margin': it assumes euclidean distances"),
    ("model.backbone=resnet", "model.backbone = 'resnet' is not valid"),
    ("design.name=groups", "design.name = 'groups' is not valid (did you mean 'group'?)"),
    ("data.source=mnist", "data.source = 'mnist' is not valid"),
])
def test_a_bad_value_is_refused_before_tensorflow_is_imported(override, message):
    result = _train(override)
    assert result["status"] == 2
    assert message in result["stderr"], result["stderr"]
    assert not result["tensorflow"], f"{override} was refused only after TensorFlow was imported"
    # The library's validation gives the same message.
    with pytest.raises(config.ConfigError) as err:
        config.load(os.path.join(ROOT, "configs", "default.yaml"), [override])
    assert message in str(err.value)


def test_the_script_itself_refuses_a_bad_range_without_tensorflow():
    """`python train.py ... --set training.epochs=-1`, as a user types it."""
    proc = subprocess.run([sys.executable, "train.py", "--config", "configs/default.yaml",
                           "--set", "training.epochs=-1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "Config error: training.epochs must be >= 1, got -1." in proc.stderr
    assert "tensorflow" not in proc.stderr.lower()  # TensorFlow's import prints its banner on stderr


def _combinations():
    for loss in builtin_names.LOSSES:
        for sampler in (*builtin_names.SAMPLERS, *loss_config.LEARNED_SAMPLERS, loss_config.NO_SAMPLER, None):
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
