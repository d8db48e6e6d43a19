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


# --- Accuracy of small distances -------------------------------
#
# The bounds below are the first-order worst-case rounding bounds stated in the
# docstring of distances.pairwise_squared_euclidean, written with the float32
# unit roundoff U = 2^-24 (half of float32's machine epsilon). They hold for any
# summation order (any BLAS, any CPU, with or without XLA) and are typically 10
# to 100 times larger than the errors actually seen (the worst case grows like
# d, the typical error like sqrt(d)); the extra factor 2 in the assertions
# covers second-order terms and the rounding of the batch mean itself. None of
# these tests needs a lucky rounding to pass; each fails on the old expansion
# around the origin, whose error is U·|a|² ≈ 6e-8 for unit vectors instead of
# U·|a - mean|².

U = 2.0**-24
MARGIN = 2.0


def _near_duplicates(spread, dim, size=64, seed=0):
    """``size`` float32 unit vectors within about ``spread`` of one common unit vector."""
    rng = np.random.default_rng(seed)
    centre = rng.normal(size=dim)
    centre /= np.linalg.norm(centre)
    step = rng.normal(size=(size, dim))
    step /= np.linalg.norm(step, axis=1, keepdims=True)
    x = centre + spread * step
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype("float32")


def _reference(a, b=None):
    """float64 D_ij, the centred norms |a_i - c|, |b_j - c| and the docstring's bound on |D̂ - D| / D."""
    a64 = a.astype(np.float64)
    b64 = a64 if b is None else b.astype(np.float64)
    c = a64.mean(axis=0)
    d = np.sqrt(np.sum((a64[:, None] - b64[None]) ** 2, axis=-1))
    na, nb = np.linalg.norm(a64 - c, axis=1), np.linalg.norm(b64 - c, axis=1)
    dim = a.shape[1]
    with np.errstate(divide="ignore"):
        rel_bound = (2 * dim + 3) * U * (na[:, None] ** 2 + nb[None] ** 2) / d**2 + 3 * U
    return d, na, nb, rel_bound


def _distance_fn(jit, b_given=False):
    if b_given:
        return tf.function(lambda x, y: distances.pairwise_euclidean(x, y), jit_compile=jit)
    return tf.function(lambda x: distances.pairwise_euclidean(x), jit_compile=jit)


def _assert_relative_error_within(got, d_ref, rel_bound):
    off = d_ref > 0
    rel = np.abs(got.astype(np.float64) - d_ref)[off] / d_ref[off]
    worst = np.argmax(rel / rel_bound[off])
    assert np.all(rel <= MARGIN * rel_bound[off]), (
        f"relative error {rel[worst]:.3g} above {MARGIN} × bound {rel_bound[off][worst]:.3g}"
    )


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_unit_vectors_1e4_apart_are_not_at_distance_zero(jit):
    """The reported case: |a|² + |b|² - 2a·b around the origin gives exactly 0 here."""
    a = _near_duplicates(1e-4, 128, size=2)
    d_ref, _, _, rel_bound = _reference(a)
    got = _distance_fn(jit)(tf.constant(a)).numpy()
    assert got[0, 1] > 0 and got[1, 0] > 0
    _assert_relative_error_within(got, d_ref, rel_bound)


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
@pytest.mark.parametrize("dim", [4, 128])
@pytest.mark.parametrize("spread", [1e-4, 1e-3, 1e-2])
def test_near_duplicate_batch_distances_match_float64(spread, dim, jit):
    a = _near_duplicates(spread, dim)
    d_ref, _, _, rel_bound = _reference(a)
    got = _distance_fn(jit)(tf.constant(a)).numpy()
    assert np.all(np.diag(got) == 0.0)
    _assert_relative_error_within(got, d_ref, rel_bound)
    if dim == 128:  # pairs about spread·√2 apart: a plain number for the reader
        assert np.max(rel_bound[d_ref > 0]) < 1e-4


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
@pytest.mark.parametrize("spread", [1e-4, 1e-2])
def test_near_duplicates_between_two_sets_match_float64(spread, jit):
    """With ``b`` given the centre is the mean of ``a``."""
    x = _near_duplicates(spread, 128)
    a, b = x[:40], x[40:]
    d_ref, _, _, rel_bound = _reference(a, b)
    got = _distance_fn(jit, b_given=True)(tf.constant(a), tf.constant(b)).numpy()
    _assert_relative_error_within(got, d_ref, rel_bound)


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
@pytest.mark.parametrize("dim", [4, 128])
@pytest.mark.parametrize("spread", [1e-4, 1e-3, 1e-2])
def test_near_duplicate_batch_gradient_matches_float64(spread, dim, jit):
    """d/da_i of sum_{i≠j} D_ij is sum_j 2 (a_i - a_j) / D_ij (every pair appears twice).

    First-order bound on row i, from the backward pass of the expansion (the
    cotangent 1/D̂_ij carries the distance's relative error; the row sums and
    the matmul by the [N, N] cotangent round at most (2N + 3) U relative to the
    terms |u_i| / D_ij and |u_j| / D_ij they add up)::

        |ĝ_i - g_i| <= sum_j 2 (rel_ij + 3U) + 2 (2N + 3) U (|u_i| + |u_j|) / D_ij
    """
    a = _near_duplicates(spread, dim)
    n = len(a)
    d_ref, na, _, rel_bound = _reference(a)
    a64 = a.astype(np.float64)
    off = ~np.eye(n, dtype=bool)
    inv = np.where(off, 1.0 / np.where(off, d_ref, 1.0), 0.0)
    want = 2.0 * (np.sum(inv, axis=1)[:, None] * a64 - inv @ a64)
    bound = np.sum(np.where(off, 2.0 * (rel_bound + 3 * U), 0.0), axis=1) + 2 * (2 * n + 3) * U * np.sum(
        (na[:, None] + na[None]) * inv, axis=1
    )

    @tf.function(jit_compile=jit)
    def grad(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            total = tf.reduce_sum(distances.pairwise_euclidean(x))
        return tape.gradient(total, x)

    got = grad(tf.constant(a)).numpy().astype(np.float64)
    err = np.linalg.norm(got - want, axis=1)
    worst = np.argmax(err / bound)
    assert np.all(err <= MARGIN * bound), f"row {worst}: error {err[worst]:.3g}, bound {bound[worst]:.3g}"
    assert np.linalg.norm(got - want) <= 1e-3 * np.linalg.norm(want)


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_unknown_batch_dimension(jit):
    a = _near_duplicates(1e-4, 128)
    d_ref, _, _, rel_bound = _reference(a)
    spec = tf.TensorSpec([None, 128], tf.float32)
    fn = tf.function(distances.pairwise_euclidean, input_signature=[spec], jit_compile=jit)
    got = fn(tf.constant(a)).numpy()
    assert got.shape == (64, 64)
    _assert_relative_error_within(got, d_ref, rel_bound)
    d_ref, _, _, rel_bound = _reference(a[:40], a[40:])
    fn = tf.function(distances.pairwise_euclidean, input_signature=[spec, spec], jit_compile=jit)
    got = fn(tf.constant(a[:40]), tf.constant(a[40:])).numpy()
    assert got.shape == (40, 24)
    _assert_relative_error_within(got, d_ref, rel_bound)


def test_float64_near_duplicates_use_float64_accuracy():
    a = _near_duplicates(1e-4, 128).astype("float64")
    d_ref, na, _, _ = _reference(a)
    got = distances.pairwise_euclidean(a).numpy()
    assert got.dtype == np.float64
    off = d_ref > 0
    rel_bound = (2 * 128 + 3) * 2.0**-53 * (na[:, None] ** 2 + na[None] ** 2) / np.where(off, d_ref, 1) ** 2
    assert np.all(np.abs(got - d_ref)[off] / d_ref[off] <= MARGIN * (rel_bound[off] + 3 * 2.0**-53))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int32"])
def test_dtype_behaviour_unchanged(dtype):
    """Floating inputs keep their dtype (half precision included); integers become float32."""
    rng = np.random.default_rng(0)
    a = np.round(rng.normal(size=(7, 5)) * 4)
    b = np.round(rng.normal(size=(4, 5)) * 4)
    want_dtype = tf.float32 if dtype == "int32" else tf.as_dtype(dtype)
    # Half precision computes in half precision, as before: 8 machine epsilons
    # relative (the distances here are all above 3; errors seen are below one
    # epsilon); integer inputs are exact in every dtype.
    rtol = {"float16": 8 * 2.0**-10, "bfloat16": 8 * 2.0**-7}.get(dtype, 1e-6)
    for other, ref in ((None, _brute(a, a, "euclidean")), (b, _brute(a, b, "euclidean"))):
        got = distances.pairwise_euclidean(
            tf.cast(a, dtype), None if other is None else tf.cast(other, dtype)
        )
        assert got.dtype == want_dtype
        np.testing.assert_allclose(tf.cast(got, tf.float64).numpy(), ref, rtol=rtol, atol=1e-9)


def test_nan_row_leaves_the_other_distances_accurate():
    """The centre skips non-finite rows: one diverged embedding poisons only its own row and column."""
    a = _near_duplicates(1e-4, 128)
    d_ref, _, _, rel_bound = _reference(a[1:])
    a[0, 3] = np.nan
    got = distances.pairwise_euclidean(a).numpy()
    assert np.all(np.isnan(got[0, 1:])) and np.all(np.isnan(got[1:, 0]))
    _assert_relative_error_within(got[1:, 1:], d_ref, rel_bound)


def test_centre_false_expands_around_the_origin_for_precentred_data():
    """``centre=False`` (knn centres a whole gallery once) is as accurate on centred data."""
    a = _near_duplicates(1e-4, 128)
    d_ref, _, _, rel_bound = _reference(a)
    c = a.astype(np.float64).mean(axis=0).astype(np.float32)
    d2 = distances.pairwise_squared_euclidean(a - c, centre=False).numpy()
    _assert_relative_error_within(np.sqrt(d2), d_ref, rel_bound)


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_precomputed_gallery_norms_give_the_same_distances(jit):
    """A chunked search passes the gallery's norms, computed once: the distances
    are those computed from the rows (same expression, so equal to rounding)."""
    rng = np.random.default_rng(2)
    a = rng.normal(size=(7, 16)).astype(np.float32)
    b = rng.normal(size=(40, 16)).astype(np.float32)
    norms = distances.squared_norms(tf.constant(b))
    np.testing.assert_allclose(norms.numpy(), np.sum(b.astype(np.float64) ** 2, axis=1), rtol=1e-6)
    fn = tf.function(lambda x, y, n: distances.pairwise_squared_euclidean(
        x, y, centre=False, b_squared_norms=n), jit_compile=jit)
    got = fn(a, b, norms).numpy()
    ref = np.sum((a[:, None].astype(np.float64) - b[None]) ** 2, axis=-1)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)
    # The norms given are the norms used: one more on each gives one more on every distance.
    # (Against float64, not ``got + 1``: that difference is at float32's rounding, on any CPU.)
    wrong = fn(a, b, norms + 1.0).numpy()
    np.testing.assert_allclose(wrong, ref + 1.0, rtol=1e-5, atol=1e-4)


def test_precomputed_norms_need_an_uncentred_separate_gallery():
    b = np.ones((3, 2), np.float32)
    with pytest.raises(ValueError, match="centre=False"):
        distances.pairwise_squared_euclidean(b, b, b_squared_norms=np.ones(3, np.float32))
    with pytest.raises(ValueError, match="centre=False"):
        distances.pairwise_squared_euclidean(b, centre=False, b_squared_norms=np.ones(3, np.float32))


def _spread_batch_with_near_duplicates(gap, dim=128, size=32, seed=0):
    """Random unit vectors (spread over the sphere) with pairs (0, 1), (2, 3)
    ``gap`` apart: close to each other, far from the batch mean."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(size, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    for i in (0, 2):
        step = rng.normal(size=dim)
        step -= step @ x[i] * x[i]
        x[i + 1] = x[i] + gap * step / np.linalg.norm(step)
        x[i + 1] /= np.linalg.norm(x[i + 1])
    return x.astype("float32")


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
@pytest.mark.parametrize("gap", [1e-4, 1e-3, 1e-2])
def test_near_duplicate_pairs_in_a_spread_batch_match_float64(gap, jit):
    """The case centring cannot help: a close pair far from
    the batch mean. Its entries are recomputed in float64; the value (1 %)
    and the gradient, d D_01 / d a_0 = (a_0 - a_1) / D_01, match float64."""
    a = _spread_batch_with_near_duplicates(gap)
    a64 = a.astype(np.float64)
    d_ref = np.sqrt(np.sum((a64[:, None] - a64[None]) ** 2, axis=-1))

    @tf.function(jit_compile=jit)
    def value_and_grad(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            d = distances.pairwise_euclidean(x)
            pair = d[0, 1]
        return d, tape.gradient(pair, x)

    got, grad = value_and_grad(tf.constant(a))
    got, grad = got.numpy(), grad.numpy()
    for i, j in ((0, 1), (2, 3)):
        assert got[i, j] > 0
        np.testing.assert_allclose(got[i, j], d_ref[i, j], rtol=1e-2)
    np.testing.assert_allclose(grad[0], (a64[0] - a64[1]) / d_ref[0, 1], rtol=2e-2, atol=1e-3)
    # The other (far) pairs keep float32 accuracy.
    off = ~np.eye(len(a), dtype=bool)
    np.testing.assert_allclose(got[off], d_ref[off], rtol=1e-5)
