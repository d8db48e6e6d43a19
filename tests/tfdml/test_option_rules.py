"""The static option rules (tfdml.option_rules, read by a config before TensorFlow) decide
as the constructors of the built-in losses and samplers do: every value just outside a
rule is refused by the class, every bound the rule admits is accepted, and every numeric
option of a built-in class has a rule."""

import inspect
import math

import pytest

from tfdml import builtin_names, losses, option_rules, samplers
from tfdml.option_rules import Rule
from tfdml_app.loss_config import RUN_ARGUMENTS

SIZES = {"num_classes": 4, "embedding_dim": 8}
#: Other options a probe of (loss, option) is built with: the constructor also checks a
#: combination (RobustHardContrastiveLoss: beta < alpha).
ALONGSIDE = {("robust_hard_contrastive", "alpha"): {"beta": 0.0}}
#: Options a class takes in its signature but refuses whatever their value.
REFUSED = {("balanced_contrastive", "eta")}


def outside(rule):
    """Values the rule refuses, each next to one of its bounds or of another kind."""
    if rule.choices:
        return ["no_such_choice", 1]
    values = ["abc"] + ([] if rule.none else [None])
    step = 1 if rule.integer else 0.5
    if rule.low is not None:
        values.append(rule.low if rule.low_open else rule.low - step)
    if rule.high is not None:
        values.append(rule.high if rule.high_open else rule.high + step)
    if rule.integer:
        values.append((rule.low or 0) + 1.5)
    return values


def inside(rule):
    """Values the rule admits: its closed bounds, just inside its open ones, None if allowed."""
    if rule.choices:
        return list(rule.choices)
    values = [None] if rule.none else []
    if rule.low is not None:
        values.append(rule.low + (1 if rule.integer else 1e-3) * rule.low_open)
    if rule.high is not None:
        values.append(rule.high - (1 if rule.integer else 1e-3) * rule.high_open)
    if rule.low is None and rule.high is None:
        values += [0, -2] if not rule.integer else [3]
    return values


def build_loss(name, **options):
    cls = losses.LOSSES[name]
    params = inspect.signature(cls).parameters
    kwargs = {k: v for k, v in SIZES.items() if k in params}
    if name == "balanced_contrastive":
        kwargs["num_classes"] = 4
    return cls(**{**kwargs, **options})


def loss_cases():
    for name in builtin_names.LOSSES:
        if name == builtin_names.WEIGHTED_SUM_LOSS:
            continue
        for option, rule in option_rules.loss_rules(name, builtin_names.LOSS_OPTIONS[name] or ()).items():
            yield name, option, rule


def sampler_cases():
    for name, rules in option_rules.SAMPLER_RULES.items():
        for option, rule in rules.items():
            yield name, option, rule


@pytest.mark.parametrize("name, option, rule", list(loss_cases()))
def test_each_loss_rule_decides_as_the_constructor(name, option, rule):
    alongside = ALONGSIDE.get((name, option), {})
    for value in outside(rule):
        assert not rule.admits(value)
        with pytest.raises((ValueError, TypeError)):
            build_loss(name, **alongside, **{option: value})
    for value in inside(rule):
        assert rule.admits(value), value
        if option == "distance" and (not builtin_names.LOSS_SAMPLING[name]["takes_distance"]
                                     or value != build_loss(name).distance):
            continue  # a loss written for one distance refuses the others, some take none
        build_loss(name, **alongside, **{option: value})


@pytest.mark.parametrize("name, option, rule", list(sampler_cases()))
def test_each_sampler_rule_decides_as_the_constructor(name, option, rule):
    cls = samplers.SAMPLERS[name]
    for value in outside(rule):
        with pytest.raises((ValueError, TypeError)):
            cls(**{option: value})
    for value in inside(rule):
        cls(**{option: value})


def numeric_defaults(cls, names):
    """The options among ``names`` whose default in ``cls``'s signature is a number."""
    found = []
    for klass in cls.__mro__:
        if klass is object or "__init__" not in vars(klass):
            continue
        for param in inspect.signature(klass.__init__).parameters.values():
            default = param.default
            if (param.name in names and not isinstance(default, bool) and isinstance(default, (int, float))
                    and param.name not in found):
                found.append(param.name)
    return found


def test_every_numeric_option_of_a_builtin_class_has_a_rule():
    missing = []
    for name in builtin_names.LOSSES:
        options = builtin_names.LOSS_OPTIONS[name]
        if options is None:
            continue
        rules = option_rules.loss_rules(name, options)
        missing += [f"loss {name}: {option}" for option in numeric_defaults(losses.LOSSES[name], options)
                    if option not in rules and option not in RUN_ARGUMENTS and (name, option) not in REFUSED]
    for name, facts in builtin_names.SAMPLER_FACTS.items():
        options = facts["options"] or ()
        rules = option_rules.SAMPLER_RULES.get(name, {})
        missing += [f"sampler {name}: {option}" for option in numeric_defaults(samplers.SAMPLERS[name], options)
                    if option not in rules and option not in RUN_ARGUMENTS]
    assert not missing, "options without a rule in tfdml/option_rules.py: " + ", ".join(missing)


def test_the_rules_in_words():
    assert option_rules.violation("alpha", -1, option_rules.POSITIVE) == "alpha must be a number > 0, got -1."
    assert option_rules.violation("alpha", 0, option_rules.POSITIVE) is not None
    assert option_rules.violation("alpha", 0, option_rules.NON_NEGATIVE) is None
    cutoff = Rule(low=0.0, high=2.0, high_open=True)
    assert option_rules.violation("cutoff", 2.0, cutoff) == "cutoff must be a number in [0, 2), got 2.0."
    assert option_rules.violation("k", 2.5, option_rules.COUNT) == "k must be an int >= 1, got 2.5."
    assert option_rules.violation("k", None, option_rules.COUNT_OR_NONE) is None
    assert option_rules.violation("k", True, option_rules.COUNT) is not None  # a bool is no count
    assert option_rules.violation("beta", math.inf, option_rules.NUMBER) == "beta must be a finite number, got inf."
    assert option_rules.violation("fallback", "x", Rule(choices=("a", "b"))) == (
        "fallback must be one of a, b, got 'x'.")
