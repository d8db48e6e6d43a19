"""A nearest-neighbour index over embeddings (exact, or approximate with faiss), with user
ids and a file format.

One module per job; everything below is importable from ``tfdml.search``:

* :mod:`~tfdml.search.index`: :class:`Index`, embeddings kept under the ids
  the user gives them (with labels and metadata), searched exactly by
  default (:func:`tfdml.metrics.knn.knn`, the retrieval metrics' search);
  :mod:`~tfdml.search.embedding` runs a model over a dataset for
  :meth:`Index.add_model`;
* :mod:`~tfdml.search.entries`: what an index accepts (:data:`DISTANCES`,
  :func:`as_keys` for ids and labels, embeddings);
* :mod:`~tfdml.search.backends`: how it searches, one class per
  ``backend=`` / ``approximate=`` (:data:`BACKENDS`, :data:`APPROXIMATE`:
  ``Index(backend="faiss", approximate="hnsw" | "ivf")`` trades recall for
  speed on large indexes, see :class:`Index`);
* :mod:`~tfdml.search.fileformat`: the ``.npz`` file of :meth:`Index.save`
  and :meth:`Index.load` (:data:`FORMAT_VERSION`);
* :mod:`~tfdml.search.calibration`: :func:`calibrate` turns held-out queries
  with known classes into a match threshold (:class:`Calibration`);
* :mod:`~tfdml.search.serving`: :func:`export_lookup` writes a SavedModel
  whose ``lookup`` embeds, searches a copy of the index and thresholds, with
  TensorFlow alone;
* :mod:`~tfdml.search.cli`: ``python -m tfdml.search INDEX.npz|FOLDER ...``
  checks and describes index files (:func:`describe`).

Distances are "smaller is closer": ``"cosine"`` is reported as the cosine
*distance* ``1 - cos(q, g)``, so one threshold rule (``distance <=
threshold``) serves both distances.
"""

import importlib as _importlib

#: Where each public name lives. The modules load on first use (PEP 562), so that
#: ``python -m tfdml.search`` can import TensorFlow quietly before any of them does.
_EXPORTS = {
    "APPROXIMATE": "backends", "BACKENDS": "backends", "HNSW_DEFAULTS": "backends",
    "IVF_DEFAULTS": "backends",
    "CALIBRATION_METRICS": "calibration", "Calibration": "calibration", "calibrate": "calibration",
    "describe": "cli", "describe_all": "cli", "main": "cli", "report_all": "cli",
    "DISTANCES": "entries", "as_keys": "entries",
    "FORMAT_VERSION": "fileformat",
    "Index": "index",
    "export_lookup": "serving",
}


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(_importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = sorted(_EXPORTS)
