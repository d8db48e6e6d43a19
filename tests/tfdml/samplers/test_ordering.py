"""The stable row order (graph form and XLA's sorting network) against NumPy's stable
``lexsort`` of (key, not first, column): ties, −0.0 / +0.0, infinities, widths that are
and are not powers of two, a width unknown while tracing, half and double precision."""

import numpy as np
import pytest
import tensorflow as tf

from tfdml.kernels import chosen


def _reference(keys, first):
    """Row by row: columns by (key, not first, column); −0.0 is +0.0 (NumPy's < already
    treats them as equal; the + 0.0 makes that explicit)."""
    keys = np.asarray(keys, np.float64) + 0.0
    columns = np.arange(keys.shape[1])
    tie = np.where(first, columns, keys.shape[1] + columns)
    return np.stack([np.lexsort((t, k)) for k, t in zip(keys, tie)]).reshape(keys.shape).astype(np.int32)


def _keys(rows, cols, seed):
    """Quantised keys (many ties) with some −0.0, +0.0, ±inf and negative values."""
    rng = np.random.default_rng(seed)
    keys = np.round(rng.uniform(-1.0, 2.0, size=(rows, cols)) * 4) / 4  # steps of 0.25: ties
    specials = np.array([-0.0, 0.0, np.inf, -np.inf, -0.25, 1e-30, -1e-30], np.float64)
    where = rng.random((rows, cols)) < 0.2
    keys[where] = rng.choice(specials, size=int(where.sum()))
    return keys.astype(np.float32), rng.random((rows, cols)) < 0.6


def _run(mode, keys, first):
    if mode == "graph":
        return tf.function(chosen.stable_order)(keys, first)
    if mode == "eager":
        return chosen.stable_order(keys, first)
    if mode == "xla":
        return tf.function(chosen.stable_order, jit_compile=True)(keys, first)
    # "xla_unknown": the width (and row count) unknown while tracing: the looped network
    spec = [tf.TensorSpec([None, None], keys.dtype), tf.TensorSpec([None, None], tf.bool)]
    return tf.function(chosen.stable_order, jit_compile=True, input_signature=spec)(keys, first)


MODES = ("eager", "graph", "xla", "xla_unknown")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 2), (4, 5), (7, 64), (5, 100), (9, 257), (1, 0)])
def test_stable_order_matches_lexsort(mode, rows, cols):
    keys, first = _keys(rows, cols, seed=rows * 1000 + cols)
    np.testing.assert_array_equal(_run(mode, tf.constant(keys), tf.constant(first)).numpy(), _reference(keys, first))


@pytest.mark.parametrize("mode", MODES)
def test_without_first_ties_keep_index_order(mode):
    keys = np.array([[0.5, -0.0, 0.5, 0.0, -1.0, 0.5]], np.float32)
    expected = [[4, 1, 3, 0, 2, 5]]  # −0.0 and +0.0 tie: columns 1, 3 in index order
    if mode == "eager":
        got = chosen.stable_order(keys)
    else:
        spec = [tf.TensorSpec([None, None], tf.float32)] if mode == "xla_unknown" else None
        f = tf.function(lambda k: chosen.stable_order(k), jit_compile=mode.startswith("xla"), input_signature=spec)
        got = f(tf.constant(keys))
    np.testing.assert_array_equal(got.numpy(), expected)


@pytest.mark.parametrize("mode", ("graph", "xla", "xla_unknown"))
@pytest.mark.parametrize("dtype", (tf.float16, tf.bfloat16, tf.float64))
def test_other_precisions(mode, dtype):
    """Half precisions widen exactly into the packed form; float64 keeps XLA's sort under
    XLA. Keys 1 + 2⁻³⁰ and 1 differ only in float64: a cast to float32 would tie them."""
    keys, first = _keys(6, 33, seed=5)
    keys = keys.astype(np.float64)
    if dtype == tf.float64:
        keys[:, 3] = 1.0 + 2.0**-30
        keys[:, 4] = 1.0
    else:
        keys = tf.cast(tf.constant(keys), dtype).numpy().astype(np.float64)  # the values the dtype holds
    got = _run(mode, tf.cast(tf.constant(keys), dtype), tf.constant(first))
    np.testing.assert_array_equal(got.numpy(), _reference(keys, first))


def test_network_under_xla_and_tensorflows_sort_outside():
    """The form depends on the mode (the XLA form has no Sort op in its graph)."""

    def ops(jit):
        f = tf.function(lambda k, m: chosen.stable_order(k, m), jit_compile=jit)
        graph = f.get_concrete_function(tf.TensorSpec([4, 8], tf.float32), tf.TensorSpec([4, 8], tf.bool)).graph
        return {op.type for op in graph.get_operations()}

    assert "TopKV2" in ops(False) or "Sort" in ops(False)
    assert not {"TopKV2", "Sort"} & ops(True)
