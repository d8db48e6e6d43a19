"""REINFORCE for the DSN (Duan Eq. 6–8, footnote 1) and the per-tuple scores S = L_emb
(Eq. 2, Eq. 9): exact policy gradients against finite differences of E[S], the sampled
estimator against the exact gradient, and a toy problem where the mass must move."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdml import dsn, losses

# Tiny pool: classes 0 (2 examples), 1 (3), 2 (1: never an anchor, only a negative class).
TINY = np.array([0, 0, 1, 1, 1, 2], np.int32)


# -- scores -------------------------------------------------------------------------


def test_reinforce_loss_by_hand():
    """−1/M Σ (S_t − S̄) log p_t over valid tuples (Eq. 8 with footnote 1's baseline)."""
    lp = tf.constant([-1.0, -2.0, -0.5, -3.0])
    s = tf.constant([1.0, 3.0, 2.0, 100.0])
    mask = tf.constant([True, True, True, False])
    # S̄ = 2: advantages −1, 1, 0 -> −(1·1 + 1·(−2) + 0) / 3 = 1/3
    assert float(dsn.reinforce_loss(lp, s, mask)) == pytest.approx(1.0 / 3.0)
    assert float(dsn.reinforce_loss(lp, s, mask, baseline="none")) == pytest.approx(-(-1 - 6 - 1) / 3)
    with pytest.raises(ValueError, match="baseline"):
        dsn.reinforce_loss(lp, s, baseline="ema")


@pytest.mark.parametrize("squared", [True, False])
@pytest.mark.parametrize("distance", ["euclidean", "cosine"])
def test_triplet_terms_eq2(squared, distance):
    """Eq. 2: [D_ap² − D_an² + α]_+ (ℓ2 form: (D_ap − D_an + α)_+), per triplet."""
    rng = np.random.default_rng(1)
    a, p, n = (rng.normal(size=(7, 4)).astype(np.float32) for _ in range(3))
    if distance == "euclidean":
        d_ap, d_an = np.linalg.norm(a - p, axis=1), np.linalg.norm(a - n, axis=1)
    else:
        def cos(u, v):
            return np.sum(u * v, 1) / np.linalg.norm(u, axis=1) / np.linalg.norm(v, axis=1)

        d_ap, d_an = 1 - cos(a, p), 1 - cos(a, n)
    if squared:
        d_ap, d_an = d_ap**2, d_an**2
    want = np.maximum(d_ap - d_an + 0.3, 0)
    loss = losses.TripletLoss(margin=0.3, squared=squared, distance=distance)
    got = loss.tuple_terms(tf.constant(a), tf.constant(p), tf.constant(n)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("squared", [True, False])
def test_triplet_tuple_terms_are_the_terms_the_loss_averages(squared):
    """The DSN scores tuples with the loss's own terms. On a batch and the
    triplets a sampler selects from it, the loss equals the mean of tuple_terms of those
    triplets' embeddings."""
    from tfdml import samplers

    rng = np.random.default_rng(4)
    labels = np.repeat(np.arange(4), 3)
    emb = rng.normal(size=(12, 5)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    loss = losses.TripletLoss(margin=0.25, squared=squared, sampler="hard")
    dist = np.linalg.norm(emb[:, None] - emb[None], axis=-1).astype(np.float32)
    sel = samplers.get("hard")(tf.constant(dist), labels)
    keep = np.flatnonzero(np.asarray(sel.mask))
    a, p, n = (np.asarray(v)[keep] for v in (sel.anchor, sel.positive, sel.negative))
    terms = loss.tuple_terms(tf.constant(emb[a]), tf.constant(emb[p]), tf.constant(emb[n]))
    assert float(loss(labels, emb)) == pytest.approx(float(np.mean(terms)), rel=1e-5)


def test_npair_terms_eq9_and_equal_to_npair_loss():
    """Eq. 9 per probe (NumPy), and mean + ℓ2 term equals tfdml.losses.NPairLoss on the
    batch (probe_i, gallery_i) interleaved; an invalid pair is no negative."""
    rng = np.random.default_rng(2)
    probe, gallery = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    mask = np.array([True, True, False, True, True])
    want = []
    for i in np.flatnonzero(mask):
        others = [j for j in np.flatnonzero(mask) if j != i]
        inner = sum(np.exp(probe[i] @ gallery[j] - probe[i] @ gallery[i]) for j in others)
        want.append(np.log1p(inner))
    npair = losses.NPairLoss(l2_reg=0.01)
    got = npair.tuple_terms(tf.constant(probe), tf.constant(gallery), tf.constant(mask)).numpy()
    np.testing.assert_allclose(got[mask], want, rtol=1e-10)
    keep = np.flatnonzero(mask)
    batch = np.stack([probe[keep], gallery[keep]], axis=1).reshape(-1, 3).astype(np.float32)
    labels = np.repeat(np.arange(len(keep)), 2)
    reference = npair(labels, batch)
    ours = np.mean(got[mask]) + npair.regularizer(tf.constant(probe), tf.constant(gallery), mask)
    assert float(ours) == pytest.approx(float(reference), rel=1e-5)


# -- gradients on a tiny case ---------------------------------------------------------------


def _randomize(net, seed):
    """Random weights *and biases*: with zero biases, pairs of identical (zero) trunk
    features put ReLUs exactly at their kink, where finite differences are one-sided."""
    rng = np.random.default_rng(seed)
    for v in net.trainable_variables:
        v.assign(rng.normal(scale=0.7, size=v.shape))


def _float64_network(cls, num_examples, seed, randomize_seed):
    """A tiny float64 sampler network over one-hot features, weights randomised."""
    keras.backend.set_floatx("float64")
    try:
        net = cls(width=3, depth=1, input_size=0, seed=seed, dtype="float64")
        net.build((None, num_examples))
    finally:
        keras.backend.set_floatx("float32")
    _randomize(net, seed=randomize_seed)
    return net, net.features(np.eye(num_examples))


@pytest.fixture(scope="module")
def tiny_triplet():
    net, features = _float64_network(dsn.TripletSamplerNetwork, len(TINY), seed=4, randomize_seed=7)
    scores = np.random.default_rng(5).uniform(0, 1, size=(len(TINY),) * 3)  # fixed S(a, p, n)
    return net, features, scores


def _expected_score(net, features, scores, ref):
    """E[S] = Σ_a q(a) Σ_(p,n) p(p, c(n), n | a) S(a, p, n), enumerated in NumPy (Eq. 5, 6)."""
    h = net.embed(features)
    structure = dsn.pool_structure(TINY)
    size = len(TINY)
    q = ref.anchor_distribution(TINY)
    anchors = np.flatnonzero(q)
    pos_l, cls_l = (t.numpy() for t in net.first_logits(h, structure, tf.constant(anchors)))
    total, tuples = 0.0, []
    for k, a in enumerate(anchors):
        neg_l = net.negative_logits(h, tf.fill([size], int(a)), tf.range(size)).numpy()
        for (p, n), prob in ref.triplet_table(pos_l[k], cls_l[k], neg_l, TINY, a).items():
            total += q[a] * prob * scores[a, p, n]
            tuples.append((a, p, n, q[a] * prob))
    return total, tuples


def _directional_fd(net, features, scores, ref, direction, eps=1e-5):
    variables = net.trainable_variables
    original = [v.numpy() for v in variables]
    values = []
    for sign in (1, -1):
        for v, o, d in zip(variables, original, direction):
            v.assign(o + sign * eps * d)
        values.append(_expected_score(net, features, scores, ref)[0])
    for v, o in zip(variables, original):
        v.assign(o)
    return (values[0] - values[1]) / (2 * eps)


def test_exact_policy_gradient_equals_finite_differences(tiny_triplet, dsnref):
    """Eq. 8: ∇_η E[S] = E[S ∇_η log p(x_s)], with log p from the chained networks
    (Eq. 5), equals a central finite difference of the enumerated E[S] along random
    directions of the DSN parameters."""
    net, features, scores = tiny_triplet
    _, tuples = _expected_score(net, features, scores, dsnref)
    a, p, n, w = (np.array(t) for t in zip(*tuples))
    weight = tf.constant(w * scores[a, p, n])
    with tf.GradientTape() as tape:
        lp = net.log_prob(features, TINY, tf.constant(a), tf.constant(p), tf.constant(n))
        objective = tf.reduce_sum(weight * lp)
    grads = tape.gradient(objective, net.trainable_variables)
    rng = np.random.default_rng(6)
    for _ in range(4):
        direction = [rng.normal(size=v.shape) for v in net.trainable_variables]
        analytic = sum(float(np.sum(g.numpy() * d)) for g, d in zip(grads, direction))
        numeric = _directional_fd(net, features, scores, dsnref, direction)
        assert analytic == pytest.approx(numeric, rel=1e-6, abs=1e-9)
        assert abs(numeric) > 1e-4  # the check is not vacuous


def test_sampled_reinforce_gradient_estimates_the_policy_gradient(tiny_triplet, dsnref):
    """The estimator of the training step (select + reinforce_loss with the mean baseline)
    on M sampled tuples has expectation −(1 − 1/M) ∇E[S]; with M = 40000 it is within
    a few percent of the exact gradient."""
    net, features, scores = tiny_triplet
    _, tuples = _expected_score(net, features, scores, dsnref)
    a, p, n, w = (np.array(t) for t in zip(*tuples))
    with tf.GradientTape() as tape:
        lp = net.log_prob(features, TINY, tf.constant(a), tf.constant(p), tf.constant(n))
        objective = tf.reduce_sum(tf.constant(w * scores[a, p, n]) * lp)
    exact = np.concatenate([g.numpy().ravel() for g in tape.gradient(objective, net.trainable_variables)])
    num = 40000
    with tf.GradientTape() as tape:
        c = net.select(features, TINY, num, tf.constant([8, 8]))
        s = tf.constant(scores[c.anchor.numpy(), c.positive.numpy(), c.negative.numpy()])
        surrogate = dsn.reinforce_loss(c.log_prob, s, c.mask)
    sampled = np.concatenate([g.numpy().ravel() for g in tape.gradient(surrogate, net.trainable_variables)])
    target = -(1 - 1 / num) * exact
    assert np.linalg.norm(sampled - target) < 0.05 * np.linalg.norm(target)


def test_npair_policy_gradient_equals_finite_differences():
    """Eq. 4, 8 for one probe network given the gallery (Fig. 2b): the exact gradient of
    E[S | gallery] = Σ_i Σ_j π(j | i) S(i, j) equals a central finite difference."""
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 2], np.int32)
    net, features = _float64_network(dsn.NPairSamplerNetwork, len(labels), seed=2, randomize_seed=8)
    gallery, valid = tf.constant([1, 3, 7]), tf.constant([True, True, True])
    scores = np.random.default_rng(3).uniform(size=(3, len(labels)))
    structure = dsn.pool_structure(labels)
    mask = net.mask(structure, gallery).numpy()

    def expected():
        logits = net.logits(net.embed(features), structure, gallery, valid).numpy()
        return sum(
            np.sum(dsn_softmax(logits[i], mask[i]) * scores[i]) for i in range(3)
        )

    rows, cols = np.nonzero(mask)
    logits = net.logits(net.embed(features), structure, gallery, valid).numpy()
    probs = np.array([dsn_softmax(logits[i], mask[i])[j] for i, j in zip(rows, cols)])
    # Σ_i Σ_j π(j | i) S(i, j) ∇ log π(j | i): log_prob of probe slot i with the full gallery.
    with tf.GradientTape() as tape:
        total = 0.0
        for i in range(3):
            sel = rows == i
            probe = np.zeros(3, np.int32)
            for j, pr in zip(cols[sel], probs[sel]):
                probe[i] = j
                lp = net.log_prob(features, labels, gallery, valid, tf.constant(probe))[i]
                total += pr * scores[i, j] * lp
    grads = tape.gradient(total, net.trainable_variables)
    variables = net.trainable_variables
    original = [v.numpy() for v in variables]
    rng = np.random.default_rng(4)
    for _ in range(3):
        direction = [rng.normal(size=v.shape) for v in variables]
        values = []
        for sign in (1, -1):
            for v, o, d in zip(variables, original, direction):
                v.assign(o + sign * 1e-5 * d)
            values.append(expected())
        for v, o in zip(variables, original):
            v.assign(o)
        numeric = (values[0] - values[1]) / 2e-5
        analytic = sum(float(np.sum(g.numpy() * d)) for g, d in zip(grads, direction))
        assert analytic == pytest.approx(numeric, rel=1e-6, abs=1e-9)
        assert abs(numeric) > 1e-4


def dsn_softmax(logits, mask):
    z = np.where(mask, logits, -np.inf)
    e = np.where(mask, np.exp(z - z[mask].max()), 0.0)
    return e / e.sum()


# -- toy problem: the mass moves ----------------------------------------------------------


def test_reinforce_moves_mass_to_high_score_candidates():
    """Fixed known scores S(a, p, n) = 1{p is the 'hard' positive of its class} +
    1{n is the 'hard' negative of its class}: within 60 REINFORCE steps (Eq. 8,
    footnote 1; Adam) the policy puts > 0.85 of its mass on the hard positive and on
    the hard negative, from 1/2 and 1/3 at the start."""
    labels = np.repeat(np.arange(4), 3).astype(np.int32)  # 4 classes × 3 examples
    hard = np.zeros(len(labels))
    hard[[0, 3, 6, 9]] = 1.0  # first member of each class
    net = dsn.TripletSamplerNetwork(width=16, depth=1, input_size=0, seed=0)
    net.build((None, len(labels)))
    features = net.features(np.eye(len(labels), dtype=np.float32))
    optimizer = keras.optimizers.Adam(0.01)
    optimizer.build(net.trainable_variables)
    hard_t = tf.constant(hard, tf.float32)

    @tf.function
    def step(seed):
        with tf.GradientTape() as tape:
            c = net.select(features, labels, 48, seed)
            s = tf.gather(hard_t, c.positive) + tf.gather(hard_t, c.negative)
            loss = dsn.reinforce_loss(c.log_prob, s, c.mask)
        optimizer.apply(tape.gradient(loss, net.trainable_variables), net.trainable_variables)
        return tf.reduce_mean(s)

    def mass():
        """Mean over anchors that are not hard of π_pos(hard positive | a), and of the
        probability that the sampled negative is hard (Σ_c π_cls(c) π_neg(hard of c))."""
        h = net.embed(features)
        structure = dsn.pool_structure(labels)
        anchors = np.array([1, 2, 4, 5, 7, 8, 10, 11])
        pos_l, cls_l = (t.numpy() for t in net.first_logits(h, structure, tf.constant(anchors)))
        pos, neg = [], []
        for k, a in enumerate(anchors):
            hard_pos = 3 * (a // 3)
            pos.append(dsn_softmax(pos_l[k], (labels == labels[a]) & (np.arange(12) != a))[hard_pos])
            # positive fixed to the hard one for the negative's conditional
            neg_l = net.negative_logits(h, tf.constant([a]), tf.constant([hard_pos])).numpy()[0]
            cls = dsn_softmax(cls_l[k], (labels != labels[a]) & (np.arange(12) % 3 == 0))
            others = [c for c in range(4) if c != labels[a]]
            neg.append(sum(cls[3 * c] * dsn_softmax(neg_l, labels == c)[3 * c] for c in others))
        return np.mean(pos), np.mean(neg)

    start = mass()
    assert start[0] == pytest.approx(0.5, abs=0.1) and start[1] == pytest.approx(1 / 3, abs=0.1)
    history = []
    for i in range(60):
        step(tf.constant([i, 0]))
        if i % 10 == 9:
            history.append(mass())
    assert min(history[-1]) > 0.85
