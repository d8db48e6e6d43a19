"""FastAPLoss against Cakir et al. 2019 (§3: FastAP from soft histograms of distances),
written here as loops over queries, bins and retrieval candidates in float64."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.tfdml.losses.test_loss_common import value_and_grad
from tfdml import losses, models


def np_fast_ap(e, labels, num_bins=10, reduction="mean", wrong=None):
    """Per query q: the squared distances d ∈ [0, 4] of the unit vectors to every other
    example, bin centres z_l = 4l/L (l = 0..L), triangular weights max(0, 1 − |d − z_l|/Δ);
    h⁺_l, h_l the soft counts of the positives and of all candidates, H⁺_l, H_l their
    cumulative sums; FastAP_q = Σ_l h⁺_l H⁺_l / H_l / N⁺_q. Then the mean (or sum) of
    1 − FastAP_q over the queries with a positive. ``wrong`` picks a near miss."""
    x = e / np.linalg.norm(e, axis=1, keepdims=True)
    n = len(labels)
    delta = 4.0 / num_bins
    terms = []
    for q in range(n):
        h_pos = np.zeros(num_bins + 1)
        h_all = np.zeros(num_bins + 1)
        for j in range(n):
            if j == q:
                continue
            d = min(max(np.sum((x[q] - x[j]) ** 2), 0.0), 4.0)
            for b in range(num_bins + 1):
                weight = max(0.0, 1.0 - abs(d - b * delta) / delta)
                h_all[b] += weight
                if labels[j] == labels[q]:
                    h_pos[b] += weight
        n_pos = sum(1 for j in range(n) if j != q and labels[j] == labels[q])
        if n_pos == 0:
            continue
        ap = 0.0
        for b in range(num_bins + 1):
            big_h_pos = h_pos[b] if wrong == "not_cumulative" else h_pos[:b + 1].sum()
            big_h = h_all[b] if wrong == "not_cumulative" else h_all[:b + 1].sum()
            if wrong == "negatives_only":
                big_h = (h_all - h_pos)[:b + 1].sum() + 1e-300
            if big_h > 0:
                ap += h_pos[b] * big_h_pos / big_h
        terms.append(1.0 - ap / n_pos)
    if not terms:
        return 0.0
    return float(np.sum(terms)) if reduction == "sum" else float(np.mean(terms))


CASES = {
    "mixed": np.array([0, 0, 1, 1, 1, 2, 3, 3], np.int64),  # class 2 has one example
    "one_class": np.array([5, 5, 5, 5], np.int64),
    "singletons": np.array([0, 1, 2], np.int64),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("num_bins", [10, 4])
def test_value_and_gradient_equal_the_numpy_brute_force(ref, case, num_bins):
    labels = CASES[case]
    e = np.random.default_rng(4).normal(size=(len(labels), 3))
    loss = losses.FastAPLoss(num_bins=num_bins, dtype="float64")
    value, grad = value_and_grad(loss, labels, e)
    assert value == pytest.approx(np_fast_ap(e, labels, num_bins), rel=1e-10, abs=1e-12)
    numeric = ref.central_gradient(lambda x: np_fast_ap(x, labels, num_bins), e)
    np.testing.assert_allclose(grad, numeric, atol=1e-6)
    if case == "mixed":
        assert np.abs(grad).max() > 1e-3


def test_hand_case_on_the_bin_centres():
    """Distances on the bin centres (L = 4: z = 0, 1, 2, 3, 4) are counted in one bin each, so
    FastAP is the exact AP: query x = (1, 0) sees a positive at d = 1 (cos ½), a negative at
    d = 2 (cos 0) and a positive at d = 4 (cos −1): AP = (1/1 + 2/3)/2 = 5/6."""
    e = np.array([[1.0, 0.0], [0.5, np.sqrt(0.75)], [0.0, 1.0], [-1.0, 0.0]])
    labels = np.array([0, 0, 1, 0])
    loss = losses.FastAPLoss(num_bins=4, dtype="float64")
    terms, has_pos = loss.query_terms(loss_targets(labels), tf.constant(e))
    assert terms.numpy()[0] == pytest.approx(1 - 5 / 6, abs=1e-12)
    assert has_pos.numpy().tolist() == [1, 1, 0, 1]
    # query 2 (the only class-1 example) has no positive: not counted in the mean
    assert float(loss(labels, e)) == pytest.approx(np.sum(terms.numpy()) / 3, rel=1e-12)


def loss_targets(labels):
    from tfdml import targets

    return targets.unpack(tf.constant(labels))


@pytest.mark.parametrize("wrong", ["not_cumulative", "negatives_only"])
def test_a_wrong_formula_does_not_match(wrong):
    labels = CASES["mixed"]
    e = np.random.default_rng(7).normal(size=(len(labels), 3))
    got = float(losses.FastAPLoss(dtype="float64")(labels, e))
    assert got == pytest.approx(np_fast_ap(e, labels), rel=1e-10)
    assert abs(got - np_fast_ap(e, labels, wrong=wrong)) > 1e-3 * abs(got)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_reductions(reduction):
    labels = CASES["mixed"]
    e = np.random.default_rng(8).normal(size=(len(labels), 3))
    got = float(losses.FastAPLoss(tuple_reduction=reduction, dtype="float64")(labels, e))
    assert got == pytest.approx(np_fast_ap(e, labels, reduction=reduction), rel=1e-10)


def test_degenerate_batches():
    """One class (no negatives: AP = 1, loss 0), one example per class or a batch of one (no
    query with a positive: 0, zero gradient), identical and zero embeddings: finite."""
    for labels, e in [(np.array([1, 1, 1]), np.random.default_rng(0).normal(size=(3, 4))),
                      (np.array([0, 1, 2]), np.random.default_rng(1).normal(size=(3, 4))),
                      (np.array([3]), np.ones((1, 4)))]:
        value, grad = value_and_grad(losses.FastAPLoss(), labels, e.astype(np.float32))
        assert value == pytest.approx(0.0, abs=1e-6) and np.all(np.abs(grad) < 1e-6)
    for e in (np.ones((4, 3)), np.zeros((4, 3))):
        value, grad = value_and_grad(losses.FastAPLoss(), np.array([0, 0, 1, 1]), e.astype(np.float32))
        assert np.isfinite(value) and np.all(np.isfinite(grad))


def test_xla_with_an_unknown_batch_size_equals_eager(ref):
    ref.check_xla_equals_eager_with_unknown_batch(losses.FastAPLoss())
    ref.check_xla_equals_eager_with_unknown_batch(losses.FastAPLoss(num_bins=20))


def test_refuses_importance_distance_sampler_and_bad_bins():
    with pytest.raises(ValueError, match=r"FastAP is a ratio of soft counts .* not a sum of per-pair terms"):
        losses.FastAPLoss(importance=True)
    with pytest.raises(ValueError, match="squared Euclidean distance of unit-norm embeddings.*remove distance"):
        losses.FastAPLoss(distance="cosine")
    with pytest.raises(ValueError, match="takes no sampler"):
        losses.FastAPLoss(sampler="semi_hard")
    with pytest.raises(ValueError, match="num_bins must be an int >= 1"):
        losses.FastAPLoss(num_bins=0)
    with pytest.raises(ValueError, match="cannot use a cross-batch memory"):
        losses.FastAPLoss(memory={"size": 8})


def test_importance_columns_in_the_batch_are_not_used():
    """A batch with the design's columns gives the loss of its labels (the weights are not
    applied: FastAP has no importance-weighted form)."""
    labels = CASES["mixed"]
    e = np.random.default_rng(9).normal(size=(len(labels), 3)).astype(np.float32)
    y = {"label": labels, "class_size": np.full(len(labels), 5.0, np.float32),
         "w_pos": np.full(len(labels), 0.1, np.float32), "w_neg": np.full(len(labels), 0.01, np.float32)}
    assert float(losses.FastAPLoss()(y, e)) == pytest.approx(float(losses.FastAPLoss()(labels, e)), rel=1e-6)


def test_registered_serialised_and_saved(tmp_path, ref):
    loss = losses.get("fast_ap", num_bins=20)
    assert isinstance(loss, losses.FastAPLoss) and losses.LOSSES["fast_ap"] is losses.FastAPLoss
    again = losses.get(keras.saving.serialize_keras_object(loss))
    assert type(again) is losses.FastAPLoss and again.get_config() == loss.get_config() and again.num_bins == 20
    model, loaded = ref.keras_file_round_trip(loss, tmp_path / "m.keras")
    assert type(loaded.loss) is losses.FastAPLoss and loaded.loss.get_config() == loss.get_config()
    assert loss.needs_positive_pairs


def test_fit_trains():
    keras.utils.set_random_seed(0)
    encoder = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4), keras.layers.UnitNormalization()])
    model = models.EmbeddingModel(encoder)
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss=losses.FastAPLoss())
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 4)
    x = (rng.normal(size=(16, 6)) + 2.0 * np.eye(6)[labels]).astype(np.float32)
    history = model.fit(x, labels, batch_size=16, epochs=8, shuffle=False, verbose=0).history["loss"]
    assert np.all(np.isfinite(history)) and history[-1] < history[0]
