"""Smart mining in a run (tfdml_app.mining): the refresh callback built from the design's
options, the controller's state kept in the backup and restored when the run resumes, and the
multi-worker loop refusing the design."""

import os

import keras
import pytest

from tfdml_app import config, fit
from tfdml_app import mining as mining_lib
from tfdml_app.errors import ExperimentError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Stop(RuntimeError):
    pass


class _StopAfterFirstEpoch(keras.callbacks.Callback):
    """Runs after the backup callback: the first epoch is backed up, then the run stops."""

    def on_epoch_end(self, epoch, logs=None):
        if epoch == 0:
            raise _Stop()


def test_a_resumed_run_continues_the_controller_from_its_backup(tmp_path):
    cfg = config.load(os.path.join(ROOT, "configs", "harwood_smart_mining.yaml"), [
        f"output_dir={tmp_path}", "training.epochs=2", "training.steps_per_epoch=1",
        "evaluation.every_n_epochs=5", "evaluation.plots=false", "export.saved_model=false",
        "evaluation.baseline=null"])
    with pytest.raises(_Stop):
        fit.run(cfg, verbose=0, callbacks=[_StopAfterFirstEpoch()])
    result = fit.run(cfg, verbose=0)
    assert result["resumed_from_epoch"] == 1
    # Epoch 1 only recorded its loss (the fraction stays 0.5); the resumed epoch 2 compares its
    # loss with the restored one and moves the fraction by the step. A controller that lost
    # its state would record again and leave 0.5.
    (fraction,) = result["history"]["hard_fraction"]
    assert fraction in (pytest.approx(0.45), pytest.approx(0.55))


class _Design:
    mined_table = True


def test_the_multi_worker_loop_refuses_the_design():
    cfg = {"strategy": "multi_worker", "design": {"name": "smart_mining"}}
    with pytest.raises(ExperimentError, match="multi-worker"):
        mining_lib.refresh_callback(cfg, _Design(), None, None)


def test_a_design_without_a_table_gets_no_callback_and_the_backup_no_state():
    assert mining_lib.refresh_callback({"strategy": "default"}, object(), None, None) is None
    assert mining_lib.backup_state(None) == {}
