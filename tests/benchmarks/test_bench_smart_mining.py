"""benchmarks/bench_smart_mining.py: tiny runs time every stage of a refresh and report the
approximate tables' recall (no timing is asserted: the figures depend on the machine)."""

import importlib.util
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))  # machine.py
_spec = importlib.util.spec_from_file_location("bench_smart_mining",
                                               os.path.join(ROOT, "benchmarks", "bench_smart_mining.py"))
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_tiny_random_run_prints_each_stage_and_recall(capsys):
    times, recall = bench.main(["--size", "400", "--classes", "40", "--k", "3", "--runs", "1"])
    assert sorted(times) == ["table exact", "table hnsw", "table ivf"]
    assert recall["exact"] == 1.0 and 0.0 <= recall["hnsw"] <= 1.0
    out = capsys.readouterr().out
    assert "Machine:" in out and "400 random" in out
    # a Markdown table, so that --record has something to record
    assert "| table exact |" in out and "| table hnsw |" in out and "| stage, 400 examples |" in out
    import results_tables

    assert "| table ivf |" in results_tables.render_run("python benchmarks/bench_smart_mining.py", out)


def test_tiny_image_split_is_embedded_first():
    images = np.random.default_rng(0).random((60, 32, 32, 1)).astype(np.float32)
    times, recall = bench.refresh_times(images, np.arange(60) % 6, k=2, kinds=["exact"], runs=1)
    assert sorted(times) == ["embed", "table exact"] and recall == {"exact": 1.0}
