"""The sources by name (:data:`SOURCES`) and :func:`get_source`: the one table
that configs, the command lines and the docs read the source names from."""

from pipelines.sources.image_folder import folder
from pipelines.sources.in_memory import arrays
from pipelines.sources.mnist import mnist5k
from pipelines.sources.npz_file import npz
from pipelines.sources.sklearn_digits import digits
from pipelines.sources.tfds_benchmarks import tfds


SOURCES = {
    "mnist5k": mnist5k,
    "digits": digits,
    "folder": folder,
    "tfds": tfds,
    "arrays": arrays,
    "npz": npz,
}


def get_source(name="mnist5k", **kwargs):
    """Build the source ``name`` (see the table in :mod:`pipelines.sources`) with its keyword options."""
    if name not in SOURCES:
        raise ValueError(f"Unknown source {name!r}; valid sources are {sorted(SOURCES)}.")
    return SOURCES[name](**kwargs)
