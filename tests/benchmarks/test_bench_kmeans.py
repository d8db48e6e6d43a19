"""benchmarks/bench_kmeans.py: its embeddings and the table it prints (no timing is asserted)."""

import importlib.util
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("bench_kmeans", os.path.join(ROOT, "benchmarks", "bench_kmeans.py"))
bench_kmeans = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_kmeans)


def test_embeddings_are_normalised_clusters_of_every_class():
    x, labels = bench_kmeans.embeddings(90, 9, dim=16)
    assert x.shape == (90, 16) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-5)
    assert np.bincount(labels).tolist() == [10] * 9


def test_the_table_compares_the_two_calls_on_each_size(capsys):
    assert bench_kmeans.main(["--sizes", "300:6", "120:4", "--rounds", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "×" in line]
    assert [row.split(" | ")[:2] for row in rows] == [["| 300", "6"], ["| 120", "4"]]
    assert all(row.endswith(("| yes |", "| no |")) for row in rows)
