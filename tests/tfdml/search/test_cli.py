"""``python -m tfdml.search`` (tfdml.search.cli): describe index files, flag damaged ones."""

import os

import numpy as np

from tfdml.search import Index


def test_the_command_line_describes_an_index_and_flags_a_damaged_one(tmp_path, capsys):
    from tfdml import search

    path = Index("cosine").add(np.eye(3), ["a", "b", "c"], labels=[1, 1, 2]).save(
        tmp_path / "i.npz")
    assert search.main([path]) == 0
    assert "3 entries, dim 3, distance cosine, str ids, labels: int64" in capsys.readouterr().out
    open(tmp_path / "cut.npz", "wb").write(open(path, "rb").read()[:100])
    assert search.main([path, str(tmp_path / "cut.npz")]) == 2
    assert "cut.npz" in capsys.readouterr().err


def test_python_dash_m_imports_the_module_once(tmp_path):
    """``python -m tfdml.search``: the package does not import tfdml.search
    itself, so runpy runs it once, without its "found in sys.modules" warning;
    ``tfdml.search`` still resolves on first use. TensorFlow is imported quietly:
    without TF_CPP_MIN_LOG_LEVEL in the environment, stderr stays empty."""
    import subprocess
    import sys

    path = Index().add(np.eye(2), [1, 2]).save(str(tmp_path / "i.npz"))
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONWARNINGS"] = "error::RuntimeWarning"
    done = subprocess.run([sys.executable, "-m", "tfdml.search", path], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and "1 index file: 1 ok" in done.stdout
    import tfdml

    assert tfdml.search.Index is Index
