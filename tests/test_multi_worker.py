"""Two worker processes on 127.0.0.1 (TF_CONFIG) train with identical weights.

MultiWorkerMirroredStrategy through tfdml.distributed.train_loop (Keras 3's
fit under it: keras-team/keras#20585). The short version runs by default;
the full default config (the README's documented command) is marked slow.
"""

import json
import os
import socket
import subprocess
import sys

import h5py
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_ports(n):
    """``n`` ports of 127.0.0.1 free now."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_two_workers(command, timeout):
    """``command`` (a list) run by two worker processes of one cluster on 127.0.0.1
    (TF_CONFIG, no GPU), from the repository's root; their ``(stdout, stderr)`` once both
    have exited, each with status 0."""
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
    procs = []
    for index in range(2):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="",
                   TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}))
        procs.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=timeout))
    finally:
        for p in procs:
            p.kill()
    for p, (stdout, stderr) in zip(procs, outputs):
        assert p.returncode == 0, stderr[-3000:]
    return outputs


def _weights(path):
    """{dataset path: array} of a .weights.h5 file, or of the weights inside a .keras file."""
    if path.endswith(".keras"):
        import io
        import zipfile

        with zipfile.ZipFile(path) as archive:
            path = io.BytesIO(archive.read("model.weights.h5"))
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(
            lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None
        )
    return out


def _run_two_workers(out_dir, extra_sets, timeout):
    cmd = [sys.executable, os.path.join(ROOT, "train.py"), "--config",
           os.path.join(ROOT, "configs", "default.yaml"), "--quiet",
           "--set", "strategy=multi_worker", "--set", f"output_dir={out_dir}", *extra_sets]
    return run_two_workers(cmd, timeout)


def _check(out_dir, outputs):
    chief = _weights(os.path.join(out_dir, "model.keras"))
    other = _weights(os.path.join(out_dir, "workers", "1", "final.weights.h5"))
    model_keys = [k for k in chief if not k.startswith("optimizer")]
    assert model_keys and chief.keys() == other.keys()
    for key in model_keys:
        np.testing.assert_array_equal(chief[key], other[key], err_msg=key)
    assert os.path.exists(os.path.join(out_dir, "metrics.json"))
    assert "held-out metrics" in outputs[0][0]


def test_two_workers_short(tmp_path):
    sets = ["--set", "data.source=digits", "--set", "training.epochs=1",
            "--set", "training.steps_per_epoch=3", "--set", "model.backbone_options={width: 4}",
            "--set", "evaluation.metrics=[recall]"]
    outputs = _run_two_workers(tmp_path, sets, timeout=600)
    _check(tmp_path, outputs)


@pytest.mark.slow
def test_two_workers_default_config(tmp_path):
    outputs = _run_two_workers(tmp_path, [], timeout=3000)
    _check(tmp_path, outputs)


@pytest.mark.slow
def test_two_workers_with_a_cross_batch_memory(tmp_path):
    """The memory holds the global batch on both workers: identical memories and weights."""
    sets = ["--set", "data.source=digits", "--set", "training.epochs=1",
            "--set", "training.steps_per_epoch=3", "--set", "model.backbone_options={width: 4}",
            "--set", "evaluation.metrics=[recall]", "--set", "loss.memory={size: 96, warmup_steps: 1}"]
    outputs = _run_two_workers(tmp_path, sets, timeout=600)
    _check(tmp_path, outputs)
    chief = _weights(os.path.join(tmp_path, "model.keras"))
    filled = [v for k, v in chief.items() if "memory" in k and np.ndim(v) == 0 and int(v) == 80]
    assert filled, sorted(k for k in chief if "memory" in k)  # 2 steps after the warm-up, 40 each
