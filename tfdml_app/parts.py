"""What the application knows of the library's parts by reading them: the
keyword arguments of a loss or sampler class (its signature), the config's own
``loss.sampler`` names, and :class:`ConfigError`. Imports no TensorFlow; the
registries are imported when a function reads them."""

import difflib
import inspect

from tfdml import builtin_names


class ConfigError(ValueError):
    """A config problem, with a message that names the key and the fix."""


#: The loss.sampler name of the config itself: ``by_loss`` builds the loss with
#: ``sampler=None``: no sampler, the loss forms its own tuples from the batch (all
#: candidate pairs, or those its formula selects). An empty loss.sampler (null) is the
#: other thing: the loss's default sampler. The learned sampler of Duan et al. 2019
#: (:mod:`tfdml.dsn`), a trained network rather than an in-graph sampler, is the
#: config's ``learned_sampler`` section.
NO_SAMPLER = "by_loss"
#: The old spelling of ``learned_sampler: {...}``: ``loss.sampler: learned`` with the
#: options in ``loss.sampler_options`` (read as the section, with a warning).
LEARNED_SAMPLERS = ("learned",)
#: Old spellings of loss.sampler values, read as the new one with a warning.
RENAMED_SAMPLERS = {"none": NO_SAMPLER}
#: The loss.name of a weighted sum of losses (:class:`tfdml.losses.WeightedSumLoss`), whose
#: terms are the list ``loss.terms``: each term a loss section of its own.
WEIGHTED_SUM = builtin_names.WEIGHTED_SUM_LOSS


def loss_sections(cfg):
    """``[(section, where)]``: the loss sections of a config whose fields are valid, with the
    key that names each in messages: the ``loss`` section itself, or with ``loss.name:
    weighted_sum`` each of its ``loss.terms`` (``loss.terms[i]``)."""
    section = cfg["loss"]
    if section["name"] != WEIGHTED_SUM:
        return [(section, "loss")]
    return [(term, f"loss.terms[{i}]") for i, term in enumerate(section["terms"] or ())]


def _losses():
    from tfdml import losses

    return losses


def _samplers():
    from tfdml import samplers

    return samplers


def _dsn():
    from tfdml import dsn

    return dsn

def suggest(key, valid):
    """``" (did you mean 'x'?)"`` for the closest of ``valid`` names, or ``""``."""
    close = difflib.get_close_matches(key, valid, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""



def _init_parameters(cls):
    """The keyword arguments ``cls(...)`` accepts, by name. A constructor that
    passes ``**kwargs`` on (``super().__init__(**kwargs)``, as a user's loss may)
    also takes those of the next ``__init__`` up its class hierarchy, except the
    ones the class sets itself (a loss's ``fixed_arguments``) and those it refuses
    by its kind (``importance`` without ``supports_importance``, ``sampler``
    without ``sampler_kinds``)."""
    params = dict(inspect.signature(cls.__init__).parameters)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        parents = [c for c in cls.__mro__[1:] if "__init__" in vars(c)]
        if parents and parents[0] is not object:
            inherited = _init_parameters(parents[0])
            params = {n: p for n, p in params.items()
                      if p.kind not in (inspect.Parameter.VAR_KEYWORD,
                                        inspect.Parameter.VAR_POSITIONAL)}
            fixed = set(getattr(cls, "fixed_arguments", {}))
            if not getattr(cls, "supports_importance", True):
                fixed.add("importance")
            if not getattr(cls, "sampler_kinds", True):
                fixed.add("sampler")
            params.update({n: p for n, p in inherited.items() if n not in params and n not in fixed})
    return params


def _option_names(cls):
    """Keyword arguments of ``cls``, or None when it takes any (``**kwargs``)."""
    params = _init_parameters(cls)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return [n for n, p in params.items() if n != "self" and p.kind is not inspect.Parameter.VAR_POSITIONAL]


def _check_option_names(key, options, cls, owner):
    _check_names(key, options, _option_names(cls), owner)


def _check_names(key, options, valid, owner):
    """Each of ``options`` among ``valid`` (None: any name), else a ConfigError for ``key``."""
    if valid is None:
        return
    for option in options:
        if option not in valid:
            raise ConfigError(
                f"{key} has {option!r}, which is not an option of {owner}{suggest(option, valid)}; "
                f"valid: {', '.join(valid)}."
            )


def _takes_sampler(cls):
    """False for a loss that fixes its own selection (no ``sampler`` argument)."""
    return "sampler" in _init_parameters(cls)


def _takes_sampler(cls):
    """False for a loss that fixes its own selection (no ``sampler`` argument)."""
    return "sampler" in _init_parameters(cls)
