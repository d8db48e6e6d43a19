"""benchmarks/scaling.py: the order-of-growth fit, a tiny sampler run, the tables and
plots (no timing is asserted: the figures depend on the machine and its load)."""

import importlib.util
import math
import os

import numpy as np
import pytest

from tfdml import samplers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("scaling", os.path.join(ROOT, "benchmarks", "scaling.py"))
scaling = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scaling)


@pytest.mark.parametrize("k", [1.0, 2.0, 2.5, 3.0])
def test_growth_exponent_recovers_k_of_a_power_law(k):
    sizes = scaling.BATCH_SIZES
    times = [0.003 * b**k for b in sizes]
    fitted, c = scaling.growth_exponent(sizes, times)
    # log t = log 0.003 + k log B exactly, so least squares returns k and 0.003 to rounding.
    assert fitted == pytest.approx(k, abs=1e-9)
    assert c == pytest.approx(0.003, rel=1e-8)


def test_growth_exponent_fits_the_upper_half_only():
    # 7 sizes: the upper half is the 4 largest (512..4096); the 3 smallest are a flat
    # overhead that would pull a fit over all points below 2.
    sizes = list(reversed(scaling.BATCH_SIZES))  # any order
    times = [1e-6 * b**2 if b >= 512 else 50.0 for b in sizes]
    assert [b for b, _ in scaling.upper_half(sizes, times)] == [512, 1024, 2048, 4096]
    assert scaling.growth_exponent(sizes, times)[0] == pytest.approx(2.0, abs=1e-9)
    assert np.polyfit(np.log(sizes), np.log(times), 1)[0] < 1.5  # what all points would give
    # 5 sizes (the evaluation's): the 3 largest; 2 sizes: both; 1 size: no slope.
    assert [n for n, _ in scaling.upper_half([1, 2, 3, 4, 5], [1] * 5)] == [3, 4, 5]
    assert len(scaling.upper_half([1, 2], [1, 1])) == 2
    assert all(math.isnan(v) for v in scaling.growth_exponent([64], [1.0]))


def test_every_sampler_has_a_loss_that_runs_it():
    for name in samplers.SAMPLERS:
        label, loss = scaling.sampler_case(name, num_classes=4)
        assert scaling.sampler_name(loss) == name, label


def test_tiny_sampler_run_returns_figures_for_every_sampler(tmp_path):
    rows, skipped = scaling.measure_samplers(samplers.SAMPLERS, sizes=(8, 16), modes=("graph",),
                                             runs=3, cap=math.inf, budget=0.0, log=lambda s: None)
    assert skipped == []
    assert {(r["sampler"], r["B"]) for r in rows} == {(s, b) for s in samplers.SAMPLERS for b in (8, 16)}
    for r in rows:
        assert r["ms"] > 0 and math.isfinite(r["ms"]) and r["calls"] == 3 and r["first_s"] > 0
        assert r["cpu_ms"] >= 0 and math.isfinite(r["cpu_ms"])
    data = {"runs": [{"skipped": skipped}], "rows": rows}
    for value in ("ms", "cpu_ms"):
        table = scaling.samplers_table(rows, skipped, value)
        assert table.count("\n") == 1 + len(samplers.SAMPLERS)  # header, rule, one line per sampler
    scaling.plot_samplers(data, str(tmp_path / "samplers.png"))
    assert (tmp_path / "samplers.png").stat().st_size > 0


def test_a_point_over_the_cap_skips_the_larger_sizes():
    rows, skipped = scaling.measure_samplers(["hard"], sizes=(16, 8, 32), modes=("graph",), runs=3,
                                             cap=0.0, budget=0.0, log=lambda s: None)
    assert [r["B"] for r in rows] == [8]  # the smallest first; any time exceeds a cap of 0
    assert [s["B"] for s in skipped] == [16, 32]


def test_evaluation_exponents_table_and_plot_from_rows(tmp_path):
    # Synthetic child results: wall time ∝ n² (tfdml 3× the floor), CPU time ∝ n^1.5,
    # memory increase ∝ n.
    rows = []
    for n in scaling.EVAL_SIZES:
        for method, factor in (("tfdml", 3.0), ("matmul", 1.0)):
            t = factor * 1e-9 * n**2
            rows.append({"method": method, "n": n, "classes": scaling.eval_classes(n), "wall_s": t + 1.0,
                         "warm_s": t, "cpu_s": 5.0, "warm_cpu_s": 1e-8 * n**1.5, "peak_rss_mb": 700 + 0.002 * n, "rss_before_mb": 700,
                         "increase_mb": 0.002 * n, "load": 1.0, "repeat": 3})
    exps = scaling.eval_exponents(rows)
    for method in ("tfdml", "matmul"):
        k_time, k_mem, lo, hi, k_cpu = exps[method]
        assert k_time == pytest.approx(2.0, abs=1e-9)  # the warm medians, not the cold calls
        assert k_cpu == pytest.approx(1.5, abs=1e-9)
        assert k_mem == pytest.approx(1.0, abs=1e-9)
        assert (lo, hi) == (scaling.EVAL_SIZES[len(scaling.EVAL_SIZES) // 2], scaling.EVAL_SIZES[-1])
    assert "| 3.0× |" in scaling.eval_table(rows)
    assert scaling.eval_classes(55_000) == 10_000
    scaling.plot_eval({"runs": [], "rows": rows}, str(tmp_path / "eval.png"))
    assert (tmp_path / "eval.png").stat().st_size > 0


def test_saving_with_keep_replaces_only_the_re_measured_sampler_points(tmp_path):
    """``samplers --only distance_weighted --keep``: that sampler's points are replaced,
    every other row stays, and the runs list records both commands."""
    path = str(tmp_path / "s.json")
    row = lambda sampler, mode, b, ms: {"sampler": sampler, "mode": mode, "B": b, "ms": ms}  # noqa: E731
    scaling.save(path, [row("hard", "graph", 64, 1.0), row("distance_weighted", "xla", 64, 5.0),
                        row("distance_weighted", "xla", 128, 9.0)])
    data = scaling.save(path, [row("distance_weighted", "xla", 64, 2.0)], keep=True, key=scaling.sampler_point)
    got = {scaling.sampler_point(r): r["ms"] for r in data["rows"]}
    assert got == {("hard", "graph", 64): 1.0, ("distance_weighted", "xla", 64): 2.0,
                   ("distance_weighted", "xla", 128): 9.0}
    assert len(data["runs"]) == 2
