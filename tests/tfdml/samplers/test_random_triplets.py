"""Uniformly drawn triplets (Lu et al. 2019 §4.5 "uniform sampling"; Duan et al. 2019 Table 3
"random"), against brute-force enumerations of the candidate triplets in NumPy."""

import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

from tfdml import masks, samplers


def _triplet_sets(y, cand):
    """NumPy, from the definition: P_a and N_a of every anchor (candidate columns of equal /
    different label; the anchor's own column excluded)."""
    size, columns = cand.shape
    cand = cand & ~np.eye(size, columns, dtype=bool)
    same = y[:size, None] == y[None, :]
    return cand & same, cand & ~same


@pytest.fixture(scope="module")
def uneven_batch():
    """Classes of 2, 3 and 4 examples, and a candidate mask with holes: |N_a| differs by anchor."""
    y = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2], np.int32)
    cand = masks.candidate_mask(y, np.array([0, 0, 0, 0, 1, 1, 1, 1, 0])).numpy()
    cand[0, 5] = cand[3, 8] = True
    return y, cand


def test_one_uniform_negative_per_positive_pair(uneven_batch):
    """num_triplets=None: slot (a, p) is valid iff p ∈ P_a and N_a ≠ ∅, and its negative is
    uniform on N_a (Pr = 1/|N_a|): chi-square over 400 fixed seeds per valid slot."""
    y, cand = uneven_batch
    pos, neg = _triplet_sets(y, cand)
    size = len(y)
    sampler = samplers.RandomTripletSampler()
    draw = tf.function(lambda seed: tuple(sampler(np.zeros((size, size), np.float32), y, cand, seed=seed)))
    valid_want = (pos & neg.any(axis=1, keepdims=True)).reshape(-1)
    counts = np.zeros((size * size, size))
    for i in range(400):
        anchor, positive, negative, valid = (t.numpy() for t in draw(tf.constant([i, 7])))
        np.testing.assert_array_equal(valid, valid_want)
        assert np.all(neg[anchor[valid], negative[valid]])
        assert np.all(negative[~valid] == 0)
        counts[np.flatnonzero(valid), negative[valid]] += 1
    expected, observed = [], []
    for slot in np.flatnonzero(valid_want):
        members = neg[slot // size]
        assert counts[slot, ~members].sum() == 0  # never a non-member
        observed += list(counts[slot, members])
        expected += [400 / members.sum()] * members.sum()
    # every slot's draws against 1/|N_a| at once: one chi-square, dof = cells − slots
    observed, expected = np.array(observed), np.array(expected)
    dof = len(observed) - valid_want.sum()
    assert dof >= 9
    assert scipy.stats.chi2.sf(((observed - expected) ** 2 / expected).sum(), dof) > 0.01


def test_fixed_number_of_triplets_uniform_over_all_candidate_triplets(uneven_batch):
    """num_triplets=T: each draw is uniform over {(a, p, n): p ∈ P_a, n ∈ N_a}, enumerated
    here by brute force; the triplets of anchors with more negatives are drawn more often."""
    y, cand = uneven_batch
    pos, neg = _triplet_sets(y, cand)
    size = len(y)
    triplets = [(a, p, n) for a in range(size) for p in range(size) for n in range(size) if pos[a, p] and neg[a, n]]
    index = {t: i for i, t in enumerate(triplets)}
    draws = 40_000
    sel = samplers.RandomTripletSampler(draws)(np.zeros((size, size), np.float32), y, cand, seed=[5, 9])
    assert sel.anchor.shape == (draws,) and bool(tf.reduce_all(sel.mask))
    counts = np.zeros(len(triplets))
    for t in zip(sel.anchor.numpy(), sel.positive.numpy(), sel.negative.numpy()):
        assert t in index, t  # never a non-candidate triplet
        counts[index[t]] += 1
    assert scipy.stats.chisquare(counts).pvalue > 0.01
    assert counts.min() > 0


def test_no_candidate_triplet_gives_an_empty_selection_in_range():
    y = np.zeros(5, np.int32)  # one class: no negatives
    d = np.zeros((5, 5), np.float32)
    for sampler in (samplers.RandomTripletSampler(), samplers.RandomTripletSampler(7)):
        sel = sampler(d, y, seed=[0, 1])
        assert not bool(tf.reduce_any(sel.mask))
        for index in sel[:3]:
            assert np.all((index.numpy() >= 0) & (index.numpy() < 5))


def test_candidates_beyond_the_batch_are_drawn_as_negatives_and_positives():
    """A [B, M] matrix with M > B (the batch followed by a memory): positives and negatives come
    from every candidate column, a memory column included, never the anchor's own column."""
    y = np.array([0, 1, 0, 1, 0, 1, 2, 2, 0, 1], np.int32)  # B = 4 anchors, 6 memory entries
    d = np.zeros((4, 10), np.float32)
    pos, neg = _triplet_sets(y, np.ones((4, 10), bool))
    grid = samplers.RandomTripletSampler()(d, y, seed=[1, 1])
    v = grid.mask.numpy()
    assert np.all(pos[grid.anchor.numpy()[v], grid.positive.numpy()[v]])
    drawn = samplers.RandomTripletSampler(3000)(d, y, seed=[2, 2])
    a, p, n = drawn.anchor.numpy(), drawn.positive.numpy(), drawn.negative.numpy()
    assert np.all(pos[a, p]) and np.all(neg[a, n])
    assert np.all(a < 4) and set(p) == set(np.flatnonzero(pos.any(axis=0)))
    assert set(n) == set(np.flatnonzero(neg.any(axis=0)))


def test_more_candidate_triplets_than_int32_holds():
    """Σ_a |P_a|·|N_a| above 2^31 (two classes of 1,100 in a batch of 2,200): the draw is in
    int64, every triplet valid, and anchors of both halves are drawn."""
    y = np.repeat(np.array([0, 1], np.int32), 1100)
    size = len(y)
    assert size * 1099 * 1100 > 2**31
    sel = samplers.RandomTripletSampler(2000)(tf.zeros((size, size)), y, seed=[3, 3])
    a, p, n = sel.anchor.numpy(), sel.positive.numpy(), sel.negative.numpy()
    assert bool(tf.reduce_all(sel.mask))
    assert np.all(y[a] == y[p]) and np.all(a != p) and np.all(y[a] != y[n])
    # the first and second half of the slots each hold half the triplets
    assert 0.4 < np.mean(a < 1100) < 0.6


def test_a_seed_gives_the_same_triplets_and_another_seed_others(uneven_batch):
    y, cand = uneven_batch
    d = np.zeros((len(y), len(y)), np.float32)
    for sampler in (samplers.RandomTripletSampler(), samplers.RandomTripletSampler(50)):
        a = sampler(d, y, cand, seed=[1, 2]).negative.numpy()
        b = sampler(d, y, cand, seed=[1, 2]).negative.numpy()
        c = sampler(d, y, cand, seed=[1, 3]).negative.numpy()
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c)


def test_needs_a_seed_and_a_positive_count():
    with pytest.raises(ValueError, match="seed"):
        samplers.RandomTripletSampler()(np.zeros((3, 3), np.float32), [0, 0, 1])
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="num_triplets"):
            samplers.RandomTripletSampler(bad)
