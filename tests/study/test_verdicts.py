"""study/verdicts.py: the statistics every reproduction verdict uses, on inputs whose
answers are known by hand; scipy (the test extra) is only the oracle of the distributions."""

import importlib.util
import os

import numpy as np
import pytest
from scipy import stats

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("verdicts", os.path.join(ROOT, "study", "verdicts.py"))
vd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vd)


def seeds(values):
    return dict(enumerate(values))


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 30])
@pytest.mark.parametrize("t", [-3.0, -0.5, 0.0, 0.7, 2.5, 10.0])
def test_t_tail_matches_scipy(t, df):
    assert vd.t_sf(t, df) == pytest.approx(stats.t.sf(t, df), rel=1e-9, abs=1e-15)


def test_paired_and_welch_tests_match_scipy():
    a, b = [0.71, 0.74, 0.69, 0.80], [0.70, 0.71, 0.69, 0.75]
    mean, se, t, p = vd.paired_t_test(np.subtract(a, b))
    ref = stats.ttest_rel(a, b)
    assert (t, p) == (pytest.approx(ref.statistic), pytest.approx(ref.pvalue))
    assert mean == pytest.approx(np.mean(np.subtract(a, b)))
    diff, se, t, df, p = vd.welch_t_test(a, b)
    ref = stats.ttest_ind(a, b, equal_var=False)
    assert (t, p) == (pytest.approx(ref.statistic), pytest.approx(ref.pvalue))


def test_a_paired_design_finds_what_the_unpaired_test_misses():
    """Seeds differ a lot from each other (0.50 to 0.90), the arms differ little but always in
    the same direction within a seed: Welch's test sees only the spread across seeds."""
    worse = [0.50, 0.60, 0.70, 0.80, 0.90]
    better = [w + d for w, d in zip(worse, [0.010, 0.012, 0.011, 0.013, 0.009])]
    assert vd.welch_t_test(better, worse)[-1] > 0.5
    assert stats.ttest_ind(better, worse, equal_var=False).pvalue > 0.5  # the oracle agrees
    rows, verdict = vd.judge([{"better": seeds(better), "worse": seeds(worse)}])
    assert rows[0]["p"] < 1e-4 and rows[0]["outcome"] == vd.HOLDS and verdict == vd.REPRODUCED
    assert rows[0]["unpaired"][-1] > 0.5  # the report shows what the unpaired test would say


def test_checks_pair_runs_by_seed():
    """Seed 2 of the better arm has no partner: it is left out, not compared with another seed."""
    rows, _ = vd.judge([{"better": {0: 0.6, 1: 0.7, 2: 0.9}, "worse": {0: 0.5, 1: 0.6, 3: 0.1}}])
    assert rows[0]["seeds"] == [0, 1] and rows[0]["diff"] == pytest.approx(0.1)


def test_holm_on_a_hand_computed_case():
    """p = (0.01, 0.04, 0.03, 0.005), m = 4: sorted 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06,
    0.04·1 = 0.04 → 0.06 (running max). 0.04 alone would pass α/1, but the step-down stopped at 0.03."""
    adjusted, rejected = vd.holm([0.01, 0.04, 0.03, 0.005], alpha=0.05)
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert rejected == [True, False, False, True]
    assert vd.holm([0.6, 0.9])[0] == pytest.approx([1.0, 1.0])  # capped at 1


def test_holm_makes_a_check_unresolved_that_alone_would_hold():
    """One check with p ≈ 0.047 holds alone; among three with that p it does not."""
    diffs = [0.01, 0.02, 0.0, 0.015, 0.005]  # n = 5, t = 2.83, p = 0.047
    check = {"better": seeds(diffs), "worse": seeds([0.0] * 5)}
    rows, verdict = vd.judge([check])
    assert rows[0]["p"] == pytest.approx(stats.ttest_1samp(diffs, 0.0).pvalue)
    assert rows[0]["outcome"] == vd.HOLDS and verdict == vd.REPRODUCED
    rows, verdict = vd.judge([check] * 3)
    assert [r["outcome"] for r in rows] == [vd.UNRESOLVED] * 3 and verdict == vd.INCONCLUSIVE


def test_sign_flip_enumerates_every_sign_pattern():
    # (1, 2, 3): only all + and all − reach |6|: 2/8. (1, −2, 3): |Σ| = 2; 6 of the 8 patterns reach 2.
    assert vd.sign_flip_p([1.0, 2.0, 3.0]) == 0.25
    assert vd.sign_flip_p([1.0, -2.0, 3.0]) == 0.75
    assert vd.sign_flip_p([0.5] * 5) == 2 / 32  # its floor: 2^(1 − n)


def test_a_small_difference_needs_five_seeds():
    """|d̄| < 3 SE: with 4 seeds the check is "needs ≥5 seeds"; the same kind of data on 5 seeds
    (t = 2.83 > t₀.₀₂₅,₄ = 2.78) decides."""
    four = [0.01, 0.02, 0.0, 0.015]
    rows, verdict = vd.judge([{"better": seeds(four), "worse": seeds([0.0] * 4)}])
    assert rows[0]["outcome"] == vd.NEEDS_SEEDS and verdict == vd.INCONCLUSIVE
    five = four + [0.005]
    assert vd.judge([{"better": seeds(five), "worse": seeds([0.0] * 5)}])[0][0]["outcome"] == vd.HOLDS


def _check(diffs):
    return {"better": seeds(diffs), "worse": seeds([0.0] * len(diffs))}


STRONG_UP = [0.10, 0.11, 0.12]  # t = 19, p = 0.0027: holds even under Holm with 2 or 3 checks
STRONG_DOWN = [-0.10, -0.11, -0.12]
LEVEL = [0.01, -0.01, 0.02]  # |d̄| < 3 SE with 3 seeds


@pytest.mark.parametrize("checks, verdict", [
    ([_check(STRONG_UP), _check(STRONG_UP)], "reproduced"),
    ([_check(STRONG_UP), _check(LEVEL)], "partly"),
    ([_check(STRONG_UP), _check(STRONG_DOWN)], "contradicted"),
    ([_check(LEVEL), _check(STRONG_DOWN)], "contradicted"),
    ([_check(LEVEL), _check(LEVEL)], "inconclusive"),
    ([_check(STRONG_UP), {"better": {}, "worse": seeds([0.1, 0.2, 0.3])}], "untested"),
    ([_check(STRONG_UP), _check([0.1])], "untested"),
    ([], "untested"),
])
def test_each_verdict_word_on_a_hand_case(checks, verdict):
    assert vd.judge(checks)[1] == verdict
    assert verdict in vd.VERDICT_WORDS


@pytest.mark.parametrize("checks, verdict", [
    ([_check(STRONG_UP), _check(STRONG_UP)], "supported"),
    ([_check(STRONG_UP), _check(LEVEL)], "partly supported"),
    ([_check(LEVEL), _check(LEVEL)], "not supported"),
    ([_check(STRONG_UP), _check(STRONG_DOWN)], "contradicted"),
    ([_check(STRONG_UP), _check([0.1])], "untested"),
])
def test_an_investigation_is_supported_or_not_rather_than_reproduced(checks, verdict):
    assert vd.judge(checks, investigation=True)[1] == verdict


def test_holm_across_the_checks_of_several_claims_is_one_family():
    """p ≈ 0.047 holds in a claim of one check; in one family with two more such checks (another
    claim's), Holm multiplies it by 3 and none holds; each claim keeps its own verdict word."""
    weak = _check([0.01, 0.02, 0.0, 0.015, 0.005])  # n = 5, p = 0.047
    alone = [vd.judge([weak])[1], vd.judge([weak, weak])[1]]
    assert alone == [vd.REPRODUCED, vd.INCONCLUSIVE]  # two checks of p 0.047: 2p > 0.05
    together = vd.judge_together([[weak], [weak, weak]], investigation=(1,))
    assert [verdict for _, verdict in together] == [vd.INCONCLUSIVE, vd.NOT_SUPPORTED]
    assert [len(rows) for rows, _ in together] == [1, 2]
    assert together[0][0][0]["p_holm"] == pytest.approx(3 * together[0][0][0]["p"])
    strong = vd.judge_together([[_check(STRONG_UP)], [_check(STRONG_UP)]])
    assert [verdict for _, verdict in strong] == [vd.REPRODUCED, vd.REPRODUCED]


def test_outcomes_of_the_hand_cases():
    rows, _ = vd.judge([_check(STRONG_UP), _check(LEVEL), _check(STRONG_DOWN)])
    assert [r["outcome"] for r in rows] == [vd.HOLDS, vd.NEEDS_SEEDS, vd.REVERSED]
    assert rows[1]["diff"] == pytest.approx(np.mean(LEVEL))


def test_a_not_worse_check_is_the_test_of_d_plus_the_margin():
    """Level arms (differences within ±0.001): "better" cannot hold, "not worse" (δ = 1 point) holds;
    an arm 5 points worse is reversed either way."""
    level = [0.001, -0.001, 0.0, 0.0005, -0.0005]
    assert vd.judge([_check(level)])[0][0]["outcome"] == vd.UNRESOLVED
    rows, verdict = vd.judge([dict(_check(level), kind="not worse")])
    assert rows[0]["outcome"] == vd.HOLDS and verdict == vd.REPRODUCED
    assert rows[0]["diff"] == pytest.approx(0.0)  # reported unshifted
    worse = [-0.05, -0.051, -0.049]
    assert vd.judge([dict(_check(worse), kind="not worse")])[0][0]["outcome"] == vd.REVERSED
    with pytest.raises(ValueError, match="kind"):
        vd.judge([dict(_check(level), kind="at least")])
