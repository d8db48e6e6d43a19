"""HistogramLoss against Ustinova & Lempitsky 2016, Eq. 1–4 (value and gradient)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdml import losses
from tfdml.losses.histogram import DEFAULT_NUM_BINS, histogram_loss


def np_delta(s, r, nodes, step):
    """δ_ijr of Eq. 2 for one similarity s and node r."""
    if r > 0 and nodes[r - 1] <= s <= nodes[r]:
        return (s - nodes[r - 1]) / step
    if r < len(nodes) - 1 and nodes[r] <= s <= nodes[r + 1]:
        return (nodes[r + 1] - s) / step
    return 0.0


def np_histogram(pairs, num_bins):
    """Eq. 1: h_r = Σ_{(s, w)} w δ_r(s) / Σ w over (similarity, weight) pairs."""
    step = 2.0 / (num_bins - 1)
    nodes = [-1.0 + r * step for r in range(num_bins)]
    total = sum(w for _, w in pairs)
    h = np.zeros(num_bins)
    for s, w in pairs:
        s = min(max(s, -1.0), 1.0)
        for r in range(num_bins):
            h[r] += w * np_delta(s, r, nodes, step)
    return h / total if total > 0 else h


def np_loss_from_pairs(pos_pairs, neg_pairs, num_bins):
    """Eq. 3–4: L = Σ_r h⁻_r Σ_{q≤r} h⁺_q."""
    h_pos, h_neg = np_histogram(pos_pairs, num_bins), np_histogram(neg_pairs, num_bins)
    return sum(h_neg[r] * sum(h_pos[q] for q in range(r + 1)) for r in range(num_bins))


def np_histogram_loss(ref, e, labels, num_bins, pos_mult=None, neg_mult=None, weights=None):
    """The loss of a batch: unordered pairs i < j by default; with multiplicities
    (ordered pairs, a sampler's) and / or importance weights W_ij, each ordered pair
    (i, j) enters with weight mult_ij · W_ij."""
    s = ref.cosine(e)
    n = len(labels)
    pos, neg = [], []
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            if pos_mult is None and j < i:
                continue  # each unordered pair once
            same = labels[i] == labels[j]
            mult = 1.0 if pos_mult is None else (pos_mult if same else neg_mult)[i, j]
            w = mult * (1.0 if weights is None else weights[i, j])
            (pos if same else neg).append((s[i, j], w))
    return np_loss_from_pairs(pos, neg, num_bins)


def test_default_num_bins_is_the_papers_step():
    """Δ = 0.01 on [−1, 1] (the authors' setting): R = 201."""
    assert DEFAULT_NUM_BINS == 201
    assert losses.HistogramLoss().num_bins == 201


def test_hand_computed_three_nodes():
    """R = 3 (nodes −1, 0, 1; Δ = 1). One positive pair at s = 0.5 → h⁺ = [0, ½, ½];
    negatives at −1 and −0.5 → h⁻ = ([1, 0, 0] + [½, ½, 0]) / 2 = [¾, ¼, 0];
    Φ⁺ = [0, ½, 1], L = ¾·0 + ¼·½ + 0 = 1/8. Reversed (the positive at −1, the
    negatives at 0.5 and −0.5): h⁺ = [1, 0, 0], Φ⁺ = 1, L = 1."""
    sim = tf.constant([0.5, -1.0, -0.5])
    pos, neg = tf.constant([1.0, 0, 0]), tf.constant([0.0, 1, 1])
    assert float(histogram_loss(sim, pos, neg, 3)) == pytest.approx(0.125)
    sim = tf.constant([-1.0, 0.5, -0.5])
    assert float(histogram_loss(sim, pos, neg, 3)) == pytest.approx(1.0)


def test_hand_computed_five_nodes_value_and_gradient():
    """R = 5 (nodes −1, −½, 0, ½, 1; Δ = ½). Positive s⁺ = 0.25: h⁺ = [0, 0, ½, ½, 0],
    Φ⁺ = [0, 0, ½, 1, 1]. Negatives −1 and −0.25: h⁻ = [½, ¼, ¼, 0, 0]. L = ¼·½ = 1/8.
    Gradient (Eq. 2 is linear on each segment, slope ±1/Δ = ±2):
    ∂L/∂s⁺ = h⁻_2 ∂Φ⁺_2/∂s⁺ = ¼·(−2) = −½;  ∂L/∂s⁻₂ = ½(Φ⁺_2 − Φ⁺_1)·2 = ½;
    ∂L/∂s⁻₁ = 0 (Φ⁺ is 0 around −1)."""
    sim = tf.constant([0.25, -1.0, -0.25])
    with tf.GradientTape() as tape:
        tape.watch(sim)
        value = histogram_loss(sim, tf.constant([1.0, 0, 0]), tf.constant([0.0, 1, 1]), 5)
    assert float(value) == pytest.approx(0.125)
    np.testing.assert_allclose(tape.gradient(value, sim).numpy(), [-0.5, 0.0, 0.5], atol=1e-6)


def test_hand_computed_batch_through_the_loss():
    """The R = 3 case from embeddings: x0 = (1, 0), x1 at 60° (s01 = ½), x2 = (−1, 0)
    (s02 = −1, s12 = −½), labels [0, 0, 1]; unnormalised inputs give the same value."""
    e = np.array([[1.0, 0.0], [0.5, np.sqrt(3) / 2], [-1.0, 0.0]], np.float32)
    labels = np.array([0, 0, 1])
    assert float(losses.HistogramLoss(num_bins=3)(labels, e)) == pytest.approx(0.125, abs=1e-6)
    assert float(losses.HistogramLoss(num_bins=3)(labels, 3.0 * e)) == pytest.approx(0.125, abs=1e-6)


@pytest.mark.parametrize("case", ["mixed", "one_class", "no_positive"])
@pytest.mark.parametrize("num_bins", [3, 11, DEFAULT_NUM_BINS])
def test_equals_numpy_brute_force_value_and_gradient(ref, case, num_bins):
    """Eq. 1–4 by loops over unordered pairs and nodes; the gradient against central
    differences of that brute force (float64)."""
    labels = ref.LABELS[case]
    e = ref.embeddings(len(labels), dim=4, seed=num_bins, normalize=False).astype(np.float64)
    loss = losses.HistogramLoss(num_bins=num_bins, dtype="float64")
    value, grad = ref.value_and_grad(loss, labels, e)
    expected = np_histogram_loss(ref, e, labels, num_bins)
    np.testing.assert_allclose(value, expected, rtol=1e-7, atol=1e-10)
    fd = ref.central_gradient(lambda x: np_histogram_loss(ref, x, labels, num_bins), e, eps=1e-7)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-7)
    if case == "mixed":
        assert 0 < value < 1 and np.abs(grad).max() > 1e-3


def test_pair_sampler_multiplicities_weight_the_histograms(ref):
    labels = ref.LABELS["mixed"]
    pos, neg = ref.random_multiplicities(labels, seed=4)
    e = ref.embeddings(len(labels), dim=5, seed=4)
    got = float(losses.HistogramLoss(num_bins=21, sampler=ref.fixed_pairs(pos, neg))(labels, e))
    expected = np_histogram_loss(ref, e, labels, 21, pos_mult=pos, neg_mult=neg)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert got != pytest.approx(float(losses.HistogramLoss(num_bins=21)(labels, e)), rel=1e-3)
    # The "all" sampler (every candidate pair once) is the default objective.
    np.testing.assert_allclose(float(losses.HistogramLoss(num_bins=21, sampler="all")(labels, e)),
                               float(losses.HistogramLoss(num_bins=21)(labels, e)), rtol=1e-6)


def test_importance_weights_enter_each_histogram(ref):
    """importance=True: each pair enters with W_ij (Hong Eq. 24 / 25 columns), normalised by Σ W."""
    labels = ref.LABELS["mixed"]
    y = ref.importance_targets(labels)
    e = ref.embeddings(len(labels), dim=5, seed=6)
    w = ref.hong_weights(labels, ref.CLASS_SIZES, 0.02, 0.005)
    ones = np.ones((len(labels),) * 2)
    got = float(losses.HistogramLoss(num_bins=21, importance=True)(y, e))
    np.testing.assert_allclose(got, np_histogram_loss(ref, e, labels, 21, ones, ones, w), rtol=1e-5)
    plain = float(losses.HistogramLoss(num_bins=21)(y, e))
    assert got != pytest.approx(plain, rel=1e-3)
    # Plain labels carry no W: every pair weighs 1.
    np.testing.assert_allclose(float(losses.HistogramLoss(num_bins=21, importance=True)(labels, e)), plain,
                               rtol=1e-6)


@pytest.mark.parametrize("case", ["one_class", "no_positive", "one_pair"])
def test_degenerate_batches_give_zero_with_zero_gradient(ref, case):
    """No positive pair (all singletons) or no negative pair (one class, one pair):
    loss 0, gradient 0 (finite)."""
    labels = np.array([7, 7]) if case == "one_pair" else ref.LABELS[case]
    e = ref.embeddings(len(labels), seed=1)
    value, grad = ref.value_and_grad(losses.HistogramLoss(), labels, e)
    assert value == 0.0
    assert np.all(grad == 0.0)


def test_identical_embeddings_and_zero_rows_are_finite(ref):
    labels = ref.LABELS["mixed"]
    for e in (np.tile([[1.0, 0, 0]], (len(labels), 1)), np.zeros((len(labels), 3))):
        value, grad = ref.value_and_grad(losses.HistogramLoss(), labels, e.astype(np.float32))
        assert np.isfinite(value) and np.all(np.isfinite(grad))


def test_int64_labels_beyond_float_precision(ref):
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=2)
    big = labels.astype(np.int64) + 2**40
    np.testing.assert_allclose(float(losses.HistogramLoss()(big, e)), float(losses.HistogramLoss()(labels, e)),
                               rtol=1e-6)
    two = np.where(labels == 1, 1, 0)
    near = np.where(labels == 1, 2**40 + 2**24 + 1, 2**40 + 2**24).astype(np.int64)  # a float32 merges them
    expected = float(losses.HistogramLoss()(two, e))
    assert expected > 0
    np.testing.assert_allclose(float(losses.HistogramLoss()(near, e)), expected, rtol=1e-6)


def test_xla_equals_eager_with_unknown_batch(ref):
    loss = losses.HistogramLoss()
    ref.check_xla_equals_eager_with_unknown_batch(loss)


def test_constructor_refuses_what_the_loss_has_no_meaning_for():
    with pytest.raises(ValueError, match="num_bins must be an int >= 2"):
        losses.HistogramLoss(num_bins=1)
    with pytest.raises(ValueError, match="num_bins must be an int >= 2"):
        losses.HistogramLoss(num_bins=20.5)
    with pytest.raises(ValueError, match="takes no distance"):
        losses.HistogramLoss(distance="euclidean")
    with pytest.raises(ValueError, match="leave tuple_reduction at 'mean'"):
        losses.HistogramLoss(tuple_reduction="sum")
    with pytest.raises(ValueError, match="selects 'triplets'"):
        losses.HistogramLoss(sampler="semi_hard")


def test_registered_and_keras_file_round_trip(tmp_path, ref):
    assert losses.get("histogram", num_bins=51).get_config()["num_bins"] == 51
    loss = losses.HistogramLoss(num_bins=51, sampler="random", seed=3, importance=True)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert type(restored) is losses.HistogramLoss and restored.get_config() == loss.get_config()
    model, loaded = ref.keras_file_round_trip(losses.HistogramLoss(num_bins=51), tmp_path / "m.keras")
    assert loaded.loss.get_config() == model.loss.get_config()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_places_similarities_in_float32(ref, dtype):
    """Similarities of 16-bit embeddings are binned in float32: the value is the float32
    loss of the same (16-bit-rounded) similarities, not the coarse 16-bit interpolation."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=8)
    sim = tf.cast(losses.HistogramLoss().similarities(tf.constant(e, dtype)), tf.float32)
    pos, neg = (tf.cast(m, tf.float32) for m in ref.pos_neg(labels, ref.candidates(labels)))
    expected = float(histogram_loss(sim, pos, neg))
    got = float(losses.HistogramLoss(dtype=dtype)(labels, e))
    np.testing.assert_allclose(got, expected, rtol=1e-2)  # one 16-bit rounding of the result (≤ 2⁻⁸)
