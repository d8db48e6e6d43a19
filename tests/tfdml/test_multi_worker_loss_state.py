"""A loss's state (learned margins, a sampler's seed stream, a cross-batch memory,
proxies) trained under MultiWorkerMirroredStrategy (two worker processes on 127.0.0.1,
TF_CONFIG) survives ``tf.train.CheckpointManager`` and ``save_weights``: restored under
the same strategy on every replica of both workers, and on one device
(tests/tfdml/multi_worker_loss_state.py is the workers' script).

Two fresh TensorFlow processes and a collective ring: slow, so marked ``slow``; the same
routes under MirroredStrategy in one process run by default (tests/tfdml/test_saving_routes.py).
"""

import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.test_multi_worker import run_two_workers
from tests.tfdml import multi_worker_loss_state as worker

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi_worker_loss_state.py")


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    """The output folder of the two workers' run (each loss: the chief's files, the
    other worker's in ``worker1/``)."""
    out = tmp_path_factory.mktemp("multi_worker")
    run_two_workers([sys.executable, SCRIPT, str(out)], timeout=600)
    return out


def _state(path):
    with np.load(path) as held:
        return [held[f"arr_{i}"] for i in range(len(held.files))]


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["margin_memory", "proxy_anchor"])
def test_a_multi_worker_checkpoint_restores_the_loss_state_on_every_worker_and_on_one_device(two_workers, loss):
    folder = two_workers / loss
    chief, other = _state(folder / "state0.npz"), _state(folder / "worker1" / "state1.npz")
    assert len(chief) == len(other) > 0
    for a, b in zip(chief, other):
        np.testing.assert_array_equal(a, b)  # both workers hold the same state
    if loss == "margin_memory":
        assert any(a.ndim == 0 and int(a) == 12 for a in chief)  # a full memory: filled = size
    for index in range(2):
        with open(folder / f"restored{index}.json") as fh:
            assert json.load(fh) == {"checkpoint": [], "load_weights": []}, index
    single = worker.build(loss, tf.distribute.get_strategy(), seed=2)
    tf.train.Checkpoint(model=single).restore(
        tf.train.latest_checkpoint(str(folder / "ckpt"))).assert_existing_objects_matched()
    single.build((None, 6))
    restored = worker.loss_state(single)
    assert len(restored) == len(chief)
    for a, b in zip(restored, chief):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    loaded = worker.build(loss, tf.distribute.get_strategy(), seed=2)
    loaded.build((None, 6))
    loaded.load_weights(str(folder / "model.weights.h5"))
    for a, b in zip(worker.loss_state(loaded), chief):
        np.testing.assert_array_equal(a, b)
