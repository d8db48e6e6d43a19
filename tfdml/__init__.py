"""tfdml: deep metric learning for TensorFlow / Keras 3.

Sampling is part of the objective: batch designs (``pipelines``), importance
weights (:mod:`tfdml.importance`), in-graph samplers (:mod:`tfdml.samplers`)
and losses (:mod:`tfdml.losses`) are separate parts that compose in
``model.fit``.

The submodules load on first use (PEP 562: ``tfdml.losses`` imports
:mod:`tfdml.losses` when it is first read): ``import tfdml`` imports neither
TensorFlow nor matplotlib, scikit-learn, SciPy or PyYAML, and changes nothing
else (no import hook). ``tfdml.files`` (and the application's config,
:mod:`tfdml_app.config`, which reads tfdml's registries) can be used without
TensorFlow: ``train.py`` checks a config before paying for it.

A saved model (``model.keras``) holds tfdml's classes (``EmbeddingModel``, the
losses, samplers, optimizers); Keras finds a class once the module defining it
is imported. Load one with :func:`load_model`, which imports them all first;
``keras.saving.load_model`` after a bare ``import tfdml`` fails with Keras's
``TypeError: Could not locate class 'EmbeddingModel'``.
"""

import importlib as _importlib

__version__ = "0.1.0.dev0"

#: The submodules read as attributes of ``tfdml``; :func:`load_model` imports them
#: all, so that Keras knows every class of tfdml a saved model may hold.
_SUBMODULES = (
    "distance_names",
    "metric_names",
    "builtin_names",
    "distances",
    "targets",
    "masks",
    "importance",
    "samplers",
    "losses",
    "pddm",
    "memory",
    "metrics",
    "callbacks",
    "models",
    "dsn",
    "distributed",
    "optimizers",
    "backbones",
)
#: Read as attributes too, but not imported by :func:`load_model`: they register
#: nothing with Keras (``plots`` imports matplotlib; ``python -m tfdml.search``
#: runs :mod:`tfdml.search` as a script, once).
_LAZY = ("search", "plots", "mining")


def _import(name):
    """``tfdml.<name>``, or None for a part that does not exist."""
    try:
        return _importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as err:  # a part not built yet
        if err.name != f"{__name__}.{name}":
            raise
        return None


def __getattr__(name):
    if name in _SUBMODULES or name in _LAZY:
        module = _import(name)
        if module is not None:
            return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES) | set(_LAZY))


def _import_keras_classes():
    """Import the submodules that register tfdml's classes with Keras."""
    for name in _SUBMODULES:
        _import(name)


def load_model(path, **kwargs):
    """Load a model saved with ``model.save(path)`` (a ``.keras`` file) that holds
    tfdml's classes: imports the submodules that register them with Keras, then
    returns ``keras.saving.load_model(path, **kwargs)`` (``compile=False``,
    ``custom_objects=...`` for the user's own classes, and so on)."""
    _import_keras_classes()
    import keras

    return keras.saving.load_model(path, **kwargs)
