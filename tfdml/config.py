"""Experiment configs: one YAML file describes a whole run of ``train.py``.

The schema below is the single source of truth for which keys exist, their
types, their defaults and their valid choices. :func:`load` reads a YAML
file, applies ``--set key=value`` overrides, fills defaults and validates
*before any work starts*: an unknown key, a wrong type, an unknown name or an
impossible combination raises :class:`ConfigError` with a message naming the
key, the bad value and the valid choices.
"""

import copy
import difflib

import yaml


class ConfigError(ValueError):
    """A config problem, with a message that names the key and the fix."""


class _Field:
    def __init__(self, types, default, choices=None, doc="", check=None):
        self.types = types if isinstance(types, tuple) else (types,)
        self.default = default
        self.choices = choices
        self.doc = doc
        self.check = check


_NUM = (int, float)

LOSSES = (
    "contrastive",
    "triplet",
    "margin",
    "weighted_contrastive",
    "balanced_contrastive",
    "npair",
    "precision_at_k",
    "stable_contrast",
    "robust_hard_contrastive",
)
SAMPLERS = ("all", "random", "semi_hard", "hard", "distance_weighted", "top_k", "learned", "none")
#: Samplers that are not in-graph selection functions but a trained policy network
#: (Duan et al. 2019, tfdml.dsn).
LEARNED_SAMPLERS = ("learned",)
DESIGNS = ("m_per_class", "group", "p_random")
SOURCES = ("mnist5k", "digits", "folder", "tfds", "arrays")
STRATEGIES = ("default", "mirrored", "multi_worker")
OPTIMIZERS = ("adam", "sgd", "adamw")
SCHEDULES = ("constant", "exponential_decay")
METRICS = ("recall", "precision", "map@r", "r_precision", "map", "nmi", "f1", "verification")

# Which sampler kinds make sense for which loss (None: the loss picks its own).
LOSS_SAMPLERS = {
    "contrastive": ("all", "random", "semi_hard", "hard", "distance_weighted"),
    "triplet": ("semi_hard", "hard", "distance_weighted", "learned"),
    "margin": ("all", "random", "semi_hard", "hard", "distance_weighted"),
    "weighted_contrastive": ("all",),
    "balanced_contrastive": ("all",),
    "npair": ("none", "learned"),
    "precision_at_k": ("top_k",),
    "stable_contrast": ("random", "semi_hard", "hard", "distance_weighted"),
    "robust_hard_contrastive": ("none",),
}
# Losses that need tuples (an anchor with a positive) inside a batch: a
# p-random pair design gives only isolated pairs.
TUPLE_LOSSES = ("triplet", "npair", "precision_at_k", "stable_contrast", "robust_hard_contrastive")

SCHEMA = {
    "seed": _Field(int, 0, doc="global seed (weights, batches, samplers)"),
    "output_dir": _Field(str, "runs/default", doc="where the run writes everything"),
    "strategy": _Field(str, "default", STRATEGIES, doc="tf.distribute strategy"),
    "data": {
        "source": _Field(str, "mnist5k", SOURCES, doc="data source"),
        "options": _Field(dict, {}, doc="keyword arguments of the source (root, dataset, ...)"),
        "train_split": _Field(str, "train"),
        "test_split": _Field(str, "test"),
    },
    "design": {
        "name": _Field(str, "m_per_class", DESIGNS, doc="batch design"),
        "m": _Field(int, 8, doc="examples per class (m_per_class, group)"),
        "n": _Field(int, 5, doc="classes per batch (m_per_class, group)"),
        "p": _Field(_NUM, 0.5, doc="probability of a positive pair (p_random)"),
        "pairs": _Field(int, 32, doc="pairs per batch (p_random)"),
    },
    "image": {
        "size": _Field((int, type(None)), None, doc="resize to size×size (None: native)"),
        "channels": _Field((int, type(None)), None, doc="force 1 or 3 channels (None: native)"),
        "augment": _Field(bool, False, doc="random resized crop (+ flip) for training"),
        "crop_scale": _Field(list, [0.5, 1.0], doc="area fraction range of the random resized crop"),
        "flip": _Field(bool, True, doc="random horizontal mirroring (with augment)"),
    },
    "model": {
        "backbone": _Field(str, "small_cnn", doc="small_cnn, mlp, or a tfdml.backbones name"),
        "backbone_options": _Field(dict, {}, doc="keyword arguments of the backbone"),
        "weights": _Field((str, type(None)), None, doc="pretrained weights: None, 'imagenet', 'bundled' or a path"),
        "embedding_dim": _Field(int, 64),
        "normalize": _Field(bool, True, doc="L2-normalise embeddings"),
    },
    "loss": {
        "name": _Field(str, "margin", LOSSES),
        "options": _Field(dict, {}, doc="keyword arguments of the loss class"),
        "sampler": _Field((str, type(None)), None, SAMPLERS + (None,), doc="None: the loss's default"),
        "sampler_options": _Field(dict, {}),
    },
    "optimizer": {
        "name": _Field(str, "adam", OPTIMIZERS),
        "learning_rate": _Field(_NUM, 1e-3),
        "weight_decay": _Field(_NUM, 0.0),
        "schedule": _Field(str, "constant", SCHEDULES),
        "decay_rate": _Field(_NUM, 0.9, doc="Hong: ×0.9 every 100 iterations"),
        "decay_steps": _Field(int, 100),
        "head_lr_multiplier": _Field(_NUM, 1.0, doc="learning rate × this for the embedding head (Duan §4: 10)"),
    },
    "training": {
        "epochs": _Field(int, 4),
        "steps_per_epoch": _Field(int, 60),
        "jit_compile": _Field(bool, False),
    },
    "evaluation": {
        "metrics": _Field(list, ["recall", "map@r", "r_precision", "nmi"], doc=f"subset of {METRICS}"),
        "ks": _Field(list, [1, 2, 4, 8]),
        "every_n_epochs": _Field(int, 1),
        "batch_size": _Field(int, 256),
        "baseline": _Field((str, type(None)), None, ("raw_pixels", None),
                           doc="also score a model-free baseline on the test split (raw_pixels)"),
    },
}


def defaults(schema=SCHEMA):
    """The full default config, as a nested dict."""
    out = {}
    for key, field in schema.items():
        out[key] = defaults(field) if isinstance(field, dict) else copy.deepcopy(field.default)
    return out


def _suggest(key, valid):
    close = difflib.get_close_matches(key, valid, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _type_names(types):
    return " or ".join("null" if t is type(None) else t.__name__ for t in types)


def _validate(config, schema, path):
    if not isinstance(config, dict):
        raise ConfigError(f"{path or 'config'} must be a mapping of keys to values, got {config!r}.")
    for key in config:
        if key not in schema:
            where = f"{path}.{key}" if path else key
            raise ConfigError(
                f"Unknown config key {where!r}{_suggest(key, list(schema))}; "
                f"valid keys{' of ' + path if path else ''}: {', '.join(schema)}."
            )
    out = {}
    for key, field in schema.items():
        where = f"{path}.{key}" if path else key
        if isinstance(field, dict):
            out[key] = _validate(config.get(key, {}) or {}, field, where)
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
        if field.choices is not None and value not in field.choices:
            shown = [c for c in field.choices if c is not None]
            raise ConfigError(
                f"{where} = {value!r} is not valid{_suggest(str(value), [str(c) for c in shown])}; "
                f"choose one of: {', '.join(map(str, shown))}."
            )
        out[key] = value
    return out


def _check_combinations(cfg):
    loss, sampler, design = cfg["loss"]["name"], cfg["loss"]["sampler"], cfg["design"]["name"]
    if sampler is not None and sampler not in LOSS_SAMPLERS[loss]:
        raise ConfigError(
            f"loss.sampler = {sampler!r} does not fit loss.name = {loss!r}; "
            f"valid samplers for {loss}: {', '.join(LOSS_SAMPLERS[loss])} (or leave it empty for the default)."
        )
    if sampler == "learned" and design not in ("m_per_class", "group"):
        raise ConfigError(
            f"loss.sampler = 'learned' draws tuples from a pool of several classes; design.name = {design!r} "
            "gives no such pool: use 'm_per_class' or 'group'."
        )
    if sampler == "learned" and cfg["strategy"] != "default":
        raise ConfigError(
            f"loss.sampler = 'learned' (the DSN of Duan et al.) runs on one replica; strategy = "
            f"{cfg['strategy']!r} is not supported with it: use strategy 'default'."
        )
    if design == "p_random" and loss in TUPLE_LOSSES:
        raise ConfigError(
            f"design.name = 'p_random' gives isolated pairs, but loss.name = {loss!r} needs tuples "
            f"(an anchor with positives and negatives in one batch); use design 'm_per_class' or 'group', "
            f"or a pair loss (contrastive, weighted_contrastive, balanced_contrastive, margin)."
        )
    if design in ("m_per_class", "group") and cfg["design"]["m"] < 2:
        raise ConfigError(f"design.m = {cfg['design']['m']} leaves no positive pairs; use m >= 2.")
    if design == "p_random" and not 0.0 < cfg["design"]["p"] < 1.0:
        raise ConfigError(f"design.p = {cfg['design']['p']} must lie strictly between 0 and 1.")
    scale = cfg["image"]["crop_scale"]
    if len(scale) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in scale) \
            or not 0.0 < scale[0] <= scale[1] <= 1.0:
        raise ConfigError(f"image.crop_scale must be [min, max] with 0 < min <= max <= 1, got {scale!r}.")
    bad = [m for m in cfg["evaluation"]["metrics"] if m not in METRICS]
    if bad:
        raise ConfigError(f"evaluation.metrics has unknown {bad}; choose from: {', '.join(METRICS)}.")
    bad_k = [k for k in cfg["evaluation"]["ks"] if not isinstance(k, int) or isinstance(k, bool) or k < 1]
    if bad_k:
        raise ConfigError(f"evaluation.ks must be positive integers, got {bad_k}.")
    for key in ("epochs", "steps_per_epoch"):
        if cfg["training"][key] < 1:
            raise ConfigError(f"training.{key} must be >= 1, got {cfg['training'][key]}.")
    if cfg["optimizer"]["head_lr_multiplier"] <= 0:
        raise ConfigError(f"optimizer.head_lr_multiplier must be > 0, got {cfg['optimizer']['head_lr_multiplier']}.")
    if cfg["optimizer"]["learning_rate"] <= 0:
        raise ConfigError(f"optimizer.learning_rate must be > 0, got {cfg['optimizer']['learning_rate']}.")


def validate(config):
    """Fill defaults and validate a config dict; returns the resolved config."""
    cfg = _validate(config or {}, SCHEMA, "")
    _check_combinations(cfg)
    return cfg


def parse_override(text):
    """``"a.b=value"`` -> (["a", "b"], parsed value); the value is read as YAML."""
    if "=" not in text:
        raise ConfigError(f"--set expects key=value (e.g. training.epochs=2), got {text!r}.")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw)
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
    raw = {}
    if path is not None:
        try:
            with open(path) as fh:
                raw = yaml.safe_load(fh)
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
    return validate(raw)


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

    files.write_text(path, yaml.safe_dump(plain(config), sort_keys=False))


#: Config keys that may change when a run resumes from its backup: they extend
#: the run or change only what is reported, not the model or the data stream.
RESUMABLE_KEYS = ("training.epochs", "evaluation", "output_dir")


def resume_differences(saved, current, allowed=RESUMABLE_KEYS):
    """Dotted keys whose values differ between the ``saved`` config of a backup
    and the ``current`` one, leaving out ``allowed`` keys (and their subkeys)."""
    saved, current = plain(saved), plain(current)
    out = []

    def walk(a, b, prefix):
        for key in sorted(set(a) | set(b), key=str):
            where = f"{prefix}.{key}" if prefix else str(key)
            if any(where == k or where.startswith(k + ".") for k in allowed):
                continue
            x, y = a.get(key), b.get(key)
            if isinstance(x, dict) and isinstance(y, dict):
                walk(x, y, where)
            elif x != y:
                out.append(where)

    walk(saved, current, "")
    return out
