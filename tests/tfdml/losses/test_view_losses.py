"""The losses of two views against brute-force NumPy references written from the papers:
NT-Xent (Chen et al. 2020 Eq. 1), SupCon (Khosla et al. 2020 Eq. 2, L^sup_out), VICReg
(Bardes et al. 2022 §3.1: s, v, c and ℓ) and Barlow Twins (Zbontar et al. 2021 Eq. 1, with
C of Eq. 2). Values and gradients (central finite differences of the reference, float64),
degenerate batches, XLA with an unknown batch size, serialisation; and each case tells the
equation from its near misses (a wrong formula fails it)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdml import losses

TOL = dict(rtol=1e-6, atol=1e-9)  # float64 losses against float64 references


# -- references (loops over the paper's indices) ---------------------------------------------
def np_unit(e):
    return np.array([row / np.linalg.norm(row) for row in np.asarray(e, np.float64)])


def np_nt_xent(e, tau, first, second):
    """Chen et al. Eq. 1: ℓ(i, j) = −log(exp(s_ij/τ) / Σ_{k≠i} exp(s_ik/τ)) with s the cosine
    similarity; the loss 1/(2N) Σ_k [ℓ(a_k, b_k) + ℓ(b_k, a_k)] over the N pairs (a_k, b_k)."""
    z = np_unit(e)
    n = len(z)

    def ell(i, j):
        den = sum(np.exp(z[i] @ z[k] / tau) for k in range(n) if k != i)
        return -np.log(np.exp(z[i] @ z[j] / tau) / den)

    return sum(ell(a, b) + ell(b, a) for a, b in zip(first, second)) / (2 * len(first))


def np_supcon(e, labels, tau, reduction="mean", self_in_denominator=False):
    """Khosla et al. Eq. 2, L^sup_out = Σ_i −1/|P(i)| Σ_{p∈P(i)} log(exp(z_i·z_p/τ) /
    Σ_{a∈A(i)} exp(z_i·z_a/τ)), A(i) = all but i, P(i) = A(i) of i's label; the mean over the
    anchors with a positive (or the sum). ``self_in_denominator``: a near miss."""
    z = np_unit(e)
    n = len(z)
    terms = []
    for i in range(n):
        positives = [p for p in range(n) if p != i and labels[p] == labels[i]]
        if not positives:
            continue
        den = sum(np.exp(z[i] @ z[a] / tau) for a in range(n) if a != i or self_in_denominator)
        terms.append(-sum(np.log(np.exp(z[i] @ z[p] / tau) / den) for p in positives) / len(positives))
    if not terms:
        return 0.0
    return float(np.sum(terms) if reduction == "sum" else np.mean(terms))


def np_pairs(ids):
    """(first, second) rows of each instance's views in batch order: members 1-2, 3-4, ..."""
    groups = {}
    for row, key in enumerate(ids):
        groups.setdefault(key, []).append(row)
    out = []
    for members in groups.values():
        out += [(members[r], members[r + 1]) for r in range(0, len(members) - 1, 2)]
    return sorted(out)


def np_cov(z, ddof=1):
    n, d = z.shape
    mean = [sum(z[i, j] for i in range(n)) / n for j in range(d)]
    c = np.zeros((d, d))
    for a in range(d):
        for b in range(d):
            c[a, b] = sum((z[i, a] - mean[a]) * (z[i, b] - mean[b]) for i in range(n)) / max(n - ddof, 1)
    return c


def np_vicreg(z, zp, lam=25.0, mu=25.0, nu=1.0, gamma=1.0, eps=1e-4, ddof=1, invariance_mean=False):
    """Bardes et al. §3.1: λ s + μ [v(Z) + v(Z')] + ν [c(Z) + c(Z')]. ``ddof=0`` (a biased
    variance) and ``invariance_mean`` (s / d) are near misses."""
    n, d = z.shape
    s = sum(sum((z[i, j] - zp[i, j]) ** 2 for j in range(d)) for i in range(n)) / n
    if invariance_mean:
        s /= d

    def v(m):
        c = np_cov(m, ddof)
        return sum(max(0.0, gamma - np.sqrt(c[j, j] + eps)) for j in range(d)) / d

    def c(m):
        cm = np_cov(m, ddof)
        return sum(cm[a, b] ** 2 for a in range(d) for b in range(d) if a != b) / d

    return lam * s + mu * (v(z) + v(zp)) + nu * (c(z) + c(zp))


def np_barlow(za, zb, lam=5e-3, centre=True):
    """Zbontar et al. Eq. 1 with C of Eq. 2 on batch-centred outputs; ``centre=False`` is a
    near miss."""
    n, d = za.shape
    if centre:
        za = za - za.mean(axis=0)
        zb = zb - zb.mean(axis=0)
    c = np.zeros((d, d))
    for i in range(d):
        for j in range(d):
            num = sum(za[b, i] * zb[b, j] for b in range(n))
            den = np.sqrt(sum(za[b, i] ** 2 for b in range(n)) + 1e-12) * np.sqrt(
                sum(zb[b, j] ** 2 for b in range(n)) + 1e-12)
            c[i, j] = num / den
    return sum((1 - c[i, i]) ** 2 for i in range(d)) + lam * sum(
        c[i, j] ** 2 for i in range(d) for j in range(d) if i != j)


def np_paired(reference, ids, **kw):
    """A loss of two views as the reference of its Z, Z' (first and second views)."""
    def f(e):
        pairs = np_pairs(list(ids))
        if not pairs:
            return 0.0
        first, second = zip(*pairs)
        return reference(e[list(first)], e[list(second)], **kw)
    return f


def fd_grad(f, e, h=1e-6):
    e = np.asarray(e, np.float64)
    g = np.zeros_like(e)
    for idx in np.ndindex(*e.shape):
        up, down = e.copy(), e.copy()
        up[idx] += h
        down[idx] -= h
        g[idx] = (f(up) - f(down)) / (2 * h)
    return g


def tf_value_and_grad(loss, y, e):
    e = tf.constant(e, tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(e)
        value = loss(y, e)
    return float(value), tape.gradient(value, e).numpy()


def check(loss, y, e, reference):
    value, grad = tf_value_and_grad(loss, y, e)
    np.testing.assert_allclose(value, reference(e), **TOL)
    np.testing.assert_allclose(grad, fd_grad(reference, e), rtol=1e-5, atol=1e-7)


# -- batches --------------------------------------------------------------------------------
def two_view_batch(instances=4, dim=5, seed=0, classes=None):
    """Rows [0, N) first views, [N, 2N) second views (the two-view design's layout)."""
    rng = np.random.default_rng(seed)
    ids = np.tile(np.arange(instances), 2).astype(np.int32)
    labels = (ids % 2 if classes is None else np.asarray(classes)[ids]).astype(np.int32)
    e = rng.normal(size=(2 * instances, dim))
    return {"label": labels, "example_id": ids}, e


# -- NT-Xent -------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("tau", [0.1, 0.5])
def test_nt_xent_is_chen_eq1_on_a_two_view_batch(seed, tau):
    y, e = two_view_batch(4, seed=seed)
    first, second = list(range(4)), list(range(4, 8))
    check(losses.NTXentLoss(temperature=tau, dtype="float64"), y, e, lambda x: np_nt_xent(x, tau, first, second))


def test_nt_xent_reads_instances_not_classes_and_plain_labels_are_instances():
    y, e = two_view_batch(3, seed=2, classes=[0, 0, 0])  # one class: SupCon would see 5 positives
    loss = losses.NTXentLoss(temperature=0.2, dtype="float64")
    expected = np_nt_xent(e, 0.2, [0, 1, 2], [3, 4, 5])
    np.testing.assert_allclose(float(loss(y, e)), expected, **TOL)
    order = np.random.default_rng(0).permutation(6)  # plain labels = instance ids, any order
    np.testing.assert_allclose(float(loss(y["example_id"][order], e[order])), expected, **TOL)


def test_nt_xent_single_pair_and_no_pair():
    loss = losses.NTXentLoss(dtype="float64")
    e = np.random.default_rng(3).normal(size=(2, 4))
    check(loss, np.array([7, 7]), e, lambda x: np_nt_xent(x, 0.1, [0], [1]))  # −log 1 = 0
    value, grad = tf_value_and_grad(loss, np.array([0, 1, 2]), e[[0, 1, 1]])
    assert value == 0.0 and np.all(grad == 0)


# -- SupCon --------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["mixed", "one_class"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_supcon_is_khosla_eq2(ref, case, reduction):
    labels = ref.LABELS[case]
    e = ref.embeddings(len(labels), seed=4, normalize=False).astype(np.float64)
    loss = losses.SupConLoss(temperature=0.3, tuple_reduction=reduction, dtype="float64")
    check(loss, labels, e, lambda x: np_supcon(x, labels, 0.3, reduction))


def test_supcon_on_a_two_view_batch_reads_the_classes():
    y, e = two_view_batch(4, seed=5, classes=[0, 1, 1, 2])
    check(losses.SupConLoss(dtype="float64"), y, e, lambda x: np_supcon(x, y["label"], 0.1))


def test_supcon_single_pair_is_zero_and_a_lone_class_adds_nothing():
    e = np.random.default_rng(6).normal(size=(3, 4))
    check(losses.SupConLoss(dtype="float64"), np.array([1, 1, 2]), e, lambda x: np_supcon(x, [1, 1, 2], 0.1))
    assert float(losses.SupConLoss(dtype="float64")(np.array([1, 1]), e[:2])) == pytest.approx(0.0, abs=1e-12)


# -- the pairing of views -----------------------------------------------------------------
def pairs_of(first, second):
    return sorted((int(i), int(second[i])) for i in np.flatnonzero(np.asarray(first)))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_view_pairs_are_the_loop_references_and_npair_structures(dtype):
    """The sorted pairing equals the loop reference (members 1-2, 3-4, ... of each id in batch
    order) and the [B, B] pairs of ``npair_structure``, for odd counts, lone rows, ids far
    beyond int32 and batches of 0 to 2 rows, eagerly and under XLA with an unknown size."""
    from tfdml.losses import views
    from tfdml.masks import npair_structure

    rng = np.random.default_rng(3)
    cases = [np.array([], dtype), np.array([5], dtype), np.array([5, 5], dtype), np.array([2, 1], dtype)]
    for size in (3, 8, 9, 31):
        for _ in range(4):
            cases.append(rng.integers(0, max(1, size // 3), size).astype(dtype))
    if dtype == np.int64:
        cases.append(np.array([2**40 + 1, -(2**40), 2**40 + 1, 7, -(2**40), 2**40 + 1], np.int64))
    xla = tf.function(views.view_pairs, jit_compile=True, input_signature=[tf.TensorSpec([None], dtype)])
    for ids in cases:
        expected = np_pairs(list(ids))
        first, second = views.view_pairs(tf.constant(ids))
        assert pairs_of(first, second) == expected, ids
        assert np.all(np.asarray(second)[~np.asarray(first)] == 0)
        assert pairs_of(*xla(tf.constant(ids))) == expected, ids
        if len(ids):
            partner, _, probe = npair_structure(tf.constant(ids))
            assert pairs_of(probe, np.argmax(np.asarray(partner), axis=1)) == expected


# -- VICReg --------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1])
def test_vicreg_is_bardes_on_a_two_view_batch(seed):
    y, e = two_view_batch(5, dim=4, seed=seed)
    e = 0.5 * e  # standard deviations below γ = 1: the variance hinge is active
    check(losses.VICRegLoss(dtype="float64"), y, e, np_paired(np_vicreg, y["example_id"]))


def test_vicreg_weights_and_pairs_in_any_row_order():
    rng = np.random.default_rng(7)
    ids = np.array([3, 1, 3, 0, 1, 0, 2, 2, 4], np.int32)  # instance 4 has one view: unused
    e = rng.normal(size=(len(ids), 3))
    loss = losses.VICRegLoss(lam=2.0, mu=3.0, nu=0.5, gamma=1.5, epsilon=1e-3, dtype="float64")
    check(loss, ids, e, np_paired(np_vicreg, ids, lam=2.0, mu=3.0, nu=0.5, gamma=1.5, eps=1e-3))


def test_vicreg_degenerate_batches():
    e = np.random.default_rng(8).normal(size=(4, 3))
    loss = losses.VICRegLoss(dtype="float64")
    check(loss, np.array([0, 0]), e[:2], np_paired(np_vicreg, [0, 0]))  # one pair: C = 0
    value, grad = tf_value_and_grad(loss, np.array([0, 1, 2, 3]), e)  # no pair
    assert value == 0.0 and np.all(grad == 0)
    one_class = {"label": np.zeros(6, np.int32), "example_id": np.array([0, 1, 2, 0, 1, 2], np.int32)}
    e6 = np.random.default_rng(9).normal(size=(6, 3))
    check(loss, one_class, e6, np_paired(np_vicreg, one_class["example_id"]))


# -- Barlow Twins --------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1])
def test_barlow_twins_is_zbontar_eq1_on_a_two_view_batch(seed):
    y, e = two_view_batch(6, dim=4, seed=seed)
    check(losses.BarlowTwinsLoss(lam=0.1, dtype="float64"), y, e, np_paired(np_barlow, y["example_id"], lam=0.1))


def test_barlow_twins_degenerate_batches():
    e = np.random.default_rng(10).normal(size=(4, 3))
    loss = losses.BarlowTwinsLoss(dtype="float64")
    value, grad = tf_value_and_grad(loss, np.array([5, 5]), e[:2])  # one pair: C = 0, L = d
    assert value == pytest.approx(3.0) and np.all(np.isfinite(grad))
    value, grad = tf_value_and_grad(loss, np.array([0, 1, 2, 3]), e)
    assert value == 0.0 and np.all(grad == 0)
    ids = np.array([2, 0, 1, 0, 2, 1], np.int32)
    check(loss, {"label": np.zeros(6, np.int32), "example_id": ids}, np.random.default_rng(11).normal(size=(6, 3)),
          np_paired(np_barlow, ids))


# -- a wrong formula fails the cases above --------------------------------------------------
def test_the_cases_tell_each_equation_from_its_near_misses():
    """Each reference case above is far (≫ the tolerance) from a plausible wrong formula, so an
    implementation of the wrong one fails: the row itself in SupCon's denominator, a biased
    variance or a per-element mean in VICReg, uncentred outputs in Barlow Twins."""
    y, e = two_view_batch(4, seed=5, classes=[0, 1, 1, 2])
    assert abs(np_supcon(e, y["label"], 0.1) - np_supcon(e, y["label"], 0.1, self_in_denominator=True)) > 1e-3
    y, e = two_view_batch(5, dim=4, seed=0)
    e = 0.5 * e
    right = np_paired(np_vicreg, y["example_id"])(e)
    for wrong in (dict(ddof=0), dict(invariance_mean=True)):
        assert abs(np_paired(np_vicreg, y["example_id"], **wrong)(e) - right) > 1e-3
    y, e = two_view_batch(6, dim=4, seed=0)
    e = e + 1.0
    assert abs(np_paired(np_barlow, y["example_id"], lam=0.1)(e)
               - np_paired(np_barlow, y["example_id"], lam=0.1, centre=False)(e)) > 1e-3


# -- shared properties ----------------------------------------------------------------------
FACTORIES = {
    "nt_xent": lambda: losses.NTXentLoss(temperature=0.2),
    "supcon": lambda: losses.SupConLoss(temperature=0.2, tuple_reduction="sum"),
    "vicreg": lambda: losses.VICRegLoss(lam=10.0, mu=5.0, nu=2.0),
    "barlow_twins": lambda: losses.BarlowTwinsLoss(lam=0.01),
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_xla_with_an_unknown_batch_size_equals_eager(name):
    y, e = two_view_batch(5, dim=6, seed=12, classes=[0, 1, 0, 2, 1])
    e = e.astype(np.float32)
    loss = FACTORIES[name]()
    spec = tf.TensorSpec([None], tf.int32)

    @tf.function(jit_compile=True, input_signature=[{"label": spec, "example_id": spec},
                                                    tf.TensorSpec([None, 6], tf.float32)])
    def step(yy, ee):
        with tf.GradientTape() as tape:
            tape.watch(ee)
            value = loss(yy, ee)
        return value, tape.gradient(value, ee)

    for rows in (10, 6):  # one compiled function, two batch sizes
        yy = {k: v[:rows] for k, v in y.items()}
        ee = tf.constant(e[:rows])
        with tf.GradientTape() as tape:
            tape.watch(ee)
            eager = loss(yy, ee)
        xla_value, xla_grad = step(yy, ee)
        np.testing.assert_allclose(xla_value.numpy(), eager.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(xla_grad.numpy(), tape.gradient(eager, ee).numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_get_config_round_trip(name):
    loss = FACTORIES[name]()
    config = keras.saving.serialize_keras_object(loss)
    restored = keras.saving.deserialize_keras_object(config)
    assert type(restored) is type(loss) and restored.get_config() == loss.get_config()
    assert type(losses.get(name)) is type(loss)
    assert losses.get(config).get_config() == loss.get_config()
    y, e = two_view_batch(4, seed=13)
    np.testing.assert_allclose(restored(y, e.astype(np.float32)).numpy(), loss(y, e.astype(np.float32)).numpy())


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_bad_arguments_and_isolated_pairs_are_refused(name):
    y, e = two_view_batch(2, seed=14)
    with pytest.raises(ValueError, match="'pair_id' column .* two_views design"):
        FACTORIES[name]()({**y, "pair_id": np.array([0, 0, 1, 1], np.int32)}, e.astype(np.float32))
    with pytest.raises(ValueError, match="takes no distance"):
        losses.get(name, distance="cosine")
    with pytest.raises(ValueError, match="takes no sampler"):
        losses.get(name, sampler="hard")
    with pytest.raises(ValueError, match="cannot use a cross-batch memory"):
        losses.get(name, memory={"size": 8})


def test_argument_ranges():
    with pytest.raises(ValueError, match="temperature must be a number > 0"):
        losses.NTXentLoss(temperature=0.0)
    with pytest.raises(ValueError, match="temperature must be a number > 0"):
        losses.SupConLoss(temperature=-1.0)
    with pytest.raises(ValueError, match="batch's statistics.*tuple_reduction='sum'"):
        losses.VICRegLoss(tuple_reduction="sum")
    with pytest.raises(ValueError, match="batch's statistics"):
        losses.BarlowTwinsLoss(tuple_reduction="mean_active")
    with pytest.raises(ValueError, match="gamma must be a number > 0"):
        losses.VICRegLoss(gamma=0.0)
    with pytest.raises(ValueError, match="lam must be a number >= 0"):
        losses.BarlowTwinsLoss(lam=-1.0)
