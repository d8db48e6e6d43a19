"""Lu et al. 2019 §3.3: misplaced sets P and N. Case 1 (n+ < k): Eq. 6 and 7; Case 2
(n+ >= k): Eq. 9 and 10; the toy examples of Fig. 2 and Fig. 3."""

import numpy as np
import pytest
import tensorflow as tf

from tfdml import kernels, masks, samplers

PATHS = {"prefix": 10**9, "sort": 0}  # the CPU table's up_to forcing each path


@pytest.fixture(params=sorted(PATHS), autouse=True)
def path(request, monkeypatch):
    """Every test runs on both paths: k passes per ranking, and one sort per row."""
    forced = {mode: kernels.Choice("prefix", {"up_to": PATHS[request.param]}) for mode in kernels.MODES}
    monkeypatch.setitem(kernels.CHOICES["CPU"], "top_k", forced)
    return request.param


def _query_batch(scores, positive, rng):
    """Query 0 (class 0) + the candidates of a figure, in a shuffled column order."""
    m = len(scores)
    perm = rng.permutation(m)
    b = m + 1
    y = np.empty(b, np.int32)
    y[0] = 0
    s = rng.uniform(-1, 1, size=(b, b)).astype(np.float32)  # other rows: arbitrary
    for col, i in enumerate(perm, start=1):
        y[col] = 0 if positive[i] else 10 + col
        s[0, col] = scores[i]
    return s, y


def _row_sets(sel, s, row=0):
    pos, neg = sel.positive.numpy()[row], sel.negative.numpy()[row]
    return sorted(s[row, pos].astype(float).round(4).tolist()), sorted(s[row, neg].astype(float).round(4).tolist())


def test_fig2_case1():
    # Fig. 2 (k = 6, n+ = 4, n = 10), ŝ in descending order, + = positive. Values chosen here,
    # consistent with the caption: 0.9+ 0.8- 0.75+ 0.7- 0.65- 0.6- | 0.55+ 0.5- 0.4+ 0.3-
    scores = [0.9, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.5, 0.4, 0.3]
    positive = [1, 0, 1, 0, 0, 0, 1, 0, 1, 0]
    s, y = _query_batch(scores, positive, np.random.default_rng(0))
    sel = samplers.TopKMisplacedSampler(k=6)(s, y)
    p_set, n_set = _row_sets(sel, s)
    assert p_set == [0.4, 0.55]  # Σ_P ŝ = 0.55 + 0.4: the positives out of top k (Eq. 6)
    assert n_set == [0.6, 0.65]  # Σ_N ŝ = 0.65 + 0.6 (Eq. 7); 0.8 and 0.7 are not misplaced
    assert 0.8 not in n_set and 0.7 not in n_set
    loss = s[0, sel.negative.numpy()[0]].sum() - s[0, sel.positive.numpy()[0]].sum()  # Eq. 5
    assert loss == pytest.approx(0.65 + 0.6 - (0.55 + 0.4), abs=1e-6)


def test_fig3_case2():
    # Fig. 3 (k = 5, n+ = 6, n = 10). Values chosen here, consistent with the caption:
    # 0.9+ 0.8- 0.7+ 0.65- 0.6+ | 0.55+ 0.53+ 0.5- 0.4+ 0.3-
    scores = [0.9, 0.8, 0.7, 0.65, 0.6, 0.55, 0.53, 0.5, 0.4, 0.3]
    positive = [1, 0, 1, 0, 1, 1, 1, 0, 1, 0]
    s, y = _query_batch(scores, positive, np.random.default_rng(1))
    sel = samplers.TopKMisplacedSampler(k=5)(s, y)
    p_set, n_set = _row_sets(sel, s)
    assert n_set == [0.65, 0.8]  # all negatives in top 5 (Eq. 9)
    assert p_set == [0.53, 0.55]  # the first 2 positives out of top 5 (Eq. 10); not 0.4
    loss = s[0, sel.negative.numpy()[0]].sum() - s[0, sel.positive.numpy()[0]].sum()
    assert loss == pytest.approx((0.8 + 0.65) - (0.55 + 0.53), abs=1e-6)


def _brute_by_value(s, y, cand, k):
    """Eq. 6, 7, 9, 10 literally, with value comparisons (scores assumed distinct)."""
    b = len(y)
    P, N = np.zeros((b, b), bool), np.zeros((b, b), bool)
    for a in range(b):
        C = [j for j in range(b) if cand[a, j] and j != a]
        if not C:
            continue
        top = sorted(C, key=lambda j: -s[a, j])[:k]  # K
        pos = [j for j in C if y[j] == y[a]]
        negs = [j for j in C if y[j] != y[a]]
        n_plus = len(pos)
        if n_plus < k:
            for j in pos:
                P[a, j] = j not in top  # Eq. 6
            s_neg = sorted((s[a, j] for j in negs), reverse=True)
            if len(s_neg) >= k - n_plus:
                threshold = s_neg[k - n_plus - 1]  # ŝ⁻_[k - n+]
                for j in negs:
                    N[a, j] = j in top and s[a, j] < threshold  # Eq. 7
        else:
            for j in negs:
                N[a, j] = j in top  # Eq. 9
            threshold = sorted((s[a, j] for j in pos), reverse=True)[k - 1]  # ŝ⁺_[k]
            for j in pos:
                P[a, j] = j not in top and s[a, j] >= threshold  # Eq. 10
    return P, N


def _brute_by_rank(s, y, cand, k):
    """The same sets with ties ranked by lower column index first."""
    b = len(y)
    P, N = np.zeros((b, b), bool), np.zeros((b, b), bool)
    for a in range(b):
        ranked = sorted((j for j in range(b) if cand[a, j] and j != a), key=lambda j: (-s[a, j], j))
        top = set(ranked[:k])
        pos = [j for j in ranked if y[j] == y[a]]
        negs = [j for j in ranked if y[j] != y[a]]
        n_plus = len(pos)
        for r, j in enumerate(pos, start=1):
            P[a, j] = j not in top and (n_plus < k or r <= k)
        for r, j in enumerate(negs, start=1):
            N[a, j] = j in top and (n_plus >= k or r > k - n_plus)
    return P, N


@pytest.mark.parametrize("k", [1, 3, 5, 8])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_brute_force_eq_6_7_9_10(k, seed):
    rng = np.random.default_rng(seed)
    b = 16
    y = rng.permutation(np.repeat(np.arange(5), [1, 2, 3, 4, 6]))  # n+ in {0, 1, 2, 3, 5}
    pair_id = rng.integers(0, 3, size=b) if seed == 2 else None  # small candidate sets (< k)
    cand = masks.candidate_mask(y, pair_id).numpy()
    s = rng.uniform(-1, 1, size=(b, b)).astype(np.float32)
    sel = samplers.TopKMisplacedSampler(k)(s, y, cand)
    ref_p, ref_n = _brute_by_value(s, y, cand, k)
    np.testing.assert_array_equal(sel.positive.numpy(), ref_p)
    np.testing.assert_array_equal(sel.negative.numpy(), ref_n)
    np.testing.assert_array_equal(sel.positive.numpy().sum(1), sel.negative.numpy().sum(1))  # |P| = |N|
    n_plus = (cand & (y[:, None] == y[None])).sum(1)
    if pair_id is None and k <= 5:  # both cases occur
        assert (n_plus < k).any() and (n_plus >= k).any()


@pytest.mark.parametrize("k", [2, 4, 6])
@pytest.mark.parametrize("seed", [0, 1])
def test_ties_ranked_by_lower_index(k, seed):
    rng = np.random.default_rng(10 + seed)
    b = 14
    y = rng.integers(0, 3, size=b)
    s = np.round(rng.uniform(0, 1, size=(b, b)), 1).astype(np.float32)  # many equal scores
    sel = samplers.TopKMisplacedSampler(k)(s, y)
    ref_p, ref_n = _brute_by_rank(s, y, masks.candidate_mask(y).numpy(), k)
    np.testing.assert_array_equal(sel.positive.numpy(), ref_p)
    np.testing.assert_array_equal(sel.negative.numpy(), ref_n)


def test_fewer_candidates_than_k_and_empty_rows():
    y = np.array([0, 0, 1, 1, 2])
    pair_id = np.array([0, 0, 0, 1, 2])  # row 3 and 4: no candidates; rows 0-2: two candidates
    s = np.random.default_rng(0).uniform(size=(5, 5)).astype(np.float32)
    sel = samplers.TopKMisplacedSampler(k=5)(s, y, masks.candidate_mask(y, pair_id))
    # Case 1 with |C| < k: K = C, so no positive is out of K and no negative is misplaced.
    assert not sel.positive.numpy().any() and not sel.negative.numpy().any()


def test_bad_k():
    with pytest.raises(ValueError, match="k must be a positive integer"):
        samplers.TopKMisplacedSampler(k=0)


@pytest.mark.parametrize("k", [1, 3, 5, 12])
def test_xla_and_graph_select_the_same_sets_ties_included(path, k):
    """Under jit_compile the sampler selects what graph mode and the rank reference
    select (scores with many exact ties, two candidate layouts); the path fixture
    chooses which path both modes take."""
    rng = np.random.default_rng(k)
    b = 40
    y = rng.integers(0, 6, size=b).astype(np.int32)
    pair_id = rng.integers(0, 2, size=b).astype(np.int32)
    sampler = samplers.TopKMisplacedSampler(k)
    for cand in (masks.candidate_mask(y).numpy(), masks.candidate_mask(y, pair_id).numpy()):
        s = np.round(rng.uniform(-1, 1, size=(b, b)), 1).astype(np.float32)
        graph = tf.function(lambda s, y, c: tuple(sampler(s, y, c)))
        xla = tf.function(lambda s, y, c: tuple(sampler(s, y, c)), jit_compile=True)
        ref_p, ref_n = _brute_by_rank(s, y, cand, k)
        for fn in (graph, xla):
            p, n = fn(s, y, cand)
            np.testing.assert_array_equal(p.numpy(), ref_p)
            np.testing.assert_array_equal(n.numpy(), ref_n)
