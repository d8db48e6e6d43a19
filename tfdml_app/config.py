# Over 400 lines: the schema table (one entry per key, with its doc) is most of it; its reader goes with it.
"""Experiment configs: one YAML file describes a whole run of ``train.py``.

The schema below is the single source of truth for which keys exist, their
types, their defaults and their valid choices. :func:`load` reads a YAML
file, applies ``--set key=value`` overrides, fills defaults and validates
*before any work starts*: an unknown key, a wrong type, an unknown name or an
impossible combination raises :class:`ConfigError` with a message naming the
key, the bad value and the valid choices.

The names of losses, samplers, backbones, designs, sources, metrics and
distances, and which of them fit together, are not copied here. Before
TensorFlow is imported (:func:`check_structure` with ``names=True``, as
``train.py`` runs it without ``--import``) they are those of the built-in parts,
from the dependency-free :mod:`tfdml.builtin_names`, :mod:`tfdml.metric_names`
and :mod:`tfdml.distance_names`, with every range and every combination that
needs no class of the library. :func:`validate` reads them from the library
(the registries :data:`tfdml.losses.LOSSES`, :data:`tfdml.samplers.SAMPLERS`,
:data:`tfdml.backbones.BACKBONES`, :data:`pipelines.designs.DESIGNS` and
:data:`pipelines.sources.SOURCES`, each sampler's ``kind`` against each loss's
``sampler_kinds``, the losses' and samplers' ``needs_tuples``), and the loss is
built once with its sampler, so whatever the library would refuse is refused
before any work. A part added to a registry is a valid name without any change
here.
"""

import copy
import re

import yaml

from tfdml import builtin_names, distance_names, metric_names
from tfdml_app.loss_config import (  # noqa: F401 - the config's names, read here
    LEARNED_SAMPLERS, NO_SAMPLER, VALIDATION_NUM_CLASSES, ConfigError, _losses, _samplers, build_loss,
    check_loss, check_loss_options, suggest, valid_samplers)


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading numbers as people write them.

    PyYAML implements YAML 1.1, where a float needs a dot and a signed
    exponent: ``1e-3``, ``1E-4`` and ``2e+1`` would be strings, and
    ``optimizer.learning_rate: 1e-3`` would be refused. As in YAML 1.2, a plain
    scalar in exponent notation is a float here. Quoted scalars stay strings.
    """


class _Dumper(yaml.SafeDumper):
    """Writes what :class:`_Loader` reads back: quotes a string such as '2e5'."""


for _cls in (_Loader, _Dumper):
    _cls.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
        list("-+0123456789."),
    )
del _cls


def read_yaml(stream):
    """A YAML document (text or file) read as configs are: exponent-notation floats."""
    return yaml.load(stream, Loader=_Loader)


def _at_least(bound):
    """A field check: the value must be >= ``bound`` (counts and sizes)."""
    def check(value):
        return None if value >= bound else f"must be >= {bound}"
    return check


class _Field:
    """One config key. ``choices``: a tuple, or a function returning one (names
    that the library registers, read when a config is validated); ``builtin``: with
    such a function, the tuple it returns when nothing but tfdml registered names
    (from :mod:`tfdml.builtin_names`: checked before TensorFlow is imported).
    ``absent``: what a saved config that does not have the key ran with, when that
    is not ``default`` (the key's default changed since it was added)."""

    _DEFAULT = object()

    def __init__(self, types, default, choices=None, doc="", check=None, absent=_DEFAULT, builtin=None):
        self.types = types if isinstance(types, tuple) else (types,)
        self.default = default
        self.absent = default if absent is _Field._DEFAULT else absent
        self._choices = choices
        self.builtin = builtin
        self.doc = doc
        self.check = check

    @property
    def choices(self):
        return self._choices() if callable(self._choices) else self._choices


_NUM = (int, float)


# The names the library registers, read from it when a config is validated
# (these modules import TensorFlow); before that, the fields' builtin names.
def _design_names():
    from pipelines import designs

    return tuple(designs.DESIGNS)


def _source_names():
    from pipelines import sources

    return tuple(sources.SOURCES)


def _validation_modes():
    from pipelines import sources

    return tuple(sources.VALIDATION_MODES)


# What tfdml_app.build builds.
STRATEGIES = ("default", "mirrored", "multi_worker")
OPTIMIZERS = ("adam", "sgd", "adamw")
SCHEDULES = ("constant", "exponential_decay")


def _jit_compile_choices():
    from tfdml import models

    return models.JIT_COMPILE_CHOICES


def _dtype_policies():
    from tfdml import models

    return models.DTYPE_POLICY_CHOICES


def _distance_names():
    from tfdml.metrics import knn

    return knn.RETRIEVAL_DISTANCES


def _backbone_names():
    from tfdml import backbones

    return tuple(backbones.BACKBONES)


def _loss_names():
    return tuple(_losses().LOSSES)


#: loss.sampler values besides the registered samplers' names.
_CONFIG_SAMPLERS = LEARNED_SAMPLERS + (NO_SAMPLER, None)


def _sampler_names():
    return tuple(_samplers().SAMPLERS) + _CONFIG_SAMPLERS


SCHEMA = {
    "seed": _Field(int, 0, doc="global seed (weights, batches, samplers)"),
    "output_dir": _Field(str, "runs/default", doc="where the run writes everything"),
    "strategy": _Field(str, "default", STRATEGIES, doc="tf.distribute strategy"),
    "data": {
        "source": _Field(str, "mnist5k", _source_names, builtin=builtin_names.SOURCES, doc="data source"),
        "options": _Field(dict, {}, doc="keyword arguments of the source (root, dataset, ...)"),
        "train_split": _Field(str, "train"),
        "test_split": _Field(str, "test"),
        "validation": {
            "fraction": _Field((float, type(None)), None, check=lambda v: None if 0.0 < v < 1.0 else
                               "must lie strictly between 0 and 1",
                               doc="hold out this fraction of the training split for validation: the "
                                   "per-epoch evaluation, the best checkpoint; the test split is then "
                                   "scored once, at the end (None: no validation split, no best "
                                   "checkpoint)"),
            "mode": _Field(str, "classes", _validation_modes, builtin=builtin_names.VALIDATION_MODES,
                           doc="'classes': whole training classes held out (open set, as the test "
                               "split); 'examples': that fraction of each training class"),
            "seed": _Field(int, 0, doc="seed of the held-out choice (fixed, independent of the run's seed)"),
        },
    },
    "design": {
        "name": _Field(str, "m_per_class", _design_names, builtin=builtin_names.DESIGNS, doc="batch design"),
        "m": _Field(int, 8, doc="examples per class (m_per_class, group)"),
        "n": _Field(int, 5, doc="classes per batch (m_per_class, group)"),
        "p": _Field(_NUM, 0.5, doc="probability of a positive pair (p_random)"),
        "pairs": _Field(int, 32, doc="pairs per batch (p_random)", check=_at_least(1)),
        "options": _Field(dict, {}, doc="further keyword arguments of the design's constructor "
                                        "(a registered design's own options)"),
    },
    "image": {
        "size": _Field((int, type(None)), None,
                       doc="the model's input, size×size (None: the data's own size); also the "
                           "folder / tfds sources' image_size when data.options does not set it, so "
                           "set it here, once"),
        "channels": _Field((int, type(None)), None,
                           doc="force 1 or 3 channels (None: the data's own); also the folder / tfds "
                               "sources' channels when data.options does not set them"),
        "augment": _Field(bool, False, doc="random resized crop (+ flip) for training"),
        "crop_scale": _Field(list, [0.5, 1.0], doc="area fraction range of the random resized crop"),
        "flip": _Field(bool, True, doc="random horizontal mirroring (with augment); assumes a mirrored "
                                        "image is the same class: set false for text, characters, glyphs"),
    },
    "model": {
        "backbone": _Field(str, "small_cnn", _backbone_names, builtin=builtin_names.BACKBONES,
                           doc="a tfdml.backbones.BACKBONES name (small_cnn and mlp: always "
                               "trained from scratch)"),
        "backbone_options": _Field(dict, {}, doc="keyword arguments of the backbone"),
        "weights": _Field((str, type(None)), None, doc="pretrained weights: None, 'imagenet', 'bundled' or a path"),
        "embedding_dim": _Field(int, 64, check=_at_least(1)),
        "normalize": _Field(bool, True, doc="L2-normalise embeddings"),
        "dtype_policy": _Field(str, "auto", _dtype_policies, absent="float32",
                               builtin=builtin_names.DTYPE_POLICY_CHOICES,
                               doc="Keras dtype policy of the backbone: 'mixed_bfloat16' computes it "
                                   "in bfloat16 (variables, embedding head, embeddings and loss stay "
                                   "float32); 'auto' picks it where the CPU has bfloat16 instructions "
                                   "and the whole step is not XLA-compiled, else float32 "
                                   "(tfdml.models.resolve_dtype_policy); the run records its choice"),
    },
    "loss": {
        "name": _Field(str, "margin", _loss_names, builtin=builtin_names.LOSSES, doc="a tfdml.losses.LOSSES name"),
        "options": _Field(dict, {}, doc="keyword arguments of the loss class"),
        "sampler": _Field((str, type(None)), None, _sampler_names,
                          builtin=builtin_names.SAMPLERS + _CONFIG_SAMPLERS,
                          doc="a tfdml.samplers name, 'learned' (tfdml.dsn), 'none', or None: the loss's default"),
        "sampler_options": _Field(dict, {}, doc="keyword arguments of the sampler (None: of the loss's default)"),
        "memory": _Field((dict, type(None)), None,
                         doc="cross-batch memory (tfdml.memory; Wang et al. 2020, XBM): {size: K, "
                             "warmup_steps: S}, the anchors of each batch mined against the batch and "
                             "the last K training embeddings after S steps; None: the batch alone"),
    },
    "optimizer": {
        "name": _Field(str, "adam", OPTIMIZERS),
        "learning_rate": _Field(_NUM, 1e-3),
        "weight_decay": _Field(_NUM, 0.0),
        "schedule": _Field(str, "constant", SCHEDULES),
        "decay_rate": _Field(_NUM, 0.9, doc="Hong: ×0.9 every 100 iterations"),
        "decay_steps": _Field(int, 100, check=_at_least(1)),
        "head_lr_multiplier": _Field(_NUM, 1.0, doc="learning rate × this for the embedding head (Duan §4: 10)"),
    },
    "training": {
        "epochs": _Field(int, 4),
        "steps_per_epoch": _Field(int, 60),
        "jit_compile": _Field((bool, str), False, _jit_compile_choices,
                              builtin=builtin_names.JIT_COMPILE_CHOICES,
                              doc="XLA: true compiles the whole train step (encoder included), "
                                  "'loss' only the loss and its sampler (the encoder keeps "
                                  "TensorFlow's kernels), false nothing"),
        "early_stopping_patience": _Field((int, type(None)), None, check=_at_least(1),
                                          doc="stop after this many evaluations without a better best "
                                              "checkpoint (needs data.validation; None: never stop early)"),
    },
    "evaluation": {
        "metrics": _Field(list, list(metric_names.DEFAULT_METRICS),
                          doc="tfdml.metrics.METRICS names (or recall@k / precision@k)"),
        "ks": _Field(list, list(metric_names.DEFAULT_KS), doc="the k of recall@k and precision@k"),
        "distance": _Field(str, "euclidean", _distance_names, builtin=distance_names.DISTANCES,
                           doc="distance of the retrieval metrics and plots (also read by evaluate.py)"),
        "every_n_epochs": _Field(int, 1, check=_at_least(1)),
        "batch_size": _Field(int, 256, check=_at_least(1)),
        "plots": _Field(bool, True,
                        doc="write the plots of the final evaluation (retrieval grid, distance "
                            "histogram, PR curve, ROC); false: metrics.json only"),
        "baseline": _Field((str, type(None)), None, ("raw_pixels", None),
                           doc="also score a model-free baseline on the test split (raw_pixels)"),
        "objective_sample": _Field(int, 0, check=_at_least(0),
                                   doc="also log train_objective at each evaluation: the loss without "
                                       "importance weights over all pairs of a fixed uniform sample of "
                                       "this many training images (Hong Fig. 2); 0: off"),
    },
    "export": {
        "saved_model": _Field(bool, True,
                              doc="also write saved_model/, the encoder as a SavedModel for "
                                  "serving (model.keras is always written)"),
        "lookup": _Field(bool, False,
                         doc="also write lookup/: a SavedModel that embeds, searches the test "
                             "split and thresholds (tfdml.search.export_lookup)"),
        "lookup_folder": _Field((str, type(None)), None,
                                doc="index the images of this folder (FOLDER/<class>/<image> gives "
                                    "labels; ids: paths relative to it) instead of the test split"),
        "lookup_k": _Field(int, 10, doc="neighbours the lookup returns", check=_at_least(1)),
        "lookup_precision": _Field((float, int, type(None)), 0.99,
                                   doc="calibrate the lookup's threshold to this nearest-"
                                       "neighbour precision (None: no threshold, so is_match is "
                                       "False for every neighbour; an unreachable target "
                                       "gives the same, with a warning)",
                                   check=lambda v: None if v is None or 0 < v <= 1
                                   else "must be a precision in (0, 1] or null"),
    },
}


def defaults(schema=SCHEMA):
    """The full default config, as a nested dict."""
    out = {}
    for key, field in schema.items():
        out[key] = defaults(field) if isinstance(field, dict) else copy.deepcopy(field.default)
    return out



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
    sampler, design = cfg["loss"]["sampler"], cfg["design"]["name"]
    grouped = builtin_names.GROUPED_DESIGNS if names == BUILTIN else _grouped_designs()
    if sampler == "learned" and design not in grouped:
        raise ConfigError(
            f"loss.sampler = 'learned' draws tuples from a pool of several classes; design.name = {design!r} "
            f"gives no such pool: use {' or '.join(map(repr, grouped))}."
        )
    if sampler == "learned" and cfg["strategy"] != "default":
        raise ConfigError(
            f"loss.sampler = 'learned' (the DSN of Duan et al.) runs on one replica; strategy = "
            f"{cfg['strategy']!r} is not supported with it: use strategy 'default'."
        )
    if sampler == "learned" and cfg["training"]["jit_compile"] == builtin_names.LOSS_ONLY:
        raise ConfigError(
            f"training.jit_compile = {cfg['training']['jit_compile']!r} compiles a loss and its in-graph "
            "sampler; the learned sampler's step is one piece: use true (all of it) or false."
        )
    if design in grouped and cfg["design"]["m"] < 2:
        raise ConfigError(f"design.m = {cfg['design']['m']} leaves no positive pairs; use m >= 2.")
    if design == "p_random" and not 0.0 < cfg["design"]["p"] < 1.0:
        raise ConfigError(f"design.p = {cfg['design']['p']} must lie strictly between 0 and 1.")
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
                "holding out whole classes would leave fewer training classes than design.n), or "
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


def validate(config):
    """Fill defaults and validate a config dict; returns the resolved config.

    The loss is built once with its sampler (:func:`build_loss`), so anything
    the library refuses is refused here, before any work.
    """
    cfg = _validate(config or {}, SCHEMA, "")
    _check_combinations(cfg)
    check_loss(cfg)
    return cfg


def check_structure(config, names=False):
    """Check a config dict without the library (and without TensorFlow): its
    keys, types, fixed choices and value ranges; the names the library
    registers (losses, samplers, backbones, designs, sources, metrics,
    distances) and the combinations are checked by :func:`validate`.

    ``names=True``: also the names, as those of tfdml's built-in parts
    (:mod:`tfdml.builtin_names`), and the ranges and combinations that need no
    class of the library, with :func:`validate`'s messages; for a config that can
    name only built-in parts (``train.py`` without ``--import``), and the names
    in ``loss.options`` (:data:`tfdml.builtin_names.LOSS_OPTIONS`). What is left
    to :func:`validate`: the loss built with its options and sampler (the
    options' values, the sampler's fit and options, and what they ask of the
    design and the model). Raises :class:`ConfigError`."""
    cfg = _validate(config or {}, SCHEMA, "", BUILTIN if names else FIXED)
    if names:
        _check_combinations(cfg, BUILTIN)
        check_loss_options(cfg["loss"], builtin_names.LOSS_OPTIONS[cfg["loss"]["name"]])


def parse_override(text):
    """``"a.b=value"`` -> (["a", "b"], parsed value); the value is read as YAML."""
    if "=" not in text:
        raise ConfigError(f"--set expects key=value (e.g. training.epochs=2), got {text!r}.")
    key, raw = text.split("=", 1)
    try:
        value = read_yaml(raw)
    except yaml.YAMLError as err:
        raise ConfigError(f"--set {key}: cannot read the value {raw!r} ({err}).") from None
    return key.strip().split("."), value


def apply_overrides(config, overrides):
    """Apply ``--set`` overrides to a (possibly partial) config dict, in place."""
    for text in overrides or ():
        keys, value = parse_override(text)
        node = config
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {'.'.join(keys)}: {key!r} is not a section.")
        node[keys[-1]] = value
    return config


def load(path=None, overrides=()):
    """Read a YAML config (or start from defaults), apply overrides, validate."""
    return validate(read(path, overrides))


def read(path=None, overrides=()):
    """The config dict of a YAML file (or ``{}``: the defaults) with ``--set``
    overrides applied, not yet validated (:func:`check_structure`,
    :func:`validate`); a file that cannot be read raises :class:`ConfigError`."""
    raw = {}
    if path is not None:
        try:
            with open(path) as fh:
                raw = read_yaml(fh)
        except FileNotFoundError:
            raise ConfigError(f"Config file {path!r} does not exist; see configs/ for examples.") from None
        except IsADirectoryError:
            raise ConfigError(f"--config {path!r} is a directory; give a YAML file such as "
                              "configs/default.yaml.") from None
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"Config file {path!r} cannot be read: {err}.") from None
        except yaml.YAMLError as err:
            raise ConfigError(f"Config file {path!r} is not valid YAML: {err}") from None
        if raw is None:
            raise ConfigError(
                f"Config file {path!r} is empty, so the run would silently train the schema defaults; "
                "copy configs/default.yaml and edit it, or leave --config out to train the main job."
            )
        if not isinstance(raw, dict):
            raise ConfigError(f"Config file {path!r} must be a mapping of sections (data:, loss:, ...), "
                              f"got a {type(raw).__name__}.")
    apply_overrides(raw, overrides)
    return raw


def plain(value):
    """YAML-safe copy: in-memory arrays (the ``arrays`` source) become a description."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    shape = getattr(value, "shape", None)
    return f"<in-memory {type(value).__name__}{' of shape ' + str(tuple(shape)) if shape is not None else ''}>"


def dump(config, path):
    """Write a resolved config as YAML (the copy kept in the output dir)."""
    from tfdml import files

    files.write_text(path, yaml.dump(plain(config), Dumper=_Dumper, sort_keys=False))


#: Config keys that may change when a run resumes from its backup: they extend
#: the run or change only what is reported, not the model or the data stream.
RESUMABLE_KEYS = ("training.epochs", "evaluation", "export", "output_dir")


def resume_differences(saved, current, allowed=RESUMABLE_KEYS):
    """Dotted keys whose values differ between the ``saved`` config of a backup
    and the ``current`` one, leaving out ``allowed`` keys (and their subkeys). A
    schema key missing from ``saved`` (a backup of a tfdml that did not have it)
    counts as what such a run ran with (its field's ``absent``, the default unless that
    changed): there it changes nothing."""
    saved, current = plain(saved), plain(current)
    out = []

    def walk(a, b, prefix, schema):
        for key in sorted(set(a) | set(b), key=str):
            where = f"{prefix}.{key}" if prefix else str(key)
            if any(where == k or where.startswith(k + ".") for k in allowed):
                continue
            field = schema.get(key) if isinstance(schema, dict) else None
            x = a[key] if key in a or not isinstance(field, _Field) else plain(field.absent)
            y = b.get(key)
            if isinstance(x, dict) and isinstance(y, dict):
                walk(x, y, where, field)
            elif x != y:
                out.append(where)

    walk(saved, current, "", SCHEMA)
    return out
