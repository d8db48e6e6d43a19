"""CircleLoss against Sun et al. 2020, Eq. 6 with the self-paced weights of Eq. 5 and the
relaxation of Eq. 8, written here as loops over anchors and pairs."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.tfdml.losses.test_loss_common import value_and_grad
from tfdml import losses, models, samplers

CASES = ["mixed", "one_class", "no_positive"]


def np_circle(s, pos, neg, m=0.25, gamma=256.0, alpha_sim=None, delta_p=None, delta_n=None,
              reduction="mean"):
    """Per anchor i with positives and negatives:
    log[1 + Σ_k Σ_j exp(γ (α_n^k (S_ik − Δ_n) − α_p^j (S_ij − Δ_p)))], α_p^j = [1 + m − S_ij]_+,
    α_n^k = [S_ik + m]_+ (computed from ``alpha_sim``, default ``s``: the weights held
    constant), Δ_p = 1 − m, Δ_n = m; a pair of multiplicity c counts c times. Then the mean
    over those anchors (``"mean"``), over those with a loss > 0 (``"mean_active"``), or the sum."""
    alpha_sim = s if alpha_sim is None else alpha_sim
    delta_p = 1.0 - m if delta_p is None else delta_p
    delta_n = m if delta_n is None else delta_n
    n = len(s)
    terms = []
    for i in range(n):
        exponents = [0.0]  # the 1 inside the log
        for k in range(s.shape[1]):
            for j in range(s.shape[1]):
                copies = int(neg[i, k] * pos[i, j])
                a_n = max(alpha_sim[i, k] + m, 0.0)
                a_p = max(1.0 + m - alpha_sim[i, j], 0.0)
                exponents += [gamma * (a_n * (s[i, k] - delta_n) - a_p * (s[i, j] - delta_p))] * copies
        if pos[i].sum() > 0 and neg[i].sum() > 0:
            terms.append(np.logaddexp.reduce(exponents))
    if reduction == "sum":
        return float(sum(terms))
    if reduction == "mean_active":
        terms = [t for t in terms if t > 0]
    return float(np.mean(terms)) if terms else 0.0


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("m, gamma", [(0.25, 256.0), (0.4, 80.0), (0.25, 4.0)])
def test_all_pairs_match_sun_eq6(ref, case, seed, m, gamma):
    labels = ref.LABELS[case]
    e = ref.embeddings(len(labels), seed=seed, normalize=False)
    s = ref.cosine(e)
    pos, neg = ref.pos_neg(labels, ref.candidates(labels))
    got = float(losses.CircleLoss(m=m, gamma=gamma)(labels, e))
    np.testing.assert_allclose(got, np_circle(s, pos, neg, m, gamma), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("wrong", [{"delta_p": 1.25}, {"delta_n": -0.25}, {"alpha_sim": "squared"}])
def test_a_wrong_formula_does_not_match(ref, wrong):
    """The reference separates the paper's Δ_p, Δ_n and weights from near misses: with a
    wrong Δ (1 + m for 1 − m, −m for m) or wrong weights the loss does not match."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=2, normalize=False)
    s = ref.cosine(e)
    pos, neg = ref.pos_neg(labels, ref.candidates(labels))
    if wrong.get("alpha_sim") == "squared":
        wrong = {"alpha_sim": s**2}
    got = float(losses.CircleLoss(gamma=16.0)(labels, e))
    np.testing.assert_allclose(got, np_circle(s, pos, neg, gamma=16.0), rtol=1e-5)
    assert abs(got - np_circle(s, pos, neg, gamma=16.0, **wrong)) > 1e-2 * abs(got)


def test_hand_case():
    """Two identical class-0 points (S = 1) and an orthogonal class-1 point (S = 0): anchors 0
    and 1 have α_p = α_n = m and the exponent γ (m (0 − m) − m (1 − (1 − m))) = −2γm²;
    anchor 2 has no positive and is not counted: the mean is softplus(−2γm²)."""
    e = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], np.float32)
    for m, gamma in [(0.25, 4.0), (0.25, 256.0), (0.4, 80.0)]:
        expected = np.log1p(np.exp(-2 * gamma * m * m))
        got = float(losses.CircleLoss(m=m, gamma=gamma, dtype="float64")([0, 0, 1], e))
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    # Labels 0, 1, 0: anchor 0 has its positive 2 at S = 0 (α_p = 1.25) and its negative 1 at
    # S = 1 (α_n = 1.25): γ (1.25 (1 − 0.25) − 1.25 (0 − 0.75)) = 7.5 with γ = 4; anchor 2 has
    # its positive 0 at S = 0 and its negative 1 at S = 0 (α_n = 0.25):
    # 4 (0.25 (0 − 0.25) + 1.25 · 0.75) = 3.5; anchor 1 (negatives only) has no term.
    got = float(losses.CircleLoss(m=0.25, gamma=4.0, dtype="float64")([0, 1, 0], e))
    np.testing.assert_allclose(got, (np.logaddexp(0.0, 7.5) + np.logaddexp(0.0, 3.5)) / 2, rtol=1e-10)


@pytest.mark.parametrize("reduction", ["mean", "mean_active", "sum"])
def test_reductions(ref, reduction):
    """"mean": anchors with a positive and a negative; "mean_active" (PML's AvgNonZeroReducer):
    anchors with a loss > 0, which leaves out well-separated anchors whose loss underflows."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=4, normalize=False)
    s = ref.cosine(e)
    pos, neg = ref.pos_neg(labels, ref.candidates(labels))
    got = float(losses.CircleLoss(gamma=16.0, tuple_reduction=reduction)(labels, e))
    np.testing.assert_allclose(got, np_circle(s, pos, neg, gamma=16.0, reduction=reduction), rtol=1e-5)


def test_an_underflowed_anchor_counts_in_mean_not_in_mean_active():
    """m = 0.75, γ = 256: class 0's twins (S = 1 with each other; S = −1, 0 with class 1) have
    the exponent γ (0 − m·m) = −144 and a loss e^{−144}, which is 0 in float32; class 1's two
    points (S = 0) have a large loss. "mean" divides by the 4 anchors with a positive and a
    negative, "mean_active" (PML's AvgNonZeroReducer) by the 2 with a loss > 0."""
    e = np.array([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]], np.float32)
    labels = np.array([0, 0, 1, 1])
    s = e.astype(np.float64) @ e.T.astype(np.float64)
    mask = labels[:, None] == labels[None, :]
    pos, neg = (mask & ~np.eye(4, dtype=bool)).astype(float), (~mask).astype(float)
    mean = float(losses.CircleLoss(m=0.75)(labels, e))
    active = float(losses.CircleLoss(m=0.75, tuple_reduction="mean_active")(labels, e))
    np.testing.assert_allclose(mean, np_circle(s, pos, neg, m=0.75), rtol=1e-5)
    assert mean > 10
    np.testing.assert_allclose(active, 2 * mean, rtol=1e-6)


@pytest.mark.parametrize("sampler", [None, "all", "semi_hard", "random"])
def test_takes_the_samplers_pairs(ref, sampler):
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=5, normalize=False)
    s = ref.cosine(e)
    cand = ref.candidates(labels)
    loss = losses.CircleLoss(m=0.4, gamma=80.0, sampler=sampler, seed=3)
    if sampler in (None, "all"):
        pos, neg = ref.pos_neg(labels, cand)
    elif sampler == "semi_hard":
        pos, neg = ref.pairs_from_triplets(ref.semi_hard_triplets(1.0 - s, labels, cand), len(labels))
        assert neg.max() > 1  # a negative selected twice counts twice
    else:
        # The sampler's own selection (its seed is the loss's first), read back here.
        selection = samplers.get("random")(tf.constant(1.0 - s, tf.float32), labels, candidates=cand,
                                           seed=losses.CircleLoss(sampler="random", seed=3).next_seed())
        pos, neg = (np.asarray(w, np.float64) for w in (selection.pos_weight, selection.neg_weight))
    np.testing.assert_allclose(float(loss(labels, e)), np_circle(s, pos, neg, 0.4, 80.0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("sampler", [None, "semi_hard"])
@pytest.mark.parametrize("m, gamma", [(0.25, 4.0), (0.4, 80.0)])
def test_gradient_matches_the_equation_with_the_weights_held_constant(ref, sampler, m, gamma):
    """∂L/∂e against central differences of the reference in which α_p, α_n are computed at
    the point itself (the paper's and PML's detached weights)."""
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 3], np.int32)
    e = ref.embeddings(8, dim=3, seed=10, normalize=False).astype(np.float64)
    s = ref.cosine(e)
    cand = ref.candidates(labels)
    if sampler is None:
        pos, neg = ref.pos_neg(labels, cand)
    else:
        pos, neg = ref.pairs_from_triplets(ref.semi_hard_triplets(1.0 - s, labels, cand), 8)
    loss = losses.CircleLoss(m=m, gamma=gamma, sampler=sampler, dtype="float64")
    value, grad = value_and_grad(loss, labels, e)
    np.testing.assert_allclose(value, np_circle(s, pos, neg, m, gamma), rtol=1e-10)
    numeric = ref.central_gradient(lambda x: np_circle(ref.cosine(x), pos, neg, m, gamma, alpha_sim=s), e)
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7)
    assert np.abs(grad).max() > 1e-3
    # Differentiating through the weights too gives another gradient.
    through = ref.central_gradient(lambda x: np_circle(ref.cosine(x), pos, neg, m, gamma), e)
    assert np.abs(through - grad).max() > 1e-3 * np.abs(grad).max()


def test_degenerate_batches():
    """A class of one example: that anchor has no positive and adds nothing (neither to the
    sum nor to the count); one class (no negatives), a batch of 1 or 2: 0 with zero gradient;
    identical embeddings: finite."""
    e = np.random.default_rng(1).normal(size=(6, 4)).astype(np.float32)
    labels = np.array([0, 1, 1, 2, 2, 2])
    loss = losses.CircleLoss(gamma=16.0, dtype="float64")
    e64 = e.astype(np.float64)
    s = e64 @ e64.T / np.outer(np.linalg.norm(e64, axis=1), np.linalg.norm(e64, axis=1))
    mask = labels[:, None] == labels[None, :]
    pos, neg = (mask & ~np.eye(6, dtype=bool)).astype(float), (~mask).astype(float)
    np.testing.assert_allclose(float(loss(labels, e64)), np_circle(s, pos, neg, gamma=16.0), rtol=1e-10)
    total = float(losses.CircleLoss(gamma=16.0, dtype="float64", tuple_reduction="sum")(labels, e64))
    np.testing.assert_allclose(total / float(loss(labels, e64)), 5.0, rtol=1e-10)  # 5 anchors, not 6
    for labels, e in [(np.array([3, 3, 3]), e[:3]), (np.array([7]), e[:1]), (np.array([1, 2]), e[:2])]:
        value, grad = value_and_grad(losses.CircleLoss(), labels, e)
        assert value == 0.0 and np.all(grad == 0.0)
    value, grad = value_and_grad(losses.CircleLoss(), np.array([0, 0, 1, 1]), np.ones((4, 3), np.float32))
    assert np.isfinite(value) and np.all(np.isfinite(grad))


def test_xla_with_an_unknown_batch_size_equals_eager(ref):
    ref.check_xla_equals_eager_with_unknown_batch(losses.CircleLoss())
    ref.check_xla_equals_eager_with_unknown_batch(losses.CircleLoss(m=0.4, gamma=80.0, sampler="semi_hard"))


def test_refuses_importance_and_other_distances():
    with pytest.raises(ValueError, match="not a sum of per-pair terms"):
        losses.CircleLoss(importance=True)
    with pytest.raises(ValueError, match=r"defined on cosine distances.*use distance='cosine'"):
        losses.CircleLoss(distance="euclidean")
    with pytest.raises(ValueError, match="gamma must be a number > 0"):
        losses.CircleLoss(gamma=0.0)
    with pytest.raises(ValueError, match="m must be a number >= 0"):
        losses.CircleLoss(m=-0.1)
    if "top_k" in samplers.SAMPLERS:  # a sampler of sets, not of pairs or triplets
        with pytest.raises(ValueError, match="selects pairs or triplets"):
            losses.CircleLoss(sampler="top_k")


def test_registered_and_serialised():
    loss = losses.get("circle", m=0.4, gamma=80.0, sampler="semi_hard", seed=7)
    assert isinstance(loss, losses.CircleLoss) and losses.LOSSES["circle"] is losses.CircleLoss
    config = keras.saving.serialize_keras_object(loss)
    again = losses.get(config)
    assert type(again) is losses.CircleLoss and again.get_config() == loss.get_config()
    assert (again.m, again.gamma) == (0.4, 80.0)
    assert losses.CircleLoss().sampler is None and losses.CircleLoss().needs_positive_pairs


def test_keras_file_round_trip_and_resume(tmp_path, ref):
    """Saved with its sampler's seed stream, loaded, the next call draws what the original draws."""
    loss = losses.CircleLoss(m=0.4, gamma=80.0, sampler="random", seed=11)
    model, loaded = ref.keras_file_round_trip(loss, tmp_path / "m.keras")
    assert type(loaded.loss) is losses.CircleLoss and loaded.loss.get_config() == loss.get_config()
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=6)
    np.testing.assert_allclose(float(loaded.loss(labels, e)), float(model.loss(labels, e)), rtol=1e-6)


def test_fit_trains(ref):
    keras.utils.set_random_seed(0)
    encoder = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4), keras.layers.UnitNormalization()])
    model = models.EmbeddingModel(encoder)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=losses.CircleLoss(m=0.4, gamma=80.0))
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 4)
    x = (rng.normal(size=(16, 6)) + 2.0 * np.eye(6)[labels]).astype(np.float32)
    history = model.fit(x, labels, batch_size=16, epochs=8, shuffle=False, verbose=0).history["loss"]
    assert np.all(np.isfinite(history)) and history[-1] < history[0]


def test_stable_at_a_large_scale(ref):
    """γ = 10⁴: exponents of ±10⁴ overflow a plain exp in any float; the loss and its
    gradient stay finite and equal the reference's log-sum-exp."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=7)
    s = ref.cosine(e)
    pos, neg = ref.pos_neg(labels, ref.candidates(labels))
    value, grad = value_and_grad(losses.CircleLoss(gamma=1e4), labels, e)
    np.testing.assert_allclose(value, np_circle(s, pos, neg, gamma=1e4), rtol=1e-5)
    assert np.all(np.isfinite(grad))


def test_cross_batch_memory_adds_candidates(ref):
    """An empty memory gives the loss of the batch; filled with a batch, its rows are further
    candidates of the next batch's anchors (Sun et al.'s sums over them too)."""
    labels = ref.LABELS["mixed"]
    y = {"label": labels, "example_id": np.arange(len(labels), dtype=np.int32)}
    e = ref.embeddings(len(labels), seed=8)
    with_memory = losses.CircleLoss(gamma=16.0, memory={"size": 32})
    assert with_memory.memory in with_memory.parameter_layers
    np.testing.assert_allclose(float(with_memory(y, e)), float(losses.CircleLoss(gamma=16.0)(labels, e)),
                               rtol=1e-6)
    # The next batch (other examples) has the first one's embeddings as further candidates.
    e2 = ref.embeddings(len(labels), seed=9)
    y2 = {"label": labels, "example_id": np.arange(len(labels), dtype=np.int32) + 100}
    cols = np.concatenate([e2, e]).astype(np.float64)
    s = np.array([[a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) for b in cols] for a in e2.astype(np.float64)])
    same = labels[:, None] == np.concatenate([labels, labels])[None, :]
    other = np.ones_like(same)
    other[:, :len(labels)] = ~np.eye(len(labels), dtype=bool)
    pos, neg = (same & other).astype(float), (~same & other).astype(float)
    np.testing.assert_allclose(float(with_memory(y2, e2)), np_circle(s, pos, neg, gamma=16.0), rtol=1e-5)
