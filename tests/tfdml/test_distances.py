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
