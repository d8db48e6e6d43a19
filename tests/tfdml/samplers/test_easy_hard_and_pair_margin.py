"""Batch easy-hard (Xuan et al. 2020: the easiest positive with the hardest or a semi-hard negative)
and pair-margin mining (pytorch-metric-learning's PairMarginMiner) against brute-force NumPy loops."""

import numpy as np
import pytest
import tensorflow as tf

from tests.tfdml.samplers.test_semi_hard_and_hard import CASES, _brute_hard, _case
from tfdml import losses, samplers


def _brute_easy_hard(d, y, cand, negative):
    """Per anchor a: p* = argmin D_ap over its positives; n* = argmin D_an over its negatives
    ("hard") or over those with D_an > D_ap* ("semi_hard"); lower index on ties."""
    b = len(y)
    positive, chosen, valid = np.full(b, -1), np.full(b, -1), np.zeros(b, bool)
    for a in range(b):
        poss = [p for p in range(b) if p != a and cand[a, p] and y[p] == y[a]]
        negs = [n for n in range(b) if n != a and cand[a, n] and y[n] != y[a]]
        if not poss:
            continue
        p = min(poss, key=lambda p: (d[a, p], p))
        if negative == "semi_hard":
            negs = [n for n in negs if d[a, n] > d[a, p]]
        if negs:
            positive[a], chosen[a], valid[a] = p, min(negs, key=lambda n: (d[a, n], n)), True
    return positive, chosen, valid


def _brute_pair_margin(d, y, cand, pos_margin, neg_margin):
    b = len(y)
    pos, neg = np.zeros((b, b)), np.zeros((b, b))
    for i in range(b):
        for j in range(b):
            if i == j or not cand[i, j]:
                continue
            if y[i] == y[j] and d[i, j] > pos_margin:
                pos[i, j] = 1
            if y[i] != y[j] and d[i, j] < neg_margin:
                neg[i, j] = 1
    return pos, neg


@pytest.mark.parametrize("negative", ["hard", "semi_hard"])
@pytest.mark.parametrize("name,seed", CASES)
def test_easy_hard_matches_brute_force(name, seed, negative):
    d, y, cand, with_pair_id = _case(name, seed)
    sel = samplers.EasyHardSampler(negative)(d, y, cand if with_pair_id else None)
    ref_pos, ref_neg, ref_valid = _brute_easy_hard(d, y, cand, negative)
    np.testing.assert_array_equal(sel.anchor.numpy(), np.arange(len(y)))
    np.testing.assert_array_equal(sel.mask.numpy(), ref_valid)
    np.testing.assert_array_equal(sel.positive.numpy()[ref_valid], ref_pos[ref_valid])
    np.testing.assert_array_equal(sel.negative.numpy()[ref_valid], ref_neg[ref_valid])
    assert np.all((sel.negative.numpy() >= 0) & (sel.negative.numpy() < len(y)))
    if name == "one_class":
        assert not sel.mask.numpy().any()


def test_easy_hard_differs_from_batch_hard_where_it_should():
    """The test can fail: batch-hard's farthest positive is not the easy positive."""
    d, y, cand, _ = _case("random", 0)
    sel = samplers.EasyHardSampler()(d, y)
    hard_pos, hard_neg, valid = _brute_hard(d, y, cand)
    assert np.any(sel.positive.numpy()[valid] != hard_pos[valid])
    np.testing.assert_array_equal(sel.negative.numpy()[valid], hard_neg[valid])  # the same negative


def test_easy_hard_hand_case():
    # Anchor 0 (class 0): positives 1, 2 at 0.6, 0.2; negatives 3, 4, 5 at 0.1, 0.4, 0.9.
    d = np.full((6, 6), 1.0, np.float32)
    d[0, 1:] = [0.6, 0.2, 0.1, 0.4, 0.9]
    y = np.array([0, 0, 0, 1, 1, 1])
    hard = samplers.EasyHardSampler()(d, y)
    assert (hard.positive.numpy()[0], hard.negative.numpy()[0]) == (2, 3)
    semi = samplers.EasyHardSampler("semi_hard")(d, y)
    assert (semi.positive.numpy()[0], semi.negative.numpy()[0]) == (2, 4)  # the closest beyond 0.2
    d[0, 2] = 0.95
    d[0, 1] = 0.95  # no negative beyond the easy positive: semi-hard drops the anchor
    assert not samplers.EasyHardSampler("semi_hard")(d, y).mask.numpy()[0]
    assert samplers.EasyHardSampler("hard")(d, y).mask.numpy()[0]


@pytest.mark.parametrize("margins", [(0.2, 0.8), (0.5, 1.2), (-1.0, 0.0)])
@pytest.mark.parametrize("name,seed", CASES)
def test_pair_margin_matches_brute_force(name, seed, margins):
    d, y, cand, with_pair_id = _case(name, seed)
    sel = samplers.PairMarginSampler(*margins)(d, y, cand if with_pair_id else None)
    pos, neg = _brute_pair_margin(d, y, cand, *margins)
    np.testing.assert_array_equal(sel.pos_weight.numpy(), pos)
    np.testing.assert_array_equal(sel.neg_weight.numpy(), neg)


def test_pair_margin_hand_case_and_strict_bounds():
    d = np.array([[0.0, 0.2, 0.8, 0.5], [0.2, 0.0, 0.3, 0.9], [0.8, 0.3, 0.0, 0.1], [0.5, 0.9, 0.1, 0.0]],
                 np.float32)
    y = np.array([0, 0, 1, 1])
    sel = samplers.PairMarginSampler(pos_margin=0.2, neg_margin=0.8)(d, y)
    assert not sel.pos_weight.numpy()[0, 1]  # D = 0.2 is not > 0.2
    assert not sel.pos_weight.numpy()[2, 3]
    assert not sel.neg_weight.numpy()[0, 2]  # D = 0.8 is not < 0.8
    np.testing.assert_array_equal(np.argwhere(sel.neg_weight.numpy()), [[0, 3], [1, 2], [2, 1], [3, 0]])


def test_bad_arguments():
    with pytest.raises(ValueError, match="negative"):
        samplers.EasyHardSampler("easy")
    for bad in (None, float("nan"), "x", True):
        with pytest.raises(ValueError, match="pos_margin must be a finite number"):
            samplers.PairMarginSampler(pos_margin=bad)


@pytest.mark.parametrize("sampler", ["easy_hard", "pair_margin", "hdc"])
@pytest.mark.parametrize("loss", ["contrastive", "triplet", "margin", "lifted_structured", "multi_similarity",
                                  "circle", "binomial_deviance", "stable_contrast", "histogram", "ddml"])
def test_composes_with_every_pair_and_triplet_loss_that_takes_its_kind(sampler, loss):
    cls = losses.LOSSES[loss]
    kind = samplers.get(sampler).kind
    if kind not in cls.sampler_kinds:
        with pytest.raises(ValueError, match="needs a sampler that selects"):
            losses.get(loss, sampler=sampler)
        return
    made = losses.get(loss, sampler=sampler, **({"num_classes": 4} if loss == "margin" else {}))
    y = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    e = tf.math.l2_normalize(tf.constant(np.random.default_rng(1).normal(size=(8, 5)), tf.float32), axis=1)
    with tf.GradientTape() as tape:
        tape.watch(e)
        value = made(y, e)
    assert np.isfinite(float(value)) and np.all(np.isfinite(tape.gradient(value, e).numpy()))


@pytest.mark.parametrize("sampler", [samplers.EasyHardSampler(), samplers.EasyHardSampler("semi_hard"),
                                     samplers.PairMarginSampler(0.3, 1.0)], ids=repr)
def test_xla_with_unknown_batch_equals_eager(sampler):
    spec = (tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([None, None], tf.bool))
    run = lambda d, y, cand: tuple(sampler(d, y, cand))  # noqa: E731
    compiled = tf.function(run, input_signature=spec, jit_compile=True)
    for name, seed in [("random", 1), ("pair_id", 0), ("one_class", 2)]:
        d, y, cand, _ = _case(name, seed)
        for e, c in zip(run(d, y, cand), compiled(d, y, cand)):
            np.testing.assert_array_equal(e.numpy(), c.numpy())
