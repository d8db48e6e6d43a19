"""benchmarks/bench_losses.py: every registered loss has a row, and a tiny run prints one row of
three figures per selected pair (no timing is asserted: the figures depend on the machine)."""

import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))  # machine.py, timing.py
_spec = importlib.util.spec_from_file_location("bench_losses", os.path.join(ROOT, "benchmarks", "bench_losses.py"))
bench_losses = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_losses)


def test_every_registered_loss_has_a_row():
    from tfdml import losses

    rows = bench_losses.cases(num_classes=4, dim=8)
    assert len({(name, sampler) for name, sampler, _ in rows}) == len(rows)
    built = {type(factory()) for _, _, factory in rows}
    assert set(losses.LOSSES.values()) <= built


def test_tiny_run_prints_a_row_per_selected_pair(capsys):
    bench_losses.main(["--runs", "1", "--warmup", "0", "--classes", "2", "--per-class", "4", "--dim", "8",
                       "--only", "proxy anchor", "histogram"])
    out = capsys.readouterr().out
    assert "Machine:" in out
    rows = [line for line in out.splitlines() if line.startswith("| proxy anchor") or line.startswith("| histogram")]
    assert len(rows) == 2
    for row in rows:
        figures = [float(c) for c in row.strip("|").split("|")[2:]]
        assert len(figures) == 3 and all(f > 0 for f in figures)
