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

Small distances are accurate when the batch is nearly collapsed (all embeddings
close to one point, as early in training): the squared distance is expanded
around the batch mean rather than around the origin, see
:func:`pairwise_squared_euclidean`.
"""

import tensorflow as tf

from tfdml import distance_names
from tfdml.distance_names import DISTANCES  # noqa: F401 (re-exported: the one table of names)
from tfdml.primitives import expanded_squared_distances, squared_norms

_SQRT_THRESHOLD = 1e-12


def _as_float(x):
    x = tf.convert_to_tensor(x)
    if not x.dtype.is_floating:
        x = tf.cast(x, tf.float32)
    return x


def _centre(a):
    """The mean of the finite rows of ``a``, as a constant (no gradient).

    Distances do not depend on the point they are measured from, so the centre
    is only a numerical device and carries no gradient (the exact derivative of
    every distance with respect to it is 0). Rows holding NaN or Inf are left
    out, so that one diverged embedding does not turn every distance into NaN;
    half-precision inputs are summed in float32 so that large batches cannot
    overflow.
    """
    acc = tf.float32 if a.dtype in (tf.float16, tf.bfloat16) else a.dtype
    x = tf.cast(a, acc)
    finite = tf.reduce_all(tf.math.is_finite(x), axis=-1, keepdims=True)
    total = tf.reduce_sum(tf.where(finite, x, tf.zeros_like(x)), axis=0)
    count = tf.reduce_sum(tf.cast(finite, acc))
    return tf.stop_gradient(tf.cast(tf.math.divide_no_nan(total, count), a.dtype))


#: float32 entries whose first-order error bound exceeds 1/_REFINE_FACTOR of the
#: value are recomputed in float64 (see pairwise_squared_euclidean).
_REFINE_FACTOR = 64.0


def pairwise_squared_euclidean(a, b=None, *, centre=True, b_squared_norms=None):
    """``D_ij² = ||a_i - b_j||²`` for all i, j (Wu et al. 2017 §3, D_ij squared).

    Computed as ``|u_i|² + |v_j|² - 2 u_i·v_j`` (one matmul), clipped at 0,
    where ``u = a - c`` and ``v = b - c`` are the rows measured from ``c``, the
    mean of the finite rows of ``a`` (see :func:`_centre`). ``b`` defaults to
    ``a``; with ``b = a`` the diagonal is exactly 0. ``centre=False`` expands
    around the origin instead (``c = 0``), for callers that have centred the
    data once themselves, e.g. a retrieval gallery searched by chunks of
    queries (:mod:`tfdml.metrics.knn`), where centring every chunk would cost
    a pass over the whole gallery each time.

    Why the centre: the expansion cancels terms of size ``|u|²`` to leave
    ``D²``, so its rounding error is proportional to ``|u_i|² + |v_j|²``. Around
    the origin, two unit vectors 1e-4 apart (``D² = 1e-8``) come out at exactly
    0 in float32 (error about 1e-7 against 1e-8). Around the batch mean, a
    nearly collapsed batch has ``|u|`` of the order of its spread and keeps
    float32 accuracy.

    Error bound, first order in the unit roundoff ``ε`` (half the machine
    epsilon: ``2^-24`` in float32, ``2^-53`` in float64), for any summation
    order, embedding size ``d``::

        |D̂_ij² - D_ij²| <= (2d + 3) ε (|u_i|² + |v_j|²) + 2ε D_ij²
        |D̂_ij - D_ij| / D_ij <= (2d + 3) ε (|u_i|² + |v_j|²) / D_ij² + 3ε

    For example, 64 unit vectors within 1e-4 of a common unit vector, d = 128
    (pairs about 1.4e-4 apart): bound 2.4e-5, measured error 2e-7, where the
    expansion around the origin returns 0 or is off by up to 640 %.

    The centre does not help embeddings close to each other but far from the
    batch mean, such as a near-duplicate pair (or a tight cluster) in an
    otherwise spread-out batch of unit vectors, for which ``|u| ≈ 1``. So, for
    float32 input with ``centre=True``, a batch with an entry whose bound above
    exceeds ``1/64`` of its value (``D_ij² < 64 (2d + 3) ε (|u_i|² + |v_j|²)``:
    for unit vectors in 128 dimensions, a pair closer than about 0.04) is
    recomputed by the same expansion in float64 (``ε = 2^-53``), from the
    inputs themselves, and rounded to float32. The float64 matmul runs only in
    such a batch (``tf.cond``); it costs about 2 times the float32 matrix on
    CPU (benchmarks/RESULTS.md). Half-precision inputs are not refined. The bound
    assumes the matmul runs in the input dtype; TensorFloat-32 matmuls on GPUs
    have ``ε = 2^-11``.
    """
    a = _as_float(a)
    same = b is None
    b = a if same else tf.cast(b, a.dtype)
    if b_squared_norms is not None and (centre or same):
        raise ValueError("b_squared_norms is only used with centre=False and a separate b: "
                         "centring moves the rows, so their norms would no longer apply.")
    c = _centre(a) if centre else None
    d2, sq_u, sq_v = _expansion(a, b, c, same, b_squared_norms)
    if centre and d2.dtype == tf.float32:
        dim = tf.cast(tf.shape(a)[-1], tf.float32)
        bound = (2.0 * dim + 3.0) * 2.0**-24 * (sq_u[:, None] + sq_v[None, :])
        inaccurate = d2 < _REFINE_FACTOR * bound
        if same:
            inaccurate = tf.logical_and(inaccurate, tf.logical_not(tf.eye(tf.shape(d2)[0], dtype=tf.bool)))

        def refined():  # the whole matrix: a where over both would cost more
            wide = _expansion(tf.cast(a, tf.float64), tf.cast(b, tf.float64), tf.cast(c, tf.float64), same)[0]
            return tf.cast(wide, tf.float32)

        d2 = tf.cond(tf.reduce_any(inaccurate), refined, lambda: d2)
    if same:
        # A mask, not tf.linalg.set_diag: the gradient of set_diag builds its
        # zero diagonal from a tf.cond over the shape when the batch size is
        # not static, which XLA (jit_compile) cannot compile.
        diagonal = tf.eye(tf.shape(d2)[0], dtype=tf.bool)
        d2 = tf.where(diagonal, tf.zeros_like(d2), d2)
    return d2


def _expansion(a, b, c, same, sq_v=None):
    """``(|u|² + |v|² - 2 u·v clipped at 0, |u|², |v|²)`` with ``u = a - c``, ``v = b - c``
    (``sq_v``: the norms of ``v`` when the caller has them)."""
    u = a if c is None else a - c
    v = u if same else (b if c is None else b - c)
    sq_u = squared_norms(u)
    if sq_v is None:
        sq_v = sq_u if same else squared_norms(v)
    else:
        sq_v = tf.cast(sq_v, u.dtype)
    return expanded_squared_distances(u, v, sq_u, sq_v), sq_u, sq_v


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
    """True when larger values mean closer (cosine), False for distances
    (a name: :func:`tfdml.distance_names.is_similarity`; a function: is it cosine)."""
    if isinstance(name, str):
        get(name)  # unknown names raise, naming the choices
        return distance_names.is_similarity(name)
    return get(name) is cosine_similarity


def get(name):
    """The pairwise function named ``name`` (one of :data:`DISTANCES`), or ``name`` if callable."""
    if callable(name):
        return name
    return _FUNCTIONS[distance_names.check(name)]


def pairwise(embeddings, other=None, distance="euclidean"):
    """The [N, M] matrix of ``distance`` between rows of ``embeddings`` and ``other``."""
    return get(distance)(embeddings, other)
