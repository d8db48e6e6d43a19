"""A loss's state (learned margins, a sampler's seed stream, a cross-batch memory,
proxies) trained under MultiWorkerMirroredStrategy (two worker processes on 127.0.0.1,
TF_CONFIG) survives ``tf.train.CheckpointManager`` and ``save_weights``: restored under
the same strategy on every replica of both workers, and on one device
(tests/tfdml/multi_worker_loss_state.py is the workers' script).

Two fresh TensorFlow processes and a collective ring: slow, so marked ``slow``; the same
routes under MirroredStrategy in one process run by default (tests/tfdml/test_saving_routes.py).
"""

import importlib.util
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "multi_worker_loss_state.py")
ROOT = os.path.dirname(os.path.dirname(HERE))


def _worker_module():
    spec = importlib.util.spec_from_file_location("multi_worker_loss_state", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    """The output folder of the two workers' run (each loss: the chief's files, the
    other worker's in ``worker1/``)."""
    out = tmp_path_factory.mktemp("multi_worker")
    cluster = {"worker": [f"127.0.0.1:{p}" for p in _free_ports(2)]}
    procs = []
    for index in range(2):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="",
                   TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}))
        procs.append(subprocess.Popen([sys.executable, SCRIPT, str(out)], cwd=ROOT, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        outputs = [p.communicate(timeout=600) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (_, stderr) in zip(procs, outputs):
        assert p.returncode == 0, stderr[-3000:]
    return out


def _state(path):
    with np.load(path) as held:
        return [held[f"arr_{i}"] for i in range(len(held.files))]


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["margin_memory", "proxy_anchor"])
def test_a_multi_worker_checkpoint_restores_the_loss_state_on_every_worker_and_on_one_device(two_workers, loss):
    worker = _worker_module()
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
