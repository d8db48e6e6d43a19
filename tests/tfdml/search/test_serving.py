"""tfdml.search.export_lookup: a SavedModel that answers like the index, with TensorFlow alone."""

import os

import numpy as np
import pytest

from tfdml.search import Index


_TF_ONLY = r"""
import sys
sys.path.append(sys.argv[1])  # site-packages only: no .pth files, so no editable tfdml
try:
    import tfdml
    raise SystemExit("tfdml is importable: the test would not show TensorFlow alone suffices")
except ImportError:
    pass
import numpy as np
import tensorflow as tf
lookup = tf.saved_model.load(sys.argv[2])
x = np.load(sys.argv[3])
out = lookup.lookup(tf.constant(x))
serving = lookup.signatures["serving_default"](inputs=tf.constant(x))
assert out["ids"].dtype == tf.string, out["ids"].dtype
text = lambda t: np.char.decode(t.numpy().astype(bytes), "utf-8")
np.savez(sys.argv[4], ids=text(out["ids"]), distances=out["distances"].numpy(),
         is_match=out["is_match"].numpy(), embed=lookup.embed(tf.constant(x)).numpy(),
         serving_ids=text(serving["ids"]))
"""


def _model(seed=0):
    import keras

    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh"),
                             keras.layers.Dense(4)])


def test_export_lookup_runs_with_tensorflow_alone(tmp_path):
    import subprocess
    import sys
    import sysconfig

    import tensorflow as tf

    from tfdml.search import export_lookup

    model = _model()
    rng = np.random.default_rng(9)
    x = rng.standard_normal((40, 6)).astype(np.float32)
    queries = rng.standard_normal((7, 6)).astype(np.float32)
    ids = np.array([f"ü-{i}" for i in range(40)])
    index = Index("euclidean").add_model(model, tf.data.Dataset.from_tensor_slices(x).batch(16),
                                         ids=ids, verbose=0)
    want_ids, want_d = index.search(model(queries).numpy(), k=5)
    threshold = float(np.median(want_d[:, 0]))
    path = export_lookup(model, index, tmp_path / "lookup", k=5, threshold=threshold)
    np.save(tmp_path / "q.npy", queries)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run(
        [sys.executable, "-I", "-S", "-c", _TF_ONLY, sysconfig.get_paths()["purelib"], path,
         str(tmp_path / "q.npy"), str(tmp_path / "out.npz")],
        check=True, cwd=tmp_path, env=env, timeout=300)
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_array_equal(out["ids"], want_ids)  # a string tensor, UTF-8
        np.testing.assert_array_equal(out["serving_ids"], want_ids)
        np.testing.assert_allclose(out["distances"], want_d, atol=1e-5)
        np.testing.assert_array_equal(out["is_match"], out["distances"] <= np.float32(threshold))
        assert 0 < out["is_match"][:, 0].sum() < 7
        np.testing.assert_allclose(out["embed"], model(queries).numpy(), atol=1e-6)


def test_export_lookup_int_ids_cosine_and_bad_input(tmp_path):
    import tensorflow as tf

    from tfdml.search import export_lookup

    model = _model(1)
    rng = np.random.default_rng(10)
    x, queries = rng.standard_normal((30, 6)), rng.standard_normal((5, 6))
    ids = np.arange(30, dtype=np.int64) + 2**62 + 1
    index = Index("cosine").add(model(x).numpy(), ids)
    export_lookup(model, index, tmp_path / "m", k=50)
    loaded = tf.saved_model.load(str(tmp_path / "m"))  # keep it: its variables live in it
    out = loaded.lookup(tf.constant(queries, tf.float32))
    want_ids, want_d = index.search(model(queries).numpy(), k=50)
    assert out["ids"].dtype == tf.int64 and out["ids"].shape == (5, 30)  # k capped at N
    np.testing.assert_array_equal(out["ids"].numpy(), want_ids)  # exact beyond 2**53
    np.testing.assert_allclose(out["distances"].numpy(), want_d, atol=1e-5)
    assert not out["is_match"].numpy().any()  # no threshold: nothing is declared a match
    export_lookup(model, index, tmp_path / "m", k=1)  # replaces the old export
    loaded = tf.saved_model.load(str(tmp_path / "m"))
    assert loaded.lookup(tf.constant(queries, tf.float32))["ids"].shape == (5, 1)
    assert sorted(os.listdir(tmp_path)) == ["m"]
    with pytest.raises(ValueError, match="dimension 4 but the index holds 3"):
        export_lookup(model, Index().add(np.eye(3), [1, 2, 3]), tmp_path / "x")
    with pytest.raises(ValueError, match="index is empty"):
        export_lookup(model, Index(), tmp_path / "x")
    assert sorted(os.listdir(tmp_path)) == ["m"]


@pytest.mark.parametrize("with_input", [True, False])
def test_export_lookup_of_a_reloaded_embedding_model_infers_its_input(tmp_path, with_input):
    """A model.keras of an EmbeddingModel, loaded back, has no ``inputs``: the
    lookup's input signature comes from its encoder (or its build shape)."""
    import keras
    import tensorflow as tf

    import tfdml
    from tfdml.search import export_lookup

    keras.utils.set_random_seed(3)
    layers = [keras.layers.Dense(4)]
    encoder = keras.Sequential(([keras.Input((6,))] if with_input else []) + layers)
    model = tfdml.models.EmbeddingModel(encoder)
    rng = np.random.default_rng(12)
    x = rng.standard_normal((10, 6)).astype(np.float32)
    model(x[:2])
    model.save(tmp_path / "model.keras")
    loaded = tfdml.load_model(tmp_path / "model.keras")
    assert getattr(loaded, "inputs", None) is None
    index = Index().add(loaded(x).numpy(), np.arange(10))
    export_lookup(loaded, index, tmp_path / "lookup", k=3, threshold=float("inf"))
    served = tf.saved_model.load(str(tmp_path / "lookup"))  # keep a reference
    assert served.signatures["lookup"].structured_input_signature[1]["inputs"].shape.as_list() == [None, 6]
    got = served.lookup(tf.constant(x[:4]))
    np.testing.assert_array_equal(got["ids"].numpy(), index.search(loaded(x[:4]).numpy(), k=3)[0])
    with pytest.raises(ValueError, match="input_signature="):
        export_lookup(tfdml.models.EmbeddingModel(keras.Sequential(layers)), index, tmp_path / "x")


def test_no_threshold_never_matches_and_inf_matches_every_neighbour(tmp_path):
    """threshold=None (no threshold chosen, e.g. a failed calibration) makes
    is_match False everywhere, in Index.match and in the exported lookup alike;
    only an explicit float("inf") accepts every neighbour."""
    import tensorflow as tf

    from tfdml.search import export_lookup

    model = _model(2)
    rng = np.random.default_rng(11)
    x, queries = rng.standard_normal((12, 6)), rng.standard_normal((3, 6)).astype(np.float32)
    index = Index().add(model(x).numpy(), np.arange(12))
    e = model(queries).numpy()
    assert not index.match(e, None, k=4)[2].any()
    assert index.match(e, float("inf"), k=4)[2].all()
    with pytest.raises(ValueError, match="threshold.*NaN"):
        index.match(e, float("nan"))
    for threshold, want in ((None, False), (float("inf"), True)):
        export_lookup(model, index, tmp_path / "m", k=4, threshold=threshold)
        loaded = tf.saved_model.load(str(tmp_path / "m"))  # keep a reference
        assert (loaded.lookup(tf.constant(queries))["is_match"].numpy() == want).all()
    with pytest.raises(ValueError, match="threshold.*NaN"):
        export_lookup(model, index, tmp_path / "m", threshold=float("nan"))
