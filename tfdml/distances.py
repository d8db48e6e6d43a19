"""Pairwise distance and similarity matrices.

Every loss and sampler in tfdml starts from one of these [N, M] matrices.
Conventions follow Wu et al. 2017 §3: ``D_ij = ||f(x_i) - f(x_j)||`` (euclidean),
its square (FaceNet's ℓ2² triplet), and Lu et al. 2019 §3.1 cosine similarity
``s_ij = f_i·f_j / (||f_i|| ||f_j||)`` (larger means closer).

The euclidean distance has a finite gradient where two embeddings coincide:
``sqrt`` has an infinite derivative at 0, which turns a batch of identical
embeddings (normal at initialisation) into NaN gradients (keras-team/keras#9097).
Here the square root is taken only where the squared distance exceeds a tiny
threshold; below it the distance is exactly 0 and its gradient is 0.
"""

import tensorflow as tf

_SQRT_THRESHOLD = 1e-12

DISTANCES = ("euclidean", "squared_euclidean", "cosine")


def _as_float(x):
    x = tf.convert_to_tensor(x)
    if not x.dtype.is_floating:
        x = tf.cast(x, tf.float32)
    return x


def pairwise_squared_euclidean(a, b=None):
    """``||a_i - b_j||²`` for all i, j, as ``|a|² + |b|² - 2 a·b``, clipped at 0.

    ``b`` defaults to ``a``; with ``b = a`` the diagonal is exactly 0.
    """
    a = _as_float(a)
    same = b is None
    b = a if same else tf.cast(b, a.dtype)
    sq_a = tf.reduce_sum(tf.square(a), axis=-1)
    sq_b = tf.reduce_sum(tf.square(b), axis=-1)
    d2 = sq_a[:, None] + sq_b[None, :] - 2.0 * tf.matmul(a, b, transpose_b=True)
    d2 = tf.maximum(d2, 0.0)
    if same:
        # A mask, not tf.linalg.set_diag: the gradient of set_diag builds its
        # zero diagonal from a tf.cond over the shape when the batch size is
        # not static, which XLA (jit_compile) cannot compile.
        diagonal = tf.eye(tf.shape(d2)[0], dtype=tf.bool)
        d2 = tf.where(diagonal, tf.zeros_like(d2), d2)
    return d2


def safe_sqrt(x, threshold=_SQRT_THRESHOLD):
    """``sqrt(x)`` with value 0 and gradient 0 where ``x <= threshold``.

    The double ``where`` keeps the untaken branch away from ``sqrt(0)`` so that
    its infinite derivative never meets a zero cotangent (0 * inf = NaN).
    NaN inputs stay NaN (a diverged model must not look like a perfect one).
    """
    positive = tf.logical_or(x > threshold, tf.math.is_nan(x))
    return tf.where(positive, tf.sqrt(tf.where(positive, x, tf.ones_like(x))), tf.zeros_like(x))


def pairwise_euclidean(a, b=None):
    """``||a_i - b_j||`` for all i, j (Wu et al. 2017 §3, D_ij), gradient-safe at 0."""
    return safe_sqrt(pairwise_squared_euclidean(a, b))


def l2_normalize(x, axis=-1, epsilon=1e-12):
    """Unit-length rows; rows of zeros stay zero (no NaN)."""
    return tf.math.l2_normalize(_as_float(x), axis=axis, epsilon=epsilon)


def cosine_similarity(a, b=None):
    """``s_ij = a_i·b_j / (||a_i|| ||b_j||)`` (Lu et al. 2019 §3.1). Larger means closer."""
    a_n = l2_normalize(a)
    b_n = a_n if b is None else l2_normalize(tf.cast(b, a_n.dtype))
    return tf.matmul(a_n, b_n, transpose_b=True)


_FUNCTIONS = {
    "euclidean": pairwise_euclidean,
    "squared_euclidean": pairwise_squared_euclidean,
    "cosine": cosine_similarity,
}


def is_similarity(name):
    """True when larger values mean closer (cosine), False for distances."""
    return get(name) is cosine_similarity


def get(name):
    """The pairwise function named ``name`` (one of :data:`DISTANCES`), or ``name`` if callable."""
    if callable(name):
        return name
    try:
        return _FUNCTIONS[name]
    except KeyError:
        raise ValueError(
            f"Unknown distance {name!r}; choose one of {', '.join(DISTANCES)}."
        ) from None


def pairwise(embeddings, other=None, distance="euclidean"):
    """The [N, M] matrix of ``distance`` between rows of ``embeddings`` and ``other``."""
    return get(distance)(embeddings, other)
