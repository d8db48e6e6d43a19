"""benchmarks/compare_peers.py: a missing peer is skipped with the install line, calls are
interleaved, the sides run on one saved batch, the PyTorch network is the Keras one, and the
legacy peers (TF Addons, TF Similarity) point to RESULTS.md without their venv.
No timing is asserted. The legacy worker itself runs only with TFDML_LEGACY_PYTHON set to an
interpreter that has TF 2.15, tensorflow-addons and tensorflow-similarity."""

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
    median = cp.interleaved({"a": side("a", [9, 1, 5, 3]), "b": side("b", [9, 2, 2, 8])}, runs=3, warmup=1,
                            settle=0)
    assert median == {"a": 3, "b": 2}
    assert order == ["a", "b"] + ["a", "b"] * 3


def test_each_timed_call_follows_untimed_calls_of_its_own_side():
    """The settling calls absorb the other side's spinning threads: only the last call of a
    side's turn is timed, and a side's turn is never split by the other's calls."""
    order = []

    def side(name, seconds):
        values = iter(seconds)
        return lambda: order.append(name) or next(values)

    # a: warm-up 9; rounds (untimed 7, timed 1), (7, 3); b: warm-up 9; (7, 4), (7, 6).
    median = cp.interleaved({"a": side("a", [9, 7, 1, 7, 3]), "b": side("b", [9, 7, 4, 7, 6])}, runs=2, warmup=1,
                            settle=1)
    assert median == {"a": 2, "b": 5}
    assert order == ["a", "b"] + ["a", "a", "b", "b"] * 2


def test_a_slow_call_settles_alone():
    """Untimed calls stop once they took ``settle_seconds``: a side whose calls are slow is not
    run three times per round."""
    order = []

    def side(name, seconds):
        values = iter(seconds)
        return lambda: order.append(name) or next(values)

    # a: fast (0.001 s), settles twice; b: slow (1 s), settles once.
    median = cp.interleaved({"a": side("a", [0.001] * 4), "b": side("b", [1.0, 1.0, 2.0])}, runs=1, warmup=1,
                            settle=2, settle_seconds=0.05)
    assert median == {"a": 0.001, "b": 2.0}
    assert order == ["a", "b", "a", "a", "a", "b", "b"]
    assert cp.ratio(3.0, 2.0) == "1.50" and cp.ratio(None, 2.0) == "–" and cp.ratio(1.0, None) == "–"
    assert cp.ratio(0.3, 100.0) == "0.003" and cp.ratio(8.0, 100.0) == "0.08"  # not 0.00


def test_a_losses_row_gives_graph_and_best_mode_ratios_against_the_legacy_peers():
    """The comparison reads tfdml's best mode against TF Similarity: here XLA (2 ms) is the
    best, so best / TF Similarity = 2 / 4 while graph / TF Similarity = 3 / 4."""
    median = {"graph": 0.003, "xla": 0.002, "PML, 1 thread": 0.010, "PML, 2 threads": 0.008,
              "TF Addons": 0.030, "TF Similarity": 0.004}
    legacy = ["TF Addons", "TF Similarity"]
    assert cp.loss_ratio_columns(legacy) == ["graph / PML", "XLA / PML", "graph / TF Addons",
                                             "graph / TF Similarity", "best / TF Addons", "best / TF Similarity"]
    cells = cp.loss_row_cells(median, ["PML, 1 thread", "PML, 2 threads"], legacy)
    assert cells == ["3.00", "2.00", "10.00", "8.00", "30.00", "4.00",
                     cp.ratio(0.003, 0.008), cp.ratio(0.002, 0.008),  # against the faster PML column
                     cp.ratio(0.003, 0.030), cp.ratio(0.003, 0.004),
                     cp.ratio(0.002, 0.030), "0.50"]
    # a legacy cell left out (TF Addons' semi-hard at B = 1024) gives "–", not an error
    del median["TF Addons"]
    assert cp.loss_row_cells(median, ["PML, 1 thread"], legacy)[3] == "–"


def test_main_runs_tfdml_alone_when_pytorch_and_the_legacy_venv_are_missing(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)
    cp.main(["--parts", "losses", "--batch", "16", "--runs", "1", "--warmup", "0", "--cases", "batch-hard triplet",
             "proxy anchor", "--legacy-python", str(tmp_path / "no-venv" / "bin" / "python")])
    out = capsys.readouterr().out
    assert "PyTorch + pytorch-metric-learning skipped: torch not installed: pip install -e '.[bench]'" in out
    skipped = [line for line in out.splitlines() if line.startswith("TF Addons and TF Similarity skipped")]
    assert len(skipped) == 1 and "no-venv/bin/python not found" in skipped[0] and "--make-legacy-venv" in skipped[0]
    header = next(line for line in out.splitlines() if line.startswith("| loss + miner |"))
    assert "TF Addons" not in header  # no legacy columns without the legacy worker
    assert header.endswith("| PML mined | tfdml loss | PML loss | same loss? |")
    for case in ("batch-hard triplet", "proxy anchor"):
        row = next(line for line in out.splitlines() if line.startswith(f"| {case} | 16 |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == len(header.strip("|").split("|"))
        assert float(cells[2]) > 0 and float(cells[3]) > 0  # tfdml graph and XLA ran
        assert cells[4:8] == ["–", "–", "–", "–"]  # PML, both ratios, what PML mined
        assert float(cells[8]) > 0 and cells[9:] == ["–", "–"]  # tfdml's loss value; no PML value, no check
    assert "- proxy anchor: one proxy per class (tfdml's, copied to PML), α = 32, δ = 0.1" in out
    assert "were not run: their last measured figures are in benchmarks/RESULTS.md" in out
    assert "Load average at the end" in out


def test_a_legacy_interpreter_without_the_libraries_is_skipped(capsys):
    # This interpreter has TF 2.21 but not TF Addons: the worker's first answer is the import error.
    assert cp.legacy_worker(sys.executable) is None
    out = capsys.readouterr().out
    assert out.startswith("TF Addons and TF Similarity skipped (legacy worker, info: ModuleNotFoundError")
    assert out.count("\n") == 1 and "--legacy-python" in out


def test_legacy_options(monkeypatch, tmp_path):
    monkeypatch.setattr(cp, "LEGACY_VENV", str(tmp_path / "venv"))
    args = cp.arguments([])
    assert args.legacy_python is None and args.make_legacy_venv is None and args.venv_python == "python3.11"
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.touch()
    assert cp.arguments([]).legacy_python == str(python)  # the default venv, once it exists
    assert cp.arguments(["--legacy-python", "/x/python"]).legacy_python == "/x/python"
    assert cp.arguments(["--make-legacy-venv"]).make_legacy_venv == str(tmp_path / "venv")
    args = cp.arguments(["--make-legacy-venv", "/y", "--venv-python", "python3.10"])
    assert (args.make_legacy_venv, args.venv_python) == ("/y", "python3.10")
    assert cp.arguments(["--worker", "legacy"]).worker == "legacy"


def test_tf_addons_semi_hard_is_left_out_where_its_tiles_would_not_fit():
    gib = 2**30
    assert cp.too_big_for_tfa(256, 8 * gib) is None and cp.too_big_for_tfa(1024, None) is None
    assert cp.too_big_for_tfa(1024, 64 * gib) is None
    assert cp.too_big_for_tfa(1024, 20 * gib) == ("its [B², B] tensors would take ~19 GiB at B = 1024, more than "
                                                  "half of the 20 GiB available")
    assert cp.available_memory() is None or cp.available_memory() > 0


def fake_python(directory, version):
    """An 'interpreter' that answers ``version`` to whatever it is asked."""
    path = directory / f"python{version}"
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(0o755)
    return str(path)


def test_make_legacy_venv_wants_python_3_9_to_3_11(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(cp, "python_version", lambda python: {"new": "3.12", "old": "3.11"}.get(python))
    monkeypatch.setattr(cp.subprocess, "run", lambda command, **kwargs: calls.append(command))
    for python, why in (("new", "is Python 3.12, but TensorFlow 2.15 .* has wheels only for Python 3.9–3.11"),
                        ("missing", "cannot run 'missing'")):
        with pytest.raises(SystemExit, match=why):
            cp.make_legacy_venv(str(tmp_path / "venv"), python)
    assert calls == [] and not (tmp_path / "venv").exists()
    assert cp.make_legacy_venv(str(tmp_path / "venv"), "old") == str(tmp_path / "venv" / "bin" / "python")
    assert calls == [["old", "-m", "venv", str(tmp_path / "venv")],
                     [str(tmp_path / "venv" / "bin" / "python"), "-m", "pip", "install", *cp.LEGACY_PINS]]


def test_make_legacy_venv_asks_the_interpreter_its_version(tmp_path):
    assert cp.python_version(sys.executable) == "%d.%d" % sys.version_info[:2]
    assert cp.python_version(fake_python(tmp_path, "3.12")) == "3.12"
    assert cp.python_version(str(tmp_path / "none")) is None
    with pytest.raises(SystemExit, match="Python 3.12"):
        cp.main(["--make-legacy-venv", str(tmp_path / "venv"), "--venv-python", fake_python(tmp_path, "3.12")])
    assert not (tmp_path / "venv").exists()


def test_legacy_peers_on_the_saved_batch_agree_with_tfdml(tmp_path):
    python = os.environ.get("TFDML_LEGACY_PYTHON")
    if not python:
        pytest.skip("TFDML_LEGACY_PYTHON (an interpreter with TF 2.15, TF Addons, TF Similarity) not set")
    started = cp.legacy_worker(python)
    if started is None:
        pytest.skip(f"{python} does not import tensorflow_addons and tensorflow_similarity")
    legacy, info = started
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import bench_losses

    try:
        assert info["versions"]["TensorFlow"].startswith("2.15") and info["threads"] >= 1
        y, e = bench_losses.batch(8, 4, 16)
        path = str(tmp_path / "batch.npz")
        np.savez(path, embeddings=e.numpy(), labels=y["label"].numpy())
        assert legacy.ask("losses", case="distance weighted + margin", path=path) == {
            "names": [], "values": {}, "skipped": {}}
        for case in ("semi-hard triplet", "batch-hard triplet"):
            answer = legacy.ask("losses", case=case, path=path)
            assert answer["names"] == ["TF Addons", "TF Similarity"]
            for name in answer["names"]:
                assert legacy.ask("call", name=name)["seconds"] > 0
            # TF Addons: tfdml's triplets and mean (checked on the saved batch, in this process).
            ours = float(cp.TfdmlSide.loss(case, 8)(y, e))
            np.testing.assert_allclose(answer["values"]["TF Addons"], ours, rtol=1e-5)
            if case == "batch-hard triplet":  # TF Similarity: the same triplets, one per anchor
                np.testing.assert_allclose(answer["values"]["TF Similarity"], ours, rtol=1e-5)
    finally:
        legacy.close()


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
    answer = side.losses("batch-hard triplet", batch=16, per_class=4, path=path)
    assert answer["mined"] == "16 triplets" and answer["value"] > 0
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


def test_every_case_has_its_settings_line_and_a_tfdml_loss():
    assert len(set(cp.LOSS_CASES)) == len(cp.LOSS_CASES) == len(cp.settings_lines(cp.LOSS_CASES))
    assert set(cp.DIFFERENT_LOSS) | set(cp.PML_FORM) | set(cp.NO_PML) <= set(cp.LOSS_CASES)
    for case in cp.LOSS_CASES:
        assert cp.TfdmlSide.loss(case, num_classes=4, dim=8).name
    with pytest.raises(ValueError, match="unknown case 'x'"):
        cp.TfdmlSide.loss("x", 4)


def test_the_same_loss_cell_says_agree_differ_or_why():
    ours = {"value": 2.0, "pml_form": None}
    assert cp.same_loss_cell("histogram", ours, 2.0 + 1e-5) == "yes (Δ -1.0e-05)"
    assert cp.same_loss_cell("histogram", ours, 2.1) == "**NO** (Δ -1.0e-01)"  # the same loss, another value
    assert cp.same_loss_cell("angular", ours, 3.0) == "no: another loss (below)"
    assert cp.same_loss_cell("angular", ours, 2.0).startswith("yes")  # different losses may agree on a batch
    assert cp.same_loss_cell("histogram", ours, None) == "–"  # PML not run
    assert cp.same_loss_cell("binomial deviance", ours, None) == "no PML counterpart"
    # proxy NCA: tfdml's value in PML's form is what is compared
    assert cp.same_loss_cell("proxy NCA", {"value": 2.0, "pml_form": 3.0}, 3.0) == "yes, in PML form (Δ 0.0e+00)"
    # ... and must agree: PML equal to tfdml's own value is a disagreement in that form
    assert cp.same_loss_cell("proxy NCA", {"value": 2.0, "pml_form": 3.0}, 2.0) == "**NO** (Δ 1.0e+00)"


def test_pml_computes_the_same_loss_as_tfdml_on_the_saved_batch(tmp_path):
    """With the shared hyper-parameters (and tfdml's proxies copied to PML), each loss PML has gives
    tfdml's value, or tfdml's value in PML's form; those that differ say why."""
    pytest.importorskip("torch")
    pytest.importorskip("pytorch_metric_learning")
    path = str(tmp_path / "batch.npz")
    tfdml, torch_side = cp.TfdmlSide(), cp.TorchSide()
    for case in cp.OTHER_CASES:
        ours = tfdml.losses(case, batch=16, per_class=4, dim=8, path=path)
        theirs = torch_side.losses(case, batch=16, per_class=4, path=path)
        if case in cp.NO_PML:
            assert theirs == {"missing": cp.NO_PML[case]}
            continue
        assert torch_side.call(threads=1)["seconds"] > 0
        cell = cp.same_loss_cell(case, ours, theirs["value"])
        assert cell.startswith("no: another loss") if case in cp.DIFFERENT_LOSS else cell.startswith("yes"), (
            case, ours, theirs)


def test_tfdml_class_vectors_reach_pml_in_its_layout():
    """tfdml's [classes · K, dim] proxies land in PML's [classes, dim] ``proxies`` as they are and in
    its [dim, classes · K] ``W`` (classification) and ``fc`` (SoftTriple) transposed; a shape that
    does not fit is refused, naming both shapes."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("pytorch_metric_learning")
    from pytorch_metric_learning import losses

    proxies = torch.arange(30, dtype=torch.float32).reshape(6, 5)  # 3 classes · K = 2, dim 5
    for loss, name, expected in ((losses.ProxyAnchorLoss(6, 5), "proxies", proxies),
                                 (losses.CosFaceLoss(num_classes=6, embedding_size=5), "W", proxies.t()),
                                 (losses.SubCenterArcFaceLoss(num_classes=3, embedding_size=5, sub_centers=2), "W",
                                  proxies.t()),
                                 (losses.SoftTripleLoss(3, 5, centers_per_class=2), "fc", proxies.t())):
        cp.copy_proxies(loss, proxies)
        assert torch.equal(getattr(loss, name).detach(), expected), type(loss).__name__
    with pytest.raises(ValueError, match=r"CosFaceLoss.W is \(5, 4\), tfdml's proxies give \(5, 6\)"):
        cp.copy_proxies(losses.CosFaceLoss(num_classes=4, embedding_size=5), proxies)


def test_a_worker_that_dies_is_reported_as_such_and_can_be_restarted():
    worker = cp.Worker("tfdml")
    worker.proc.kill()
    with pytest.raises(cp.WorkerDied, match=r"tfdml worker exited with status -9 during 'losses' \(killed"):
        worker.ask("losses", case="proxy anchor", batch=8, per_class=4, dim=8, path="unused.npz")
    worker.restart()
    assert worker.proc.poll() is None
    worker.close()


class _PeerKilledOnLosses:
    """A PML worker that the system kills while it builds a case (as it can for a B³ tensor)."""

    def __init__(self):
        self.restarts = 0

    def ask(self, op, **request):
        raise cp.WorkerDied("the torch worker exited with status -9 during 'losses' (killed: out of memory?)")

    def restart(self):
        self.restarts += 1


def test_a_peer_killed_on_one_case_leaves_that_row_without_pml_and_the_run_goes_on(capsys, tmp_path):
    tfdml, peer = cp.Worker("tfdml"), _PeerKilledOnLosses()
    try:
        cp.part_losses(tfdml, peer, [8], runs=1, warmup=0, per_class=4, dim=8, threads=[2],
                       scratch=str(tmp_path), cases=["batch-hard triplet", "proxy anchor"])
    finally:
        tfdml.close()
    out = capsys.readouterr().out
    assert peer.restarts == 2
    for case in ("batch-hard triplet", "proxy anchor"):
        row = next(line for line in out.splitlines() if line.startswith(f"| {case} | 8 |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[2]) > 0 and cells[4] == "–"  # tfdml ran, PML did not
        assert f"Not run: PML, {case}, B = 8: the torch worker exited with status -9" in out


def test_a_case_at_several_batches_is_one_row():
    rows = [["256", "1.00", "no miner", "yes (Δ 0.0e+00)"], ["1024", "4.00", "no miner", "yes (Δ 1.0e-07)"]]
    assert cp.joined_cells(rows) == ["256 / 1024", "1.00 / 4.00", "no miner", "yes (Δ 0.0e+00) / yes (Δ 1.0e-07)"]
    assert cp.joined_cells(rows[:1]) == rows[0]
