"""tfdml: deep metric learning for TensorFlow / Keras 3.

Sampling is part of the objective: batch designs (``pipelines``), importance
weights (:mod:`tfdml.importance`), in-graph samplers (:mod:`tfdml.samplers`)
and losses (:mod:`tfdml.losses`) are separate parts that compose in
``model.fit``.
"""

import importlib as _importlib

__version__ = "0.1.0.dev0"

_SUBMODULES = (
    "distance_names",
    "distances",
    "targets",
    "masks",
    "importance",
    "samplers",
    "losses",
    "metrics",
    "callbacks",
    "models",
    "dsn",
    "distributed",
    "optimizers",
    "config",
    "backbones",
    "plots",
)
# Imported on first use (tfdml.search): `python -m tfdml.search` runs it once.
_LAZY = ("search",)

for _name in _SUBMODULES:
    try:
        globals()[_name] = _importlib.import_module(f"tfdml.{_name}")
    except ModuleNotFoundError as _err:  # a part not built yet
        if _err.name != f"tfdml.{_name}":
            raise
del _name


def __getattr__(name):
    if name in _LAZY:
        return _importlib.import_module(f"tfdml.{name}")
    raise AttributeError(f"module 'tfdml' has no attribute {name!r}")
