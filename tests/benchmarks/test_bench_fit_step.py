"""benchmarks/bench_fit_step.py --fit-startup: a tiny run prints the fixed cost of consecutive fit()
calls, and the fixed cost is a call's wall time minus its steps × the steady step time (no timing
is asserted: the figures depend on the machine)."""

import importlib.util
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))  # machine.py
_spec = importlib.util.spec_from_file_location("bench_fit_step", os.path.join(ROOT, "benchmarks", "bench_fit_step.py"))
bench_fit_step = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_fit_step)


def test_the_fixed_cost_is_wall_minus_steps_times_the_steady_step():
    # two rounds of three calls of 2 steps; the steady steps (calls 2+) are 1, 1, 2, 2, 3, 3, 1, 1 -> median 1.5
    rounds = [[(10.0, [5.0, 4.0]), (4.0, [1.0, 1.0]), (5.0, [2.0, 2.0])],
              [(12.0, [6.0, 5.0]), (6.0, [3.0, 3.0]), (3.5, [1.0, 1.0])]]
    step, fixed = bench_fit_step.fixed_costs(rounds)
    assert step == 1.5
    assert fixed == [[7.0, 1.0, 2.0], [9.0, 3.0, 0.5]]


def test_tiny_fit_startup_run(capsys):
    bench_fit_step.main(["--fit-startup", "--batch", "8", "--modes", "graph", "--rounds", "1", "--fit-calls", "2",
                         "--fit-call-steps", "2"])
    out = capsys.readouterr().out
    assert out.startswith("Machine: ")
    row = next(line for line in out.splitlines() if line.startswith("| 8 | graph |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == 10 and float(cells[2]) > 0 and float(cells[3]) > 0 and float(cells[5]) > 0
    # fit in -> first step and last step -> fit out: a median and the largest, within the call's wall
    for cell in cells[8:]:
        median, largest = re.fullmatch(r"([0-9.]+) \(≤ ([0-9]+)\)", cell).groups()
        assert 0 <= float(median) <= float(largest) + 0.5 and float(median) <= float(cells[5])


def test_fit_startup_needs_two_calls(capsys):
    with pytest.raises(SystemExit):
        bench_fit_step.main(["--fit-startup", "--fit-calls", "1"])
    assert "--fit-startup needs --fit-calls >= 2" in capsys.readouterr().err


def test_a_mode_names_its_jit_compile_and_dtype_policy():
    assert bench_fit_step.parse_mode("graph") == (False, "float32")
    assert bench_fit_step.parse_mode("loss:mixed_bfloat16") == ("loss", "mixed_bfloat16")
    with pytest.raises(ValueError, match="choose from"):
        bench_fit_step.parse_mode("loss:mixed_float16")


def test_a_mixed_bfloat16_mode_trains_a_bfloat16_network_with_a_float32_head(capsys):
    net = bench_fit_step.network(embedding_dim=8, widths=(4,), dtype_policy="mixed_bfloat16")
    assert net.layers[1].compute_dtype == "bfloat16"  # the first convolution
    assert net.output.dtype == "float32"
    bench_fit_step.main(["--batch", "8", "--modes", "graph", "graph:mixed_bfloat16", "--rounds", "1",
                         "--warmup", "1", "--steps", "2"])
    out = capsys.readouterr().out
    assert "| 8 | graph:mixed_bfloat16 |" in out


def test_the_network_alone_trains_on_fixed_unit_targets():
    import numpy as np

    targets = bench_fit_step.network_targets(8)
    np.testing.assert_allclose(np.linalg.norm(targets, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(targets, bench_fit_step.network_targets(8))  # the same on both sides
    times = bench_fit_step.time_network("loss", 8, warmup=1, steps=2)  # "loss": graph mode, nothing to compile
    assert len(times) == 2 and min(times) > 0
