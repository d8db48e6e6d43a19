"""benchmarks/bench_ordering.py runs end to end on small sizes and prints one row per size
with every contender (its own check that the network forms equal the graph form passes).
No time is asserted."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_prints_a_row_per_size_with_every_column():
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "bench_ordering.py"), "--sizes", "5,33",
         "--runs", "1", "--warmup", "0"],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": ROOT},
    ).stdout
    rows = [line for line in out.splitlines() if line.startswith("| 5 |") or line.startswith("| 33 |")]
    assert len(rows) == 2
    assert all(len(row.strip("|").split("|")) == 6 for row in rows)  # N, four contenders, the ratio
    assert "disagrees" not in out
