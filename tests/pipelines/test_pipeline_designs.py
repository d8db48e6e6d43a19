"""Batch designs: pair frequencies (Hong Eq. 8, 9), weights (Eq. 24, 25), determinism, errors.

Statistical tolerance: over K independent batches the number of batches that
contain an ordered pair (i, j) is Binomial(K, pi_ij) (group designs: a pair
appears at most once per batch), and the number of draws of (i, j) in K·P
p-random pair draws is Binomial(K·P, Q_ij). Every pair must lie within 5
binomial standard deviations of its expectation (a false alarm has probability
< 1e-3 over all pairs even for a random seed; the seeds here are fixed).
"""

import numpy as np
import pytest
import tensorflow as tf

from pipelines import designs
from tfdml import importance, masks

# Unequal class sizes; class 4 has a single example (no positive pair).
SIZES_SMALL = np.array([2, 3, 5, 4, 1])
# Many classes (L >= 4n): exercises the "first distinct of 2n draws" class sampler.
SIZES_MANY = np.array([2, 3, 4, 5, 2, 3, 4, 5, 2, 3, 4, 2])


def labels_for(sizes, seed=0):
    labels = np.repeat(np.arange(len(sizes)), sizes).astype(np.int32)
    # Shuffle so that example ids are not grouped by class.
    return labels[np.random.default_rng(seed).permutation(len(labels))]


def take(ds, k):
    """K consecutive elements of a dataset stacked into numpy arrays."""
    return tf.nest.map_structure(lambda t: t.numpy(), next(iter(ds.take(k).batch(k))))


# --- references written from the paper --------------------------------------------


def q_group(labels, m, n, eligible):
    """Hong Eq. 9 on the eligible classes; Q = 0 for pairs touching a left-out class."""
    classes, counts = np.unique(labels, return_counts=True)
    size = dict(zip(classes, counts))
    big_l = len(eligible)
    N = len(labels)
    Q = np.zeros((N, N))
    for i in range(N):
        for j in range(N):
            yi, yj = labels[i], labels[j]
            if i == j or yi not in eligible or yj not in eligible:
                continue
            if yi == yj:
                Q[i, j] = (m - 1) / (big_l * (m * n - 1) * size[yi] * (size[yi] - 1))
            else:
                Q[i, j] = m * (n - 1) / (big_l * (big_l - 1) * (m * n - 1) * size[yi] * size[yj])
    return Q


def q_random(labels, p):
    """Hong Eq. 8, with the positive class drawn among the L+ classes that have >= 2 examples."""
    classes, counts = np.unique(labels, return_counts=True)
    size = dict(zip(classes, counts))
    big_l = len(classes)
    l_pos = int(np.sum(counts >= 2))
    N = len(labels)
    Q = np.zeros((N, N))
    for i in range(N):
        for j in range(N):
            yi, yj = labels[i], labels[j]
            if i == j:
                continue
            if yi == yj:
                Q[i, j] = p / (l_pos * size[yi] * (size[yi] - 1))
            else:
                Q[i, j] = (1 - p) / (big_l * (big_l - 1) * size[yi] * size[yj])
    return Q


def w_eq24(labels, p):
    """Hong Eq. 24 (L+ in the positive branch, = L when every class has 2 examples)."""
    classes, counts = np.unique(labels, return_counts=True)
    size = dict(zip(classes, counts))
    big_l, N, l_pos = len(classes), len(labels), int(np.sum(counts >= 2))

    def w(yi, yj):
        if yi == yj:
            return l_pos * size[yi] * (size[yi] - 1) / (p * N * (N - 1))
        return big_l * (big_l - 1) * size[yi] * size[yj] / ((1 - p) * N * (N - 1))

    return w


def w_eq25(labels, m, n, eligible):
    """Hong Eq. 25 with N, L of the eligible classes."""
    classes, counts = np.unique(labels, return_counts=True)
    size = dict(zip(classes, counts))
    big_l = len(eligible)
    N = sum(size[c] for c in eligible)

    def w(yi, yj):
        if yi == yj:
            return big_l * (m * n - 1) * size[yi] * (size[yi] - 1) / ((m - 1) * N * (N - 1))
        return big_l * (big_l - 1) * (m * n - 1) * size[yi] * size[yj] / (m * (n - 1) * N * (N - 1))

    return w


def assert_binomial(counts, trials, prob, sigmas=5.0):
    expected = trials * prob
    sd = np.sqrt(trials * prob * (1 - prob))
    never = prob == 0
    assert counts[never].sum() == 0, "a pair with Q = 0 was sampled"
    z = np.abs(counts[~never] - expected[~never]) / sd[~never]
    assert z.max() < sigmas, f"max |z| = {z.max():.2f}"
    return z


# --- pair frequencies ---------------------------------------------------------------


@pytest.mark.parametrize(
    "sizes,m,n,design_cls",
    [
        (SIZES_SMALL, 2, 2, designs.GroupDesign),
        (SIZES_SMALL, 3, 2, designs.GroupDesign),
        (SIZES_MANY, 2, 3, designs.GroupDesign),
        (SIZES_SMALL, 2, 2, designs.MPerClassDesign),
        (SIZES_MANY, 2, 3, designs.MPerClassDesign),
    ],
)
def test_group_pair_frequencies_match_hong_eq9(sizes, m, n, design_cls):
    labels = labels_for(sizes)
    eligible = [c for c, s in enumerate(sizes) if s >= m]
    design = design_cls(m, n)
    K = 3000
    ids = take(design.index_batches(labels, seed=3), K)["example_id"]
    assert ids.shape == (K, m * n)
    # Examples of a batch are distinct and come m per class from n distinct classes.
    for row in ids[:50]:
        assert len(set(row)) == m * n
        assert len(set(labels[row])) == n
    onehot = np.zeros((K, len(labels)))
    np.put_along_axis(onehot, ids, 1.0, axis=1)
    counts = onehot.T @ onehot
    np.fill_diagonal(counts, 0)
    Q = q_group(labels, m, n, eligible)
    np.testing.assert_allclose(Q.sum(), 1.0)
    pi = m * n * (m * n - 1) * Q  # probability that a batch contains the ordered pair
    assert_binomial(counts, K, pi)
    # The test can fail: uniform pair sampling (P_U) is rejected by the same counts.
    pu = np.full_like(pi, m * n * (m * n - 1) / (len(labels) * (len(labels) - 1)))
    np.fill_diagonal(pu, 0)
    z_uniform = np.abs(counts - K * pu) / np.sqrt(K * pu * (1 - pu) + 1e-12)
    assert z_uniform.max() > 10


@pytest.mark.parametrize("p", [0.5, 0.2])
def test_p_random_pair_frequencies_match_hong_eq8(p):
    labels = labels_for(SIZES_SMALL)
    design = designs.PRandomDesign(p, pairs=8)
    K = 3000
    cols = take(design.index_batches(labels, seed=5), K)
    ids = cols["example_id"].reshape(K, 8, 2)
    np.testing.assert_array_equal(cols["pair_id"][0], np.repeat(np.arange(8), 2))
    first, second = ids[..., 0].ravel(), ids[..., 1].ravel()
    assert np.all(first != second)
    counts = np.zeros((len(labels), len(labels)))
    np.add.at(counts, (first, second), 1)
    Q = q_random(labels, p)
    np.testing.assert_allclose(Q.sum(), 1.0)
    assert_binomial(counts, K * 8, Q)
    # Positive fraction is p (binomial, 5 sd).
    positive = labels[first] == labels[second]
    assert abs(positive.mean() - p) < 5 * np.sqrt(p * (1 - p) / positive.size)
    # The test can fail: Eq. 8 with L instead of L+ (5 classes, one a singleton) is rejected.
    q_wrong = Q.copy()
    same = labels[:, None] == labels[None, :]
    q_wrong[same] *= 4 / 5
    with pytest.raises(AssertionError):
        assert_binomial(counts, K * 8, q_wrong / q_wrong.sum())


def test_m_per_class_visits_every_class_once_per_epoch():
    sizes = np.array([3, 2, 4, 2, 5, 3, 2])  # 7 classes, 2 per batch -> 3 batches per epoch
    labels = labels_for(sizes)
    design = designs.MPerClassDesign(2, classes_per_batch=2)
    per_epoch = design.batches_per_epoch(labels)
    assert per_epoch == 3
    lab = take(design.index_batches(labels, seed=1), per_epoch * 40)["label"]
    epochs = lab.reshape(40, per_epoch * 4)
    seen = np.zeros(7)
    for epoch in epochs:
        classes, counts = np.unique(epoch, return_counts=True)
        assert len(classes) == 6 and np.all(counts == 2)  # 6 distinct classes, m = 2 each
        seen[classes] += 1
    # Each class is left out of ~1/7 of the epochs; all of them get visited.
    assert seen.min() > 20 and seen.sum() == 240


def test_m_per_class_leftover_classes_are_dropped_not_carried_over():
    """The L mod n classes at the end of an epoch's permutation are dropped: the next
    epoch is an independent permutation, so a class can be left out twice in a row
    (with leftovers carried over, that could never happen)."""
    labels = labels_for(np.array([3, 2, 4, 2, 5, 3, 2]))  # 7 classes, 2 per batch: 1 left out
    design = designs.MPerClassDesign(2, classes_per_batch=2)
    lab = take(design.index_batches(labels, seed=1), 3 * 60)["label"].reshape(60, 12)
    left_out = [int(np.setdiff1d(np.arange(7), epoch)[0]) for epoch in lab]
    assert any(a == b for a, b in zip(left_out, left_out[1:]))


# --- weights vs Eq. 24 / 25 -----------------------------------------------------------


@pytest.mark.parametrize(
    "design",
    [designs.GroupDesign(2, 2), designs.GroupDesign(3, batch_size=6), designs.MPerClassDesign(2, 3),
     designs.PRandomDesign(0.3, pairs=6)],
    ids=repr,
)
def test_weight_columns_equal_hong_eq24_eq25(design):
    labels = labels_for(SIZES_SMALL)
    cols = next(iter(design.index_batches(labels, seed=0)))
    W = importance.pair_weights(cols).numpy()
    pair_id = cols.get("pair_id")
    cand = masks.candidate_mask(cols["label"], pair_id).numpy()
    y = cols["label"].numpy()
    if isinstance(design, designs.PRandomDesign):
        ref = w_eq24(labels, design.p)
        q = q_random(labels, design.p)
    else:
        m = design.m
        n = getattr(design, "n", None) or design.classes_per_batch
        eligible = [c for c, s in enumerate(SIZES_SMALL) if s >= m]
        ref = w_eq25(labels, m, n, eligible)
        q = q_group(labels, m, n, eligible)
    ids = cols["example_id"].numpy()
    N = len(labels)
    for a in range(len(y)):
        for b in range(len(y)):
            if cand[a, b]:
                np.testing.assert_allclose(W[a, b], ref(y[a], y[b]), rtol=1e-5)
                # ... and is P_U / Q with P_U = 1 / (N(N-1)) over the eligible examples.
                n_elig = N if isinstance(design, designs.PRandomDesign) else sum(
                    s for s in SIZES_SMALL if s >= design.m)
                np.testing.assert_allclose(W[a, b], 1 / (n_elig * (n_elig - 1)) / q[ids[a], ids[b]], rtol=1e-5)
    # Contract columns and dtypes.
    assert cols["label"].dtype == tf.int32 and cols["example_id"].dtype == tf.int32
    assert cols["class_size"].dtype == tf.float32
    np.testing.assert_array_equal(cols["class_size"].numpy(), SIZES_SMALL[y])
    np.testing.assert_array_equal(labels[ids], y)


def test_weights_method_matches_columns():
    labels = labels_for(SIZES_MANY)
    design = designs.GroupDesign(2, 3)
    w_pos, w_neg = design.weights(labels)
    N, L, m, n = SIZES_MANY.sum(), len(SIZES_MANY), 2, 3
    np.testing.assert_allclose(w_pos, L * (m * n - 1) / ((m - 1) * N * (N - 1)))
    np.testing.assert_allclose(w_neg, L * (L - 1) * (m * n - 1) / (m * (n - 1) * N * (N - 1)))



def test_only_the_group_design_carries_the_memory_pair_constant():
    # w_memory = N(N−1)·(mn/L)²: N(N−1)·π_i·π_j = w_memory / (N_i N_j), π_i = mn/(L N_i) the
    # chance that an example is in a batch (tfdml.importance.memory_pair_weights).
    labels = labels_for(SIZES_MANY)
    N, L, m, n = SIZES_MANY.sum(), len(SIZES_MANY), 2, 3
    cols = next(iter(designs.GroupDesign(m, n).index_batches(labels, seed=0)))
    assert cols["w_memory"].dtype == tf.float32
    np.testing.assert_allclose(cols["w_memory"].numpy(), N * (N - 1) * (m * n / L) ** 2, rtol=1e-6)
    # m-per-class batches of one epoch are dependent, p-random has isolated pairs: no column.
    for design in (designs.MPerClassDesign(m, n), designs.PRandomDesign(0.5, 4)):
        assert "w_memory" not in next(iter(design.index_batches(labels, seed=0)))

# --- determinism ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "design", [designs.GroupDesign(2, 3), designs.PRandomDesign(0.5, 4), designs.MPerClassDesign(2, 3)],
    ids=repr,
)
def test_same_seed_same_batches(design):
    labels = labels_for(SIZES_MANY)
    a = take(design.index_batches(labels, seed=7), 40)
    tf.random.set_seed(123)  # the global seed plays no part
    b = take(design.index_batches(labels, seed=7), 40)
    c = take(design.index_batches(labels, seed=8), 40)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a["example_id"], c["example_id"])
    # Successive batches differ.
    assert not np.array_equal(a["example_id"][0], a["example_id"][1])


def test_batches_gather_images_and_are_deterministic():
    from pipelines import augment, sources

    rng = np.random.default_rng(0)
    feats = rng.random((40, 6, 6, 1)).astype("float32")
    labels = np.repeat(np.arange(8), 5)
    split = sources.get_source("arrays", features=feats, labels=labels).split("train")
    design = designs.GroupDesign(2, 2)
    x, cols = next(iter(design.batches(split, seed=4)))
    np.testing.assert_array_equal(x.numpy(), feats[cols["example_id"].numpy()])
    t = augment.TrainTransform(size=4)
    x1, c1 = next(iter(design.batches(split, seed=4, transform=t)))
    x2, c2 = next(iter(design.batches(split, seed=4, transform=t)))
    assert x1.shape == (4, 4, 4, 1)
    np.testing.assert_array_equal(x1.numpy(), x2.numpy())
    np.testing.assert_array_equal(c1["example_id"].numpy(), cols["example_id"].numpy())


def _static_shape_split():
    from pipelines import sources

    feats = np.random.default_rng(0).random((60, 10, 10, 1)).astype("float32")
    return sources.get_source("arrays", features=feats, labels=np.repeat(np.arange(12), 5)).split("train")


def _transforms():
    from pipelines import augment

    return {
        "none": None,
        "crop": augment.TrainTransform(size=8),
        "resized_crop": augment.TrainTransform(size=(8, 6), scale=(0.3, 1.0)),
        "eval": augment.EvalTransform(size=8, resize_to=9),
    }


@pytest.mark.parametrize(
    "design",
    [designs.MPerClassDesign(2, classes_per_batch=3), designs.GroupDesign(2, 3), designs.PRandomDesign(0.5, 3)],
    ids=lambda d: d.name,
)
@pytest.mark.parametrize("transform", list(_transforms()))
def test_batches_have_static_shapes(design, transform):
    """A design knows its batch size (docs/design.md): every element_spec is fully defined,
    with and without augmentation, and the batches have those shapes."""
    split = _static_shape_split()
    t = _transforms()[transform]
    ds = design.batches(split, seed=0, transform=t)
    specs = tf.nest.flatten(ds.element_spec)
    assert all(spec.shape.is_fully_defined() for spec in specs), ds.element_spec
    x_spec, col_specs = ds.element_spec
    assert x_spec.shape[0] == design.batch_size
    assert x_spec.shape[1:] == ((10, 10, 1) if t is None else tuple(t.size) + (1,))
    assert all(spec.shape == (design.batch_size,) for spec in col_specs.values())
    assert ("pair_id" in col_specs) == (design.name == "p_random")
    for value, spec in zip(tf.nest.flatten(next(iter(ds))), specs):
        assert value.shape == spec.shape
    index_specs = design.index_batches(split).element_spec
    assert all(spec.shape == (design.batch_size,) for spec in index_specs.values())


# --- errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: designs.GroupDesign(1, 4), "m must be"),
        (lambda: designs.GroupDesign(2, 1), "n must be"),
        (lambda: designs.GroupDesign(2), "exactly one of n and batch_size"),
        (lambda: designs.GroupDesign(4, batch_size=10), "not divisible by m=4"),
        (lambda: designs.MPerClassDesign(3, batch_size=10), "not divisible by m=3"),
        (lambda: designs.MPerClassDesign(2, classes_per_batch=1), "classes_per_batch must be"),
        (lambda: designs.PRandomDesign(0.0, 4), "strictly between 0 and 1"),
        (lambda: designs.PRandomDesign(1.0, 4), "strictly between 0 and 1"),
        (lambda: designs.PRandomDesign(1.5, 4), "strictly between 0 and 1"),
        (lambda: designs.PRandomDesign(0.5, batch_size=7), "odd"),
        (lambda: designs.PRandomDesign(0.5, pairs=0), "pairs must be"),
        (lambda: designs.get_design("groups", m=2, n=2), r"did you mean 'group'\?\); choose one of group, p_random"),
    ],
)
def test_impossible_designs_raise_at_construction(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_impossible_designs_for_a_split_raise_on_validate():
    labels = labels_for(SIZES_SMALL)
    with pytest.raises(ValueError, match="larger than every class"):
        designs.GroupDesign(6, 2).validate(labels)
    with pytest.raises(ValueError, match="only 2 classes have at least m=4"):
        designs.GroupDesign(4, 3).index_batches(labels)
    with pytest.raises(ValueError, match="only 4 classes"):
        designs.MPerClassDesign(2, 5).validate(labels)
    # One class with m examples: the advice is never "n <= 1", which n >= 2 refuses.
    one_big = labels_for([6, 3, 2])
    with pytest.raises(ValueError, match=r"only 1 classes have at least m=4 examples; use m <= 3 so") as err:
        designs.MPerClassDesign(4, 2).validate(one_big)
    assert "n <= 1" not in str(err.value)
    designs.MPerClassDesign(3, 2).validate(one_big)  # the advice works
    with pytest.raises(ValueError, match="needs two classes with at least two examples"):
        designs.GroupDesign(2, 2).validate(labels_for([5, 1]))
    with pytest.raises(ValueError, match="at least 2 classes"):
        designs.PRandomDesign(0.5, 2).validate(np.zeros(5, int))
    with pytest.raises(ValueError, match="at least 2 examples"):
        designs.PRandomDesign(0.5, 2).validate(np.arange(5))
    with pytest.raises(ValueError, match="no examples"):
        designs.GroupDesign(2, 2).validate(np.zeros(0, int))
    with pytest.raises(ValueError, match="integer class ids"):
        designs.GroupDesign(2, 2).validate(np.array([0.5, 1.5]))
    with pytest.raises(ValueError, match="index_batches"):
        designs.GroupDesign(2, 2).batches(labels)


def test_get_design_builds_from_config():
    d = designs.get_design("p_random", p=0.25, batch_size=10)
    assert isinstance(d, designs.PRandomDesign) and d.pairs == 5 and d.batch_size == 10
    assert designs.get_design("m_per_class", **{"m": 2, "batch_size": 8}).classes_per_batch == 4


@pytest.mark.parametrize("name", ["group", "p_random", "m_per_class", "two_views"])
def test_every_design_is_made_from_a_config_section_and_from_its_own_config(name):
    section = {"name": name, "m": 3, "n": 4, "p": 0.25, "pairs": 6}
    design = designs.DESIGNS[name].from_config(section)
    assert design.get_config() == {"group": {"m": 3, "n": 4}, "p_random": {"p": 0.25, "pairs": 6},
                                   "m_per_class": {"m": 3, "classes_per_batch": 4},
                                   "two_views": {"images": 4}}[name]
    assert type(design).from_config(design.get_config()).get_config() == design.get_config()


def test_a_design_registered_from_outside_is_found_by_name():
    @designs.register("wide_m_per_class")
    class Wide(designs.MPerClassDesign):
        pass

    try:
        assert isinstance(designs.get_design("wide_m_per_class", m=2, classes_per_batch=3), Wide)
        assert designs.DESIGNS["wide_m_per_class"].from_config({"m": 2, "n": 3}).batch_size == 6
        with pytest.raises(ValueError, match="subclass of pipelines.designs.Design"):
            designs.register("not_a_design")(dict)
    finally:
        del designs.DESIGNS["wide_m_per_class"]
