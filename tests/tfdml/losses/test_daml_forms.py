"""The metric objectives J_m of DAMLLoss's forms against brute-force NumPy, each written from
its equation with the generator's synthetic negatives x̃⁻_t in place of the real negatives
(Duan et al. 2018; the equation numbers were not readable, see DAMLLoss's docstring):

* DAML (cont), the paper's: J_m = Σ_i D(x_i, x⁺_i)² + Σ_j [α − D(x_j, x̃⁻_j)²]_+, one positive
  and one synthetic negative pair per triplet;
* DAML (N-pair): Sohn's N-pair term per anchor i, log(1 + Σ_{t: anchor i} exp(f_iᵀ x̃⁻_t − f_iᵀ f⁺_t));
* DAML (lifted): Song et al.'s Eq. 4 per ordered positive pair (i, j) of the triplets,
  [log(Σ_{t: anchor i} e^{α − D(x_i, x̃⁻_t)} + Σ_{t: anchor j} e^{α − D(x_j, x̃⁻_t)}) + D_ij]_+² / 2,

each a mean over its tuples, with J = J_gen + λ J_m and J_gen the same in every form."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tfdml import losses, samplers

D = 6
WEIGHTS = dict(margin=0.3, metric_weight=0.7, reg_weight=0.5, adv_weight=2.0)
PAIRS = np.array([0, 1, 0, 2, 1, 2, 3, 3], np.int32)  # two examples per class: N-pair batches
#: α of the contrastive form's cases: its hinge [α − D(x, x̃⁻)²]_+ active for some triplets, not all
MARGINS = {"contrastive": 1.5}


def sq(u, v):
    return float(sum((u[k] - v[k]) ** 2 for k in range(len(u))))


def dot(u, v):
    return float(sum(u[k] * v[k] for k in range(len(u))))


def np_contrastive(e, triplets, syn, margin):
    terms = [sq(e[a], e[p]) + max(margin - sq(e[a], s), 0.0) for (a, p, _), s in zip(triplets, syn)]
    return sum(terms) / len(terms)


def np_npair(e, triplets, syn, margin, own_logit=True):
    by_anchor = {}
    for (a, p, _), s in zip(triplets, syn):
        own = dot(e[a], e[p]) if own_logit else 0.0
        by_anchor.setdefault(a, []).append(dot(e[a], s) - own)
    terms = [math.log(1.0 + sum(math.exp(z) for z in zs)) for zs in by_anchor.values()]
    return sum(terms) / len(terms)


def np_lifted(e, triplets, syn, margin, dist=lambda u, v: math.sqrt(sq(u, v))):
    negatives = {}
    for (a, _, _), s in zip(triplets, syn):
        negatives.setdefault(a, []).append(math.exp(margin - dist(e[a], s)))
    pairs = sorted({(a, p) for a, p, _ in triplets})
    terms = []
    for i, j in pairs:
        j_ij = math.log(sum(negatives.get(i, [])) + sum(negatives.get(j, []))) + dist(e[i], e[j])
        terms.append(max(j_ij, 0.0) ** 2 / 2.0)
    return sum(terms) / len(terms)


REFERENCES = {"contrastive": np_contrastive, "npair": np_npair, "lifted": np_lifted}


def np_gen(e, triplets, syn, margin, reg_weight, adv_weight):
    terms = [sq(s, e[a]) + reg_weight * sq(s, e[n]) + adv_weight * max(sq(s, e[a]) - sq(e[p], e[a]) - margin, 0.0)
             for (a, p, n), s in zip(triplets, syn)]
    return sum(terms) / len(terms)


def synthetic_of(loss, e, triplets):
    """x̃⁻ = G([x, x⁺, x⁻]) of the loss's generator for each triplet (G itself: test_daml_loss.py)."""
    idx = [list(column) for column in zip(*triplets)]
    rows = [tf.constant(e[i]) for i in idx]
    return loss.generator(*rows).numpy().astype(np.float64)


def case(ref, form, sampler, seed=0, dtype="float32", **extra):
    labels = PAIRS if sampler == "npair" else ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), dim=D, seed=seed)
    if dtype == "float64":
        e = e.astype(np.float64)
    weights = {**WEIGHTS, "margin": MARGINS.get(form, WEIGHTS["margin"]), **extra}
    loss = ref.shifted_daml_generator(losses.DAMLLoss(embedding_dim=D, form=form, sampler=sampler, seed=seed,
                                                      dtype=dtype, **weights))
    triplets = ref.triplet_list(samplers.get(sampler)(ref.pairwise(e).astype(np.float32), labels))
    assert triplets
    return loss, labels, e, triplets


def np_total(form, e, triplets, syn, margin, metric_weight, reg_weight, adv_weight, real_weight=0.0):
    j_m = REFERENCES[form](e, triplets, syn, margin)
    if real_weight:
        j_m += real_weight * REFERENCES[form](e, triplets, [e[n] for _, _, n in triplets], margin)
    return np_gen(e, triplets, syn, margin, reg_weight, adv_weight) + metric_weight * j_m


FORM_SAMPLERS = [("contrastive", "semi_hard"), ("contrastive", "hard"), ("npair", "npair"),
                 ("npair", "semi_hard"), ("lifted", "semi_hard"), ("lifted", "hard"), ("lifted", "npair")]


@pytest.mark.parametrize("form, sampler", FORM_SAMPLERS)
@pytest.mark.parametrize("real_weight", [0.0, 0.25])
def test_value_matches_the_reference(ref, form, sampler, real_weight):
    loss, labels, e, triplets = case(ref, form, sampler, real_weight=real_weight)
    if form == "contrastive":
        syn = synthetic_of(loss, e, triplets)
        hinges = [loss.margin > sq(e[a], x) for (a, _, _), x in zip(triplets, syn)]
        assert any(hinges) and not all(hinges)
    e64 = e.astype(np.float64)
    weights = {**WEIGHTS, "margin": loss.margin}
    expected = np_total(form, e64, triplets, synthetic_of(loss, e, triplets), real_weight=real_weight, **weights)
    np.testing.assert_allclose(float(loss(labels, e)), expected, rtol=1e-5)


def tuple_count(form, triplets):
    """How many tuples J_m of ``form`` averages over: triplets, anchors, ordered positive pairs."""
    if form == "npair":
        return len({a for a, _, _ in triplets})
    if form == "lifted":
        return len({(a, p) for a, p, _ in triplets})
    return len(triplets)


@pytest.mark.parametrize("form, sampler", [("contrastive", "hard"), ("npair", "npair"), ("lifted", "npair")])
def test_sum_reduction_sums_each_objective_over_its_tuples(ref, form, sampler):
    """``tuple_reduction="sum"``: the paper's Σ, J_gen over the triplets and J_m over the form's
    tuples (each ordered positive pair of the lifted form once, however many triplets hold it)."""
    loss, labels, e, triplets = case(ref, form, sampler, tuple_reduction="sum")
    syn, e64 = synthetic_of(loss, e, triplets), e.astype(np.float64)
    j_gen = len(triplets) * np_gen(e64, triplets, syn, loss.margin, WEIGHTS["reg_weight"], WEIGHTS["adv_weight"])
    j_m = tuple_count(form, triplets) * REFERENCES[form](e64, triplets, syn, loss.margin)
    np.testing.assert_allclose(float(loss(labels, e)), j_gen + WEIGHTS["metric_weight"] * j_m, rtol=1e-5)


@pytest.mark.parametrize("form, sampler", [("contrastive", "semi_hard"), ("npair", "npair"), ("lifted", "semi_hard")])
def test_the_embeddings_gradient_is_lambda_times_that_of_j_m(ref, form, sampler):
    """∂J/∂x = λ ∂J_m/∂x with x̃⁻ held fixed: central finite differences of the float64 reference
    (the real negatives' term included, so both rows of J_m are checked)."""
    loss, labels, e, triplets = case(ref, form, sampler, seed=1, dtype="float64", real_weight=0.25)
    syn = synthetic_of(loss, e, triplets)
    x = tf.constant(e)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = loss(labels, x)
    got = tf.convert_to_tensor(tape.gradient(value, x)).numpy()

    def metric_of(flat):
        f = flat.reshape(e.shape)
        j_m = REFERENCES[form](f, triplets, syn, loss.margin)
        j_m += 0.25 * REFERENCES[form](f, triplets, [f[n] for _, _, n in triplets], loss.margin)
        return WEIGHTS["metric_weight"] * j_m

    numeric = ref.central_gradient(metric_of, e.ravel()).reshape(e.shape)
    np.testing.assert_allclose(got, numeric, rtol=1e-5, atol=1e-8)
    assert np.abs(numeric).max() > 1e-3


@pytest.mark.parametrize("form, sampler", [("contrastive", "semi_hard"), ("npair", "npair"), ("lifted", "semi_hard")])
def test_the_generator_gets_the_same_gradient_in_every_form(ref, form, sampler):
    """J_gen does not depend on the form, and J_m sends nothing to the generator."""
    loss, labels, e, _ = case(ref, form, sampler, seed=2)
    twin = ref.shifted_daml_generator(losses.DAMLLoss(embedding_dim=D, form="triplet", sampler=sampler, seed=2,
                                                      **{**WEIGHTS, "margin": loss.margin}))
    grads = []
    for each in (loss, twin):
        with tf.GradientTape() as tape:
            value = each(labels, tf.constant(e))
        grads.append([tf.convert_to_tensor(g).numpy()
                      for g in tape.gradient(value, each.generator.trainable_variables)])
    for got, want in zip(*grads):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_a_wrong_formula_is_caught(ref):
    """The references tell each form from its likely slips: squared distances in the lifted
    form, the N-pair term without the positive's logit, the contrastive terms on D, not D²."""
    slips = {
        "lifted": lambda e, t, s, m: np_lifted(e, t, s, m, dist=sq),
        "npair": lambda e, t, s, m: np_npair(e, t, s, m, own_logit=False),
        "contrastive": lambda e, t, s, m: sum(math.sqrt(sq(e[a], e[p])) + max(m - math.sqrt(sq(e[a], x)), 0.0)
                                              for (a, p, _), x in zip(t, s)) / len(t),
    }
    for form, sampler in [("lifted", "semi_hard"), ("npair", "npair"), ("contrastive", "semi_hard")]:
        loss, labels, e, triplets = case(ref, form, sampler, seed=4)
        syn = synthetic_of(loss, e, triplets)
        got = float(loss(labels, e))
        e64 = e.astype(np.float64)
        gen = np_gen(e64, triplets, syn, WEIGHTS["margin"], WEIGHTS["reg_weight"], WEIGHTS["adv_weight"])
        wrong = gen + WEIGHTS["metric_weight"] * slips[form](e64, triplets, syn, WEIGHTS["margin"])
        assert abs(got - wrong) > 1e-3, form


def test_hand_cases(ref):
    """x₀ = (0, 0), x₁ = (1, 0) (class 0), x₂ = (0, 2) (class 1), x̃⁻ = (0, 1) (a constant
    generator), α = 0.5, λ = λ₁ = λ₂ = 1, hard sampler: triplets (0, 1, 2) and (1, 0, 2).
    J_gen = 2.75 (test_daml_loss.py's hand case).

    DAML (cont): anchor 0: D² = 1 to x⁺, 1 to x̃⁻: 1 + [0.5 − 1]_+ = 1; anchor 1: 1 + [0.5 − 2]_+ = 1:
      J_m = 1, J = 3.75.
    DAML (lifted): pairs (0, 1), (1, 0), D_01 = 1; anchor 0's negative at D = 1, anchor 1's at √2:
      J_01 = log(e^{−0.5} + e^{0.5 − √2}) + 1, J_m = J_01² / 2.
    DAML (N-pair): anchor 0: f₀ = 0, log(1 + e⁰) = log 2; anchor 1: f₁ᵀ x̃⁻ = 0, f₁ᵀ f₀ = 0: log 2;
      J_m = log 2."""
    e = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]], np.float32)
    labels = np.array([0, 0, 1])
    j_01 = math.log(math.exp(-0.5) + math.exp(0.5 - math.sqrt(2.0))) + 1.0
    for form, j_m in [("contrastive", 1.0), ("lifted", j_01 ** 2 / 2), ("npair", math.log(2.0))]:
        loss = losses.DAMLLoss(embedding_dim=2, sampler="hard", margin=0.5, form=form)
        ref.constant_daml_generator(loss, [0.0, 1.0])
        assert float(loss(labels, e)) == pytest.approx(2.75 + j_m, rel=1e-6), form


@pytest.mark.parametrize("form, sampler", [("contrastive", "semi_hard"), ("npair", "semi_hard"), ("lifted", "hard")])
def test_xla_with_an_unknown_batch_equals_eager(ref, form, sampler):
    loss = losses.DAMLLoss(embedding_dim=D, form=form, sampler=sampler, seed=2, real_weight=0.5, **WEIGHTS)
    ref.check_xla_equals_eager_with_unknown_batch(loss, dim=D, cases=("mixed", "one_class", "no_positive"))


def test_xla_of_the_npair_form_on_npair_batches_equals_eager(ref):
    """N-pair batches of two sizes through one function compiled for an unknown batch size."""
    loss = losses.DAMLLoss(embedding_dim=D, form="npair", sampler="npair", seed=2, real_weight=0.5, **WEIGHTS)
    ref.check_xla_equals_eager_with_unknown_batch(loss, dim=D, cases=(PAIRS, PAIRS[:6]))


@pytest.mark.parametrize("form", ["contrastive", "npair", "lifted"])
@pytest.mark.parametrize("labels", [np.array([7]), np.array([1, 1, 1]), np.array([0, 1, 2])])
def test_degenerate_batches_give_zero_and_zero_gradients(form, labels):
    loss = losses.DAMLLoss(embedding_dim=D, form=form, sampler="hard", seed=0, real_weight=1.0)
    x = tf.constant(np.eye(len(labels), D, dtype=np.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = loss(labels, x)
    grads = tape.gradient(value, [x] + loss.generator.trainable_variables)
    assert float(value) == 0.0
    assert all(np.all(tf.convert_to_tensor(g).numpy() == 0.0) for g in grads)
