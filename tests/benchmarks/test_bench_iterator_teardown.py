"""benchmarks/bench_iterator_teardown.py: a tiny run times both teardowns in both settings (no
timing is asserted: the figures depend on TensorFlow's threads and the machine)."""

import importlib.util
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))  # machine.py
_spec = importlib.util.spec_from_file_location(
    "bench_iterator_teardown", os.path.join(ROOT, "benchmarks", "bench_iterator_teardown.py"))
bench_iterator_teardown = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_iterator_teardown)


def test_tiny_run_gives_each_teardown_in_every_setting(capsys):
    results = bench_iterator_teardown.main(["--fits", "1", "--failed", "1", "--seconds", "0.1", "--idle", "0"])
    failed = "gc 0 s after a failed fit"
    assert sorted(results) == sorted([("end of fit", "keras", on) for on in (True, False)]
                                     + [(failed, kind, on) for kind in ("keras", "tfdml") for on in (True, False)])
    assert all(len(times) == 1 and times[0] >= 0 for times in results.values())
    out = capsys.readouterr().out
    assert "Machine:" in out and out.count("autotune on") == 3 and out.count("autotune off") == 3
    assert out.count("tfdml EmbeddingModel") == 2


@pytest.mark.parametrize("argv", [["--seconds", "0"], ["--fits", "-1"], ["--idle", "-1"]])
def test_bad_arguments_are_refused(argv):
    with pytest.raises(SystemExit):
        bench_iterator_teardown.arguments(argv)
