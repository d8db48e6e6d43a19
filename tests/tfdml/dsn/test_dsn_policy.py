"""Sampler networks: chained selection (Duan Eq. 5, Fig. 2) returns valid tuples,
draws from the softmax policy of Eq. 4, and its log-probabilities are Eq. 5's."""

import numpy as np
import pytest
import tensorflow as tf

from tfdml import dsn

# Unequal classes: 7 has a single example (never an anchor, but a negative
# class), 3 has exactly two (its positive is forced), labels not grouped.
LABELS = np.array([3, 5, 5, 7, 9, 5, 9, 9, 5, 3, 9, 5], np.int32)


@pytest.fixture(scope="module")
def pool():
    x = np.random.default_rng(0).normal(size=(len(LABELS), 6, 6, 1)).astype("float32")
    return x


# Every selection test runs with both trunks (the paper's conv network on the images, and the MLP).
@pytest.fixture(scope="module", params=dsn.network.TRUNKS)
def triplet_net(pool, request):
    net = dsn.TripletSamplerNetwork(width=8, depth=1, input_size=3, trunk=request.param, channels=4, seed=0)
    net.build(pool.shape)
    return net


@pytest.fixture(scope="module", params=dsn.network.TRUNKS)
def npair_net(pool, request):
    net = dsn.NPairSamplerNetwork(width=8, depth=1, input_size=3, trunk=request.param, channels=4, seed=0)
    net.build(pool.shape)
    return net


def test_cheap_features_are_block_means(pool):
    """DSN input: 6×6 averaged over 2×2 blocks (factor floor(6 / 3)), flattened."""
    got = dsn.cheap_features(pool, input_size=3).numpy()
    want = pool.reshape(len(pool), 3, 2, 3, 2, 1).mean(axis=(2, 4)).reshape(len(pool), -1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert dsn.cheap_features(pool.reshape(len(pool), -1)).shape == (len(pool), 36)


def test_pool_structure():
    s = dsn.pool_structure(LABELS)
    np.testing.assert_array_equal(s.count.numpy(), [np.sum(LABELS == y) for y in LABELS])
    first = [int(np.flatnonzero(LABELS == y)[0]) for y in LABELS]
    np.testing.assert_array_equal(s.rep.numpy(), first)
    np.testing.assert_array_equal(s.is_rep.numpy(), np.arange(len(LABELS)) == first)


def test_triplet_selection_is_valid_for_every_anchor(triplet_net, pool):
    """Eq. 5 chain: positive of the anchor's class (not the anchor), negative of
    another class; anchors cover the classes with >= 2 examples uniformly.
    (The XLA-compiled path runs in test_dsn_model.py's jit_compile fit.)"""
    features = triplet_net.features(pool)
    select = tf.function(lambda f, s: triplet_net.select(f, LABELS, 30, s))
    negative_labels = set()
    for i in range(3):
        c = select(features, tf.constant([i, 7]))
        a, p, n, mask = (t.numpy() for t in (c.anchor, c.positive, c.negative, c.mask))
        assert mask.all()
        assert np.all(LABELS[a] == LABELS[p]) and np.all(a != p)
        assert np.all(LABELS[a] != LABELS[n])
        assert not np.any(LABELS[a] == 7)
        # 30 anchors over 3 eligible classes (3, 5, 9): exactly 10 each (cycled permutation).
        _, counts = np.unique(LABELS[a], return_counts=True)
        np.testing.assert_array_equal(counts, [10, 10, 10])
        assert np.all(np.isfinite(c.log_prob.numpy())) and np.all(c.log_prob.numpy() <= 0)
        negative_labels.update(LABELS[n].tolist())
    assert negative_labels == {3, 5, 7, 9}  # the singleton class 7 is a negative class


def test_triplet_selection_without_tuples_is_masked(triplet_net):
    x = np.zeros((4, 6, 6, 1), np.float32)
    f = triplet_net.features(x)
    for labels in ([1, 1, 1, 1], [0, 1, 2, 3]):  # no negative / no positive
        c = triplet_net.select(f, np.array(labels, np.int32), 5, tf.constant([0, 1]))
        assert not c.mask.numpy().any()
        np.testing.assert_array_equal(c.log_prob.numpy(), 0.0)


def test_triplet_draws_follow_the_policy(triplet_net, pool, dsnref):
    """Empirical frequencies of (p, n) given the anchor match Eq. 5's product of the
    three softmaxes (Eq. 4) computed in NumPy from the raw head logits, and the
    returned log-probabilities equal that product."""
    features = triplet_net.features(pool)
    c = triplet_net.select(features, LABELS, 24000, tf.constant([3, 4]))
    h = triplet_net.embed(features)
    structure = dsn.pool_structure(LABELS)
    a, p, n = c.anchor.numpy(), c.positive.numpy(), c.negative.numpy()
    for anchor in (1, 0, 6):  # classes 5 (5 members), 3 (2), 9 (4)
        rows = np.flatnonzero(a == anchor)
        assert len(rows) > 1000
        pos_l, cls_l = (t.numpy()[0] for t in triplet_net.first_logits(h, structure, tf.constant([anchor])))
        size = len(LABELS)
        neg_l = triplet_net.negative_logits(h, tf.fill([size], anchor), tf.range(size)).numpy()
        table = dsnref.triplet_table(pos_l, cls_l, neg_l, LABELS, anchor)
        assert sum(table.values()) == pytest.approx(1.0)
        for (pp, nn), prob in table.items():
            freq = np.mean((p[rows] == pp) & (n[rows] == nn))
            assert abs(freq - prob) < 4 * np.sqrt(prob * (1 - prob) / len(rows)) + 1e-3
        for r in rows[:50]:
            assert c.log_prob.numpy()[r] == pytest.approx(np.log(table[(p[r], n[r])]), abs=1e-5)


def test_npair_selection_is_valid_and_follows_the_policy(npair_net, pool, dsnref):
    """Fig. 2b: gallery of distinct classes with >= 2 examples, probe of the same
    class (not the gallery example), drawn by Eq. 4; surplus slots are masked."""
    features = npair_net.features(pool)
    for i in range(3):
        c = npair_net.select(features, LABELS, 5, tf.constant([i, 1]))
        g, pr, mask = c.gallery.numpy(), c.probe.numpy(), c.mask.numpy()
        np.testing.assert_array_equal(mask, [True, True, True, False, False])
        assert sorted(LABELS[g[mask]]) == [3, 5, 9]
        assert np.all(LABELS[pr[mask]] == LABELS[g[mask]]) and np.all(pr[mask] != g[mask])
    # Frequencies for a fixed gallery: one softmax (Eq. 4) per probe slot.
    gallery = tf.constant([2, 0, 4])
    valid = tf.constant([True, True, True])
    structure = dsn.pool_structure(LABELS)
    h = npair_net.embed(features)
    logits = npair_net.logits(h, structure, gallery, valid).numpy()
    reps = 4000
    mask = np.tile(npair_net.mask(structure, gallery).numpy(), (reps, 1))
    draws = dsn.pool.gumbel_sample(tf.constant(np.tile(logits, (reps, 1))), mask, tf.constant([5, 9]))
    draws = draws.numpy().reshape(reps, 3)
    for i, gi in enumerate(gallery.numpy()):
        cand = (LABELS == LABELS[gi]) & (np.arange(len(LABELS)) != gi)
        prob = dsnref.softmax_masked(logits[i], cand)
        freq = np.bincount(draws[:, i], minlength=len(LABELS)) / reps
        np.testing.assert_allclose(freq, prob, atol=0.03)
    lp = npair_net.log_prob(features, LABELS, gallery, valid, tf.constant([1, 9, 6])).numpy()
    np.testing.assert_allclose(
        lp,
        [np.log(dsnref.softmax_masked(logits[i], (LABELS == LABELS[g]) & (np.arange(12) != g))[j])
         for i, (g, j) in enumerate(zip([2, 0, 4], [1, 9, 6]))],
        rtol=1e-5,
    )


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="width"):
        dsn.TripletSamplerNetwork(width=0)
    with pytest.raises(ValueError, match="Unknown sampler network"):
        dsn.policy.get("pairs")


def test_conv_trunk_reads_the_images_and_learns_through_its_convolutions(pool):
    """Duan §3.2: the sampler networks share convolutional and fully connected layers on the
    images. The conv trunk's features are the images themselves, its first weights a 3 × 3
    kernel, and Eq. 5's log-probability has a gradient on every trunk weight."""
    net = dsn.TripletSamplerNetwork(width=8, depth=2, trunk="conv", channels=4, seed=0)
    net.build(pool.shape)
    features = net.features(pool)
    np.testing.assert_array_equal(features.numpy(), pool)
    assert tuple(net.trunk[0].kernel.shape) == (3, 3, 1, 4)
    assert net.embed(features).shape == (len(LABELS), 8)
    choice = net.select(features, LABELS, 6, tf.constant([1, 2]))
    with tf.GradientTape() as tape:
        lp = tf.reduce_sum(net.log_prob(features, LABELS, choice.anchor, choice.positive, choice.negative))
    trunk_weights = [w for layer in net.trunk for w in layer.trainable_weights]
    grads = tape.gradient(lp, trunk_weights)
    assert len(trunk_weights) == 6  # two convolutions and the dense layer, kernel and bias each
    assert all(g is not None and np.any(g.numpy() != 0) for g in grads)
    # The same pixels in another arrangement give other features (the MLP trunk's block means
    # would not see a permutation inside a block either; the conv trunk sees every pixel).
    swapped = pool.copy()
    swapped[:, [0, 1]] = swapped[:, [1, 0]]
    assert not np.allclose(net.embed(net.features(swapped)).numpy(), net.embed(features).numpy())


def test_conv_trunk_round_trips_and_refuses_inputs_that_are_not_images(pool):
    net = dsn.NPairSamplerNetwork(width=8, depth=1, trunk="conv", channels=4, seed=3)
    net.build(pool.shape)
    config = net.get_config()
    assert config["trunk"] == "conv" and config["channels"] == 4
    twin = dsn.NPairSamplerNetwork.from_config(config)
    twin.build(pool.shape)
    twin.set_weights(net.get_weights())
    np.testing.assert_allclose(twin(pool).numpy(), net(pool).numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="trunk='conv' reads images"):
        dsn.NPairSamplerNetwork(trunk="conv").build((12, 36))
    with pytest.raises(ValueError, match="unknown trunk 'resnet'.*mlp, conv"):
        dsn.NPairSamplerNetwork(trunk="resnet")


def test_the_uniform_policy_s_triplets_and_their_log_probabilities(triplet_net, pool):
    """DSNEmbeddingModel's diagnostics compare the policy with the uniform chain over the
    same candidates: for the policy's anchors, a positive of the anchor's class, a negative
    class, a member of it, each uniformly; log p = −log(|class(a)| − 1) − log(classes − 1)
    − log |class(n)| (counted here from the labels). Over many draws every positive and
    negative class of an anchor turns up about equally often."""
    features = triplet_net.features(pool)
    choice = triplet_net.select(features, LABELS, 30, tf.constant([1, 2]))
    sizes = {c: int(np.sum(LABELS == c)) for c in np.unique(LABELS)}
    seen = {}
    for i in range(60):
        noise = dsn.pool.draw_noise(tf.constant([i, 3]), triplet_net.uniform_noise_rows(30), len(LABELS))
        u = triplet_net.uniform_choice(LABELS, choice, noise)
        a, p, n, lp = (t.numpy() for t in (u.anchor, u.positive, u.negative, u.log_prob))
        np.testing.assert_array_equal(a, choice.anchor.numpy())
        assert np.all(LABELS[a] == LABELS[p]) and np.all(a != p) and np.all(LABELS[a] != LABELS[n])
        expected = [-np.log(sizes[LABELS[i]] - 1) - np.log(len(sizes) - 1) - np.log(sizes[LABELS[j]])
                    for i, j in zip(a, n)]
        np.testing.assert_allclose(lp, expected, rtol=1e-6)
        for i, j in zip(a, n):
            seen.setdefault(LABELS[i], []).append(LABELS[j])
    for anchor_class, negatives in seen.items():
        _, counts = np.unique(negatives, return_counts=True)
        assert len(counts) == len(sizes) - 1  # every other class, the singleton 7 included
        assert counts.min() > 0.6 * counts.mean(), (anchor_class, counts)


def test_the_uniform_policy_s_probes(npair_net, pool):
    features = npair_net.features(pool)
    choice = npair_net.select(features, LABELS, 5, tf.constant([0, 1]))
    noise = dsn.pool.draw_noise(tf.constant([4, 4]), npair_net.uniform_noise_rows(5), len(LABELS))
    u = npair_net.uniform_choice(LABELS, choice, noise)
    g, pr, lp, mask = (t.numpy() for t in (u.gallery, u.probe, u.log_prob, u.mask))
    np.testing.assert_array_equal(mask, choice.mask.numpy())
    assert np.all(LABELS[pr[mask]] == LABELS[g[mask]]) and np.all(pr[mask] != g[mask])
    np.testing.assert_allclose(lp[mask], [-np.log(np.sum(LABELS == c) - 1) for c in LABELS[g[mask]]], rtol=1e-6)
    np.testing.assert_array_equal(lp[~mask], 0.0)
