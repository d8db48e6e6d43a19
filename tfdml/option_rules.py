"""The value rules of the built-in losses' and samplers' numeric and named options, without
TensorFlow: what a config's ``loss.options`` and ``loss.sampler_options`` may hold, checked
before TensorFlow is imported (``tfdml_app.config_checks.check_structure``).

The constructors of the classes check the same values themselves (the API path); a test
(``tests/tfdml/test_option_rules.py``) builds every class with a value just outside each
rule (it must refuse it) and on each bound the rule admits (it must accept it), and fails
when a numeric option of a built-in class has no rule here. A rule is a :class:`Rule`;
:func:`violation` says why a value breaks it, in the constructors' words.
"""

import math
from typing import NamedTuple

from tfdml import builtin_names, distance_names


class Rule(NamedTuple):
    """A number in [low, high] (``low_open`` / ``high_open``: the bound excluded; None: no
    bound), an int when ``integer``, None allowed when ``none``; or, with ``choices``, one
    of those names."""

    low: float = None
    high: float = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    none: bool = False
    choices: tuple = ()

    def describe(self):
        """The rule in words: "a number > 0", "an int >= 2 or null", "a number in [0, 2)"."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        kind = "an int" if self.integer else "a number"
        if self.low is not None and self.high is not None:
            text = (f"{kind} in {'(' if self.low_open else '['}{_number(self.low)}, "
                    f"{_number(self.high)}{')' if self.high_open else ']'}")
        elif self.low is not None:
            text = f"{kind} {'>' if self.low_open else '>='} {_number(self.low)}"
        elif self.high is not None:
            text = f"{kind} {'<' if self.high_open else '<='} {_number(self.high)}"
        else:
            text = f"a finite {kind[2:].strip()}" if not self.integer else kind
        return text + (" or null" if self.none else "")

    def admits(self, value):
        if value is None:
            return self.none
        if self.choices:
            return isinstance(value, str) and value in self.choices
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.integer and not isinstance(value, int):
            return False
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return False
        return True


def _number(value):
    return f"{value:g}"


def violation(name, value, rule):
    """None when ``value`` of option ``name`` keeps ``rule``, else the reason, e.g.
    "alpha must be a number > 0, got -1."."""
    if rule.admits(value):
        return None
    return f"{name} must be {rule.describe()}, got {value!r}."


POSITIVE = Rule(low=0.0, low_open=True)
NON_NEGATIVE = Rule(low=0.0)
NUMBER = Rule()
COUNT = Rule(low=1, integer=True)
COUNT_OR_NONE = Rule(low=1, integer=True, none=True)

#: Options every loss takes with the same rule (``MetricLoss``'s and the proxy losses').
COMMON_LOSS_RULES = {
    "proxy_lr_multiplier": POSITIVE,
    "centers_per_class": COUNT,
    "distance": Rule(choices=distance_names.DISTANCES),
}

#: Each built-in loss (``loss.name``) → its own options' rules (``COMMON_LOSS_RULES`` apply
#: too, where the loss takes the option).
LOSS_RULES = {
    "contrastive": {"margin": POSITIVE},
    "triplet": {"margin": POSITIVE},
    "margin": {"alpha": POSITIVE, "beta0": NUMBER, "nu": NON_NEGATIVE, "num_examples": COUNT_OR_NONE},
    "weighted_contrastive": {"margin": POSITIVE, "eta": POSITIVE, "importance_power": NUMBER},
    "balanced_contrastive": {"margin": POSITIVE, "lam": POSITIVE, "importance_power": NUMBER},
    "npair": {"l2_reg": NON_NEGATIVE},
    "precision_at_k": {"k": COUNT, "gamma": POSITIVE},
    "stable_contrast": {"alpha": POSITIVE, "beta": NUMBER},
    "robust_hard_contrastive": {"alpha": POSITIVE, "beta": NON_NEGATIVE},
    "histogram": {"num_bins": Rule(low=2, integer=True)},
    "angular": {"alpha": Rule(low=0.0, high=90.0, low_open=True, high_open=True), "lam": NON_NEGATIVE},
    "lifted_structured": {"margin": POSITIVE},
    "binomial_deviance": {"alpha": POSITIVE, "beta": NUMBER, "cost": POSITIVE},
    "multi_similarity": {"alpha": POSITIVE, "beta": POSITIVE, "lam": NUMBER},
    "circle": {"m": NON_NEGATIVE, "gamma": POSITIVE},
    "facility_location": {"gamma": NON_NEGATIVE, "refinement_steps": Rule(low=0, integer=True),
                          "nmi_average": Rule(choices=("geometric", "arithmetic"))},
    "ddml": {"tau": Rule(low=1.0, low_open=True), "beta": POSITIVE},
    "daml": {"margin": POSITIVE, "metric_weight": NON_NEGATIVE, "reg_weight": NON_NEGATIVE,
             "adv_weight": NON_NEGATIVE, "real_weight": NON_NEGATIVE, "hidden_units": COUNT_OR_NONE,
             "form": Rule(choices=builtin_names.DAML_FORMS)},
    "pddm": {"variant": Rule(choices=("quadruplet", "triplet")), "positives": Rule(choices=("hardest", "all")),
             "alpha": POSITIVE, "beta": POSITIVE, "lam": NON_NEGATIVE, "units": COUNT, "hidden_units": COUNT},
    "proxy_nca": {"embedding_scale": POSITIVE, "proxy_scale": POSITIVE},
    "proxy_anchor": {"alpha": POSITIVE, "delta": NON_NEGATIVE},
    "nt_xent": {"temperature": POSITIVE},
    "supcon": {"temperature": POSITIVE},
    "vicreg": {"lam": NON_NEGATIVE, "mu": NON_NEGATIVE, "nu": NON_NEGATIVE, "gamma": POSITIVE,
               "epsilon": POSITIVE},
    "barlow_twins": {"lam": NON_NEGATIVE},
    "normalized_softmax": {"temperature": POSITIVE},
    "cosface": {"scale": POSITIVE, "margin": NON_NEGATIVE},
    "arcface": {"scale": POSITIVE, "margin": Rule(low=0.0, high=math.pi, high_open=True)},
    "sub_center_arcface": {"scale": POSITIVE, "margin": Rule(low=0.0, high=math.pi, high_open=True)},
    "soft_triple": {"la": POSITIVE, "gamma": POSITIVE, "margin": NON_NEGATIVE, "tau": NON_NEGATIVE},
    "fast_ap": {"num_bins": COUNT},
    "hdc": {"levels": COUNT, "filter_percentage": Rule(low=0.0, high=1.0, low_open=True)},
    "global": {"lam": NON_NEGATIVE, "margin": NON_NEGATIVE},
}

#: Each built-in sampler (``loss.sampler``) → its options' rules.
SAMPLER_RULES = {
    "random": {"num_pairs": COUNT_OR_NONE},
    "random_triplets": {"num_triplets": COUNT_OR_NONE},
    "distance_weighted": {"cutoff": Rule(low=0.0, high=2.0, high_open=True),
                          "nonzero_loss_cutoff": Rule(low=0.0, low_open=True, none=True),
                          "lam": Rule(low=0.0, low_open=True, none=True)},
    "top_k": {"k": COUNT},
    "multi_similarity": {"epsilon": NON_NEGATIVE},
    "pair_margin": {"pos_margin": NUMBER, "neg_margin": NUMBER},
    "hdc": {"filter_percentage": Rule(low=0.0, high=1.0, low_open=True)},
    "semi_hard": {"fallback": Rule(choices=("hardest_inside", "drop"))},
    "easy_hard": {"negative": Rule(choices=("hard", "semi_hard"))},
}


def loss_rules(loss, options):
    """The rules of ``loss``'s options among ``options`` (its option names)."""
    rules = {name: rule for name, rule in COMMON_LOSS_RULES.items() if name in options}
    rules.update(LOSS_RULES.get(loss, {}))
    return rules


def violations(rules, values):
    """The reasons the ``values`` (option → value) break their ``rules``, in order."""
    found = (violation(name, value, rules[name]) for name, value in values.items() if name in rules)
    return [reason for reason in found if reason]
