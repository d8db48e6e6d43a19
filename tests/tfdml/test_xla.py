"""tfdml.xla: is_compiling (the mode a sampler or loss is traced for) and count_at_least."""

import numpy as np
import pytest
import tensorflow as tf

from tfdml import xla


def _seen(fn, *args):
    seen = []

    def probe(x):
        seen.append(xla.is_compiling())
        return x + 1

    fn(probe)(*args)
    return seen


def test_false_eagerly_and_in_graph_mode():
    assert _seen(lambda f: f, tf.constant(1.0)) == [False]
    assert _seen(lambda f: tf.function(f), tf.constant(1.0)) == [False]
    assert _seen(lambda f: tf.function(f, jit_compile=False), tf.constant(1.0)) == [False]


def test_true_under_jit_compile_also_nested():
    assert _seen(lambda f: tf.function(f, jit_compile=True), tf.constant(1.0)) == [True]
    # a plain tf.function called from a compiled one is compiled with it
    assert _seen(lambda f: tf.function(lambda x: tf.function(f)(x), jit_compile=True), tf.constant(1.0)) == [True]
    # a compiled function called from a plain one
    assert _seen(lambda f: tf.function(lambda x: tf.function(f, jit_compile=True)(x)), tf.constant(1.0)) == [True]


# count_at_least: counts per row of values >= each threshold, against NumPy's comparisons.

MODES = {
    "eager": lambda f: f,
    "graph": lambda f: tf.function(f),
    "xla": lambda f: tf.function(f, jit_compile=True),
}


def _reference(values, thresholds):
    return np.sum(values[:, None, :] >= thresholds[:, :, None], axis=2)


def _values_and_thresholds(rows, n, width, seed=0):
    rng = np.random.default_rng(seed)
    values = np.round(rng.standard_normal((rows, n)), 1).astype(np.float32)  # ties
    thresholds = values[np.arange(rows)[:, None], rng.integers(0, n, (rows, width))]
    thresholds[:, ::3] = np.round(rng.standard_normal((rows, len(range(0, width, 3)))), 1)
    return values, thresholds


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("width", [1, 5, xla.COUNT_GROUP, xla.COUNT_GROUP + 1, 2 * xla.COUNT_GROUP + 3])
def test_count_at_least_equals_numpy(mode, width):
    values, thresholds = _values_and_thresholds(7, 301, width)
    got = MODES[mode](xla.count_at_least)(tf.constant(values), tf.constant(thresholds))
    assert got.dtype == tf.int32
    np.testing.assert_array_equal(got.numpy(), _reference(values, thresholds))


@pytest.mark.parametrize("mode", MODES)
def test_count_at_least_edge_values(mode):
    """±0 are equal, ±inf thresholds reach all or none, a NaN value reaches nothing
    and a NaN threshold is reached by nothing (IEEE comparisons: the same on every CPU)."""
    inf, nan = np.inf, np.nan
    values = np.array([[-0.0, 0.0, 1.0, -inf, inf, nan], [2.0, 2.0, 2.0, 1.0, nan, -1.0]], np.float32)
    thresholds = np.array([[0.0, -0.0, inf, -inf, nan], [2.0, inf, -inf, 1.5, -1.0]], np.float32)
    got = MODES[mode](xla.count_at_least)(tf.constant(values), tf.constant(thresholds))
    np.testing.assert_array_equal(got.numpy(), [[4, 4, 1, 5, 0], [3, 0, 5, 3, 5]])
    np.testing.assert_array_equal(got.numpy(), _reference(values, thresholds))


def test_count_at_least_is_one_variadic_reduction_per_group_under_xla():
    values, thresholds = _values_and_thresholds(3, 50, xla.COUNT_GROUP + 1)
    args = (tf.constant(values), tf.constant(thresholds))
    ops = [op.type for op in tf.function(xla.count_at_least, jit_compile=True)
           .get_concrete_function(*args).graph.get_operations()]
    assert ops.count("XlaVariadicReduceV2") == 2
    ops = [op.type for op in tf.function(xla.count_at_least).get_concrete_function(*args).graph.get_operations()]
    assert "XlaVariadicReduceV2" not in ops  # no kernel outside XLA


def test_count_at_least_without_the_xla_op(monkeypatch):
    """A TensorFlow without tf2xla's Python ops: one reduction per threshold, same counts."""
    monkeypatch.setattr(xla, "_tf2xla", None)
    values, thresholds = _values_and_thresholds(4, 80, 9)
    fn = tf.function(lambda v, t: xla.count_at_least(v, t), jit_compile=True)
    args = (tf.constant(values), tf.constant(thresholds))
    assert "XlaVariadicReduceV2" not in [op.type for op in fn.get_concrete_function(*args).graph.get_operations()]
    np.testing.assert_array_equal(fn(*args).numpy(), _reference(values, thresholds))


def test_count_at_least_shapes():
    assert xla.count_at_least(tf.zeros([3, 4]), tf.zeros([3, 0])).shape == (3, 0)
    unknown = tf.function(lambda v, t: xla.count_at_least(v, t),
                          input_signature=[tf.TensorSpec([None, None]), tf.TensorSpec([None, None])])
    with pytest.raises(ValueError, match="static number of thresholds"):
        unknown.get_concrete_function()
    # an unknown number of rows and values is fine under XLA
    fn = tf.function(lambda v, t: xla.count_at_least(v, t), jit_compile=True,
                     input_signature=[tf.TensorSpec([None, None]), tf.TensorSpec([None, 2])])
    values, thresholds = _values_and_thresholds(5, 33, 2)
    np.testing.assert_array_equal(fn(tf.constant(values), tf.constant(thresholds)).numpy(),
                                  _reference(values, thresholds))
