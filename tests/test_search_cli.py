"""search.py: build an index from a model and an image folder, query it, draw the grid."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdml_app import commands, search_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def folder_and_model(tmp_path_factory):
    """Two classes of 6×6 RGB images, dark and bright, and a model whose
    embedding is the mean colour: the nearest images share the class."""
    root = tmp_path_factory.mktemp("search")
    rng = np.random.default_rng(0)
    for cname, base in (("dark", 30), ("bright", 220)):
        (root / "images" / cname).mkdir(parents=True)
        for k in range(4):
            pixels = np.clip(base + rng.integers(-20, 20, size=(6, 6, 3)), 0, 255).astype(np.uint8)
            tf.io.write_file(str(root / "images" / cname / f"{k}.png"), tf.io.encode_png(pixels))
    inputs = keras.Input((6, 6, 3))
    model = keras.Model(inputs, keras.layers.GlobalAveragePooling2D()(inputs))
    path = str(root / "model.keras")
    model.save(path)
    return root, path


def test_build_query_and_grid(folder_and_model, capsys):
    root, model = folder_and_model
    index = str(root / "index.npz")
    assert search_cli.main(["build", "--model", model, "--images", str(root / "images"), "--out", index]) == 0
    assert "8 images" in capsys.readouterr().out
    query = str(root / "images" / "dark" / "0.png")
    grid = str(root / "grid.png")
    assert search_cli.main(["query", "--index", index, "--model", model, query, "-k", "3", "--grid", grid]) == 0
    lines = capsys.readouterr().out.splitlines()
    # A single image's class is the folder holding it, a class of the index.
    assert lines[0] == f"{query}  [class dark: 3 of 3 neighbours share it]"
    # The query itself first (distance 0), then the other dark images.
    ranked = [line.split() for line in lines[1:4]]
    assert ranked[0][1] == "0.0000" and ranked[0][2] == os.path.join("dark", "0.png")
    assert all(r[2].startswith("dark") and r[3:] == ["same", "class"] for r in ranked)
    assert os.path.getsize(grid) > 0
    assert search_cli.main(["describe", index]) == 0


def test_query_marks_the_neighbours_of_the_query_class(folder_and_model, capsys, monkeypatch):
    """A folder of queries in class sub-folders: each neighbour is marked as of
    the query's class or another (named), in the text and in the grid's colours."""
    from tfdml import plots

    root, model = folder_and_model
    index = str(root / "index.npz")
    search_cli.main(["build", "--model", model, "--images", str(root / "images"), "--out", index])
    drawn = {}
    monkeypatch.setattr(plots, "retrieval_grid", lambda *a, **kw: drawn.update(correct=a[2]))
    capsys.readouterr()
    assert search_cli.main(["query", "--index", index, "--model", model, str(root / "images"), "-k", "5",
                            "--grid", str(root / "g.png")]) == 0
    lines = capsys.readouterr().out.splitlines()
    # 8 queries × (header + 5 neighbours), then "Wrote": 4 of each class; 4 same, 1 other each.
    headers = lines[0:48:6]
    assert all(h.endswith("[class bright: 4 of 5 neighbours share it]") for h in headers[:4])
    assert all(h.endswith("[class dark: 4 of 5 neighbours share it]") for h in headers[4:])
    rows = [lines[i + 1:i + 6] for i in range(0, 48, 6)]
    assert all(r[-1].endswith("other class: dark") for r in rows[:4])
    assert all(r[-1].endswith("other class: bright") for r in rows[4:])
    assert all(line.endswith("same class") for r in rows for line in r[:4])
    want = np.zeros((8, 5), bool)
    want[:, :4] = True
    np.testing.assert_array_equal(drawn["correct"], want)


def test_describe_reports_every_bad_file_and_goes_on(tmp_path, capsys):
    from tfdml.search import Index

    good = Index().add(np.eye(2), [1, 2]).save(str(tmp_path / "good.npz"))
    (tmp_path / "sub").mkdir()
    Index().add(np.eye(3), ["a", "b", "c"]).save(str(tmp_path / "sub" / "other.npz"))
    (tmp_path / "sub" / "cut.npz").write_bytes(open(good, "rb").read()[:50])
    missing = str(tmp_path / "missing.npz")
    capsys.readouterr()
    assert search_cli.main(["describe", missing, good, str(tmp_path / "sub")]) == 2
    out, err = capsys.readouterr()
    assert "missing.npz" in err and "cut.npz" in err and "Traceback" not in err
    assert "good.npz: 2 entries" in out and "other.npz: 3 entries" in out  # after the bad ones
    assert out.splitlines()[-1] == "4 index files: 2 ok, 2 bad"
    assert search_cli.main(["describe", good]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 index file: 1 ok"


def test_clear_errors(folder_and_model, tmp_path, capsys):
    root, model = folder_and_model
    assert search_cli.main(["query", "--index", str(tmp_path / "none.npz"), "--model", model,
                            str(root / "images")]) == 2
    err = capsys.readouterr().err
    assert f"{commands.name('search')}: error:" in err and "Traceback" not in err
    (tmp_path / "empty").mkdir()
    assert search_cli.main(["build", "--model", model, "--images", str(tmp_path / "empty"),
                            "--out", str(tmp_path / "i.npz")]) == 2
    assert "holds no images" in capsys.readouterr().err


def test_describe_prints_no_tensorflow_start_up_lines(tmp_path):
    """search.py imports TensorFlow through tfdml.startup.quiet_tensorflow_import: a
    sound file gives its description on stdout and nothing on stderr."""
    import subprocess
    import sys

    from tfdml.search import Index

    path = Index().add(np.eye(2), [1, 2]).save(str(tmp_path / "i.npz"))
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    done = subprocess.run([sys.executable, os.path.join(ROOT, "search.py"), "describe", path],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.splitlines()[-1] == "1 index file: 1 ok"
