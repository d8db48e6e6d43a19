"""Lint: ruff (pyflakes, syntax errors, the line ceiling; config in pyproject.toml)
over the package, the data side, the tests, the benchmarks, the study and the top-level scripts."""

import glob
import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATHS = ["tfdml", "tfdml_app", "pipelines", "tests", "benchmarks", "study", "docs"] + sorted(
    os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "*.py")))


def test_ruff_finds_nothing():
    assert importlib.util.find_spec("ruff") is not None, 'ruff is not installed: pip install -e ".[test]"'
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", *PATHS],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
