"""The statistics of the reproduction verdicts: declared before the runs, the same for every claim.

A claim of a paper is judged by a set of **checks**, each "arm A scores higher
than arm B" (or a contrast of arms) on one metric, the :data:`PRIMARY_METRIC`
(MAP@R) for every claim. Runs of two arms with the same seed share the initial
weights and the order of the batches, so a check is judged on the **paired
differences** d_s = A_s − B_s over the seeds both arms have:

* the paired t-test: d̄ = mean(d), SE = sd(d)/√n (sample sd), t = d̄/SE with
  n − 1 degrees of freedom, two-sided p (Student's t distribution, computed here
  from the regularised incomplete beta function);
* the exact sign-flip permutation test of the same d (all 2ⁿ sign patterns),
  reported beside it as a distribution-free cross-check. Its smallest two-sided
  p is 2¹⁻ⁿ (0.25 with 3 seeds, 0.0625 with 5), so it cannot reject at 5 % below
  6 seeds; the decision is the t-test's.
* Holm's step-down correction across the checks of one claim (family-wise
  error :data:`ALPHA`).

A check **holds** when its Holm-adjusted p ≤ α and d̄ > 0, is **reversed** when
the same holds with d̄ < 0, and is **unresolved** otherwise. A verdict that would
turn on a difference smaller than :data:`RESOLVE_SE` standard errors needs at
least :data:`MIN_SEEDS` seeds: with fewer, such a check is "unresolved: needs ≥5
seeds" whatever its p. A check with an arm missing is "missing", with fewer than
2 paired seeds "too few seeds".

A **not-worse** check (only for a paper claim that is itself "not worse", e.g.
"matches", "is not sensitive to") is the same test on d̄ + δ with the declared
margin :data:`NON_INFERIORITY_MARGIN` δ: it holds when A is significantly better
than B − δ, is reversed when A is significantly worse than B − δ.

The verdict words, defined once (:func:`claim_verdict`): **reproduced** (every
check holds), **partly** (some hold, none is reversed), **inconclusive** (none
holds and none is reversed: nothing decided), **contradicted** (a check is
reversed: the paper's direction is contradicted at significance), **untested**
(no runs, or an arm or seeds missing). An investigation (the study's own probe,
not a paper's claim) is **supported**, **partly supported** or **not supported**
in place of the first three.

The family of Holm's correction is a choice: :func:`judge` corrects across the
checks it is given (the report gives it the checks of one claim, and, beside
that, every check of one paper: :func:`judge_together`).
"""

import itertools
import math

import numpy as np

#: The one metric every verdict reads (R@1 and the paper's metric are reported, never a tie-breaker).
PRIMARY_METRIC = "map@r"
#: Family-wise error of the checks of one claim (Holm).
ALPHA = 0.05
#: A verdict turning on |d̄| < RESOLVE_SE · SE needs MIN_SEEDS seeds.
RESOLVE_SE = 3.0
MIN_SEEDS = 5
#: δ of a not-worse check, in the metric's units (1 point of MAP@R).
NON_INFERIORITY_MARGIN = 0.01

HOLDS, REVERSED, UNRESOLVED = "holds", "reversed", "unresolved"
NEEDS_SEEDS = f"unresolved: needs ≥{MIN_SEEDS} seeds"
MISSING, TOO_FEW = "missing", "too few seeds"
KINDS = ("better", "not worse")

REPRODUCED, PARTLY, INCONCLUSIVE = "reproduced", "partly", "inconclusive"
CONTRADICTED, UNTESTED = "contradicted", "untested"
SUPPORTED, PARTLY_SUPPORTED, NOT_SUPPORTED = "supported", "partly supported", "not supported"
#: The verdict words and what each means (the one definition the report prints).
VERDICT_WORDS = {
    REPRODUCED: "every check holds",
    PARTLY: "some checks hold, none is reversed",
    INCONCLUSIVE: "no check holds and none is reversed: nothing is decided either way",
    CONTRADICTED: "a check is reversed: the opposite of the paper's direction, significant",
    UNTESTED: "not run (the reason is given), or an arm or seeds missing",
}
#: The words of an investigation (the study's own probe, not a paper's claim) in place of a claim's.
INVESTIGATION_WORDS = {REPRODUCED: SUPPORTED, PARTLY: PARTLY_SUPPORTED, INCONCLUSIVE: NOT_SUPPORTED}


# --------------------------------------------------------------------------- distributions


def _betacf(a, b, x):
    """Continued fraction of the incomplete beta function (modified Lentz; Press et al.,
    Numerical Recipes, §6.4)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a, b, x):
    """The regularised incomplete beta function I_x(a, b), 0 ≤ x ≤ 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t, df):
    """P(T > t) for Student's t with ``df`` degrees of freedom:
    ½ I_{df/(df+t²)}(df/2, ½) for t ≥ 0 (Abramowitz & Stegun 26.7.1)."""
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def _two_sided(t, df):
    return min(1.0, 2.0 * t_sf(abs(t), df))


# --------------------------------------------------------------------------- tests


def paired_t_test(diffs):
    """(mean, SE, t, two-sided p) of paired differences: t = d̄ / (sd/√n), n − 1 df.
    All differences equal: SE = 0, and t = ±inf (p = 0) unless they are all 0 (t = 0, p = 1)."""
    d = np.asarray(diffs, dtype=float)
    n = len(d)
    if n < 2:
        raise ValueError(f"a paired t-test needs at least 2 differences, got {n}")
    mean, se = float(d.mean()), float(d.std(ddof=1) / math.sqrt(n))
    if se == 0.0:
        t = 0.0 if mean == 0.0 else math.copysign(math.inf, mean)
    else:
        t = mean / se
    return mean, se, t, _two_sided(t, n - 1)


def welch_t_test(a, b):
    """(mean difference, SE, t, df, two-sided p) of the unpaired (Welch) t-test of a − b:
    SE = √(s_a²/n_a + s_b²/n_b), df by Welch–Satterthwaite. Shown beside the paired test
    (it ignores that runs of one seed share their start and batches)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    diff, se = float(a.mean() - b.mean()), math.sqrt(va + vb)
    if se == 0.0:
        return diff, 0.0, (0.0 if diff == 0 else math.copysign(math.inf, diff)), math.inf, float(diff == 0)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    t = diff / se
    return diff, se, t, df, _two_sided(t, df)


def sign_flip_p(diffs):
    """Exact two-sided p of the sign-flip permutation test of paired differences: the share of
    the 2ⁿ sign patterns whose |Σ ±d_s| reaches the observed |Σ d_s| (the observed one included)."""
    d = np.asarray(diffs, dtype=float)
    n = len(d)
    if not 1 <= n <= 20:
        raise ValueError(f"exact enumeration takes 1 to 20 differences, got {n}")
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
    sums = np.abs(signs @ d)
    observed = abs(d.sum())
    return float(np.mean(sums >= observed - 1e-12 * max(1.0, np.abs(d).sum())))


def holm(pvalues, alpha=ALPHA):
    """Holm's step-down correction: (adjusted p-values, rejected) in the input order.
    Sorted ascending, p₍ᵢ₎ is rejected while p₍ⱼ₎ ≤ α/(m − j) for every j ≤ i; the adjusted
    value is max_{j ≤ i} min(1, (m − j) p₍ⱼ₎) (i, j from 0)."""
    p = list(pvalues)
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted, [a <= alpha for a in adjusted]


# --------------------------------------------------------------------------- checks and verdicts


def paired(better, worse):
    """(seeds, differences) of two {seed: value} maps over the seeds both have (None values dropped)."""
    seeds = sorted(s for s in better if s in worse and better[s] is not None and worse[s] is not None)
    return seeds, [better[s] - worse[s] for s in seeds]


def judge(checks, alpha=ALPHA, investigation=False):
    """The outcome of every check of one claim and the claim's verdict.

    ``checks``: dicts with ``better`` and ``worse`` ({seed: value} of the primary metric)
    and optionally ``kind`` (:data:`KINDS`, default "better"). Returns ``(rows, verdict)``,
    ``rows`` one dict per check: seeds, n, diff (d̄), se, t, p, p_holm, p_sign_flip,
    unpaired (Welch's (diff, se, t, df, p), for comparison) and outcome. Holm's family: the
    checks given. ``investigation``: the verdict in :data:`INVESTIGATION_WORDS`."""
    rows, tested = [], []
    for check in checks:
        kind = check.get("kind", "better")
        if kind not in KINDS:
            raise ValueError(f"check kind {kind!r} is not one of {KINDS}")
        better, worse = check["better"], check["worse"]
        seeds, diffs = paired(better, worse)
        row = {"kind": kind, "seeds": seeds, "n": len(seeds), "diff": None, "se": None, "t": None, "p": None,
               "p_holm": None, "p_sign_flip": None, "unpaired": None, "outcome": None}
        if not any(v is not None for v in better.values()) or not any(v is not None for v in worse.values()):
            row["outcome"] = MISSING
        elif len(seeds) < 2:
            row["outcome"] = TOO_FEW
        else:
            shift = NON_INFERIORITY_MARGIN if kind == "not worse" else 0.0
            mean, se, t, p = paired_t_test([x + shift for x in diffs])
            row.update(diff=mean - shift, se=se, t=t, p=p, p_sign_flip=sign_flip_p([x + shift for x in diffs]),
                       unpaired=welch_t_test([better[s] for s in seeds], [worse[s] for s in seeds]),
                       shifted=mean)
            tested.append(row)
        rows.append(row)
    adjusted, rejected = holm([r["p"] for r in tested], alpha)
    for row, p_holm, significant in zip(tested, adjusted, rejected):
        row["p_holm"] = p_holm
        shifted, se, n = row.pop("shifted"), row["se"], row["n"]
        small = abs(shifted) < RESOLVE_SE * se
        if significant and not (small and n < MIN_SEEDS):
            row["outcome"] = HOLDS if shifted > 0 else REVERSED
        elif small and n < MIN_SEEDS:
            row["outcome"] = NEEDS_SEEDS
        else:
            row["outcome"] = UNRESOLVED
    return rows, claim_verdict([r["outcome"] for r in rows], investigation)


def judge_together(groups, alpha=ALPHA, investigation=()):
    """:func:`judge` of several claims' checks with Holm's correction across all of them (one
    family): ``groups`` a list of check lists; returns ``(rows, verdict)`` per group, each
    verdict from that group's outcomes. ``investigation``: the indices of the groups that are
    investigations."""
    rows, _ = judge([check for group in groups for check in group], alpha)
    judged, start = [], 0
    for i, group in enumerate(groups):
        part = rows[start:start + len(group)]
        start += len(group)
        judged.append((part, claim_verdict([r["outcome"] for r in part], i in investigation)))
    return judged


def claim_verdict(outcomes, investigation=False):
    """The verdict word of a claim from its checks' outcomes (:data:`VERDICT_WORDS`; an
    investigation's in :data:`INVESTIGATION_WORDS`)."""
    outcomes = list(outcomes)
    if not outcomes or any(o in (MISSING, TOO_FEW) for o in outcomes):
        return UNTESTED
    if any(o == REVERSED for o in outcomes):
        return CONTRADICTED
    if all(o == HOLDS for o in outcomes):
        word = REPRODUCED
    elif any(o == HOLDS for o in outcomes):
        word = PARTLY
    else:
        word = INCONCLUSIVE
    return INVESTIGATION_WORDS[word] if investigation else word
