"""tfdml.xla: is_compiling (the mode a sampler or loss is traced for), opaque_to_constant_analysis.

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


def test_opaque_to_constant_analysis_is_the_identity_and_compiles_away():
    """Values and gradients pass unchanged, in graph mode and under XLA, and XLA's optimized
    program has no loop left (the zero-trip loop costs nothing at run time)."""
    import numpy as np
    import tensorflow as tf

    def f(x, labels):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y, same = xla.opaque_to_constant_analysis(tf.matmul(x, x, transpose_b=True),
                                                      tf.equal(labels[:, None], labels[None, :]))
            total = tf.reduce_sum(tf.where(same, y, 2.0 * y))
        return y, same, tape.gradient(total, x)

    x = tf.constant(np.random.default_rng(0).normal(size=(6, 3)).astype(np.float32))
    labels = tf.constant([1, 2, 1, 3, 2, 1])
    want = f(x, labels)  # eagerly: the loop runs as Python would
    for jit in (False, True):
        got = tf.function(f, jit_compile=jit)(x, labels)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    hlo = tf.function(f, jit_compile=True).experimental_get_compiler_ir(x, labels)(stage="optimized_hlo")
    assert "while" not in hlo.lower()
    assert xla.opaque_to_constant_analysis() == ()
