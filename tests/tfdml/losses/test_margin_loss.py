"""MarginLoss against Wu et al. 2017 §4 (margin loss, learned β, ν-regulariser) and training tests."""

import numpy as np
import pytest
import keras
import tensorflow as tf

from tfdml.losses import MarginLoss, MarginParameters


def np_margin(d, pos, neg, beta, alpha, nu):
    """Wu §4: ℓ(i,j) = (α + y_ij(D_ij − β(i)))_+, y ∈ {−1, 1}; objective Σ ℓ + ν β(i) per pair,
    divided by the number of pairs with ℓ > 0 (at least 1), as in Wu's reference code."""
    total, active = 0.0, 0.0
    n = len(d)
    for i in range(n):
        for j in range(n):
            for w, y in ((pos[i, j], 1.0), (neg[i, j], -1.0)):
                if w:
                    term = max(alpha + y * (d[i, j] - beta[i]), 0.0)
                    total += w * (term + nu * beta[i])
                    active += w * (term > 0)
    return total / max(active, 1.0)


def set_betas(loss, seed, num_classes=None, num_examples=None):
    rng = np.random.default_rng(seed)
    params = loss.margin_parameters
    params.beta0.assign(1.0 + 0.2 * rng.random())
    if num_classes:
        params.beta_class.assign(0.2 * rng.normal(size=num_classes))
    if num_examples:
        params.beta_img.assign(0.2 * rng.normal(size=num_examples))


def np_beta(loss, labels, example_id=None):
    p = loss.margin_parameters
    beta = np.full(len(labels), float(p.beta0.numpy()))
    if p.beta_class is not None:
        beta += p.beta_class.numpy()[labels]
    if p.beta_img is not None:
        beta += p.beta_img.numpy()[example_id]
    return beta


@pytest.mark.parametrize("case", ["mixed", "one_class", "no_positive"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_margin_all_pairs_wu_section4(ref, case, seed):
    labels = ref.LABELS[case]
    n = len(labels)
    e = ref.embeddings(n, seed=seed)
    example_id = np.random.default_rng(seed).permutation(20)[:n].astype(np.int32)
    loss = MarginLoss(alpha=0.3, nu=0.1, num_classes=6, num_examples=20, sampler=None)
    set_betas(loss, seed, 6, 20)
    pos, neg = ref.pos_neg(labels, ref.candidates(labels))
    expected = np_margin(ref.pairwise(e), pos, neg, np_beta(loss, labels, example_id), 0.3, 0.1)
    y = ref.importance_targets(labels, example_id=example_id)
    np.testing.assert_allclose(float(loss(y, e)), expected, rtol=1e-5)


@pytest.mark.parametrize("seed", [1, 8])
def test_margin_distance_weighted_same_selection(ref, seed):
    """Default sampler (distance weighted, Wu §4): NumPy loss on the sampler's selection for seed [s, 0]."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), dim=8, seed=seed)
    loss = MarginLoss(num_classes=6, nu=0.05, seed=seed)
    set_betas(loss, seed, 6)
    got = float(loss(labels, e))
    d = ref.pairwise(e)
    sel = loss.sampler(
        d.astype(np.float32), labels, seed=tf.constant([seed, 0], tf.int32), embedding_dim=8
    )
    trips = ref.triplet_list(sel)
    assert trips  # the selection is not empty
    pos, neg = ref.pairs_from_triplets(trips, len(labels))
    expected = np_margin(d, pos, neg, np_beta(loss, labels), 0.2, 0.05)
    np.testing.assert_allclose(got, expected, rtol=1e-5)


@pytest.mark.parametrize("seed", [0, 4])
def test_margin_semi_hard_numpy_selection(ref, seed):
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=seed)
    d = ref.pairwise(e)
    trips = ref.semi_hard_triplets(d, labels, ref.candidates(labels))
    pos, neg = ref.pairs_from_triplets(trips, len(labels))
    loss = MarginLoss(num_classes=4, sampler="semi_hard")
    set_betas(loss, seed, 4)
    expected = np_margin(d, pos, neg, np_beta(loss, labels), 0.2, 0.0)
    np.testing.assert_allclose(float(loss(labels, e)), expected, rtol=1e-5)


def test_margin_parameters_are_variables():
    loss = MarginLoss(num_classes=5, num_examples=7, learn_beta0=False)
    (params,) = [p for p in loss.parameter_layers if isinstance(p, MarginParameters)]
    names = sorted(v.name for v in params.trainable_variables)
    assert names == ["beta_class", "beta_img"]
    assert float(params.beta0.numpy()) == pytest.approx(1.2)
    assert np.all(params.beta_class.numpy() == 0) and params.beta_class.shape == (5,)
    assert MarginLoss(sampler=None).margin_parameters.beta0.trainable


def test_margin_bad_input(ref):
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels))
    with pytest.raises(ValueError, match="num_classes"):
        MarginLoss(num_classes=3, sampler=None)(labels, e)  # labels go up to 3
    with pytest.raises(ValueError, match="example_id"):
        MarginLoss(num_examples=30, sampler=None)(labels, e)
    with pytest.raises(ValueError, match="alpha"):
        MarginLoss(alpha=-1.0)
    with pytest.raises(ValueError, match="num_classes"):
        MarginLoss(num_classes=0)
    with pytest.raises(ValueError, match="Unknown sampler"):
        MarginLoss(sampler="no_such_sampler")


def _model(seed):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((5,))
    x = keras.layers.Dense(8)(inputs)
    outputs = keras.layers.UnitNormalization()(x)
    return keras.Model(inputs, outputs)


def test_margin_beta_class_trains_and_survives_save_load(ref, tmp_path):
    """β_class is a real variable: model.fit moves it; save_weights / load_weights restore it."""
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 4).astype(np.int32)
    x = (rng.normal(size=(16, 5)) + labels[:, None]).astype(np.float32)
    loss = MarginLoss(num_classes=4, nu=0.1, seed=3)
    model = _model(0)
    model.loss_parameters = loss.parameter_layers[0]
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss)
    assert any(v is loss.margin_parameters.beta_class for v in model.trainable_variables)
    model.fit(x, labels, batch_size=16, epochs=3, shuffle=False, verbose=0)
    trained = loss.margin_parameters.beta_class.numpy()
    assert np.abs(trained).max() > 1e-3
    path = str(tmp_path / "m.weights.h5")
    model.save_weights(path)

    loss2 = MarginLoss(num_classes=4, nu=0.1, seed=3)
    model2 = _model(1)
    model2.loss_parameters = loss2.parameter_layers[0]
    model2.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss2)
    model2.load_weights(path)
    np.testing.assert_array_equal(loss2.margin_parameters.beta_class.numpy(), trained)
    np.testing.assert_array_equal(model2.predict(x, verbose=0), model.predict(x, verbose=0))
