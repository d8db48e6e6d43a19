"""GlobalLoss against the global loss of Kumar B G, Carneiro & Reid 2016 (the second term of
Harwood et al. 2017's smart mining), J = (σ²₊ + σ²₋) + λ max(0, μ₊ − μ₋ + t): value and
gradient by a NumPy brute force over the batch's pairs and by hand."""

import numpy as np
import pytest
import tensorflow as tf

from tfdml import losses
from tfdml.losses.global_loss import DEFAULT_LAM, DEFAULT_MARGIN, global_loss


def np_distances(ref, e, distance):
    """D_ij by loops: ‖e_i − e_j‖, its square, or 1 − cos (the losses' cosine distance)."""
    if distance == "cosine":
        return 1.0 - ref.cosine(e)
    d = ref.pairwise(e)
    return d ** 2 if distance == "squared_euclidean" else d


def np_global_loss(ref, e, labels, lam, margin, distance="squared_euclidean", pos_mult=None, neg_mult=None):
    """The global loss, J = (σ²₊ + σ²₋) + λ max(0, μ₊ − μ₋ + t), written from its definition:
    μ± and σ²± the mean and (population) variance of the distances of the positive and the
    negative pairs, each unordered pair i < j once; with multiplicities (a sampler's ordered
    pairs) each ordered pair (i, j) counts mult_ij times. 0 without a positive or a negative
    pair."""
    d = np_distances(ref, e, distance)
    n = len(labels)
    pos, neg = [], []
    for i in range(n):
        for j in range(n):
            if i == j or (pos_mult is None and j < i):
                continue
            same = labels[i] == labels[j]
            mult = 1 if pos_mult is None else int((pos_mult if same else neg_mult)[i, j])
            (pos if same else neg).extend([d[i, j]] * mult)
    if not pos or not neg:
        return 0.0
    mu_pos = sum(pos) / len(pos)
    mu_neg = sum(neg) / len(neg)
    var_pos = sum((x - mu_pos) ** 2 for x in pos) / len(pos)
    var_neg = sum((x - mu_neg) ** 2 for x in neg) / len(neg)
    return var_pos + var_neg + lam * max(0.0, mu_pos - mu_neg + margin)


def test_defaults():
    loss = losses.GlobalLoss()
    assert (loss.lam, loss.margin, loss.distance) == (DEFAULT_LAM, DEFAULT_MARGIN, "squared_euclidean")
    assert losses.get("global").__class__ is losses.GlobalLoss


def test_hand_computed_hinge_only_value_and_gradient(ref):
    """1-D points x = (0, 2, 1), labels (0, 0, 1), squared distances, λ = ½, t = 0.4:
    one positive pair, d = 4 (μ₊ = 4, σ²₊ = 0); negatives d = 1, 1 (μ₋ = 1, σ²₋ = 0);
    J = ½ (4 − 1 + 0.4) = 1.7. Gradient: σ²₋ = ((a − b)/2)² has zero slope at a = b, so
    ∂J/∂x = λ (∂μ₊ − ∂μ₋): ∂/∂x₀ = ½ (2·(0 − 2) − (0 − 1)) = −1.5, ∂/∂x₁ = ½ (−2·(0 − 2) −
    (2 − 1)) = 1.5, ∂/∂x₂ = ½ ((0 − 1) + (2 − 1)) = 0."""
    e = np.array([[0.0], [2.0], [1.0]], np.float32)
    value, grad = ref.value_and_grad(losses.GlobalLoss(lam=0.5, margin=0.4), np.array([0, 0, 1]), e)
    assert value == pytest.approx(1.7, rel=1e-6)
    np.testing.assert_allclose(grad[:, 0], [-1.5, 1.5, 0.0], atol=1e-6)


def test_hand_computed_all_three_terms():
    """1-D x = (0, 1, 2, 4), labels (0, 0, 1, 1), squared distances. Positives d = 1, 4:
    μ₊ = 2.5, σ²₊ = 2.25. Negatives d = 4, 16, 1, 9: μ₋ = 7.5, σ²₋ = (3.5² + 8.5² + 6.5² +
    1.5²)/4 = 32.25. t = 6, λ = 2: hinge 2.5 − 7.5 + 6 = 1, J = 2.25 + 32.25 + 2 = 36.5;
    t = 4 leaves the hinge at 0: J = 34.5."""
    e = np.array([[0.0], [1.0], [2.0], [4.0]], np.float32)
    labels = np.array([0, 0, 1, 1])
    assert float(losses.GlobalLoss(lam=2.0, margin=6.0)(labels, e)) == pytest.approx(36.5, rel=1e-6)
    assert float(losses.GlobalLoss(lam=2.0, margin=4.0)(labels, e)) == pytest.approx(34.5, rel=1e-6)


def test_function_on_a_distance_matrix():
    """global_loss on given distances and pair weights: the weights are multiplicities."""
    dist = tf.constant([[1.0, 3.0, 5.0]])
    pos, neg = tf.constant([[2.0, 0.0, 0.0]]), tf.constant([[0.0, 1.0, 1.0]])
    # μ₊ = 1, σ²₊ = 0; μ₋ = 4, σ²₋ = 1; hinge max(0, 1 − 4 + 5) = 2.
    assert float(global_loss(dist, pos, neg, lam=1.5, margin=5.0)) == pytest.approx(1.0 + 1.5 * 2.0)


@pytest.mark.parametrize("distance", ["squared_euclidean", "euclidean", "cosine"])
@pytest.mark.parametrize("case", ["mixed", "one_class", "no_positive"])
def test_equals_numpy_brute_force_value_and_gradient(ref, case, distance):
    """The definition by loops over unordered pairs; the gradient against central differences
    of that brute force (float64). The margin is chosen so the hinge is active."""
    labels = ref.LABELS[case]
    e = ref.embeddings(len(labels), dim=4, seed=7, normalize=False).astype(np.float64)
    lam, margin = 0.7, 3.0
    loss = losses.GlobalLoss(lam=lam, margin=margin, distance=distance, dtype="float64")
    value, grad = ref.value_and_grad(loss, labels, e)
    expected = np_global_loss(ref, e, labels, lam, margin, distance)
    np.testing.assert_allclose(value, expected, rtol=1e-7, atol=1e-10)
    fd = ref.central_gradient(lambda x: np_global_loss(ref, x, labels, lam, margin, distance), e, eps=1e-6)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-7)
    if case == "mixed":
        assert value > 0 and np.abs(grad).max() > 1e-3
        d = np_distances(ref, e, distance)
        same = labels[:, None] == labels[None, :]
        off = ~np.eye(len(labels), dtype=bool)
        assert d[same & off].mean() - d[~same].mean() + margin > 0  # the hinge term is tested too


def test_pair_sampler_multiplicities_weight_the_distributions(ref):
    labels = ref.LABELS["mixed"]
    pos, neg = ref.random_multiplicities(labels, seed=4)
    e = ref.embeddings(len(labels), dim=5, seed=4)
    got = float(losses.GlobalLoss(margin=2.0, sampler=ref.fixed_pairs(pos, neg))(labels, e))
    expected = np_global_loss(ref, e, labels, DEFAULT_LAM, 2.0, pos_mult=pos, neg_mult=neg)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert got != pytest.approx(float(losses.GlobalLoss(margin=2.0)(labels, e)), rel=1e-3)
    np.testing.assert_allclose(float(losses.GlobalLoss(sampler="all")(labels, e)),
                               float(losses.GlobalLoss()(labels, e)), rtol=1e-6)


@pytest.mark.parametrize("case", ["one_class", "no_positive", "one_pair"])
def test_degenerate_batches_give_zero_with_zero_gradient(ref, case):
    labels = np.array([7, 7]) if case == "one_pair" else ref.LABELS[case]
    e = ref.embeddings(len(labels), seed=1)
    value, grad = ref.value_and_grad(losses.GlobalLoss(), labels, e)
    assert value == 0.0
    assert np.all(grad == 0.0)


@pytest.mark.parametrize("distance", ["squared_euclidean", "euclidean", "cosine"])
def test_identical_embeddings_and_zero_rows_are_finite(ref, distance):
    labels = ref.LABELS["mixed"]
    for e in (np.tile([[1.0, 0, 0]], (len(labels), 1)), np.zeros((len(labels), 3))):
        value, grad = ref.value_and_grad(losses.GlobalLoss(distance=distance), labels, e.astype(np.float32))
        assert np.isfinite(value) and np.all(np.isfinite(grad))


def test_xla_with_unknown_batch_equals_eager(ref):
    ref.check_xla_equals_eager_with_unknown_batch(losses.GlobalLoss(margin=2.0))


def test_options_are_checked():
    with pytest.raises(ValueError, match="lam must be a number >= 0"):
        losses.GlobalLoss(lam=-1.0)
    with pytest.raises(ValueError, match="margin must be a number >= 0"):
        losses.GlobalLoss(margin="wide")
    with pytest.raises(ValueError, match="leave tuple_reduction at 'mean'"):
        losses.GlobalLoss(tuple_reduction="sum")
    with pytest.raises(ValueError, match="importance"):
        losses.GlobalLoss(importance=True)
