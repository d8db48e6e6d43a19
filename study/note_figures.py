"""Figures quoted in the study report's hand-written notes, computed from the committed results.

A note quotes a figure as ``<!-- fig: EXPR -->VALUE<!-- /fig -->``: the comment does not
render, VALUE does, and ``python study/reproduce.py report`` rewrites VALUE from EXPR
(``report --check`` fails when one is stale), so a note cannot quote a figure the results
no longer give. EXPR is one term, or ``range:`` and terms separated by ``;``:

* ``diff A B``: the paired mean difference A − B over the seeds both arms have, ± its SE
  (the statistic of the verdict checks, :func:`verdicts.paired`), e.g. ``+1.5 ± 1.0``;
* ``gain A B``: the same paired mean difference without its SE, e.g. ``+7.4``;
* ``mean A``: A's mean over its seeds, e.g. ``20.8``; A may be a pattern (``*-dw-*``) in a
  range, which then spans every arm with results it matches;
* ``range: term; term; ...``: the smallest and largest value of the terms, ``6.9–8.6`` when
  none is negative, else ``−0.2 to +0.7``.

A term takes options as ``key=value``: ``metric=`` (default MAP@R, the verdicts' metric; a
training figure such as ``train_objective`` is read from the history), ``at=`` (a fraction of
the budget: the curve's figure at that point) and ``budget=`` (another budget's results folder,
default the folder of the report). Metrics are in % with one decimal, as in the tables.
"""

import fnmatch
import re
import statistics

import verdicts

FIGURE = re.compile(r"(<!-- fig: (?P<expr>.+?) -->)(?P<value>.*?)(<!-- /fig -->)", re.S)
KINDS = ("diff", "gain", "mean")
OPTIONS = ("metric", "at", "budget")
MINUS = "\u2212"


class NoteFigureError(ValueError):
    """A note figure that cannot be computed: its expression or its results."""


def _signed(value, spec):
    text = f"{abs(value):{spec}}"
    if float(text) == 0.0:
        return f"+{text}"
    return ("+" if value > 0 else MINUS) + text


def parse_term(text):
    """``(kind, arms, options)`` of one term."""
    words = text.split()
    if not words or words[0] not in KINDS:
        raise NoteFigureError(f"note figure {text!r}: a term starts with one of {', '.join(KINDS)}")
    kind, rest = words[0], words[1:]
    options = dict(w.split("=", 1) for w in rest if "=" in w)
    arms = [w for w in rest if "=" not in w]
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise NoteFigureError(f"note figure {text!r}: unknown option(s) {', '.join(unknown)} "
                              f"(known: {', '.join(OPTIONS)})")
    if len(arms) != (1 if kind == "mean" else 2):
        raise NoteFigureError(f"note figure {text!r}: {kind} takes {'one arm' if kind == 'mean' else 'two arms'}")
    if "at" in options:
        try:
            options["at"] = float(options["at"])
        except ValueError:
            raise NoteFigureError(f"note figure {text!r}: at= takes a fraction of the budget, e.g. at=0.25") from None
    return kind, arms, options


class Figures:
    """Computes note figures from a results source: an object with ``values(budget, arm, metric,
    at)`` ({seed: value}, raw), ``arms(budget)`` (arms with results) and ``scale(metric)``
    ((factor, format spec) of the tables). ``budget`` None is the report's own folder."""

    def __init__(self, source, default_metric=verdicts.PRIMARY_METRIC):
        self.source, self.default_metric = source, default_metric

    def _values(self, expr, arm, options):
        metric = options.get("metric", self.default_metric)
        values = {s: v for s, v in self.source.values(options.get("budget"), arm, metric, options.get("at")).items()
                  if v is not None}
        if not values:
            where = f" under budget {options['budget']}" if "budget" in options else ""
            raise NoteFigureError(f"note figure {expr!r}: arm {arm} has no results with {metric}{where}")
        return values

    def term_values(self, expr, term):
        """[(value, se or None)] of one parsed term (several for a pattern in ``mean``), unscaled."""
        kind, arms, options = term
        if kind == "mean":
            names = arms
            if any(ch in arms[0] for ch in "*?["):
                names = sorted(fnmatch.filter(self.source.arms(options.get("budget")), arms[0]))
                if not names:
                    raise NoteFigureError(f"note figure {expr!r}: no arm with results matches {arms[0]}")
            return [(statistics.fmean(self._values(expr, name, options).values()), None) for name in names]
        _, diffs = verdicts.paired(self._values(expr, arms[0], options), self._values(expr, arms[1], options))
        if len(diffs) < 2:
            raise NoteFigureError(f"note figure {expr!r}: {arms[0]} and {arms[1]} share fewer than 2 seeds")
        mean, se, _, _ = verdicts.paired_t_test(diffs)
        return [(mean, se if kind == "diff" else None)]

    def render(self, expr):
        """The text of one figure expression."""
        ranged = expr.startswith("range:")
        texts = [t.strip() for t in (expr[len("range:"):] if ranged else expr).split(";") if t.strip()]
        if not texts or (len(texts) > 1 and not ranged):
            raise NoteFigureError(f"note figure {expr!r}: one term, or 'range:' and terms separated by ';'")
        terms = [parse_term(t) for t in texts]
        metrics = {options.get("metric", self.default_metric) for _, _, options in terms}
        if len(metrics) > 1:
            raise NoteFigureError(f"note figure {expr!r}: a range spans one metric")
        factor, spec = self.source.scale(metrics.pop())
        values = [(factor * v, None if se is None else factor * se) for t in terms for v, se in self.term_values(expr, t)]
        if not ranged:
            if len(values) != 1:
                raise NoteFigureError(f"note figure {expr!r}: an arm pattern spans several arms: use 'range:'")
            (value, se), = values
            if terms[0][0] == "mean":
                return f"{value:{spec}}"
            return _signed(value, spec) + ("" if se is None else f" ± {se:{spec}}")
        low, high = min(v for v, _ in values), max(v for v, _ in values)
        if low >= 0:
            return f"{low:{spec}}\u2013{high:{spec}}"
        return f"{_signed(low, spec)} to {_signed(high, spec)}"

    def fill(self, text):
        """``text`` with every figure's value rewritten from its expression."""
        return FIGURE.sub(lambda m: m.group(1) + self.render(m.group("expr").strip()) + m.group(4), text)
