"""The sources by name (:data:`SOURCES`), :func:`register` and :func:`get_source`: the
one table that configs, the command lines and the docs read the source names from.

A source is a callable ``source(**options) -> Source`` (a function or a class);
one added from outside the package is found by name exactly as a built-in::

    @pipelines.sources.register("my_source")
    def my_source(size=100):
        return pipelines.sources.arrays(features, labels)
"""

from tfdml.registry import Registry

from pipelines.sources.image_folder import folder
from pipelines.sources.in_memory import arrays
from pipelines.sources.mnist import mnist5k
from pipelines.sources.npz_file import npz
from pipelines.sources.sklearn_digits import digits
from pipelines.sources.tfds_benchmarks import tfds


def _check_source(name, obj):
    if not callable(obj):
        raise ValueError(f"A source is a callable returning a Source; {name!r} is {obj!r}.")


#: name → ``source(**options)``, in registration order.
SOURCES = Registry("source", check=_check_source)
SOURCES.update({
    "mnist5k": mnist5k,
    "digits": digits,
    "folder": folder,
    "tfds": tfds,
    "arrays": arrays,
    "npz": npz,
})


def register(name):
    """Decorator: make ``source(**options) -> Source`` the source named ``name``
    (:data:`SOURCES`, :func:`get_source`, configs' ``data.source``)."""
    return SOURCES.register(name)


def get_source(name="mnist5k", **kwargs):
    """Build the source ``name`` (see the table in :mod:`pipelines.sources`) with its keyword options."""
    return SOURCES.build(name, **kwargs)
