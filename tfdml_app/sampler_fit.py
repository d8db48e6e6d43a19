"""Which ``loss.sampler`` fits ``loss.name``, and its ``loss.sampler_options``' names.

One set of checks reads a table of *facts* about the parts: for each loss the
selection kinds it accepts, whether it takes a ``sampler`` argument, needs one,
its default sampler, whether the learned sampler (:mod:`tfdml.dsn`) trains it
and the one distance its equation is written for; for each sampler its kind,
its option names and the distance it assumes; the options of the learned
sampler (the config's ``learned_sampler`` section). :func:`library_facts` reads them
from the classes (the registries, including what an ``--import`` module
registered; imports TensorFlow); :func:`builtin_facts` holds those of tfdml's
built-in parts, from :mod:`tfdml.builtin_names` (no TensorFlow), which
``tests/tfdml/test_builtin_names.py`` keeps equal to :func:`library_facts`.
So ``train.py`` refuses a sampler that does not fit its loss before TensorFlow
is imported, with the message :func:`tfdml_app.config.validate` gives.
"""

import collections

from tfdml import builtin_names, distance_names
from tfdml_app.parts import (
    NO_SAMPLER, ConfigError, _check_names, _dsn, _init_parameters, _losses, _option_names,
    _samplers, _takes_sampler)

#: ``losses``: loss name -> its facts (:func:`loss_facts`); ``samplers``: sampler name ->
#: its facts (:func:`sampler_facts`); ``loss_options``: loss name -> its option names (None: any).
#: ``learned_options``: the option names of the config's ``learned_sampler`` section.
Facts = collections.namedtuple("Facts", "losses samplers loss_options learned_options")

#: Options of the ``learned_sampler`` section that are the model's
#: (:class:`tfdml.dsn.DSNEmbeddingModel`) and the run's (the network's learning rate, its
#: pre-training steps); the sampler network's own follow (:func:`tfdml.dsn.policy.network_options`).
DSN_MODEL_OPTIONS = ("tuples_per_minibatch", "minibatches", "baseline", "diagnostics", "learning_rate",
                     "pretrain_steps")

#: What :func:`check_sampler` returns when the loss is built without a ``sampler`` argument
#: (its default sampler, or the selection it fixes itself).
DEFAULT = "default"


def loss_facts(cls):
    """What a config's sampler checks need to know of the loss class ``cls``."""
    takes = _takes_sampler(cls)
    default = _init_parameters(cls)["sampler"].default if takes else None
    return {
        "kinds": tuple(cls.sampler_kinds),
        "takes_sampler": takes,
        "required": bool(cls.sampler_required),
        "default": default if isinstance(default, str) else None,
        "learned": _dsn().kind_for_loss(cls) is not None,
        "distance": getattr(cls, "fixed_distance", None),
        "takes_distance": bool(getattr(cls, "takes_distance", True)),
    }


def sampler_facts(cls):
    """What a config's sampler checks need to know of the sampler class ``cls``."""
    options = _option_names(cls)
    return {
        "kind": cls.kind,
        "options": None if options is None else tuple(options),
        "distance": getattr(cls, "requires_distance", None),
    }


def dsn_options():
    """Every option of the ``learned_sampler`` section, from the library."""
    from tfdml.dsn import policy

    return DSN_MODEL_OPTIONS + policy.network_options()


def library_facts():
    """The facts of every registered loss and sampler, read from their classes."""
    losses, samplers = _losses(), _samplers()
    return Facts({name: loss_facts(cls) for name, cls in losses.LOSSES.items()},
                 {name: sampler_facts(type(samplers.get(name))) for name in samplers.SAMPLERS},
                 {name: _option_names(cls) for name, cls in losses.LOSSES.items()},
                 dsn_options())


def builtin_facts():
    """The facts of tfdml's built-in losses and samplers (:mod:`tfdml.builtin_names`)."""
    return Facts(builtin_names.LOSS_SAMPLING, builtin_names.SAMPLER_FACTS, builtin_names.LOSS_OPTIONS,
                 builtin_names.LEARNED_SAMPLER_OPTIONS)


def _fits_distance(loss, sampler, distance=None):
    """The rule of :meth:`tfdml.losses.MetricLoss.fits_sampler_distance`, on facts: the
    sampler's distance (None: any) is the loss's (``distance``, else the one its equation
    is written for; None: any)."""
    distance = loss["distance"] if distance is None else distance
    return sampler["distance"] is None or not loss["takes_distance"] or distance is None \
        or distance == sampler["distance"]


def valid_samplers(loss_name, facts):
    """The loss.sampler names that fit ``loss_name``: the samplers whose kind the loss
    accepts (and whose distance it computes), ``by_loss`` unless the loss needs a sampler."""
    loss = facts.losses[loss_name]
    names = [n for n, s in facts.samplers.items() if s["kind"] in loss["kinds"] and _fits_distance(loss, s)]
    if not loss["kinds"] or (loss["takes_sampler"] and not loss["required"]):
        names.append(NO_SAMPLER)
    return names


def misfit(loss_name, sampler, reason, facts, where="loss"):
    return ConfigError(
        f"{where}.sampler = {sampler!r} does not fit {where}.name = {loss_name!r}: {reason}; "
        f"valid samplers for {loss_name}: {', '.join(valid_samplers(loss_name, facts))} "
        "(or leave it empty for the default)."
    )


def _kinds(kinds):
    return " or ".join(kinds) if kinds else "nothing"


def check_sampler(section, facts, where="loss"):
    """Check the ``loss`` ``section`` of a config (its fields valid) against ``facts``:
    the sampler fits the loss, its options are options of that sampler. Returns what
    the loss is built with: a registered sampler's name, :data:`NO_SAMPLER` (the
    argument ``sampler=None``), or :data:`DEFAULT` (no ``sampler`` argument). Raises
    :class:`ConfigError`. ``where``: the section's key in messages (``loss.terms[i]`` for a
    term of a weighted sum)."""
    name, sampler, options = section["name"], section["sampler"], section["sampler_options"]
    loss = facts.losses[name]
    if sampler is None and options:
        if loss["default"] is None:
            raise ConfigError(
                f"{where}.sampler_options {options!r} are given, but {where}.sampler is empty and {name} "
                f"uses no sampler by default; name the sampler in {where}.sampler "
                f"(valid for {name}: {', '.join(valid_samplers(name, facts))})."
            )
        sampler = loss["default"]  # the options are those of the loss's default sampler
    if sampler is None:
        return DEFAULT
    if sampler == NO_SAMPLER:
        if options:
            raise ConfigError(f"{where}.sampler_options {options!r} are given, but {where}.sampler = {NO_SAMPLER!r} "
                              "(no sampler).")
        if loss["required"]:
            raise misfit(name, sampler, f"{name} needs a sampler that selects {_kinds(loss['kinds'])}", facts, where)
        if not loss["takes_sampler"] and loss["kinds"]:
            raise misfit(name, sampler, f"{name} selects with its own sampler of {_kinds(loss['kinds'])}", facts, where)
        return NO_SAMPLER if loss["takes_sampler"] else DEFAULT
    facts_of = facts.samplers[sampler]
    if facts_of["kind"] not in loss["kinds"]:
        accepts = f"{name} accepts {_kinds(loss['kinds'])}" if loss["kinds"] else f"{name} takes no sampler"
        raise misfit(name, sampler, f"it selects {facts_of['kind']}, {accepts}", facts, where)
    if not loss["takes_sampler"]:
        if options:
            raise ConfigError(
                f"{where}.sampler_options {options!r}: {name} builds its own {sampler} sampler; set its "
                f"arguments in {where}.options (valid: {', '.join(facts.loss_options[name] or [])})."
            )
        return DEFAULT
    distance = section["options"].get("distance")
    if distance not in distance_names.DISTANCES:
        distance = None  # a bad value: the loss's own check names it
    if not _fits_distance(loss, facts_of, distance):
        fix = (f"use {where}.options.distance = {facts_of['distance']!r} (with model.normalize: true), or "
               "another sampler" if distance is not None and loss["distance"] is None else "use another sampler")
        raise misfit(name, sampler, f"it assumes {facts_of['distance']} distances, and {name} computes "
                                    f"{distance or loss['distance']} distances: {fix}", facts, where)
    _check_names(f"{where}.sampler_options", options, facts_of["options"], sampler)
    return sampler


def check_learned_sampler(cfg, facts):
    """Check the ``learned_sampler`` section of a config (its fields valid) against
    ``facts``: a loss it trains, no in-graph sampler beside it, its option names.
    Raises :class:`ConfigError`."""
    options, name = cfg["learned_sampler"], cfg["loss"]["name"]
    if options is None:
        return
    if not facts.losses.get(name, {}).get("learned"):  # a weighted sum is no loss the DSN trains
        supported = [n for n, f in facts.losses.items() if f["learned"]]
        raise ConfigError(f"learned_sampler with loss.name = {name!r}: the learned sampler (tfdml.dsn) "
                          f"trains {', '.join(supported)} only; use one of them, or remove learned_sampler.")
    if cfg["loss"]["sampler"] is not None or cfg["loss"]["sampler_options"]:
        raise ConfigError(
            f"learned_sampler picks the training tuples, so loss.sampler = {cfg['loss']['sampler']!r} "
            f"(loss.sampler_options {cfg['loss']['sampler_options']!r}) would not select any: leave both "
            "empty (the loss's default sampler then serves evaluation only), or remove learned_sampler.")
    _check_names("learned_sampler", options, facts.learned_options, "the learned sampler")
