"""benchmarks/peers_memory.py (compare_peers.py --parts memory): a row per memory size and loss
case with every column, tfdml alone without PyTorch, a full memory before the timed step, and
the same loss value as PML's CrossBatchMemory on the same batch and memory where PyTorch is
installed. No timing is asserted."""

import importlib.util
import os
import re
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("compare_peers", os.path.join(ROOT, "benchmarks", "compare_peers.py"))
cp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cp)
pm = cp.peers_memory


def table(out, first_column):
    """(header cells, rows as cell lists) of the markdown table whose header starts with ``first_column``."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_column} |"))
    cells = lambda line: [c.strip() for c in line.strip().strip("|").split("|")]  # noqa: E731
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(cells(line))
    return cells(lines[start]), rows


def test_the_memory_part_runs_tfdml_alone_when_pytorch_is_missing(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)
    cp.main(["--parts", "memory", "--memory-sizes", "32", "16", "--memory-batch", "8", "--dim", "16", "--runs", "1",
             "--warmup", "0"])
    out = capsys.readouterr().out
    assert "PyTorch + pytorch-metric-learning skipped: torch not installed" in out
    header, rows = table(out, "loss")
    assert header == pm.memory_header(["PML"])
    assert [(r[0], r[1]) for r in rows] == [(case, size) for size in ("16", "32") for case in pm.MEMORY_CASES]
    for row in rows:
        cell = dict(zip(header, row))
        assert len(row) == len(header) and cell["B"] == "8"
        assert float(cell["tfdml graph"]) > 0 and float(cell["tfdml XLA"]) > 0
        assert float(cell["tfdml memory MiB"]) >= 0 and float(cell["tfdml peak RSS +MiB"]) >= 0
        assert np.isfinite(float(cell["tfdml loss"]))
        for column in ("PML", "graph / PML", "XLA / PML", "PML memory MiB", "PML peak RSS +MiB", "PML loss",
                       "same loss?"):
            assert cell[column] == "–", column
    assert "- contrastive: configs/xbm_contrastive_memory.yaml's loss (margin α = 0.5" in out
    assert "Load average at the end" in out


def test_the_tfdml_side_fills_the_memory_before_the_timed_step(tmp_path):
    side = cp.TfdmlSide()
    path = str(tmp_path / "memory.npz")
    size, batch, dim = 20, 8, 8  # the last fill batch is cut to 4 rows
    answer = side.memory("contrastive", size=size, batch=batch, per_class=4, dim=dim, path=path)
    assert answer["rows"] == size and answer["names"] == ["graph", "xla"]
    # embeddings [K, d] float32, labels and example ids [K] int64, class sizes [K] float32, 3 int64 counters
    assert answer["bytes"] == size * dim * 4 + size * (8 + 8 + 4) + 3 * 8
    assert answer["pml_form"] == pytest.approx(answer["value"] * (batch * (batch - 1) + batch * size))
    saved = np.load(path)
    assert saved["memory_embeddings"].shape == (size, dim) and saved["memory_labels"].shape == (size,)
    assert set(saved["memory_labels"]) <= set(saved["labels"])  # past examples of the batch's classes
    for name in answer["names"]:
        assert side.call(name)["seconds"] > 0
    assert side.peak_rss()["bytes"] >= answer["bytes"]  # the worker holds at least the memory's buffers


def test_fill_batches_are_other_examples_and_hold_k_rows():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    batches = pm.past_batches(20, 8, 4, 8)
    assert [len(e) for _, e in batches] == [8, 8, 4]
    ids = np.concatenate([y["example_id"].numpy() for y, _ in batches])
    assert list(ids) == list(range(8, 28))  # after the timed batch's ids 0..7: never its own examples
    assert all(len(v) == len(e) for y, e in batches for v in y.values())
    assert pm.pml_memory_size(1024, 256) == 1280  # PML's memory also holds the batch it just wrote


def same_memory_loss_cell(case, ours, theirs, rtol):
    """compare_peers.same_loss_cell with the memory part's tables, as the memory rows call it."""
    assert rtol == cp.VALUE_RTOL
    return cp.same_loss_cell(case, ours, theirs, pml_form=pm.MEMORY_PML_FORM, no_pml=(), different=())


def test_the_same_memory_loss_cell():
    assert same_memory_loss_cell("multi-similarity + miner", {"value": 2.0, "pml_form": None}, 2.0 + 1e-5, 1e-4) \
        == "yes (Δ -1.0e-05)"
    assert same_memory_loss_cell("multi-similarity + miner", {"value": 2.0, "pml_form": None}, 2.5, 1e-4) \
        == "**NO** (Δ -5.0e-01)"
    # contrastive: tfdml's value in PML's form (the sum over the pairs) is what is compared
    assert same_memory_loss_cell("contrastive", {"value": 0.5, "pml_form": 30.0}, 30.0, 1e-4) \
        == "yes, in PML form (Δ 0.0e+00)"
    assert same_memory_loss_cell("contrastive", {"value": 0.5, "pml_form": 30.0}, 0.5, 1e-4).startswith("**NO**")
    assert same_memory_loss_cell("contrastive", {"value": 0.5, "pml_form": 30.0}, None, 1e-4) == "–"


def test_pml_cross_batch_memory_computes_the_same_loss_as_tfdml(tmp_path):
    """On the same batch and memory rows, PML's CrossBatchMemory (K + B rows, the batch written
    before mining) gives tfdml's value (K rows, the batch mined before it is written)."""
    pytest.importorskip("torch")
    pytest.importorskip("pytorch_metric_learning")
    tfdml, torch_side = cp.TfdmlSide(), cp.TorchSide()
    path = str(tmp_path / "memory.npz")
    for size in (16, 20):
        for case in pm.MEMORY_CASES:
            ours = tfdml.memory(case, size=size, batch=8, per_class=4, dim=8, path=path)
            theirs = torch_side.memory(case, size=size, batch=8, per_class=4, path=path)
            assert same_memory_loss_cell(case, ours, theirs["value"], cp.VALUE_RTOL).startswith("yes"), (
                case, size, ours, theirs)
            assert theirs["bytes"] == (size + 8) * 8 * 4 + (size + 8) * 8  # float32 embeddings, int64 labels
            assert torch_side.call(threads=1)["seconds"] > 0


def test_the_guide_s_memory_section_names_its_commands_as_they_parse():
    sys.path.insert(0, os.path.join(ROOT, "study"))
    import reproduce

    guide = open(os.path.join(ROOT, "docs", "guide.md"), encoding="utf-8").read()
    section = " ".join(guide.split("## Cross-batch memory", 1)[1].split("\n## ", 1)[0].split())
    commands = dict((script, args.split()) for script, args in
                    re.findall(r"`python (?:benchmarks|study)/(\w+)\.py ([^`]+)`", section))
    assert set(commands) == {"compare_peers", "reproduce", "probe_memory"}
    import probe_memory

    assert probe_memory.build_parser().parse_args(commands["probe_memory"]).arm in reproduce.claim_arms("xbm_memory")
    assert "memory" in cp.arguments(commands["compare_peers"]).parts
    claim = reproduce.build_parser().parse_args(commands["reproduce"]).claim
    assert claim == ["xbm_memory"] and {row["id"] for row in reproduce.paper_claims.rows_of("xbm_memory")} == {
        "xbm_size", "xbm_ms", "xbm_size_is"}
