"""benchmarks/bench_first_call.py: the cells are the registry's losses with the samplers a config
accepts for them, every cell builds, and a tiny run times one cell in a fresh process (no timing
is asserted: the figures depend on the machine)."""

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("bench_first_call",
                                               os.path.join(ROOT, "benchmarks", "bench_first_call.py"))
bfc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bfc)


def test_the_cells_are_every_loss_with_each_sampler_a_config_accepts():
    from tfdml import losses
    from tfdml_app import loss_config

    cells = bfc.cells()
    assert {loss for loss, _ in cells} == set(losses.LOSSES)
    for loss in losses.LOSSES:
        expected = loss_config.valid_samplers(loss)
        assert [s for name, s in cells if name == loss] == expected
    assert bfc.cells(["margin", "npair"], ["by_loss", "hard"]) == [("margin", "hard"), ("margin", "by_loss"),
                                                                ("npair", "by_loss")]
    with pytest.raises(SystemExit, match="--losses: unknown nope; registered: contrastive"):
        bfc.cells(["nope"])
    with pytest.raises(SystemExit, match="No loss \\+ sampler pair .* npair: by_loss"):
        bfc.cells(["npair"], ["hard"])


def test_every_cell_builds_the_loss_a_config_would():
    from tfdml import losses, samplers

    cells = bfc.cells()
    not_built = bfc.refused(cells)
    for why in not_built.values():  # a pair whose sampler kind fits but the loss does not meet its needs
        assert why.startswith("loss.sampler = ") and "does not fit loss.name" in why
    for loss, sampler in cells:
        if (loss, sampler) in not_built:
            continue
        built = bfc.build(loss, sampler, num_classes=4, dim=8)
        assert isinstance(built, losses.LOSSES[loss])
        if sampler == "by_loss":
            assert built.sampler is None, (loss, sampler)
        else:
            assert isinstance(built.sampler, samplers.SAMPLERS[sampler]), (loss, sampler)


def test_a_row_gives_the_medians_or_the_first_error():
    answers = [{"first_s": f, "first_cpu_s": 2 * f, "warm_s": 0.001, "imports_s": 2.0, "process_s": 9.0}
               for f in (3.0, 1.0, 2.0)]
    result = bfc.medians(answers)
    assert result == {"first_s": 2.0, "first_cpu_s": 4.0, "warm_s": 0.001, "imports_s": 2.0, "process_s": 9.0}
    assert bfc.row("margin", "by_loss", "xla", 256, result) == ("| margin | by_loss | xla | 256 | 2.00 | 4.00 | 1.00 | 2.00 "
                                                              "| 9.00 |")
    failed = bfc.medians(answers + [{"error": "ValueError: no"}])
    assert bfc.row("margin", "by_loss", "xla", 256, failed) == ("| margin | by_loss | xla | 256 | failed: ValueError: no "
                                                              "| | | | |")


def test_bad_batch_sizes_are_refused_in_one_line(capsys):
    for batch in ("6", "4"):  # not a multiple of m = 4; one class only
        with pytest.raises(SystemExit):
            bfc.arguments(["--batch", batch])
        assert "B must be a multiple of --per-class 4 with at least two classes" in capsys.readouterr().err


def test_tiny_run_times_one_cell_in_a_fresh_process(capsys):
    results = bfc.main(["--losses", "contrastive", "--samplers", "all", "--batch", "16", "--runs", "1",
                        "--modes", "graph"])
    result = results["contrastive", "all", "graph", 16]
    assert "error" not in result, result
    assert result["first_s"] > 0 and result["warm_s"] > 0 and result["process_s"] > result["imports_s"] > 0
    assert result["first_cpu_s"] > 0
    out = capsys.readouterr().out
    assert out.startswith("Machine: ") and "| contrastive | all | graph | 16 | " in out


def test_named_kernels_run_their_reference_path_in_the_child(monkeypatch, capsys):
    """--reference reaches the child, which traces those kernels inside kernels.forced; an unknown
    kernel is refused in one line naming the table's kernels."""
    from tfdml import kernels

    seen = []
    real = kernels.choose
    monkeypatch.setattr(kernels, "choose", lambda name, *a, **k: seen.append((name, real(name, *a, **k))) or seen[-1][1])
    answer = bfc.child("triplet", "semi_hard", "graph", 16, 4, 8, reference=("semi_hard",))
    assert answer["first_cpu_s"] > 0
    chosen = dict(seen)
    assert chosen["semi_hard"].is_reference and not chosen["triplet_slots"].is_reference
    args = bfc.arguments(["--reference", "semi_hard", "ordering"])
    assert args.reference == ["semi_hard", "ordering"]
    with pytest.raises(SystemExit):
        bfc.arguments(["--reference", "nope"])
    assert "--reference: Unknown kernel 'nope'; the table's kernels: " in capsys.readouterr().err
