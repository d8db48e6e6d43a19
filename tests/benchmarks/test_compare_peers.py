"""benchmarks/compare_peers.py: a missing peer is skipped with the install line, calls are
interleaved, both sides run on one saved batch, and the PyTorch network is the Keras one.
No timing is asserted."""

import importlib.util
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("compare_peers", os.path.join(ROOT, "benchmarks", "compare_peers.py"))
cp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cp)


def test_a_missing_peer_is_named_with_the_extra_that_installs_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pytorch_metric_learning", None)  # import fails as if not installed
    missing = cp.missing_peers(("pytorch_metric_learning",))
    assert missing == {"pytorch_metric_learning": "pytorch-metric-learning not installed: pip install -e '.[bench]'"}
    assert cp.report_missing(("pytorch_metric_learning",), "PML") is False
    assert "PML skipped: pytorch-metric-learning not installed" in capsys.readouterr().out
    assert cp.missing_peers(("numpy",)) == {}


def test_calls_are_interleaved_and_each_side_gets_its_median():
    order = []

    def side(name, seconds):
        values = iter(seconds)
        return lambda: order.append(name) or next(values)

    # a: warm-up 9, then 1, 5, 3 -> median 3; b: warm-up 9, then 2, 2, 8 -> median 2.
    median = cp.interleaved({"a": side("a", [9, 1, 5, 3]), "b": side("b", [9, 2, 2, 8])}, runs=3, warmup=1)
    assert median == {"a": 3, "b": 2}
    assert order == ["a", "b"] + ["a", "b"] * 3
    assert cp.ratio(3.0, 2.0) == "1.50" and cp.ratio(None, 2.0) == "–" and cp.ratio(1.0, None) == "–"


def test_main_runs_tfdml_alone_when_pytorch_is_missing(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)
    cp.main(["--parts", "losses", "--batch", "16", "--runs", "1", "--warmup", "0", "--cases", "batch-hard triplet"])
    out = capsys.readouterr().out
    assert "PyTorch + pytorch-metric-learning skipped: torch not installed: pip install -e '.[bench]'" in out
    row = next(line for line in out.splitlines() if line.startswith("| batch-hard triplet | 16 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert float(cells[2]) > 0 and float(cells[3]) > 0  # tfdml graph and XLA ran
    assert cells[4:] == ["–", "–", "–", "–"]  # PML, both ratios, PML's triplets
    assert "cited from issue 13" in out and "Load average at the end" in out


def test_pml_side_runs_on_the_batch_the_tfdml_side_saved(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("pytorch_metric_learning")
    rng = np.random.default_rng(0)
    e = rng.normal(size=(16, 8)).astype(np.float32)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    path = str(tmp_path / "batch.npz")
    np.savez(path, embeddings=e, labels=np.repeat(np.arange(4), 4).astype(np.int32))
    side = cp.TorchSide()
    # Batch-hard mines one triplet per anchor: 16 anchors, each with positives and negatives.
    assert side.losses("batch-hard triplet", batch=16, per_class=4, path=path) == {"triplets": 16}
    assert side.call(threads=1)["seconds"] > 0
    side.losses("distance weighted + margin", batch=16, per_class=4, path=path)
    assert side.call(threads=1)["seconds"] > 0


def test_the_pytorch_network_is_the_keras_network():
    torch = pytest.importorskip("torch")
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import bench_fit_step

    keras_net = bench_fit_step.network()
    torch_net = cp.torch_network()
    keras_shapes = sorted(tuple(w.shape) for w in keras_net.trainable_weights)
    # PyTorch keeps conv kernels as [out, in, h, w] and dense ones as [out, in]; Keras as [h, w, in, out] / [in, out].
    torch_shapes = sorted(tuple(reversed(p.shape)) if p.ndim == 2 else
                          (tuple(p.shape[2:]) + (p.shape[1], p.shape[0]) if p.ndim == 4 else tuple(p.shape))
                          for p in torch_net.parameters())
    assert torch_shapes == keras_shapes
    out = torch_net.eval()(torch.zeros(2, 1, 32, 32).normal_())
    assert out.shape == (2, 128)
    np.testing.assert_allclose(out.norm(dim=1).detach().numpy(), 1.0, rtol=1e-5)
