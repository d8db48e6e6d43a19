"""Weighted (Hong et al. Eq. 10 / 23) and balanced (Eq. 15 / 23) contrastive losses."""

import numpy as np
import pytest

from tfdml.losses import BalancedContrastiveLoss, WeightedContrastiveLoss


def np_weighted(d, labels, cand, margin, eta, w=None):
    """Eq. 23: 1/B Σ_(i,j) W_ij (Y_ij g(D_ij) + (1 − Y_ij) η_ij h(D_ij)), g = d², h = [α − d]_+² (Eq. 5)."""
    n = len(labels)
    total, count = 0.0, 0
    for i in range(n):
        for j in range(n):
            if not cand[i, j]:
                continue
            wij = 1.0 if w is None else w[i, j]
            e = eta(i, j) if callable(eta) else eta
            if labels[i] == labels[j]:
                total += wij * d[i, j] ** 2
            else:
                total += wij * e * max(margin - d[i, j], 0.0) ** 2
            count += 1
    return total / count if count else 0.0


def balanced_eta(lam, num_classes, sizes, labels):
    """η_ij = λ/(L−1) · (N_{y_i} − 1)/N_{y_j} (Eq. 15)."""
    return lambda i, j: lam / (num_classes - 1) * (sizes[labels[i]] - 1) / sizes[labels[j]]


@pytest.mark.parametrize("case", ["mixed", "one_class", "no_positive"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_weighted_eq23_with_importance_columns(ref, case, seed):
    labels = ref.LABELS[case]
    e = ref.embeddings(len(labels), seed=seed)
    d, cand = ref.pairwise(e), ref.candidates(labels)
    w = ref.hong_weights(labels, ref.CLASS_SIZES, 0.02, 0.005)
    y = ref.importance_targets(labels, 0.02, 0.005)
    loss = WeightedContrastiveLoss(margin=1.3, eta=0.7)
    np.testing.assert_allclose(float(loss(y, e)), np_weighted(d, labels, cand, 1.3, 0.7, w), rtol=1e-5)
    # Plain labels: W = 1.
    np.testing.assert_allclose(float(loss(labels, e)), np_weighted(d, labels, cand, 1.3, 0.7), rtol=1e-5)


def test_weighted_eq23_p_random_pairs(ref):
    """p-random design (§4.1): only pairs sharing pair_id, weighted by Eq. 24."""
    labels = np.array([0, 0, 1, 3, 3, 3, 4, 1], np.int32)
    pair_id = np.array([0, 0, 1, 1, 2, 2, 3, 3], np.int32)
    e = ref.embeddings(len(labels), seed=4)
    d, cand = ref.pairwise(e), ref.candidates(labels, pair_id)
    w = ref.hong_weights(labels, ref.CLASS_SIZES, 0.1, 0.03)
    y = ref.importance_targets(labels, 0.1, 0.03, pair_id=pair_id)
    got = WeightedContrastiveLoss(margin=1.5)(y, e)
    np.testing.assert_allclose(float(got), np_weighted(d, labels, cand, 1.5, 1.0, w), rtol=1e-5)


@pytest.mark.parametrize("case", ["mixed", "one_class", "no_positive"])
@pytest.mark.parametrize("seed", [0, 1])
def test_balanced_eq15_eq23(ref, case, seed):
    labels = ref.LABELS[case]
    e = ref.embeddings(len(labels), seed=seed)
    d, cand = ref.pairwise(e), ref.candidates(labels)
    w = ref.hong_weights(labels, ref.CLASS_SIZES, 0.02, 0.005)
    y = ref.importance_targets(labels, 0.02, 0.005)
    loss = BalancedContrastiveLoss(margin=1.2, lam=8.0, num_classes=6)
    eta = balanced_eta(8.0, 6, ref.CLASS_SIZES, labels)
    np.testing.assert_allclose(float(loss(y, e)), np_weighted(d, labels, cand, 1.2, eta, w), rtol=1e-5)
    # Class sizes without the design constants: W = 1.
    y_sizes = {"label": labels, "class_size": ref.CLASS_SIZES[labels]}
    np.testing.assert_allclose(float(loss(y_sizes, e)), np_weighted(d, labels, cand, 1.2, eta), rtol=1e-5)
    # importance=False ("without IS", Hong Table 1): W = 1 although the batch has the columns.
    plain = BalancedContrastiveLoss(margin=1.2, lam=8.0, num_classes=6, importance=False)
    np.testing.assert_allclose(float(plain(y, e)), np_weighted(d, labels, cand, 1.2, eta), rtol=1e-5)


def test_weighted_and_balanced_without_importance_serialise_and_ignore_the_columns(ref):
    import keras

    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=5)
    d, cand = ref.pairwise(e), ref.candidates(labels)
    y = ref.importance_targets(labels, 0.02, 0.005)
    loss = WeightedContrastiveLoss(margin=1.3, eta=0.7, importance=False)
    np.testing.assert_allclose(float(loss(y, e)), np_weighted(d, labels, cand, 1.3, 0.7), rtol=1e-5)
    for built in (loss, BalancedContrastiveLoss(num_classes=4, importance=False), WeightedContrastiveLoss()):
        again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(built))
        assert again.importance is built.importance and again.get_config() == built.get_config()
    assert WeightedContrastiveLoss().importance is True  # the default: the point of the loss


def test_balanced_weights_follow_eq14_not_printed_eq16(ref):
    """Erratum check. Over a whole data set with all pairs, Eq. 14 is the expected tuplet loss
    Σ_(i,j)∈P+ [g(D_ij) + Σ_{l ≠ y_i} λ/(L−1) · mean_{k ∈ X_l} h(D_ik)]; the loss must equal
    it (times 1/B), which holds for η_ij = λ/(L−1)(N_{y_i}−1)/N_{y_j} and not for Eq. 16's
    (N_{y_i}−1)/N_{y_i}."""
    labels = np.array([0, 0, 0, 0, 1, 1, 2, 2, 2], np.int32)  # the whole 'training split'
    sizes = np.array([4.0, 2.0, 3.0], np.float32)
    num_classes, lam, margin = 3, 5.0, 1.4
    e = ref.embeddings(len(labels), seed=6)
    d = ref.pairwise(e)
    n = len(labels)
    h = lambda i, k: max(margin - d[i, k], 0.0) ** 2  # noqa: E731
    eq14 = 0.0
    for i in range(n):
        for j in range(n):
            if i == j or labels[i] != labels[j]:
                continue
            eq14 += d[i, j] ** 2
            for cls in range(num_classes):
                if cls == labels[i]:
                    continue
                members = [k for k in range(n) if labels[k] == cls]
                eq14 += lam / (num_classes - 1) * np.mean([h(i, k) for k in members])
    eq14 /= n * (n - 1)  # Eq. 23's 1/B over the B = n(n−1) ordered pairs
    y = {"label": labels, "class_size": sizes[labels]}
    got = float(BalancedContrastiveLoss(margin=margin, lam=lam, num_classes=num_classes)(y, e))
    np.testing.assert_allclose(got, eq14, rtol=1e-5)
    printed = lambda i, j: lam / (num_classes - 1) * (sizes[labels[i]] - 1) / sizes[labels[i]]  # noqa: E731
    assert abs(np_weighted(d, labels, ref.candidates(labels), margin, printed) - eq14) > 1e-3


def test_balanced_needs_class_sizes_and_num_classes(ref):
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels))
    with pytest.raises(ValueError, match="class_size"):
        BalancedContrastiveLoss(num_classes=4)(labels, e)
    with pytest.raises(ValueError, match="num_classes"):
        BalancedContrastiveLoss()
    with pytest.raises(ValueError, match="eta"):
        WeightedContrastiveLoss(eta=0.0)


# -- importance=True on the other pair losses ------------------------------------


def np_importance_pairs(d, labels, cand, w, pos_term, neg_term, extra_per_pair=None):
    """Eq. 23 for any pair term: Σ_(i,j) W_ij ℓ_ij (+ Σ W_ij e_i) / #pairs, over candidate pairs."""
    total, count = 0.0, 0
    for i in range(len(labels)):
        for j in range(len(labels)):
            if not cand[i, j]:
                continue
            term = pos_term(d[i, j]) if labels[i] == labels[j] else neg_term(d[i, j])
            if extra_per_pair is not None:
                term += extra_per_pair(i)
            total += w[i, j] * term
            count += 1
    return total / count if count else 0.0


@pytest.mark.parametrize("case", ["mixed", "one_class", "no_positive"])
def test_contrastive_importance_is_hong_eq23(ref, case):
    """ContrastiveLoss(importance=True) is WeightedContrastiveLoss(eta=1) (ℓ2², Eq. 5) and,
    with squared=False, the same weights on the ℓ2 terms of draft Eq. 18."""
    from tfdml.losses import ContrastiveLoss

    labels = ref.LABELS[case]
    e = ref.embeddings(len(labels), seed=3)
    d, cand = ref.pairwise(e), ref.candidates(labels)
    w = ref.hong_weights(labels, ref.CLASS_SIZES, 0.02, 0.005)
    y = ref.importance_targets(labels, 0.02, 0.005)
    got = float(ContrastiveLoss(margin=1.3, importance=True)(y, e))
    assert got == pytest.approx(float(WeightedContrastiveLoss(margin=1.3)(y, e)), rel=1e-6)
    np.testing.assert_allclose(got, np_weighted(d, labels, cand, 1.3, 1.0, w), rtol=1e-5)
    l2 = float(ContrastiveLoss(margin=1.3, squared=False, importance=True)(y, e))
    ref_l2 = np_importance_pairs(d, labels, cand, w, lambda x: x, lambda x: max(1.3 - x, 0.0))
    np.testing.assert_allclose(l2, ref_l2, rtol=1e-5)
    # Without importance=True the columns are not used (and they change the value when used).
    plain = float(ContrastiveLoss(margin=1.3)(y, e))
    np.testing.assert_allclose(plain, np_weighted(d, labels, cand, 1.3, 1.0), rtol=1e-5)
    if case == "mixed":
        assert abs(plain - got) > 1e-3 * abs(plain)


@pytest.mark.parametrize("nu", [0.0, 0.3])
def test_margin_importance_weights_each_pair_and_its_beta_term(ref, nu):
    """MarginLoss(importance=True): Σ W_ij [(α + y_ij (D_ij − β))_+ + ν β] / #pairs (Wu §4
    pair term, Hong Eq. 23 weights; the reduction becomes 'mean')."""
    from tfdml.losses import MarginLoss

    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=5)
    d, cand = ref.pairwise(e), ref.candidates(labels)
    w = ref.hong_weights(labels, ref.CLASS_SIZES, 0.02, 0.005)
    y = ref.importance_targets(labels, 0.02, 0.005)
    alpha, beta = 0.2, 1.1
    loss = MarginLoss(alpha=alpha, beta0=beta, nu=nu, sampler=None, importance=True)
    assert loss.tuple_reduction == "mean"
    want = np_importance_pairs(d, labels, cand, w, lambda x: max(alpha + x - beta, 0.0),
                               lambda x: max(alpha - x + beta, 0.0), lambda i: nu * beta)
    np.testing.assert_allclose(float(loss(y, e)), want, rtol=1e-5)
    ones = np.ones_like(w)
    unweighted = np_importance_pairs(d, labels, cand, ones, lambda x: max(alpha + x - beta, 0.0),
                                     lambda x: max(alpha - x + beta, 0.0), lambda i: nu * beta)
    np.testing.assert_allclose(float(loss(labels, e)), unweighted, rtol=1e-5)  # plain labels: W = 1


def test_importance_is_refused_where_it_has_no_pair_terms_and_serialises():
    import keras

    from tfdml_app import config
    from tfdml.losses import ContrastiveLoss, MarginLoss

    # Losses without pair or triplet terms take no importance argument; configs say which do.
    with pytest.raises(config.ConfigError, match="'importance', which is not an option of npair"):
        config.validate({"loss": {"name": "npair", "options": {"importance": True}}})
    for name in ("margin", "contrastive", "triplet"):
        config.validate({"loss": {"name": name, "options": {"importance": True}}})
    from tfdml.losses import TripletLoss

    for loss in (ContrastiveLoss(importance=True), MarginLoss(num_classes=3, importance=True),
                 TripletLoss(importance=True)):
        again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
        assert again.importance is True and again.get_config() == loss.get_config()


@pytest.mark.parametrize("sampler", ["semi_hard", "hard"])
@pytest.mark.parametrize("squared", [True, False])
def test_triplet_importance_weights_each_selected_triplet(ref, sampler, squared):
    """TripletLoss(importance=True): Σ_t mask_t W_t ℓ_t / Σ_t mask_t over the sampler's
    triplets, W_apn = w_triplet·N_a(N_a−1)·N_n (tfdml.importance; not in the papers)."""
    import tensorflow as tf

    from tfdml import samplers
    from tfdml.losses import TripletLoss

    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=7)
    d = ref.pairwise(e)
    y = {**ref.importance_targets(labels, 0.02, 0.005),
         "w_triplet": np.full(len(labels), 0.0031, np.float32)}
    loss = TripletLoss(margin=0.3, squared=squared, sampler=sampler, importance=True)
    sel = samplers.get(sampler)(tf.constant(d, tf.float32), labels)
    a, p, n, mask = (np.asarray(v) for v in (sel.anchor, sel.positive, sel.negative, sel.mask))
    sizes = ref.CLASS_SIZES[labels].astype(np.float64)
    values = d ** 2 if squared else d
    total = count = 0.0
    for t in np.flatnonzero(mask):
        w = 0.0031 * sizes[a[t]] * (sizes[a[t]] - 1) * sizes[n[t]]
        total += w * max(values[a[t], p[t]] - values[a[t], n[t]] + 0.3, 0.0)
        count += 1
    np.testing.assert_allclose(float(loss(y, e)), total / count, rtol=1e-5)
    # Pair columns alone (no w_triplet, e.g. a p-random batch): no triplet weights.
    unweighted = float(TripletLoss(margin=0.3, squared=squared, sampler=sampler)(y, e))
    no_column = {k: v for k, v in y.items() if k != "w_triplet"}
    assert float(loss(no_column, e)) == pytest.approx(unweighted, rel=1e-6)


def test_stable_contrast_and_robust_hard_contrast_take_importance(ref):
    """Stable contrast weights its slots like triplets (W_apn), robust hard
    contrast its positive pairs (W_ij), each against a NumPy reference of the draft's Eq."""
    import tensorflow as tf

    from tfdml import samplers
    from tfdml.losses import RobustHardContrastiveLoss, StableContrastLoss

    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=9)
    d, cand = ref.pairwise(e), ref.candidates(labels)
    sizes = ref.CLASS_SIZES[labels].astype(np.float64)
    y = {**ref.importance_targets(labels, 0.02, 0.005),
         "w_triplet": np.full(len(labels), 0.004, np.float32)}
    # Stable contrast (draft Eq. 16) on the semi-hard slots.
    loss = StableContrastLoss(alpha=0.2, beta=1.0, sampler="semi_hard", importance=True)
    sel = samplers.get("semi_hard")(tf.constant(d, tf.float32), labels)
    a, p, n, mask = (np.asarray(v) for v in (sel.anchor, sel.positive, sel.negative, sel.mask))
    keep = np.flatnonzero(mask)
    w = 0.004 * sizes[a[keep]] * (sizes[a[keep]] - 1) * sizes[n[keep]]
    terms = (np.maximum(d[a[keep], p[keep]] - 1.0 + 0.2, 0)
             + np.maximum(1.0 - d[a[keep], n[keep]] + 0.2, 0))
    np.testing.assert_allclose(float(loss(y, e)), np.sum(w * terms) / keep.size, rtol=1e-5)
    # Robust hard contrast (draft Eq. 22): W_ij of each positive pair.
    loss = RobustHardContrastiveLoss(alpha=1.0, beta=0.3, importance=True)
    W = ref.hong_weights(labels, ref.CLASS_SIZES, 0.02, 0.005)
    total = count = 0.0
    for i in range(len(labels)):
        negs = [d[i, k] for k in range(len(labels)) if cand[i, k] and labels[k] != labels[i]
                and d[i, k] > 0.3]
        hardest = max([max(1.0 - x, 0.0) ** 2 for x in negs], default=0.0)
        for j in range(len(labels)):
            if cand[i, j] and labels[i] == labels[j]:
                total += W[i, j] * (max(d[i, j] - 1.0, 0.0) ** 2 + hardest)
                count += 1
    np.testing.assert_allclose(float(loss(y, e)), total / count, rtol=1e-5)


@pytest.mark.parametrize("delta", [-1.0, 0.0, 0.5, 2.0])
def test_importance_power_weights_each_pair_by_w_to_the_delta(ref, delta):
    """Hong et al. §6.2 (Fig. 1): W̃_ij = W_ij^δ in Eq. 23; δ = 0 is the loss without IS."""
    labels = ref.LABELS["mixed"]
    e = ref.embeddings(len(labels), seed=3)
    d, cand = ref.pairwise(e), ref.candidates(labels)
    w = ref.hong_weights(labels, ref.CLASS_SIZES, 0.02, 0.005)
    assert np.ptp(w[cand]) > 0.1  # the weights differ, so δ changes the loss
    y = ref.importance_targets(labels, 0.02, 0.005)
    eta = balanced_eta(8.0, 6, ref.CLASS_SIZES, labels)
    loss = BalancedContrastiveLoss(margin=1.2, lam=8.0, num_classes=6, importance_power=delta)
    np.testing.assert_allclose(float(loss(y, e)), np_weighted(d, labels, cand, 1.2, eta, w ** delta), rtol=1e-5)
    weighted = WeightedContrastiveLoss(margin=1.3, eta=0.7, importance_power=delta)
    np.testing.assert_allclose(float(weighted(y, e)), np_weighted(d, labels, cand, 1.3, 0.7, w ** delta), rtol=1e-5)
    assert BalancedContrastiveLoss.from_config(loss.get_config()).importance_power == delta
    if delta == 0.0:
        plain = BalancedContrastiveLoss(margin=1.2, lam=8.0, num_classes=6, importance=False)
        np.testing.assert_allclose(float(loss(y, e)), float(plain(y, e)), rtol=1e-6)


def test_importance_power_must_be_a_finite_number():
    for bad in (float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="importance_power"):
            WeightedContrastiveLoss(importance_power=bad)
