"""benchmarks/bench_eval.py: the methods that force either path give the metrics tfdml gives
(no timing is asserted)."""

import importlib.util
import os

import pytest

from tfdml import kernels

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("bench_eval", os.path.join(ROOT, "benchmarks", "bench_eval.py"))
bench_eval = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_eval)


def test_counting_and_sorting_methods_agree():
    table = dict(kernels.CHOICES["CPU"])
    x, labels = bench_eval._data(400, 4, 8)  # classes of ~100: sorted by default (few pairs)
    got = {m: bench_eval._compute(m, x, labels, 8, chunk_size=64, ks=(1, 10))
           for m in ("tfdml_count", "tfdml_sort", "tfdml")}
    assert got["tfdml_count"] == got["tfdml_sort"] == got["tfdml"]
    assert got["tfdml"]["num_queries"] == 400
    assert 0 < got["tfdml"]["map@r"] < 1
    assert kernels.CHOICES["CPU"] == table  # each method's form is chosen for its call only


def test_classes_option_reaches_the_child(monkeypatch):
    seen = {}

    class Done(Exception):
        pass

    def fake_run(cmd, **kwargs):
        seen["cmd"] = cmd
        raise Done

    monkeypatch.setattr(bench_eval.subprocess, "run", fake_run)
    with pytest.raises(Done):
        bench_eval.main(["--sizes", "500", "--classes", "7", "--methods", "tfdml_sort"])
    assert seen["cmd"][seen["cmd"].index("--classes") + 1] == "7"
    assert "tfdml_sort" in seen["cmd"]
