"""search.py: build an index from a model and an image folder, query it, draw the grid."""

import importlib.util
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("search_cli", os.path.join(ROOT, "search.py"))
search_cli = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(search_cli)


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
    assert lines[0] == query
    # The query itself first (distance 0), then the other dark images.
    ranked = [line.split() for line in lines[1:4]]
    assert ranked[0][1] == "0.0000" and ranked[0][2] == os.path.join("dark", "0.png")
    assert all(r[2].startswith("dark") for r in ranked)
    assert os.path.getsize(grid) > 0
    assert search_cli.main(["describe", index]) == 0


def test_clear_errors(folder_and_model, tmp_path, capsys):
    root, model = folder_and_model
    assert search_cli.main(["query", "--index", str(tmp_path / "none.npz"), "--model", model,
                            str(root / "images")]) == 2
    err = capsys.readouterr().err
    assert "search.py: error:" in err and "Traceback" not in err
    (tmp_path / "empty").mkdir()
    assert search_cli.main(["build", "--model", model, "--images", str(tmp_path / "empty"),
                            "--out", str(tmp_path / "i.npz")]) == 2
    assert "holds no images" in capsys.readouterr().err
