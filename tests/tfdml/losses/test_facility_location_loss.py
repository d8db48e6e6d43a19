"""FacilityLocationLoss against Song et al. 2017 §3.1–3.4, written here as loops over every
candidate medoid with scikit-learn's NMI, and against finite differences of that reference."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from sklearn import metrics as skm

from tfdml import losses
from tfdml.losses import facility_inference


def np_assign(d, medoids):
    """g(S): each example's nearest medoid's slot (lowest slot on a tie), a medoid its own."""
    out = []
    for i in range(len(d)):
        if i in medoids:
            out.append(medoids.index(i))
        else:
            out.append(int(np.argmin([d[i, m] for m in medoids])))
    return out


def np_nmi(labels, clusters, average):
    return skm.normalized_mutual_info_score(labels, clusters, average_method=average)


def np_facility(d, medoids):
    """F(X, S) = −Σ_i min_{j ∈ S} d(x_i, x_j) (§3.1)."""
    return -sum(min(d[i, m] for m in medoids) for i in range(len(d)))


def np_objective(d, labels, medoids, gamma, average):
    return np_facility(d, medoids) + gamma * (1 - np_nmi(labels, np_assign(d, medoids), average))


TIES = []  # set by np_medoids: True when a choice had two candidates within rounding


def best_of(scores):
    """The candidate of the highest score, the lowest index among those within rounding of it
    (two medoids giving one clustering can tie exactly, and float sums then order them by chance)."""
    top = max(scores.values())
    near = sorted(j for j, v in scores.items() if v >= top - 1e-9 * max(1.0, abs(top)))
    TIES.append(len(near) > 1)
    return near[0]


def np_medoids(d, labels, gamma, steps, average="geometric"):
    """Greedy loss-augmented inference (§3.3), then ``steps`` refinement rounds (§3.4)."""
    k = len(set(labels.tolist()))
    chosen = []
    for _ in range(k):
        chosen.append(best_of({j: np_objective(d, labels, chosen + [j], gamma, average)
                               for j in range(len(d)) if j not in chosen}))
    for _ in range(steps):
        clusters = np_assign(d, chosen)
        for s in range(k):
            members = [i for i in range(len(d)) if clusters[i] == s]
            scores = {}
            for m in members:
                trial = chosen[:s] + [m] + chosen[s + 1:]
                scores[m] = -sum(d[i, m] for i in members) + gamma * (
                    1 - np_nmi(labels, np_assign(d, trial), average))
            chosen[s] = best_of(scores)
    return chosen


def np_loss(e, labels, gamma=1.0, steps=5, average="geometric", medoids=None, oracle_sign=1.0):
    """ℓ = [F(X, S) + γ Δ(g(S), y*) − F̃(X, y*)]_+ with F̃ = Σ_k max_j −Σ_{i in k} d(x_i, x_j)."""
    d = np.sqrt(((e[:, None, :] - e[None, :, :]) ** 2).sum(-1))
    if medoids is None:
        medoids = np_medoids(d, labels, gamma, steps, average)
    oracle = 0.0
    for k in set(labels.tolist()):
        members = np.flatnonzero(labels == k)
        oracle += max(-d[np.ix_(members, [j])].sum() for j in members)
    return max(np_objective(d, labels, medoids, gamma, average) - oracle_sign * oracle, 0.0), medoids


def batch(seed, labels, dim=4):
    e = np.random.default_rng(seed).normal(size=(len(labels), dim))
    return e / np.linalg.norm(e, axis=1, keepdims=True)


LABELS = {
    "mixed": np.array([0, 0, 0, 1, 1, 2, 3, 3, 3, 3, 1, 0]),
    "pairs": np.array([7, 7, 3, 3, 9, 9, 1, 1]),
    "big_ids": np.array([2**40, 5, 2**40, 5, -3, -3, 5]),
}


@pytest.mark.parametrize("case", sorted(LABELS))
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("gamma, steps, average", [(1.0, 5, "geometric"), (4.0, 0, "geometric"),
                                                   (2.0, 2, "arithmetic"), (0.0, 1, "geometric")])
def test_matches_song_et_al(case, seed, gamma, steps, average):
    labels = LABELS[case]
    e = batch(seed, labels)
    loss = losses.FacilityLocationLoss(gamma=gamma, refinement_steps=steps, nmi_average=average, dtype="float64")
    TIES.clear()
    expected, medoids = np_loss(e, labels, gamma, steps, average)
    d = tf.constant(np.sqrt(((e[:, None] - e[None]) ** 2).sum(-1)))
    chosen, _ = loss.medoids(d, tf.constant(labels))
    if not any(TIES):  # on a tie either medoid is the paper's; the value below is the same
        assert chosen.numpy()[: len(medoids)].tolist() == medoids
    assert (chosen.numpy()[len(medoids):] == -1).all()
    np.testing.assert_allclose(float(loss(labels, e)), expected, rtol=1e-9, atol=1e-12)


def test_candidate_nmi_is_sklearn_nmi():
    """Every candidate's NMI, from the count products, equals scikit-learn's on the moved
    assignment (a random base assignment, random moves)."""
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 4, size=15)
    assign = rng.integers(0, 5, size=15)
    moved = rng.random((15, 15)) < 0.3
    classes = facility_inference.BatchClasses(tf.constant(labels))
    for average in ("geometric", "arithmetic"):
        got = facility_inference.candidate_nmi(tf.constant(moved), tf.constant(assign, tf.int32), classes, average)
        want = [np_nmi(labels, np.where(moved[j], 5, assign), average) for j in range(15)]
        np.testing.assert_allclose(got.numpy(), want, atol=1e-12)


def test_a_wrong_formula_does_not_match():
    """The reference tells the paper's loss from near misses: without the refinement, with an
    arithmetic NMI, or with the oracle's sign flipped, the value moves."""
    labels = LABELS["mixed"]
    e = batch(10, labels, dim=2)
    got = float(losses.FacilityLocationLoss(gamma=4.0, dtype="float64")(labels, e))
    np.testing.assert_allclose(got, np_loss(e, labels, 4.0)[0], rtol=1e-9)
    for wrong in ({"steps": 0}, {"average": "arithmetic"}, {"oracle_sign": -1.0}):
        assert abs(got - np_loss(e, labels, 4.0, **wrong)[0]) > 1e-4, wrong


def test_gradient_is_finite_differences_of_the_reference():
    """With the medoids the inference chooses held fixed (the paper's subgradient), the
    gradient equals central differences of the NumPy loss."""
    labels = LABELS["mixed"]
    e = batch(5, labels)
    loss = losses.FacilityLocationLoss(gamma=1.0, dtype="float64")
    x = tf.constant(e)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = loss(labels, x)
    grad = tape.gradient(value, x).numpy()
    assert float(value) > 0
    medoids = np_loss(e, labels, 1.0)[1]
    eps = 1e-6
    numeric = np.zeros_like(e)
    for idx in np.ndindex(*e.shape):
        plus, minus = e.copy(), e.copy()
        plus[idx] += eps
        minus[idx] -= eps
        numeric[idx] = (np_loss(plus, labels, medoids=medoids)[0] - np_loss(minus, labels, medoids=medoids)[0]) / (2 * eps)
    np.testing.assert_allclose(grad, numeric, atol=1e-6)


def test_hand_case():
    """Two tight classes far apart: the greedy picks one medoid per class, NMI = 1 and F = F̃,
    so ℓ = 0; one point of class 0 placed inside class 1 makes the clustering wrong and the
    loss is that point's excess distance plus γ(1 − NMI)."""
    e = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 0.0], [5.1, 0.0]])
    labels = np.array([0, 0, 1, 1])
    loss = losses.FacilityLocationLoss(gamma=1.0, dtype="float64")
    np.testing.assert_allclose(float(loss(labels, e)), 0.0, atol=1e-12)
    e2 = np.array([[0.0, 0.0], [5.05, 0.0], [5.0, 0.0], [5.1, 0.0]])
    # Inference keeps the geometric clusters {0}, {1, 2, 3}: F = −(0.05 + 0.05), NMI < 1;
    # the oracle pays 5.05 for class 0 and 0.1 for class 1.
    nmi = np_nmi(labels, [0, 1, 1, 1], "geometric")
    expected = -0.1 + (1 - nmi) + 5.05 + 0.1
    np.testing.assert_allclose(float(loss(labels, e2)), expected, rtol=1e-9)


@pytest.mark.parametrize("labels", [[4, 4, 4, 4], [0, 1, 2, 3]])
def test_degenerate_batches_are_zero(labels):
    """One class: the oracle is the optimum and NMI = 1; every example its own class: every
    example is a medoid, F = F̃ = 0, NMI = 1."""
    e = batch(6, labels)
    x = tf.constant(e, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = losses.FacilityLocationLoss(gamma=3.0)(np.array(labels), x)
    np.testing.assert_allclose(float(value), 0.0, atol=1e-6)
    assert np.isfinite(tape.gradient(value, x).numpy()).all()


def test_xla_with_an_unknown_batch_size_equals_eager():
    loss = losses.FacilityLocationLoss(gamma=2.0)
    fn = tf.function(lambda y, e: loss(y, e), jit_compile=True,
                     input_signature=[tf.TensorSpec([None], tf.int64), tf.TensorSpec([None, 4], tf.float32)])
    for case in ("mixed", "pairs", "big_ids"):
        labels = LABELS[case]
        e = batch(7, labels).astype(np.float32)
        np.testing.assert_allclose(float(fn(tf.constant(labels, tf.int64), e)), float(loss(labels, e)), rtol=1e-5)


def test_config_round_trip_and_arguments():
    loss = losses.get("facility_location", gamma=0.5, refinement_steps=2, nmi_average="arithmetic")
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert (again.gamma, again.refinement_steps, again.nmi_average) == (0.5, 2, "arithmetic")
    for bad in ({"gamma": -1.0}, {"refinement_steps": 1.5}, {"nmi_average": "max"}, {"sampler": "hard"},
                {"tuple_reduction": "sum"}, {"importance": True}):
        with pytest.raises(ValueError):
            losses.FacilityLocationLoss(**bad)
