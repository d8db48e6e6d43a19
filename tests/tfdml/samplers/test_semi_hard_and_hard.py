"""Semi-hard (Wu et al. 2017 §3, n*_ap = argmin_{n: D_an > D_ap} D_an) and batch-hard
selections against brute-force NumPy loops over anchors and positives."""

import numpy as np
import pytest

from tfdml import masks, samplers


def _brute_semi_hard(d, y, cand, fallback):
    b = len(y)
    negative = np.full(b * b, -1)
    valid = np.zeros(b * b, bool)
    for a in range(b):
        negs = [n for n in range(b) if n != a and cand[a, n] and y[n] != y[a]]
        for p in range(b):
            if p == a or not cand[a, p] or y[p] != y[a] or not negs:
                continue
            beyond = [n for n in negs if d[a, n] > d[a, p]]  # Wu §3: n with D_an > D_ap
            if beyond:
                negative[a * b + p] = min(beyond, key=lambda n: (d[a, n], n))
                valid[a * b + p] = True
            elif fallback == "hardest_inside":
                negative[a * b + p] = max(negs, key=lambda n: (d[a, n], -n))
                valid[a * b + p] = True
    return negative, valid


def _brute_hard(d, y, cand):
    b = len(y)
    positive, negative, valid = np.full(b, -1), np.full(b, -1), np.zeros(b, bool)
    for a in range(b):
        poss = [p for p in range(b) if p != a and cand[a, p] and y[p] == y[a]]
        negs = [n for n in range(b) if n != a and cand[a, n] and y[n] != y[a]]
        if poss and negs:
            positive[a] = max(poss, key=lambda p: (d[a, p], -p))
            negative[a] = min(negs, key=lambda n: (d[a, n], n))
            valid[a] = True
    return positive, negative, valid


def _case(name, seed):
    rng = np.random.default_rng(seed)
    pair_id = None
    if name == "random":
        y = rng.integers(0, 4, size=14)
    elif name == "singleton_class":
        y = np.array([0, 0, 0, 1, 1, 2, 3, 3, 3, 3, 4, 1])  # classes 2 and 4 have one example
    elif name == "one_class":
        y = np.zeros(9, int)  # no negatives anywhere
    elif name == "pair_id":
        y = rng.integers(0, 3, size=16)
        pair_id = rng.integers(0, 3, size=16)
    d = rng.uniform(0.0, 2.0, size=(len(y), len(y)))
    if seed % 2:  # quantised distances: many ties, exercises the strict '>' and tie-breaking
        d = np.round(d, 1)
    else:  # a genuine (symmetric) euclidean matrix
        x = rng.normal(size=(len(y), 5))
        d = np.linalg.norm(x[:, None] - x[None], axis=-1)
    d = d.astype(np.float32)
    cand = masks.candidate_mask(y, pair_id).numpy()
    return d, y.astype(np.int32), cand, pair_id is not None


CASES = [(name, seed) for name in ("random", "singleton_class", "one_class", "pair_id") for seed in (0, 1, 2, 3)]


@pytest.mark.parametrize("fallback", ["hardest_inside", "drop"])
@pytest.mark.parametrize("name,seed", CASES)
def test_semi_hard_matches_brute_force_wu_sec3(name, seed, fallback):
    d, y, cand, with_pair_id = _case(name, seed)
    sel = samplers.SemiHardSampler(fallback)(d, y, cand if with_pair_id else None)
    ref_neg, ref_valid = _brute_semi_hard(d, y, cand, fallback)
    b = len(y)
    np.testing.assert_array_equal(sel.anchor.numpy(), np.repeat(np.arange(b), b))
    np.testing.assert_array_equal(sel.positive.numpy(), np.tile(np.arange(b), b))
    np.testing.assert_array_equal(sel.mask.numpy(), ref_valid)
    np.testing.assert_array_equal(sel.negative.numpy()[ref_valid], ref_neg[ref_valid])
    if name == "one_class":
        assert not sel.mask.numpy().any()
    negative = sel.negative.numpy()
    assert np.all((negative >= 0) & (negative < b))  # invalid slots still hold in-range indices


@pytest.mark.parametrize("name,seed", CASES)
def test_hard_matches_brute_force(name, seed):
    d, y, cand, with_pair_id = _case(name, seed)
    sel = samplers.HardSampler()(d, y, cand if with_pair_id else None)
    ref_pos, ref_neg, ref_valid = _brute_hard(d, y, cand)
    np.testing.assert_array_equal(sel.anchor.numpy(), np.arange(len(y)))
    np.testing.assert_array_equal(sel.mask.numpy(), ref_valid)
    np.testing.assert_array_equal(sel.positive.numpy()[ref_valid], ref_pos[ref_valid])
    np.testing.assert_array_equal(sel.negative.numpy()[ref_valid], ref_neg[ref_valid])
    if name == "one_class":
        assert not sel.mask.numpy().any()


def test_semi_hard_hand_case():
    # Anchor 0 (class 0), positive 1 at 0.5; negatives 2, 3, 4 at 0.3, 0.7, 0.9.
    d = np.full((5, 5), 1.0, np.float32)
    d[0, 1:] = [0.5, 0.3, 0.7, 0.9]
    y = np.array([0, 0, 1, 1, 1])
    sel = samplers.SemiHardSampler()(d, y)
    assert sel.negative.numpy()[0 * 5 + 1] == 3  # the closest negative beyond 0.5
    d[0, 1] = 0.95  # now every negative is inside: fallback picks the farthest one (0.9)
    assert samplers.SemiHardSampler()(d, y).negative.numpy()[1] == 4
    assert not samplers.SemiHardSampler("drop")(d, y).mask.numpy()[1]


def test_candidates_never_select_the_diagonal():
    d = np.zeros((4, 4), np.float32)
    y = np.array([0, 0, 1, 1])
    sel = samplers.HardSampler()(d, y, np.ones((4, 4), bool))
    assert np.all(sel.positive.numpy() != np.arange(4))


def test_bad_fallback():
    with pytest.raises(ValueError, match="fallback"):
        samplers.SemiHardSampler("nearest")
