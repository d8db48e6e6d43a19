"""tfdml: deep metric learning for TensorFlow / Keras 3.

Sampling is part of the objective: batch designs (``pipelines``), importance
weights (:mod:`tfdml.importance`), in-graph samplers (:mod:`tfdml.samplers`)
and losses (:mod:`tfdml.losses`) are separate parts that compose in
``model.fit``.

The submodules load on first use (PEP 562): ``import tfdml`` imports neither
TensorFlow nor matplotlib, scikit-learn, SciPy or PyYAML, and ``tfdml.files``
(and the application's config, :mod:`tfdml_app.config`, which reads tfdml's
registries) can be used without TensorFlow: ``train.py`` checks a config
before paying for it. Once Keras is imported, the submodules with Keras
classes load, as ``import tfdml`` always did, so that Keras finds tfdml's
serialisable classes (``import tfdml`` before ``keras.saving.load_model``, in
either order); ``plots`` and ``search`` still load on first use only.
"""

import importlib as _importlib
import importlib.abc as _importlib_abc
import sys as _sys

__version__ = "0.1.0.dev0"

_SUBMODULES = (
    "distance_names",
    "metric_names",
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
    "backbones",
)
#: Loaded on first use only, never by :func:`_load_all`: ``tfdml.search``, so that
#: ``python -m tfdml.search`` runs its module once; ``plots`` (matplotlib), which
#: registers nothing with Keras, so that loading tfdml with Keras imports no matplotlib.
_LAZY = ("search", "plots")

#: Packages whose import must be complete before tfdml's submodules load
#: (they import them).
_PREREQUISITES = ("keras", "tensorflow")


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


def _initializing(name):
    module = _sys.modules.get(name)
    return getattr(getattr(module, "__spec__", None), "_initializing", False)


def _load_all(finished=None):
    """Import every submodule once Keras is imported, unless tfdml, Keras or
    TensorFlow is still being imported (``finished``: the module whose import
    just completed; that one counts as done)."""
    if _LOADER.done or "keras" not in _sys.modules:
        return
    busy = [m for m in list(_sys.modules) if m != finished and _initializing(m) and (
        m.startswith(__name__ + ".") or m.split(".")[0] in _PREREQUISITES)]
    if busy:
        return  # the last of them to finish loads them
    _LOADER.done = True
    if _LOADER in _sys.meta_path:
        _sys.meta_path.remove(_LOADER)
    for name in _SUBMODULES:
        _import(name)


class _AfterImport:
    """A module loader that runs :func:`_load_all` after the module it loads."""

    def __init__(self, loader, name):
        self._loader, self._name = loader, name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _load_all(finished=self._name)

    def __getattr__(self, attr):  # get_source, get_resource_reader, ... of the real loader
        return getattr(self._loader, attr)


class _LoadWithKeras(_importlib_abc.MetaPathFinder):
    """Watches the imports of Keras, TensorFlow and tfdml's submodules, to load
    all of tfdml when the last of them completes (then leaves sys.meta_path)."""

    done = False

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.split(".")[0]
        if fullname not in _PREREQUISITES and not (top == __name__ and fullname.count(".") == 1):
            return None
        for finder in _sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _AfterImport(spec.loader, fullname)
        return spec


_LOADER = _LoadWithKeras()
if not any(isinstance(f, _LoadWithKeras) for f in _sys.meta_path):
    _sys.meta_path.insert(0, _LOADER)
_load_all()
