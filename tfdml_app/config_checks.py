"""The checks of a config's values: keys, types, choices, ranges and the
combinations of sections, each refused with a :class:`ConfigError` that names
the key, the bad value and the fix.

:func:`check_structure` runs them without TensorFlow (with ``names=True``,
against the names of the built-in parts, :mod:`tfdml.builtin_names`);
:func:`check_values` runs the same checks against the names the library
registers (used by :func:`tfdml_app.config.validate`, which also builds the loss).
"""

import copy
import sys
import warnings

from tfdml import builtin_names, cascade_spec, metric_names, option_rules
from tfdml_app import sampler_fit
from tfdml_app.loss_config import ConfigError, check_cascade_loss, check_loss_options, suggest
from tfdml_app.parts import LEARNED_SAMPLERS, WEIGHTED_SUM, loss_sections
from tfdml_app.schema import OLD_DESIGN_KEYS, SCHEMA, TERM_SCHEMA


#: Which names :func:`_validate` checks a field's ``choices`` against: those the
#: library registers (imports it), the built-in ones (:mod:`tfdml.builtin_names`,
#: no TensorFlow), or none (fixed choices only).
LIBRARY, BUILTIN, FIXED = "library", "builtin", "fixed"


def _choices(field, names):
    """The values a field takes when names of the kind ``names`` are checked (None: any)."""
    if not callable(field._choices):
        return field._choices
    if names == LIBRARY:
        return field.choices
    return field.builtin if names == BUILTIN else None


def _grouped_designs():
    from pipelines import designs

    return [name for name, cls in designs.DESIGNS.items() if cls.grouped_by_class]


def _renamed(where, old, new):
    """The new name of a renamed value, with a warning that names it."""
    warnings.warn(f"{where} = {old!r} is an old spelling of {new!r}, read as {new!r} for now: write "
                  f"{where.split('.')[-1]}: {new}.", FutureWarning, stacklevel=4)
    return new


def _type_names(types):
    return " or ".join("null" if t is type(None) else t.__name__ for t in types)


def _validate(config, schema, path, names=LIBRARY):
    if not isinstance(config, dict):
        raise ConfigError(f"{path or 'config'} must be a mapping of keys to values, got {config!r}.")
    for key in config:
        if key not in schema:
            where = f"{path}.{key}" if path else key
            raise ConfigError(
                f"Unknown config key {where!r}{suggest(key, list(schema))}; "
                f"valid keys{' of ' + path if path else ''}: {', '.join(schema)}."
            )
    out = {}
    for key, field in schema.items():
        where = f"{path}.{key}" if path else key
        if isinstance(field, dict):
            out[key] = _validate(config.get(key, {}) or {}, field, where, names)
            continue
        value = config.get(key, copy.deepcopy(field.default))
        if isinstance(value, str) and value in field.renamed:
            value = _renamed(where, value, field.renamed[value])
        if isinstance(value, bool) and bool not in field.types:
            raise ConfigError(f"{where} must be {_type_names(field.types)}, got the boolean {value!r}.")
        if float in field.types and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, field.types):
            raise ConfigError(
                f"{where} must be {_type_names(field.types)}, got {value!r} ({type(value).__name__})."
            )
        choices = _choices(field, names)
        if choices is not None and value not in choices:
            shown = [c for c in choices if c is not None]
            raise ConfigError(
                f"{where} = {value!r} is not valid{suggest(str(value), [str(c) for c in shown])}; "
                f"choose one of: {', '.join(map(str, shown))}."
            )
        if field.check is not None and value is not None:
            problem = field.check(value)
            if problem:
                raise ConfigError(f"{where} = {value!r} {problem}.")
        out[key] = value
    return out


def _check_combinations(cfg, names=LIBRARY):
    """The ranges and combinations of a config whose fields are valid: of the built-in
    designs (``names=BUILTIN``) or of the registered ones (``LIBRARY``)."""
    learned, design = cfg["learned_sampler"] is not None, cfg["design"]["name"]
    grouped = builtin_names.GROUPED_DESIGNS if names == BUILTIN else _grouped_designs()
    if learned and design not in grouped:
        raise ConfigError(
            f"learned_sampler draws tuples from a pool of several classes; design.name = {design!r} "
            f"gives no such pool: use {' or '.join(map(repr, grouped))}."
        )
    if learned and cfg["strategy"] != "default":
        raise ConfigError(
            f"learned_sampler (the DSN of Duan et al.) runs on one replica; strategy = "
            f"{cfg['strategy']!r} is not supported with it: use strategy 'default'."
        )
    if learned and cfg["model"]["projection_head"] is not None:
        raise ConfigError(
            f"model.projection_head = {cfg['model']['projection_head']!r} with learned_sampler: the "
            "learned sampler's network and its loss score the embeddings themselves, so a head would "
            "not be trained; remove model.projection_head or learned_sampler."
        )
    if learned and cfg["training"]["jit_compile"] == builtin_names.LOSS_ONLY:
        raise ConfigError(
            f"training.jit_compile = {cfg['training']['jit_compile']!r} compiles a loss and its in-graph "
            "sampler; the learned sampler's step is one piece: use true (all of it) or false."
        )
    _check_cascade(cfg)
    scale = cfg["image"]["crop_scale"]
    if len(scale) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in scale) \
            or not 0.0 < scale[0] <= scale[1] <= 1.0:
        raise ConfigError(f"image.crop_scale must be [min, max] with 0 < min <= max <= 1, got {scale!r}.")
    bad_k = [k for k in cfg["evaluation"]["ks"] if not isinstance(k, int) or isinstance(k, bool) or k < 1]
    if bad_k:
        raise ConfigError(f"evaluation.ks must be positive integers, got {bad_k}.")
    try:
        metric_names.parse_metrics(cfg["evaluation"]["metrics"], cfg["evaluation"]["ks"])
    except ValueError as err:
        raise ConfigError(f"evaluation.metrics: {err}") from None
    if cfg["training"]["early_stopping_patience"] is not None:
        if cfg["data"]["validation"]["fraction"] is None:
            raise ConfigError(
                "training.early_stopping_patience needs a validation split to watch (stopping on the "
                "test split would select on test data): hold one out of the training split, e.g. "
                "--set data.validation.fraction=0.2 (and --set data.validation.mode=examples when "
                "holding out whole classes would leave fewer training classes than design.options.n), or "
                "remove training.early_stopping_patience."
            )
        if cfg["strategy"] == "multi_worker":
            raise ConfigError("training.early_stopping_patience is not supported with strategy "
                              "'multi_worker' (it evaluates nothing per epoch); remove it.")
    for key in ("epochs", "steps_per_epoch"):
        if cfg["training"][key] < 1:
            raise ConfigError(f"training.{key} must be >= 1, got {cfg['training'][key]}.")
    if cfg["optimizer"]["head_lr_multiplier"] <= 0:
        raise ConfigError(f"optimizer.head_lr_multiplier must be > 0, got {cfg['optimizer']['head_lr_multiplier']}.")
    if cfg["optimizer"]["learning_rate"] <= 0:
        raise ConfigError(f"optimizer.learning_rate must be > 0, got {cfg['optimizer']['learning_rate']}.")


def _check_cascade(cfg):
    """``model.cascade`` of a config whose fields are valid, resolved in place (its levels
    filled in, :func:`tfdml.cascade_spec.resolve`), against the rest of ``model``."""
    model = cfg["model"]
    if model["cascade"] is None:
        return
    model["cascade"] = cascade = cascade_spec.resolve(model["cascade"])
    levels = cascade["levels"]
    if model["embedding_dim"] % levels:
        raise ConfigError(f"model.embedding_dim = {model['embedding_dim']} does not divide into the {levels} levels "
                          f"of model.cascade (each level has embedding_dim / {levels} dimensions): use a multiple "
                          f"of {levels}, e.g. {max(1, model['embedding_dim'] // levels) * levels}.")
    if not model["normalize"]:
        raise ConfigError("model.normalize = false with model.cascade: the cascade L2-normalises each level's "
                          "embedding (Yuan et al.), so it has no unnormalised form; set model.normalize: true "
                          "or remove model.cascade.")


def _design_options(name, names):
    """``(config_options, option names)`` of the design ``name``: of its class (``LIBRARY``,
    or any names once the library is imported), else of the built-in designs
    (:data:`tfdml.builtin_names.DESIGN_OPTIONS`); ``({}, None)`` when nothing is known of it."""
    if names == LIBRARY or ("pipelines.designs" in sys.modules and name not in builtin_names.DESIGN_OPTIONS):
        from pipelines import designs

        if name in designs.DESIGNS:
            cls = designs.DESIGNS[name]
            return cls.config_options, cls.option_names()
    if name in builtin_names.DESIGN_OPTIONS:
        return builtin_names.DESIGN_OPTIONS[name], builtin_names.DESIGN_OPTION_NAMES[name]
    return {}, None


def _check_design_options(cfg, names):
    """``design.options`` of a config whose fields are valid: names the design takes, its own
    parameters (``Design.config_options``) filled with their defaults and checked against
    their ranges, in place."""
    name, options = cfg["design"]["name"], cfg["design"]["options"]
    own, valid = _design_options(name, names)
    if valid is not None:
        for key in options:
            if key not in valid:
                raise ConfigError(f"design.options has {key!r}, which is not an option of the {name} design"
                                  f"{suggest(str(key), list(valid))}; valid: {', '.join(valid)} (with another "
                                  "design.name, replace its options too: design.options: {} takes the defaults).")
    for key, spec in own.items():
        value = options.setdefault(key, copy.deepcopy(spec["default"]))
        where, why = f"design.options.{key}", f" ({spec['why']})" if spec.get("why") else ""
        if "min" in spec:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{where} must be an integer, got {value!r}.")
            if value < spec["min"]:
                raise ConfigError(f"{where} = {value} must be >= {spec['min']}{why}.")
        else:
            low, high = spec["between"]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{where} must be a number, got {value!r}.")
            options[key] = value = float(value)
            if not low < value < high:
                raise ConfigError(f"{where} = {value} must lie strictly between {low:g} and {high:g}{why}.")


def _check_terms(cfg, names):
    """``loss.terms`` of a config whose fields are valid: each term checked as a loss section
    of its own (:data:`tfdml_app.schema.TERM_SCHEMA`, defaults filled in place), given with
    ``loss.name: weighted_sum`` and only with it; the keys of one loss stay empty beside
    them."""
    loss = cfg["loss"]
    if loss["name"] != WEIGHTED_SUM:
        if loss["terms"] is not None:
            raise ConfigError(f"loss.terms is given, but loss.name = {loss['name']!r}: terms are the losses of "
                              f"a weighted sum; set loss.name: {WEIGHTED_SUM}, or remove loss.terms.")
        return
    if not loss["terms"]:
        raise ConfigError(f"loss.name = {WEIGHTED_SUM!r} sums the losses of loss.terms, which is empty: give a "
                          "list of at least one loss, e.g. [{name: proxy_anchor}, {name: multi_similarity, "
                          "weight: 0.5}].")
    for key in ("options", "sampler", "sampler_options", "memory"):
        if loss[key] != SCHEMA["loss"][key].default:
            fix = ("a cross-batch memory is not available to a weighted sum's terms: remove loss.memory"
                   if key == "memory" else f"set it in the term it belongs to (loss.terms[i].{key})")
            raise ConfigError(f"loss.{key} = {loss[key]!r} with loss.name = {WEIGHTED_SUM!r}: each term has its "
                              f"own; {fix}.")
    terms, seen = [], {}
    for i, term in enumerate(loss["terms"]):
        where = f"loss.terms[{i}]"
        if not isinstance(term, dict) or "name" not in term:
            raise ConfigError(f"{where} = {term!r}: a term is a loss section with a name, e.g. "
                              "{name: multi_similarity, weight: 0.5, options: {...}}.")
        term = _validate(term, TERM_SCHEMA, where, names)
        key = term["options"].get("name", term["name"])
        if key in seen:
            raise ConfigError(f"{seen[key]} and {where} are both named {key!r}, and a loss's state is saved under "
                              f"its name: give one of them its own options.name, e.g. {where}.options.name: "
                              f"{key}_2.")
        seen[key] = where
        terms.append(term)
    loss["terms"] = terms


def _moved_design(config):
    """``config`` with the design's parameters beside its name (``design.m``, ...) moved to
    ``design.options``, with a warning (those its design does not take, which it ignored,
    are left out); ``config`` itself is left as it is."""
    design = config.get("design") if isinstance(config, dict) else None
    old = [key for key in OLD_DESIGN_KEYS if isinstance(design, dict) and key in design]
    if not old:
        return config
    config = copy.deepcopy(config)
    design = config["design"]
    name = design.get("name", SCHEMA["design"]["name"].default)
    options = design.get("options") or {}
    if not isinstance(options, dict):
        raise ConfigError(f"design.options must be a mapping of option names to values, got {options!r}.")
    takes = _design_options(name, BUILTIN)[1]
    moved_options, ignored = {}, []
    for key in old:
        value = design.pop(key)
        if key in options:
            raise ConfigError(f"design.{key} and design.options.{key} are both given; keep design.options.{key} "
                              f"(the design's parameters are its options) and remove design.{key}.")
        if takes is None or key in takes:
            moved_options[key] = value
        else:
            ignored.append(key)
    design["options"] = {**moved_options, **options}
    left_out = (f"; design.{', design.'.join(ignored)}, which the {name} design does not take (it ignored "
                "them), left out" if ignored else "")
    warnings.warn(f"design.{', design.'.join(old)} beside design.name is the old place of the design's "
                  f"parameters, read as design.options: {moved_options!r} for now: write them under "
                  f"design.options (design.options.{old[0]}){left_out}.", FutureWarning, stacklevel=4)
    return config


def moved(config):
    """``config`` with keys in an old place moved to their new one, each with a
    ``FutureWarning`` naming it (a copy; ``config`` itself is left as it is):
    ``loss.sampler: learned`` with its ``loss.sampler_options`` is the
    ``learned_sampler`` section; ``design.m`` (n, p, pairs) beside ``design.name`` is
    ``design.options.m``."""
    config = _moved_design(config)
    loss = config.get("loss") if isinstance(config, dict) else None
    if not isinstance(loss, dict) or loss.get("sampler") not in LEARNED_SAMPLERS:
        return config
    if config.get("learned_sampler") is not None:
        raise ConfigError("loss.sampler = 'learned' and learned_sampler are both given; keep learned_sampler "
                          "(the learned sampler's section) and remove loss.sampler.")
    config = copy.deepcopy(config)
    config["loss"].pop("sampler")
    options = config["loss"].pop("sampler_options", None) or {}
    config["learned_sampler"] = options
    warnings.warn(f"loss.sampler = 'learned' is an old spelling of the learned_sampler section, read as "
                  f"learned_sampler: {options!r} for now: write learned_sampler: {options!r} (the options that "
                  "were loss.sampler_options) and remove loss.sampler.", FutureWarning, stacklevel=3)
    return config


def check_values(config):
    """Fill defaults and check a config dict against the names the library registers
    (imports it): every check but building the loss; returns the resolved config."""
    cfg = _validate(moved(config or {}), SCHEMA, "")
    _check_design_options(cfg, LIBRARY)
    _check_terms(cfg, LIBRARY)
    _check_combinations(cfg)
    sampler_fit.check_learned_sampler(cfg, sampler_fit.library_facts())
    return cfg


def _check_option_values(section, where):
    """The values in ``loss.options`` and ``loss.sampler_options`` of a built-in loss and
    sampler (``section`` at ``where``), on :mod:`tfdml.option_rules`, with the messages of
    the constructors' path (:func:`tfdml_app.loss_config.build_loss`)."""
    name, options = section["name"], section["options"]
    rules = option_rules.loss_rules(name, builtin_names.LOSS_OPTIONS[name] or options)
    for reason in option_rules.violations(rules, options):
        raise ConfigError(f"{where}.options for {name!r}: {reason}")
    sampler = section["sampler"] or builtin_names.LOSS_SAMPLING[name]["default"]
    for reason in option_rules.violations(option_rules.SAMPLER_RULES.get(sampler, {}), section["sampler_options"]):
        raise ConfigError(f"{where}.sampler_options for {sampler!r}: {reason}")


def check_structure(config, names=False):
    """Check a config dict without the library (and without TensorFlow): its
    keys, types, fixed choices and value ranges; the names the library
    registers (losses, samplers, backbones, designs, sources, metrics,
    distances) and the combinations are checked by :func:`tfdml_app.config.validate`.

    ``names=True``: also the names, as those of tfdml's built-in parts
    (:mod:`tfdml.builtin_names`), and the ranges and combinations that need no
    class of the library, with :func:`tfdml_app.config.validate`'s messages; for a
    config that can name only built-in parts (``train.py`` without ``--import``):
    the names in ``loss.options`` (:data:`tfdml.builtin_names.LOSS_OPTIONS`), the
    sampler's fit to the loss and the names in ``loss.sampler_options`` and
    ``learned_sampler`` (:mod:`tfdml_app.sampler_fit` on
    :data:`tfdml.builtin_names.LOSS_SAMPLING`, :data:`~tfdml.builtin_names.SAMPLER_FACTS`
    and :data:`~tfdml.builtin_names.LEARNED_SAMPLER_OPTIONS`), and the values in
    ``loss.options`` and ``loss.sampler_options`` (:mod:`tfdml.option_rules`). What is left to
    :func:`tfdml_app.config.validate`, which builds the loss with its sampler: the
    values of ``loss.memory`` and the combinations of option values a constructor
    refuses, and what the built loss and sampler
    ask of the batch design and the model (:func:`tfdml_app.loss_config.check_loss`).
    Raises :class:`ConfigError`."""
    cfg = _validate(moved(config or {}), SCHEMA, "", BUILTIN if names else FIXED)
    _check_design_options(cfg, BUILTIN if names else FIXED)
    _check_terms(cfg, BUILTIN if names else FIXED)
    if names:
        _check_combinations(cfg, BUILTIN)
        sampler_fit.check_learned_sampler(cfg, sampler_fit.builtin_facts())
        for section, where in loss_sections(cfg):
            check_loss_options(section, builtin_names.LOSS_OPTIONS[section["name"]], where)
            check_cascade_loss(cfg, section, builtin_names.LOSS_OPTIONS[section["name"]], where)
            sampler_fit.check_sampler(section, sampler_fit.builtin_facts(), where)
            _check_option_values(section, where)
