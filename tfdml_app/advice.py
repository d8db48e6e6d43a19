"""Advice that changes a run's config, checked on the run's own data before it
is printed: settings that the config validation, the validation hold-out and
the batch design all accept (used by the run summary and the design's error)."""

import copy

from tfdml_app import config as config_lib
from tfdml_app import data as data_lib
from tfdml_app.errors import ExperimentError

#: The fraction of the training split a suggested validation split holds out
#: (when the config does not set one).
FRACTION = 0.2
#: The fewest classes of a useful validation split: with one class every
#: neighbour is a match, every retrieval figure is 1 and no epoch is better.
MIN_VALIDATION_CLASSES = 2


def validation_split(cfg, train_split):
    """The ``--set`` settings (``["key=value", ...]``) that give the run of
    ``cfg`` a validation split of ``train_split`` (the whole training split)
    that its design still fits, or None when none is found.

    Tried in turn, and the first that works is returned: the config's
    ``data.validation`` with its fraction (:data:`FRACTION` when unset); the
    same with ``mode: examples`` (every training class stays for the design);
    whole classes held out with ``design.options.n`` lowered to the classes left."""
    fraction = cfg["data"]["validation"]["fraction"] or FRACTION
    base = [] if cfg["data"]["validation"]["fraction"] == fraction else [f"data.validation.fraction={fraction}"]
    examples = base + _differs(cfg, "data.validation.mode", "examples")
    for settings in ([base] if examples == base else [base, examples]):
        if _fits(cfg, train_split, settings):
            return settings
    classes = base + _differs(cfg, "data.validation.mode", "classes")
    split = _fits(cfg, train_split, classes, design=False)
    if split is not None and _grouped(cfg):
        lowered = classes + [f"design.options.n={int(split[0].num_classes)}"]
        if split[0].num_classes < cfg["design"]["options"]["n"] and _fits(cfg, train_split, lowered):
            return lowered
    return None


def _grouped(cfg):
    """Whether the design draws ``design.options.n`` classes per batch (m_per_class, group)."""
    from pipelines import designs

    return designs.DESIGNS[cfg["design"]["name"]].grouped_by_class


def _differs(cfg, key, value):
    """``["key=value"]`` when ``cfg`` does not already hold that value, else ``[]``."""
    node = cfg
    for part in key.split("."):
        node = node[part]
    return [] if node == value else [f"{key}={value}"]


def _fits(cfg, train_split, settings, design=True):
    """``(train, validation)`` of ``cfg`` with ``settings`` applied, when the
    config validates, the validation split has :data:`MIN_VALIDATION_CLASSES`
    classes or more and (``design``) the design fits the training part; else None."""
    changed = config_lib.apply_overrides(copy.deepcopy(cfg), settings)
    try:
        changed = config_lib.validate(changed)
        train, validation = data_lib.split_validation(changed, train_split)
        if validation is None or validation.num_classes < MIN_VALIDATION_CLASSES:
            return None
        if design:
            data_lib.build_design(changed).validate(train)
    except (config_lib.ConfigError, ExperimentError, ValueError):
        return None
    return train, validation


def as_options(settings):
    """``settings`` as the command line takes them: ``--set a=1 --set b=2``."""
    return " ".join(f"--set {s}" for s in settings)
