"""benchmarks/bench_lookup.py: a tiny run loads the exported lookup back and times it and
Index.search at every batch size (no timing is asserted: the figures depend on the machine)."""

import importlib.util
import os
import sys


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))  # machine.py, timing.py
_spec = importlib.util.spec_from_file_location("bench_lookup", os.path.join(ROOT, "benchmarks", "bench_lookup.py"))
bench_lookup = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_lookup)


def test_tiny_run_prints_one_figure_per_batch_size(capsys):
    times = bench_lookup.main(["--size", "300", "--batches", "1", "5", "--runs", "2", "--warmup", "1"])
    assert sorted(times) == [("Index.search", 1), ("Index.search", 5), ("lookup", 1), ("lookup", 5)]
    assert all(t > 0 for t in times.values())
    out = capsys.readouterr().out
    assert "Machine:" in out and out.count("batch=    1") == 2 and out.count("batch=    5") == 2


def test_k_larger_than_the_gallery_is_capped_not_an_error():
    times = bench_lookup.lookup_times(size=4, batches=[2], k=10, runs=1, warmup=0)
    assert sorted(times) == [("Index.search", 2), ("lookup", 2)]
