"""Experiment configs: one YAML file describes a whole run of ``train.py``.

:func:`load` reads a YAML file, applies ``--set key=value`` overrides, fills
defaults and validates *before any work starts*: an unknown key, a wrong type,
an unknown name or an impossible combination raises :class:`ConfigError` with
a message naming the key, the bad value and the valid choices.

* :mod:`tfdml_app.schema` — which keys exist, their types, defaults, choices
  and docs (:data:`SCHEMA`, the single source of truth);
* :mod:`tfdml_app.config_checks` — the checks of the values: before TensorFlow
  is imported (:func:`check_structure`; with ``names=True``, as ``train.py``
  runs it without ``--import``, against the built-in parts' names and facts of
  the dependency-free :mod:`tfdml.builtin_names`, :mod:`tfdml.metric_names`
  and :mod:`tfdml.distance_names`), or against the library's registries;
* :mod:`tfdml_app.loss_config` — the loss built once with its sampler
  (:func:`validate`), so whatever the library would refuse is refused before
  any work.

The names of losses, samplers, backbones, designs, sources, metrics and
distances, and which of them fit together, are not copied here: a part added
to a registry is a valid name without any change here.
"""

import re
import warnings

import yaml

from tfdml_app.config_checks import check_structure, check_values, moved  # noqa: F401 - part of this API
from tfdml_app.loss_config import (  # noqa: F401 - the config's names, read here
    LEARNED_SAMPLERS, NO_SAMPLER, VALIDATION_NUM_CLASSES, WEIGHTED_SUM, ConfigError, build_loss, cascade_levels,
    check_loss, suggest, valid_samplers)
from tfdml_app.schema import OLD_DESIGN_KEYS, SCHEMA, TERM_SCHEMA, _Field, defaults  # noqa: F401 - part of this API


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


def validate(config):
    """Fill defaults and validate a config dict; returns the resolved config.

    The loss is built once with its sampler (:func:`build_loss`), so anything
    the library refuses is refused here, before any work.
    """
    cfg = check_values(config)
    check_loss(cfg)
    return cfg



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
    """Apply ``--set`` overrides to a (possibly partial) config dict, in place. A design
    parameter set at its old place (``design.m=4``) sets ``design.options.m``, with a warning."""
    for text in overrides or ():
        keys, value = parse_override(text)
        if len(keys) == 2 and keys[0] == "design" and keys[1] in OLD_DESIGN_KEYS:
            warnings.warn(f"--set {'.'.join(keys)} is the old place of a design parameter, read as "
                          f"--set design.options.{keys[1]} for now: write that.", FutureWarning, stacklevel=2)
            keys = ["design", "options", keys[1]]
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
    changed): there it changes nothing; so does a value or a key of ``saved`` in an old
    spelling (a field's ``renamed``, :func:`tfdml_app.config_checks.moved`)."""
    saved, current = moved(plain(saved)), plain(current)
    out = []

    def walk(a, b, prefix, schema):
        for key in sorted(set(a) | set(b), key=str):
            where = f"{prefix}.{key}" if prefix else str(key)
            if any(where == k or where.startswith(k + ".") for k in allowed):
                continue
            field = schema.get(key) if isinstance(schema, dict) else None
            x = a[key] if key in a or not isinstance(field, _Field) else plain(field.absent)
            if isinstance(field, _Field) and isinstance(x, str):
                x = field.renamed.get(x, x)  # a backup's config holds what it was validated as
            y = b.get(key)
            if isinstance(x, dict) and isinstance(y, dict):
                walk(x, y, where, field)
            elif x != y:
                out.append(where)

    walk(saved, current, "", SCHEMA)
    return out
