"""Lifted structured, binomial deviance and multi-similarity losses (and the multi-similarity
pair mining) against brute-force NumPy loops written from the papers' equations."""

import numpy as np
import pytest
import tensorflow as tf

from tfdml import losses, samplers
from tfdml.losses import pair_weighting as gpw

# -- references: loops from the equations -------------------------------------------------


def np_lifted_song(d, pos, neg, alpha):
    """Song et al. 2016 Eq. 4:
    1/(2|P|) Σ_{(i,j)∈P} [log(Σ_{(i,k)∈N} e^{α−D_ik} + Σ_{(j,l)∈N} e^{α−D_jl}) + D_ij]_+²,
    over ordered pairs with multiplicity (J_ij = J_ji: the same mean as over unordered ones)."""
    n = len(d)
    total, count = 0.0, 0.0
    for i in range(n):
        for j in range(n):
            if pos[i, j] == 0:
                continue
            s = sum(neg[i, k] * np.exp(alpha - d[i, k]) for k in range(n))
            s += sum(neg[j, l] * np.exp(alpha - d[j, l]) for l in range(n))
            hinge = max(np.log(s) + d[i, j], 0.0) if s > 0 else 0.0
            total += pos[i, j] * hinge**2
            count += pos[i, j]
    return total / (2 * count) if count else 0.0


def np_lifted_hermans(d, pos, neg, alpha):
    """Hermans et al. 2017: mean over anchors with a positive and a negative of
    [log Σ_p e^{D_ap} + log Σ_n e^{α − D_an}]_+."""
    n = len(d)
    total, count = 0.0, 0
    for a in range(n):
        sp = sum(pos[a, p] * np.exp(d[a, p]) for p in range(n))
        sn = sum(neg[a, q] * np.exp(alpha - d[a, q]) for q in range(n))
        if sp > 0 and sn > 0:
            total += max(np.log(sp) + np.log(sn), 0.0)
            count += 1
    return total / count if count else 0.0


def np_binomial(s, pos, neg, alpha=2.0, beta=0.5, cost=25.0, balanced=True, w=None):
    """Yi et al. / Ustinova & Lempitsky: Σ w_ij ln(1 + e^{−α(s_ij − β) m_ij}), m = 1 / −C,
    w = 1/n_pos, 1/n_neg (balanced) or W_ij / n_pairs."""
    n = len(s)
    w = np.ones((n, n)) if w is None else w
    sums = {"pos": 0.0, "neg": 0.0}
    counts = {"pos": 0.0, "neg": 0.0}
    for i in range(n):
        for j in range(n):
            for kind, c, m in (("pos", pos[i, j], 1.0), ("neg", neg[i, j], -cost)):
                if c:
                    sums[kind] += c * w[i, j] * np.log1p(np.exp(-alpha * (s[i, j] - beta) * m))
                    counts[kind] += c
    if balanced:
        return sum(sums[k] / counts[k] for k in sums if counts[k])
    total = counts["pos"] + counts["neg"]
    return (sums["pos"] + sums["neg"]) / total if total else 0.0


def np_ms(s, pos, neg, alpha=2.0, beta=50.0, lam=1.0):
    """Wang et al. 2019, L_MS, 1/m over all m anchors."""
    n = len(s)
    total = 0.0
    for i in range(n):
        sp = sum(pos[i, k] * np.exp(-alpha * (s[i, k] - lam)) for k in range(n))
        sn = sum(neg[i, k] * np.exp(beta * (s[i, k] - lam)) for k in range(n))
        total += np.log1p(sp) / alpha + np.log1p(sn) / beta
    return total / n


def np_ms_mining(s, labels, cand, eps=0.1):
    """Wang et al.'s pair mining on similarities: keep negative k if S_ik > min_pos S_ij − ε,
    positive j if S_ij < max_neg S_ik + ε."""
    n = len(s)
    pos = np.zeros((n, n))
    neg = np.zeros((n, n))
    for i in range(n):
        p = [j for j in range(n) if cand[i, j] and labels[j] == labels[i]]
        q = [k for k in range(n) if cand[i, k] and labels[k] != labels[i]]
        for k in q:
            if p and s[i, k] > min(s[i, j] for j in p) - eps:
                neg[i, k] = 1
        for j in p:
            if q and s[i, j] < max(s[i, k] for k in q) + eps:
                pos[i, j] = 1
    return pos, neg


def value_and_grad(loss, y, e):
    e = tf.convert_to_tensor(e)
    with tf.GradientTape() as tape:
        tape.watch(e)
        value = loss(y, e)
    return float(value), tape.gradient(value, e).numpy()


CASES = ["mixed", "one_class", "no_positive"]


# -- lifted structured ------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("generalized", [False, True])
def test_lifted_all_pairs_matches_song_eq4_and_hermans(ref, case, seed, generalized):
    labels = ref.LABELS[case]
    e = ref.embeddings(len(labels), seed=seed)
    pos, neg = ref.pos_neg(labels, ref.candidates(labels))
    fn = np_lifted_hermans if generalized else np_lifted_song
    expected = fn(ref.pairwise(e), pos, neg, 0.7)
    got = losses.LiftedStructuredLoss(margin=0.7, generalized=generalized)(labels, e)
    np.testing.assert_allclose(float(got), expected, rtol=1e-5, atol=1e-6)


def test_lifted_hand_case():
    """Points 0, 0.5 (class 0) and 2 (class 1) on a line, α = 1: one unordered positive pair,
    J = log(e^{1−2} + e^{1−1.5}) + 0.5, L = J²/2."""
    e = np.array([[0.0], [0.5], [2.0]], np.float32)
    labels = np.array([0, 0, 1])
    j = np.log(np.exp(-1.0) + np.exp(-0.5)) + 0.5
    np.testing.assert_allclose(float(losses.LiftedStructuredLoss()(labels, e)), j**2 / 2, rtol=1e-6)
    # Hermans: anchor 0: log e^{0.5} + log e^{1−2}; anchor 1: 0.5 + (1 − 1.5); anchor 2 has no positive.
    hermans = (max(0.5 - 1.0, 0) + max(0.5 - 0.5, 0)) / 2
    assert float(losses.LiftedStructuredLoss(generalized=True)(labels, e)) == pytest.approx(hermans, abs=1e-7)


@pytest.mark.parametrize("sampler", ["random", "semi_hard", "multi_similarity"])
def test_lifted_takes_the_samplers_pairs(ref, sampler):
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=4)
    d = ref.pairwise(e)
    loss = losses.LiftedStructuredLoss(sampler=sampler, seed=3)
    sel = loss.sampler(d.astype(np.float32), labels, seed=tf.constant([3, 0], tf.int32))
    if sampler == "semi_hard":
        pos, neg = ref.pairs_from_triplets(ref.triplet_list(sel), len(labels))
    else:
        pos, neg = sel.pos_weight.numpy(), sel.neg_weight.numpy()
    np.testing.assert_allclose(float(loss(labels, e)), np_lifted_song(d, pos, neg, 1.0), rtol=1e-5)


@pytest.mark.parametrize("generalized", [False, True])
def test_lifted_gradient_matches_the_equation(ref, generalized):
    """TF gradient vs central differences of the NumPy equation (float64)."""
    labels = np.array([0, 0, 0, 1, 1, 2, 2], np.int32)
    e = ref.embeddings(7, dim=3, seed=6).astype(np.float64)
    pos, neg = ref.pos_neg(labels, ref.candidates(labels))
    fn = np_lifted_hermans if generalized else np_lifted_song
    loss = losses.LiftedStructuredLoss(margin=1.5, generalized=generalized, dtype="float64")
    value, grad = value_and_grad(loss, labels, e)
    assert value > 0
    numeric = ref.central_gradient(lambda x: fn(ref.pairwise(x), pos, neg, 1.5), e)
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7)


# -- binomial deviance --------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("balanced", [True, False])
def test_binomial_all_pairs_matches_yi(ref, case, balanced):
    labels = ref.LABELS[case]
    e = ref.embeddings(len(labels), seed=2, normalize=False)
    pos, neg = ref.pos_neg(labels, ref.candidates(labels))
    expected = np_binomial(ref.cosine(e), pos, neg, balanced=balanced)
    got = losses.BinomialDevianceLoss(balanced=balanced)(labels, e)
    np.testing.assert_allclose(float(got), expected, rtol=1e-5, atol=1e-6)


def test_binomial_hand_case():
    """Two identical class-0 points (s = 1) and an orthogonal class-1 point (s = 0):
    ln(1 + e^{−2·0.5}) + ln(1 + e^{2·25·(0 − 0.5)})."""
    e = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], np.float32)
    expected = np.log1p(np.exp(-1.0)) + np.log1p(np.exp(-25.0))
    np.testing.assert_allclose(float(losses.BinomialDevianceLoss()([0, 0, 1], e)), expected, rtol=1e-6)


@pytest.mark.parametrize("sampler", ["random", "hard"])
def test_binomial_takes_the_samplers_pairs(ref, sampler):
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=5)
    s = ref.cosine(e)
    loss = losses.BinomialDevianceLoss(sampler=sampler, seed=2)
    sel = loss.sampler((1.0 - s).astype(np.float32), labels, seed=tf.constant([2, 0], tf.int32))
    if sampler == "hard":
        pos, neg = ref.pairs_from_triplets(ref.triplet_list(sel), len(labels))
    else:
        pos, neg = sel.pos_weight.numpy(), sel.neg_weight.numpy()
    np.testing.assert_allclose(float(loss(labels, e)), np_binomial(s, pos, neg), rtol=1e-5)


@pytest.mark.parametrize("balanced", [True, False])
def test_binomial_gradient_matches_the_equation(ref, balanced):
    labels = np.array([0, 0, 0, 1, 1, 2, 2], np.int32)
    e = ref.embeddings(7, dim=3, seed=8, normalize=False).astype(np.float64)
    pos, neg = ref.pos_neg(labels, ref.candidates(labels))
    loss = losses.BinomialDevianceLoss(alpha=2.0, beta=0.3, cost=5.0, balanced=balanced, dtype="float64")
    _, grad = value_and_grad(loss, labels, e)
    numeric = ref.central_gradient(
        lambda x: np_binomial(ref.cosine(x), pos, neg, beta=0.3, cost=5.0, balanced=balanced), e)
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7)
    assert np.abs(grad).max() > 1e-3


def test_binomial_importance_weights_each_pair_term(ref):
    """balanced=False, importance=True: Σ W_ij ℓ_ij / #pairs with W of Hong Eq. 24/25 (the form
    tests/pipelines/test_pipeline_unbiased.py shows unbiased); without columns W = 1."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=9)
    y = ref.importance_targets(labels)
    w = ref.hong_weights(labels, ref.CLASS_SIZES, 0.02, 0.005)
    pos, neg = ref.pos_neg(labels, ref.candidates(labels))
    loss = losses.BinomialDevianceLoss(balanced=False, importance=True)
    expected = np_binomial(ref.cosine(e), pos, neg, balanced=False, w=w)
    np.testing.assert_allclose(float(loss(y, e)), expected, rtol=1e-5)
    np.testing.assert_allclose(float(loss(labels, e)), np_binomial(ref.cosine(e), pos, neg, balanced=False),
                               rtol=1e-5)
    assert abs(expected - np_binomial(ref.cosine(e), pos, neg, balanced=False)) > 1e-3


def test_binomial_refuses_importance_with_the_batch_normalised_weights():
    with pytest.raises(ValueError, match="importance=True\\) needs balanced=False"):
        losses.BinomialDevianceLoss(importance=True)
    with pytest.raises(ValueError, match="distance='cosine'"):
        losses.BinomialDevianceLoss(distance="euclidean")


# -- multi-similarity ---------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("seed", [0, 3])
def test_ms_with_its_mining_matches_wang_l_ms(ref, case, seed):
    labels = ref.LABELS[case]
    e = ref.embeddings(len(labels), seed=seed, normalize=False)
    s = ref.cosine(e)
    cand = ref.candidates(labels)
    # A λ and ε at which the mining keeps some pairs and drops others.
    pos, neg = np_ms_mining(s, labels, cand, eps=0.1)
    expected = np_ms(s, pos, neg, lam=0.5)
    loss = losses.MultiSimilarityLoss(lam=0.5)
    np.testing.assert_allclose(float(loss(labels, e)), expected, rtol=1e-5, atol=1e-7)
    all_pos, all_neg = ref.pos_neg(labels, cand)
    if case == "mixed":
        assert 0 < pos.sum() + neg.sum() < all_pos.sum() + all_neg.sum()  # the mining matters
    expected_all = np_ms(s, all_pos, all_neg, lam=0.5)
    got_all = losses.MultiSimilarityLoss(lam=0.5, sampler=None)(labels, e)
    np.testing.assert_allclose(float(got_all), expected_all, rtol=1e-5, atol=1e-7)


def test_ms_hand_case():
    """Identical class-0 points (S = 1) and an orthogonal class-1 point (S = 0), λ = 1:
    all pairs: anchors 0, 1: ½ ln 2 + ln(1 + e^{−50})/50; anchor 2: ln(1 + 2e^{−50})/50; mean of 3.
    With the mining every pair is easy (0 > 1 − 0.1 fails, 1 < 0 + 0.1 fails): loss 0."""
    e = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], np.float32)
    expected = (2 * (0.5 * np.log(2.0) + np.log1p(np.exp(-50.0)) / 50) + np.log1p(2 * np.exp(-50.0)) / 50) / 3
    np.testing.assert_allclose(float(losses.MultiSimilarityLoss(sampler=None)([0, 0, 1], e)), expected, rtol=1e-6)
    assert float(losses.MultiSimilarityLoss()([0, 0, 1], e)) == 0.0


@pytest.mark.parametrize("sampler", [None, "multi_similarity", "semi_hard"])
def test_ms_gradient_matches_the_equation(ref, sampler):
    labels = np.array([0, 0, 0, 1, 1, 2, 2], np.int32)
    e = ref.embeddings(7, dim=3, seed=10, normalize=False).astype(np.float64)
    s = ref.cosine(e)
    cand = ref.candidates(labels)
    loss = losses.MultiSimilarityLoss(alpha=2.0, beta=10.0, lam=0.5, sampler=sampler, dtype="float64")
    if sampler is None:
        pos, neg = ref.pos_neg(labels, cand)
    elif sampler == "multi_similarity":
        pos, neg = np_ms_mining(s, labels, cand)
    else:
        pos, neg = ref.pairs_from_triplets(ref.semi_hard_triplets(1.0 - s, labels, cand), 7)
    value, grad = value_and_grad(loss, labels, e)
    np.testing.assert_allclose(value, np_ms(s, pos, neg, beta=10.0, lam=0.5), rtol=1e-10)
    numeric = ref.central_gradient(lambda x: np_ms(ref.cosine(x), pos, neg, beta=10.0, lam=0.5), e)
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7)
    assert np.abs(grad).max() > 1e-3


def test_ms_gradient_is_the_general_pair_weighting(ref):
    """∂L_i/∂S_ij = −w⁺_ij (positive pair), +w⁻_ij (negative pair), Wang et al.'s w⁺, w⁻,
    written here as loops; and multi_similarity_weights gives the same."""
    labels = ref.LABELS["mixed"]
    s = ref.cosine(ref.embeddings(len(labels), seed=11, normalize=False))
    pos, neg = ref.pos_neg(labels, ref.candidates(labels))
    pos[0, 1] = 2.0  # a pair selected twice counts as two copies
    alpha, beta, lam = 2.0, 50.0, 0.5
    n = len(labels)
    w_pos = np.zeros((n, n))
    w_neg = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if pos[i, j]:
                w_pos[i, j] = 1 / (np.exp(alpha * (s[i, j] - lam))
                                   + sum(pos[i, k] * np.exp(alpha * (s[i, j] - s[i, k])) for k in range(n)))
            if neg[i, j]:
                w_neg[i, j] = 1 / (np.exp(beta * (lam - s[i, j]))
                                   + sum(neg[i, k] * np.exp(beta * (s[i, k] - s[i, j])) for k in range(n)))
    sim = tf.constant(s)
    with tf.GradientTape() as tape:
        tape.watch(sim)
        terms = gpw.multi_similarity_terms(sim, tf.constant(pos), tf.constant(neg), alpha, beta, lam)
        total = tf.reduce_sum(terms)
    grad = tape.gradient(total, sim).numpy()
    np.testing.assert_allclose(grad, pos * -w_pos + neg * w_neg, rtol=1e-9, atol=1e-12)
    got_pos, got_neg = gpw.multi_similarity_weights(sim, tf.constant(pos), tf.constant(neg), alpha, beta, lam)
    np.testing.assert_allclose(got_pos.numpy(), w_pos, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got_neg.numpy(), w_neg, rtol=1e-9, atol=1e-12)


def test_binomial_weights_are_the_gradient_of_its_terms():
    s = tf.constant(np.linspace(-1, 1, 9))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(s)
        p, n = gpw.binomial_deviance_terms(s, 2.0, 0.5, 25.0)
    wp, wn = gpw.binomial_deviance_weights(s, 2.0, 0.5, 25.0)
    np.testing.assert_allclose(-tape.gradient(p, s).numpy(), wp.numpy(), rtol=1e-12)
    np.testing.assert_allclose(tape.gradient(n, s).numpy(), wn.numpy(), rtol=1e-12)


# -- the multi-similarity mining ----------------------------------------------------------


@pytest.mark.parametrize("case", CASES + ["pair_id"])
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.5])
def test_ms_sampler_matches_wangs_mining(ref, case, eps):
    labels = ref.LABELS["mixed" if case == "pair_id" else case]
    pair_id = np.array([0, 0, 1, 1, 0, 0, 1, 1, 0, 1, 0, 1]) if case == "pair_id" else None
    s = ref.cosine(ref.embeddings(len(labels), seed=12))
    cand = ref.candidates(labels, pair_id)
    sel = samplers.MultiSimilaritySampler(epsilon=eps)((1.0 - s).astype(np.float32), labels, candidates=cand)
    pos, neg = np_ms_mining(s, labels, cand, eps)
    np.testing.assert_array_equal(sel.pos_weight.numpy(), pos)
    np.testing.assert_array_equal(sel.neg_weight.numpy(), neg)


def test_ms_sampler_registration_and_refusals():
    assert samplers.get("multi_similarity") == samplers.MultiSimilaritySampler()
    assert samplers.get({"name": "multi_similarity", "epsilon": 0.2}).epsilon == 0.2
    assert samplers.MultiSimilaritySampler().needs_tuples
    with pytest.raises(ValueError, match="epsilon must be a number >= 0"):
        samplers.MultiSimilaritySampler(epsilon=-1)
    assert isinstance(losses.MultiSimilarityLoss().sampler, samplers.MultiSimilaritySampler)


# -- shared contract ----------------------------------------------------------------------


@pytest.mark.parametrize("make", [losses.LiftedStructuredLoss, losses.MultiSimilarityLoss])
def test_log_sum_exp_losses_refuse_importance_with_the_reason(make):
    with pytest.raises(ValueError, match="not a sum of per-pair terms"):
        make(importance=True)


@pytest.mark.parametrize("name", ["lifted_structured", "binomial_deviance", "multi_similarity"])
def test_degenerate_batches_are_finite(ref, name):
    """A single example of a class, all-identical embeddings, one class, a batch of 1 and 2."""
    loss = losses.get(name)
    cases = [
        (np.array([0, 1, 1, 2, 2, 2]), ref.embeddings(6, seed=1)),
        (np.array([0, 0, 1, 1]), np.tile(np.eye(4, dtype=np.float32)[:1], (4, 1))),
        (np.array([3, 3, 3]), ref.embeddings(3, seed=2)),
        (np.array([7]), ref.embeddings(1, seed=3)),
        (np.array([1, 2]), ref.embeddings(2, seed=4)),
    ]
    for labels, e in cases:
        value, grad = value_and_grad(loss, labels, e)
        assert np.isfinite(value) and np.all(np.isfinite(grad)), (labels, value)


@pytest.mark.parametrize("make", [
    lambda: losses.LiftedStructuredLoss(margin=0.8, generalized=True, sampler="random", seed=1),
    lambda: losses.BinomialDevianceLoss(balanced=False, importance=True, sampler="semi_hard"),
    lambda: losses.MultiSimilarityLoss(lam=0.5, sampler={"name": "multi_similarity", "epsilon": 0.2}),
], ids=["lifted", "binomial", "ms"])
def test_keras_file_round_trip(tmp_path, make, ref):
    loss = make()
    _, loaded = ref.keras_file_round_trip(loss, tmp_path / "m.keras")
    assert type(loaded.loss) is type(loss) and loaded.loss.get_config() == loss.get_config()


@pytest.mark.parametrize("generalized", [False, True])
def test_lifted_far_negatives_are_not_taken_for_none(generalized):
    """Unnormalised embeddings far apart: log Σ e^{α − D} is about −1.5·10⁴, a real value,
    not the empty sum. Points 0, 3·10⁴ (class 0) and −1.5·10⁴ (class 1), α = 1."""
    e = np.array([[0.0], [3e4], [-1.5e4]], np.float64)
    d = np.abs(e - e.T)
    # Song Eq. 4 in log space: J_01 = logaddexp(1 − D_02, 1 − D_12) + D_01.
    j = np.logaddexp(1 - d[0, 2], 1 - d[1, 2]) + d[0, 1]
    song = j**2 / 2
    # Hermans: anchor 0: D_01 + (1 − D_02); anchor 1: D_10 + (1 − D_12) < 0.
    hermans = (max(d[0, 1] + 1 - d[0, 2], 0) + max(d[1, 0] + 1 - d[1, 2], 0)) / 2
    loss = losses.LiftedStructuredLoss(generalized=generalized, dtype="float64")
    expected = hermans if generalized else song
    assert expected > 1e3
    np.testing.assert_allclose(float(loss([0, 0, 1], e)), expected, rtol=1e-9)


@pytest.mark.parametrize("cls", [losses.MultiSimilarityLoss, losses.BinomialDevianceLoss])
def test_losses_of_cosine_similarities_refuse_another_distance(cls):
    assert cls.fixed_distance == "cosine"
    with pytest.raises(ValueError, match=r"defined on cosine distances.*use distance='cosine'"):
        cls(distance="euclidean")
