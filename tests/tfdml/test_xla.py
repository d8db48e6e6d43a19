"""tfdml.xla: is_compiling (the mode a sampler or loss is traced for).

count_at_least and its forms: tests/tfdml/kernels/test_metrics_kernels.py.
"""

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
