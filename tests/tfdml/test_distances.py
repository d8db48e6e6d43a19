import numpy as np
import pytest
import tensorflow as tf

from tfdml import distances


def _brute(a, b, kind):
    out = np.zeros((len(a), len(b)))
    for i in range(len(a)):
        for j in range(len(b)):
            if kind == "euclidean":
                out[i, j] = np.linalg.norm(a[i] - b[j])
            elif kind == "squared_euclidean":
                out[i, j] = np.sum((a[i] - b[j]) ** 2)
            else:
                out[i, j] = a[i] @ b[j] / (np.linalg.norm(a[i]) * np.linalg.norm(b[j]))
    return out


@pytest.mark.parametrize("kind", distances.DISTANCES)
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_brute_force(kind, seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(7, 5)).astype("float32")
    b = rng.normal(size=(4, 5)).astype("float32")
    np.testing.assert_allclose(distances.pairwise(a, b, kind), _brute(a, b, kind), atol=1e-5)
    np.testing.assert_allclose(distances.pairwise(a, None, kind), _brute(a, a, kind), atol=1e-5)


def test_self_distance_diagonal_is_zero():
    a = np.random.default_rng(0).normal(size=(6, 3)).astype("float32") * 100
    d = distances.pairwise_euclidean(a).numpy()
    assert np.all(np.diag(d) == 0.0)


@pytest.mark.parametrize("kind", distances.DISTANCES)
def test_gradient_finite_for_identical_embeddings(kind):
    x = tf.Variable(tf.ones((4, 3)))
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(distances.pairwise(x, None, kind))
    grad = tape.gradient(total, x)
    assert np.all(np.isfinite(grad.numpy()))


@pytest.mark.parametrize("kind", distances.DISTANCES)
def test_xla_with_unknown_batch_size_equals_eager(kind):
    """Value and gradient under jit_compile when the batch size is unknown at trace
    time (a user's tf.data pipeline without drop_remainder). The gradient of
    tf.linalg.set_diag did not compile there (a tf.cond over the diagonal's shape)."""
    a = tf.constant(np.random.default_rng(3).normal(size=(6, 4)).astype("float32"))
    a = tf.concat([a, a[:1]], 0)  # a duplicate row: a zero off-diagonal distance too

    def value_and_grad(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            d = distances.pairwise(x, None, kind)
            total = tf.reduce_sum(d * tf.reshape(tf.range(tf.size(d), dtype=d.dtype), tf.shape(d)))
        return d, tape.gradient(total, x)

    spec = [tf.TensorSpec([None, 4], tf.float32)]
    compiled = tf.function(value_and_grad, input_signature=spec, jit_compile=True)(a)
    for c, e in zip(compiled, value_and_grad(a)):
        np.testing.assert_allclose(c.numpy(), e.numpy(), rtol=1e-5, atol=1e-5)
    if kind != "cosine":
        assert np.all(np.diag(compiled[0].numpy()) == 0.0)


def test_euclidean_gradient_matches_analytic_away_from_zero():
    a = tf.Variable([[0.0, 0.0], [3.0, 4.0]])
    with tf.GradientTape() as tape:
        d = distances.pairwise_euclidean(a)[0, 1]
    g = tape.gradient(d, a).numpy()
    np.testing.assert_allclose(g, [[-0.6, -0.8], [0.6, 0.8]], atol=1e-6)


def test_unknown_distance_names_the_choices():
    with pytest.raises(ValueError, match="euclidean"):
        distances.get("manhattan")


def test_nan_embeddings_give_nan_distances_not_zero():
    """A diverged model must not look perfect: NaN propagates through the safe sqrt."""
    a = np.array([[np.nan, 0.0], [1.0, 0.0]], dtype="float32")
    d = distances.pairwise_euclidean(a).numpy()
    assert np.isnan(d[0, 1]) and np.isnan(d[1, 0])
