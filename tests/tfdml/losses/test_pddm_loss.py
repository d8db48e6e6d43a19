"""PDDMLayer and PDDMLoss against brute-force NumPy.

The mining rule is the paper's (Huang, Loy & Tang 2016, arXiv:1610.08904 p. 4, stated
in the text without an equation number): one hard quadruplet a batch, the most
dissimilar positive pair (î, ĵ) = argmin_{(i,j)∈P̂} S_ij and the hard negatives
k̂ = argmax_{(î,k)∈N̂} S_îk, l̂ = argmax_{(ĵ,l)∈N̂} S_ĵl; the hand cases below check it.
The unit and the two hinges are tfdml's forms (the paper's printed equations for them
were not recovered; see tfdml.pddm and tfdml.losses.pddm):

    S_ij = w_s · ReLU(W_c [û ; v̂] + b_c) + b_s,  û = n(ReLU(W_u n(|f_i − f_j|) + b_u)),
                                                  v̂ = n(ReLU(W_v n((f_i + f_j)/2) + b_v)),
    loss = E_m + λ E_e on the hard quadruplet (î, ĵ, k̂, l̂) mined by S:
    E_m = [α + S_îk̂ − S_îĵ]_+ + [α + S_ĵl̂ − S_îĵ]_+,  E_e = [β + D²_îĵ − D²_îk̂]_+ + [β + D²_îĵ − D²_ĵl̂]_+.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdml import losses
from tfdml.losses import pddm as pddm_loss
from tfdml.pddm import PDDMLayer, pddm_scores


def _n(x):
    norm = np.sqrt(np.sum(x * x))
    return x / norm if norm > 0 else x


def np_unit(weights, a, b):
    """S [A, B] by a double loop over the pairs, in float64."""
    w = {name: np.asarray(value, np.float64) for name, value in weights.items()}
    out = np.zeros((len(a), len(b)))
    for i in range(len(a)):
        for j in range(len(b)):
            u1 = _n(np.abs(a[i] - b[j]))
            v1 = _n((a[i] + b[j]) / 2.0)
            u = _n(np.maximum(u1 @ w["w_u"] + w["b_u"], 0.0))
            v = _n(np.maximum(v1 @ w["w_v"] + w["b_v"], 0.0))
            c = np.maximum(np.concatenate([u, v]) @ w["w_c"] + w["b_c"], 0.0)
            out[i, j] = c @ w["w_s"] + w["b_s"]
    return out


def unit_weights(unit):
    return {v.name: v.numpy() for v in unit.weights}


def randomised(unit, seed):
    """``unit`` with every weight, biases included, drawn from N(0, 0.5²): with the initial zero
    biases the normalisation of u1 and v1 would not change S (ReLU of a linear map commutes
    with a positive scale), so a test could not tell it is missing. b_c is drawn from
    1 + |N(0, 0.5²)| so that no pair has an all-zero c: such pairs all score b_s, and their
    ties would make the mined negative a matter of rounding."""
    rng = np.random.default_rng(seed)
    for v in unit.weights:
        v.assign(rng.normal(scale=0.5, size=v.shape).astype(v.dtype))
    unit.b_c.assign((1.0 + np.abs(rng.normal(scale=0.5, size=unit.b_c.shape))).astype(unit.b_c.dtype))
    return unit


def np_pddm(s, e, labels, alpha=0.5, beta=0.5, lam=1.0, variant="quadruplet", positives="hardest",
            wrong=None):
    """The loss by loops: positive pairs whose both ends have negatives, the paper's hard pair
    (î, ĵ) = argmin S_ij (first in row-major order) or all of them, each end with its hard
    negative argmax_k S_ik (k̂ for î, l̂ for ĵ)."""
    e = np.asarray(e, np.float64)
    n = len(labels)
    d2 = np.array([[np.sum((e[i] - e[k]) ** 2) for k in range(n)] for i in range(n)])
    negs = [[k for k in range(n) if labels[k] != labels[i]] for i in range(n)]
    pick = (lambda ks, i: min(ks, key=lambda k: (s[i, k], k))) if wrong == "easiest_negative" else \
        (lambda ks, i: max(ks, key=lambda k: (s[i, k], -k)))
    pairs = [(i, j) for i in range(n) for j in range(n)
             if i != j and labels[i] == labels[j] and negs[i] and negs[j]]
    if not pairs:
        return 0.0
    if positives == "hardest":
        pairs = [max(pairs, key=lambda p: (s[p], (-p[0], -p[1])))] if wrong == "easiest_positive" else \
            [min(pairs, key=lambda p: (s[p], p))]
    dist = np.sqrt(d2) if wrong == "distance_not_squared" else d2
    total = 0.0
    for i, j in pairs:
        k, l = pick(negs[i], i), pick(negs[j], j)
        total += max(alpha + s[i, k] - s[i, j], 0.0) + lam * max(beta + dist[i, j] - dist[i, k], 0.0)
        if variant == "quadruplet" and wrong != "one_header":
            total += max(alpha + s[j, l] - s[i, j], 0.0) + lam * max(beta + dist[i, j] - dist[j, l], 0.0)
    return total / len(pairs)


def reference(loss, labels, e, **kw):
    e64 = np.asarray(e, np.float64)
    s = np_unit(unit_weights(loss.unit), e64, e64)
    return np_pddm(s, e64, labels, alpha=loss.alpha, beta=loss.beta, lam=loss.lam, variant=loss.variant,
                   positives=loss.positives, **kw)


# -- the unit ---------------------------------------------------------------------------------
def test_unit_matches_the_loop_and_is_symmetric(ref):
    unit = randomised(PDDMLayer(6, units=5, hidden_units=4, seed=3), 0)
    a, b = ref.embeddings(5, seed=1), ref.embeddings(7, seed=2)
    np.testing.assert_allclose(unit([a, b]).numpy(), np_unit(unit_weights(unit), a, b), rtol=1e-5, atol=1e-6)
    s = unit(a).numpy()
    np.testing.assert_allclose(s, s.T, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(s, np_unit(unit_weights(unit), a, a), rtol=1e-5, atol=1e-6)


def test_unit_biases_are_used():
    """Biases set by hand: with zero kernels S = w_s · ReLU(b_c) + b_s for every pair."""
    unit = PDDMLayer(3, units=2, hidden_units=2, seed=0)
    for v in unit.weights:
        v.assign(np.zeros(v.shape, np.float32))
    unit.b_c.assign([1.0, -2.0])
    unit.w_s.assign([3.0, 5.0])
    unit.b_s.assign(0.25)
    np.testing.assert_allclose(unit(np.eye(3, dtype=np.float32)).numpy(), np.full((3, 3), 3.25))


def test_pddm_scores_ranks_a_gallery_in_chunks(ref):
    unit = randomised(PDDMLayer(6, units=4, hidden_units=3, seed=5), 1)
    q, g = ref.embeddings(5, seed=3), ref.embeddings(4, seed=4)
    expected = np_unit(unit_weights(unit), q, g)
    for chunk in (1, 2, 256):
        np.testing.assert_allclose(pddm_scores(unit, q, g, chunk_size=chunk).numpy(), expected, rtol=1e-5,
                                   atol=1e-6)
    with pytest.raises(ValueError, match="chunk_size must be an int >= 1"):
        pddm_scores(unit, q, g, chunk_size=0)


def test_unit_refuses_features_of_another_size(ref):
    with pytest.raises(ValueError, match="embedding_dim=6, got features of size 4"):
        PDDMLayer(6)(ref.embeddings(3, dim=4))
    with pytest.raises(ValueError, match="units must be an int >= 1"):
        PDDMLayer(6, units=0)


# -- the loss ---------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["mixed", "one_class", "no_positive"])
@pytest.mark.parametrize("variant", ["quadruplet", "triplet"])
@pytest.mark.parametrize("positives", ["hardest", "all"])
@pytest.mark.parametrize("seed", [0, 1])
def test_loss_matches_the_loops(ref, case, variant, positives, seed):
    labels = ref.LABELS[case]
    e = ref.embeddings(len(labels), seed=seed)
    loss = losses.PDDMLoss(embedding_dim=6, variant=variant, positives=positives, units=8, hidden_units=5,
                           seed=seed + 10, alpha=0.3, beta=0.7, lam=0.5)
    randomised(loss.unit, seed)
    expected = reference(loss, labels, e)
    np.testing.assert_allclose(float(loss(labels, e)), expected, rtol=1e-5, atol=1e-6)
    if case != "mixed":
        assert expected == 0.0


def test_hand_case():
    """Constant S (zero kernels): every hinge on S is α; the hardest pair is the first, (0, 1),
    and both negatives are the first, point 2. D²_01 = 1, D²_02 = 0.25, D²_12 = 1.25:
    E_e = [0.5 + 1 − 0.25]_+ + [0.5 + 1 − 1.25]_+ = 1.5, E_m = 2α = 1."""
    e = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.5], [3.0, 0.0]], np.float32)
    labels = np.array([0, 0, 1, 1])
    for variant, expected in (("quadruplet", 1.0 + 1.5), ("triplet", 0.5 + 1.25)):
        loss = losses.PDDMLoss(embedding_dim=2, variant=variant, alpha=0.5, beta=0.5, lam=1.0, seed=0)
        for v in loss.unit.weights:
            v.assign(np.zeros(v.shape, np.float32))
        assert float(loss(labels, e)) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("wrong, positives", [("easiest_negative", "all"), ("distance_not_squared", "all"),
                                              ("one_header", "all"), ("easiest_positive", "hardest")])
def test_a_wrong_formula_is_caught(ref, wrong, positives):
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=4)
    loss = losses.PDDMLoss(embedding_dim=6, positives=positives, seed=2)
    randomised(loss.unit, 2)
    got = float(loss(labels, e))
    assert got == pytest.approx(reference(loss, labels, e), rel=1e-5)
    assert abs(got - reference(loss, labels, e, wrong=wrong)) > 1e-3


def test_the_test_fails_when_the_terms_are_wrong(ref, monkeypatch):
    """The library's terms with the second header dropped no longer match the reference."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=2)
    loss = losses.PDDMLoss(embedding_dim=6, positives="all", seed=2)
    expected = reference(loss, labels, e)
    original = pddm_loss.pddm_terms
    monkeypatch.setattr(pddm_loss, "pddm_terms", lambda *args: original(*args[:-1], "triplet"))
    assert abs(float(loss(labels, e)) - expected) > 1e-3


# -- the paper's mining rule, by hand ----------------------------------------------------------
#: S of a batch of five, labels 0 0 0 1 1. Positive pairs: S_01 = 0.9, S_02 = 0.4, S_12 = 0.7,
#: S_34 = 0.6, so the most dissimilar is (î, ĵ) = (0, 2). Negatives of 0: S_03 = 0.5, S_04 = 0.8,
#: so k̂ = 4; of 2: S_23 = 0.3, S_24 = 0.1, so l̂ = 3; of 1: S_13 = S_14 = 0.2 (a tie: 3); of 3:
#: S_30 = 0.5 > S_32 = 0.3 > S_31 = 0.2, so 0; of 4: S_40 = 0.8, so 0.
HAND_LABELS = np.array([0, 0, 0, 1, 1])
HAND_S = np.array([[1.0, 0.9, 0.4, 0.5, 0.8],
                   [0.9, 1.0, 0.7, 0.2, 0.2],
                   [0.4, 0.7, 1.0, 0.3, 0.1],
                   [0.5, 0.2, 0.3, 1.0, 0.6],
                   [0.8, 0.2, 0.1, 0.6, 1.0]])


def _hand_masks(labels=HAND_LABELS):
    same = labels[:, None] == labels[None, :]
    return tf.constant(same & ~np.eye(len(labels), dtype=bool)), tf.constant(~same)


def _mined_pair(scores, valid):
    return [tuple(p) for p in np.argwhere(pddm_loss.hardest_positive_pair(tf.constant(scores), valid).numpy())]


def test_mining_picks_the_most_dissimilar_positive_pair_and_its_hard_negatives():
    positive, negative = _hand_masks()
    assert _mined_pair(HAND_S, positive) == [(0, 2)]
    np.testing.assert_array_equal(pddm_loss.hardest_negatives(tf.constant(HAND_S), negative).numpy(),
                                  [4, 3, 3, 0, 0])


def test_mining_ties_go_to_the_first_pair_in_row_major_order():
    positive, _ = _hand_masks()
    tied = HAND_S.copy()
    tied[3, 4] = tied[4, 3] = 0.4          # S_34 = S_02: (0, 2) comes first
    assert _mined_pair(tied, positive) == [(0, 2)]
    tied[3, 4] = tied[4, 3] = 0.35         # now the lowest
    assert _mined_pair(tied, positive) == [(3, 4)]
    assert _mined_pair(tied, tf.zeros_like(positive)) == []


def test_mining_under_xla_with_an_unknown_batch_gives_the_hand_quadruplet():
    spec = [tf.TensorSpec([None, None], tf.float64), tf.TensorSpec([None, None], tf.bool),
            tf.TensorSpec([None, None], tf.bool)]

    @tf.function(jit_compile=True, input_signature=spec)
    def mine(scores, positive, negative):
        return pddm_loss.hardest_positive_pair(scores, positive), pddm_loss.hardest_negatives(scores, negative)

    positive, negative = _hand_masks()
    pair, negatives = mine(tf.constant(HAND_S), positive, negative)
    assert [tuple(p) for p in np.argwhere(pair.numpy())] == [(0, 2)]
    np.testing.assert_array_equal(negatives.numpy(), [4, 3, 3, 0, 0])

def test_loss_on_the_hand_mined_quadruplet(monkeypatch):
    """S fixed to HAND_S: the quadruplet is (î, ĵ, k̂, l̂) = (0, 2, 4, 3). With e_0 = (0, 0),
    e_2 = (0, 1), e_3 = (2, 0), e_4 = (0, 0.5): D²_02 = 1, D²_04 = 0.25, D²_23 = 5.
    E_m = [0.5 + 0.8 − 0.4]_+ + [0.5 + 0.3 − 0.4]_+ = 1.3, E_e = [0.5 + 1 − 0.25]_+ + [0.5 + 1 − 5]_+ = 1.25;
    λ = 0.5: 1.3 + 0.625. Triplet: 0.9 + 0.5 · 1.25."""
    e = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [2.0, 0.0], [0.0, 0.5]], np.float32)
    for variant, expected in (("quadruplet", 1.925), ("triplet", 1.525)):
        loss = losses.PDDMLoss(embedding_dim=2, variant=variant, alpha=0.5, beta=0.5, lam=0.5, seed=0)
        monkeypatch.setattr(loss.unit, "scores", lambda x: tf.constant(HAND_S, x.dtype))
        assert float(loss(HAND_LABELS, e)) == pytest.approx(expected, rel=1e-6)
        assert np_pddm(HAND_S, e, HAND_LABELS, lam=0.5, variant=variant) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("positives", ["hardest", "all"])
def test_gradient_matches_finite_differences_of_the_reference(ref, positives):
    """d loss / d embeddings against central differences, in float64, of the reference (the
    paper's mining rule on S, tfdml's unit and hinges)."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), dim=3, seed=5).astype(np.float64)
    loss = losses.PDDMLoss(embedding_dim=3, positives=positives, units=4, hidden_units=3, seed=7,
                           dtype="float64")
    weights = unit_weights(randomised(loss.unit, 3))

    def reference_of(flat):
        x = flat.reshape(e.shape)
        return np_pddm(np_unit(weights, x, x), x, labels, positives=positives)

    numeric = ref.central_gradient(reference_of, e.ravel()).reshape(e.shape)
    x = tf.constant(e)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = loss(labels, x)
    analytic = tape.gradient(value, x).numpy()
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)
    assert np.abs(analytic).max() > 1e-3


def test_the_unit_is_trained_by_the_loss(ref):
    """E_m reaches the unit's weights: S's last layer gets a gradient equal to the reference's."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), dim=3, seed=6).astype(np.float64)
    loss = losses.PDDMLoss(embedding_dim=3, units=4, hidden_units=3, seed=8, dtype="float64")
    weights = unit_weights(randomised(loss.unit, 4))

    def reference_of(w_s):
        return np_pddm(np_unit({**weights, "w_s": w_s}, e, e), e, labels)

    numeric = ref.central_gradient(reference_of, weights["w_s"].astype(np.float64))
    with tf.GradientTape() as tape:
        value = loss(labels, tf.constant(e))
    analytic = tape.gradient(value, loss.unit.w_s).numpy()
    np.testing.assert_allclose(analytic, numeric, rtol=1e-4, atol=1e-7)
    assert np.abs(analytic).max() > 1e-3


def test_degenerate_batches_give_zero_and_finite_gradients(ref):
    loss = losses.PDDMLoss(embedding_dim=6, seed=1)
    for labels, e, zero in [(np.array([7]), ref.embeddings(1), True),                  # one example
                            (np.array([1, 1, 1]), ref.embeddings(3), True),            # one class
                            (np.array([0, 1, 2]), ref.embeddings(3), True),            # one example a class
                            (np.array([0, 0, 1, 1]), np.zeros((4, 6), np.float32), False)]:  # identical
        x = tf.constant(e)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            value = loss(labels, x)
        grads = [tape.gradient(value, x)] + tape.gradient(value, loss.unit.trainable_variables)
        assert np.isfinite(float(value))
        assert all(np.all(np.isfinite(g.numpy())) for g in grads if g is not None)
        if zero:
            assert float(value) == 0.0
            assert all(not np.any(g.numpy()) for g in grads if g is not None)


@pytest.mark.parametrize("variant", ["quadruplet", "triplet"])
@pytest.mark.parametrize("positives", ["hardest", "all"])
def test_xla_with_an_unknown_batch_equals_eager(ref, variant, positives):
    ref.check_xla_equals_eager_with_unknown_batch(
        losses.PDDMLoss(embedding_dim=6, variant=variant, positives=positives, seed=4))


def test_keras_file_keeps_the_trained_unit(ref, tmp_path):
    """A fitted EmbeddingModel trains the unit, saves it in the .keras file and loads it back;
    the encoder (what exports carry) holds none of its weights."""
    loss = losses.PDDMLoss(embedding_dim=3, units=4, hidden_units=3, seed=1)
    initial = [v.numpy().copy() for v in loss.unit.weights]
    model, loaded = ref.keras_file_round_trip(loss, tmp_path / "m.keras")
    trained = [v.numpy() for v in loss.unit.weights]
    assert any(not np.array_equal(a, b) for a, b in zip(initial, trained))
    restored = loaded._metric_loss.unit
    for want, got in zip(trained, restored.weights):
        np.testing.assert_array_equal(got.numpy(), want)
    unit_ids = {id(v) for v in loss.unit.weights}
    assert not unit_ids & {id(v) for v in model.encoder.weights}


def test_serialisation_round_trip_and_registry(ref):
    loss = losses.PDDMLoss(embedding_dim=6, variant="triplet", positives="all", alpha=0.2, beta=0.3, lam=0.4,
                           units=7, hidden_units=5, seed=9, name="p")
    config = keras.saving.serialize_keras_object(loss)
    restored = keras.saving.deserialize_keras_object(config)
    assert type(restored) is losses.PDDMLoss and restored.get_config() == loss.get_config()
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=2)
    np.testing.assert_allclose(float(restored(labels, e)), float(loss(labels, e)), rtol=1e-6)
    assert losses.get("pddm", embedding_dim=6).variant == "quadruplet"
    unit = loss.unit
    assert keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(unit)).get_config() == \
        unit.get_config()
    assert loss.parameter_layers == [unit]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="needs embedding_dim"):
        losses.PDDMLoss()
    with pytest.raises(ValueError, match="variant must be one of 'quadruplet', 'triplet'"):
        losses.PDDMLoss(embedding_dim=4, variant="pair")
    with pytest.raises(ValueError, match="positives must be one of"):
        losses.PDDMLoss(embedding_dim=4, positives="semi_hard")
    with pytest.raises(ValueError, match="takes no sampler; remove sampler"):
        losses.PDDMLoss(embedding_dim=4, sampler="hard")
    with pytest.raises(ValueError, match="takes no distance; remove distance"):
        losses.PDDMLoss(embedding_dim=4, distance="cosine")
    with pytest.raises(ValueError, match="no importance-weighted form"):
        losses.PDDMLoss(embedding_dim=4, importance=True)
    with pytest.raises(ValueError, match="cannot use a cross-batch memory"):
        losses.PDDMLoss(embedding_dim=4, memory={"size": 8})
