"""All-pairs and random-pairs samplers (Wu et al. 2017, §5.1 "random": uniform sampling
from all positive and negative pairs)."""

import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

from tfdml import masks, samplers


def test_all_pairs_equals_candidate_masks():
    y = np.array([0, 0, 1, 1, 1, 2])
    pair_id = np.array([0, 0, 0, 1, 1, 1])
    cand = masks.candidate_mask(y, pair_id)
    sel = samplers.AllPairsSampler()(np.zeros((6, 6), np.float32), y, cand)
    pos = np.array([[y[i] == y[j] and i != j and pair_id[i] == pair_id[j] for j in range(6)] for i in range(6)])
    neg = np.array([[y[i] != y[j] and pair_id[i] == pair_id[j] for j in range(6)] for i in range(6)])
    np.testing.assert_array_equal(sel.pos_weight.numpy(), pos.astype(np.float32))
    np.testing.assert_array_equal(sel.neg_weight.numpy(), neg.astype(np.float32))
    assert sel.pos_weight.dtype == tf.float32


def test_random_pairs_only_candidates_total_and_uniform():
    y = np.array([0, 0, 1, 1, 1, 2, 2])
    pair_id = np.array([0, 0, 0, 0, 1, 1, 1])
    cand = masks.candidate_mask(y, pair_id).numpy()
    num_pairs = 6000
    sel = samplers.RandomPairSampler(num_pairs)(np.zeros((7, 7), np.float32), y, cand, seed=[3, 4])
    pos, neg = sel.pos_weight.numpy(), sel.neg_weight.numpy()
    same = y[:, None] == y[None]
    assert np.all(pos[~(cand & same)] == 0) and np.all(neg[~(cand & ~same)] == 0)
    counts = (pos + neg)[cand]
    assert counts.sum() == num_pairs
    assert np.all(counts == np.round(counts))
    # Uniform over the candidate pairs (Wu §5.1): chi-square goodness of fit.
    assert scipy.stats.chisquare(counts).pvalue > 0.01


def test_random_pairs_default_count_and_seed_dependence():
    y = np.arange(8) // 2
    d = np.zeros((8, 8), np.float32)
    sampler = samplers.RandomPairSampler()
    a = sampler(d, y, seed=tf.constant([1, 2]))
    b = sampler(d, y, seed=tf.constant([1, 2]))
    c = sampler(d, y, seed=tf.constant([1, 3]))
    assert float(tf.reduce_sum(a.pos_weight + a.neg_weight)) == 8.0
    np.testing.assert_array_equal(a.neg_weight.numpy(), b.neg_weight.numpy())
    assert not np.array_equal((a.pos_weight + a.neg_weight).numpy(), (c.pos_weight + c.neg_weight).numpy())


def test_random_pairs_no_candidates_gives_zeros():
    sel = samplers.RandomPairSampler(5)(np.zeros((3, 3), np.float32), [0, 1, 2], np.zeros((3, 3), bool), seed=[0, 0])
    assert float(tf.reduce_sum(sel.pos_weight + sel.neg_weight)) == 0.0


def test_random_pairs_needs_seed_and_valid_count():
    with pytest.raises(ValueError, match="seed"):
        samplers.RandomPairSampler()(np.zeros((3, 3), np.float32), [0, 0, 1])
    with pytest.raises(ValueError, match="num_pairs"):
        samplers.RandomPairSampler(0)
    with pytest.raises(ValueError, match="num_pairs"):
        samplers.RandomPairSampler(2.5)
