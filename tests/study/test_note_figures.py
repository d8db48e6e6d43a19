"""study/note_figures.py: the figures the study report's notes quote, on results whose figures are
known by hand."""

import importlib.util
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "study"))  # note_figures imports verdicts beside it
_spec = importlib.util.spec_from_file_location("note_figures", os.path.join(ROOT, "study", "note_figures.py"))
nf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nf)

# seed → MAP@R; A − B per seed is 10, 9, 8 points: mean 9, sd 1, SE 1/√3 = 0.577
RESULTS = {None: {"a": {0: 0.60, 1: 0.62, 2: 0.64}, "b": {0: 0.50, 1: 0.53, 2: 0.56},
                  "c": {0: 0.52, 1: 0.54, 2: 0.56, 3: 0.9}, "x-dw-1": {0: 0.9}, "x-dw-2": {0: 0.7}},
           "other": {"a": {0: 0.10, 1: 0.20}}}


class Source:
    def values(self, budget, arm, metric, at):
        scale = 2.0 if metric == "recall@1" else 1.0
        return {s: scale * v for s, v in RESULTS.get(budget, {}).get(arm, {}).items()}

    def arms(self, budget):
        return sorted(RESULTS.get(budget, {}))

    def scale(self, metric):
        return 100.0, ".1f"


@pytest.fixture
def figures():
    return nf.Figures(Source())


def test_a_paired_difference_is_given_with_its_standard_error(figures):
    assert figures.render("diff a b") == "+9.0 ± 0.6"
    assert figures.render("gain b a") == "\u22129.0"
    # pairs on the seeds both arms have: c's seed 3 is left out (a − c: 8, 8, 8)
    assert figures.render("gain a c") == "+8.0"
    assert figures.render("diff a b metric=recall@1") == "+18.0 ± 1.2"


def test_a_mean_and_a_range_of_terms(figures):
    assert figures.render("mean a") == "62.0"
    assert figures.render("mean a budget=other") == "15.0"
    assert figures.render("range: gain a b; gain c b") == "1.0\u20139.0"  # c − b: 2, 1, 0
    assert figures.render("range: gain b a; gain c b") == "\u22129.0 to +1.0"
    assert figures.render("range: mean x-dw-*") == "70.0\u201390.0"


def test_a_figure_that_cannot_be_computed_names_itself_and_the_fix(figures):
    for expr, words in (("diff a", "two arms"), ("mean a b", "one arm"), ("median a", "starts with one of"),
                        ("mean a budget=nowhere", "has no results"), ("mean a seeds=3", "unknown option(s) seeds"),
                        ("mean x-dw-*", "use 'range:'"), ("gain a b; gain c b", "'range:'"),
                        ("range: mean q-*", "no arm with results matches q-*"),
                        ("range: mean a; mean a metric=recall@1", "one metric"),
                        ("diff a b budget=other", "has no results"), ("mean a at=half", "at= takes a fraction")):
        with pytest.raises(nf.NoteFigureError, match="note figure") as err:
            figures.render(expr)
        assert words in str(err.value), (expr, str(err.value))


def test_fill_rewrites_each_value_from_its_expression_and_nothing_else(figures):
    text = ("A leads B by <!-- fig: diff a b -->+1.0 ± 9.9<!-- /fig --> MAP@R\n"
            "and spans <!-- fig: range: gain a b;\n  gain c b -->old<!-- /fig --> points.\n")
    filled = figures.fill(text)
    assert filled == ("A leads B by <!-- fig: diff a b -->+9.0 ± 0.6<!-- /fig --> MAP@R\n"
                      "and spans <!-- fig: range: gain a b;\n  gain c b -->1.0\u20139.0<!-- /fig --> points.\n")
    assert figures.fill(filled) == filled
    assert figures.fill("no figures here") == "no figures here"
