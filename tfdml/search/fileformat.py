"""The index file (:meth:`Index.save <tfdml.search.Index.save>`, :meth:`Index.load
<tfdml.search.Index.load>`).

One ``.npz`` file, written atomically through :mod:`tfdml.files`, holding the
arrays ``embeddings`` (float32 [N, d]), ``ids`` (int64 or unicode [N]),
``labels`` (optional, int64 or unicode [N]), ``metadata`` (a JSON string, a
list of N values, optional) and ``manifest``: a JSON string with ``format``
(``"tfdml.search.Index"``), ``version`` (:data:`FORMAT_VERSION`),
``distance``, ``count``, ``dim``, ``id_kind``, ``label_kind``, ``sha256``, the
checksum of the other arrays (SHA-256 over, in name order, each array's
``"name:dtype:shape;"`` then its C-order bytes), and ``search`` (optional;
``Index.search_settings``: the backend, ``approximate`` and its parameters;
files without it load as exact TensorFlow search). The file never holds a
faiss structure: it is rebuilt from the embeddings. Nothing is pickled.
"""

import hashlib
import io
import json
import os
import zipfile

import numpy as np

from tfdml import files
from tfdml.search import entries

#: Version of the file format written by :func:`write`.
FORMAT_VERSION = 1
FORMAT = "tfdml.search.Index"

#: The search settings of a file without them.
EXACT_SEARCH = {"backend": "tensorflow", "approximate": None}


def checksum(arrays):
    """The ``sha256`` of the manifest: over ``arrays`` (name -> array) in name order."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


def write(path, distance, embeddings, ids, labels=None, metadata=None, search=None):
    """Write an index file at ``path`` atomically; returns ``path`` as a string.

    ``embeddings`` [N, d] and ``ids`` [N] (``None`` for an empty index),
    ``labels`` [N] or None, ``metadata`` a list of N JSON values or None,
    ``search`` the index's search settings.
    """
    count = 0 if ids is None else int(ids.shape[0])
    arrays = {"embeddings": embeddings if count else np.zeros((0, 0), np.float32),
              "ids": ids if count else np.zeros((0,), np.int64)}
    if labels is not None:
        arrays["labels"] = labels
    if metadata is not None:
        arrays["metadata"] = np.array(json.dumps(metadata))
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "distance": distance,
        "count": count,
        "dim": None if embeddings is None else int(embeddings.shape[1]),
        "id_kind": entries.kind(ids) if count else None,
        "label_kind": entries.kind(labels) if labels is not None else None,
        "sha256": checksum(arrays),
        "search": search,
    }
    path = os.fspath(path)
    with files.atomic_path(path, suffix=".npz") as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, manifest=np.array(json.dumps(manifest)), **arrays)
    return path


def read(path):
    """``(manifest, arrays)`` of the index file ``path``, checked: a damaged file, another
    format or version is a ValueError that says so (a missing file: FileNotFoundError)."""
    path = os.fspath(path)
    fix = "write it again with Index.save (the file is damaged or not an index)"
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        with np.load(io.BytesIO(raw), allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as err:
        raise ValueError(f"Cannot read the index file {path}: {err}; {fix}.") from None
    if "manifest" not in arrays:
        raise ValueError(f"{path} has no manifest: it is not a tfdml index; {fix}.")
    try:
        manifest = json.loads(str(arrays.pop("manifest")))
    except ValueError as err:
        raise ValueError(f"The manifest of {path} is not JSON ({err}); {fix}.") from None
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path} is not a tfdml index (format {manifest.get('format')!r}).")
    if manifest.get("version") != FORMAT_VERSION:
        raise ValueError(
            f"{path} has index format version {manifest.get('version')}; this tfdml reads "
            f"version {FORMAT_VERSION}: upgrade tfdml or rebuild the index."
        )
    if checksum(arrays) != manifest.get("sha256"):
        raise ValueError(f"The checksum of {path} does not match its content; {fix}.")
    return manifest, arrays


def search_settings(manifest):
    """The saved search settings of a manifest (:data:`EXACT_SEARCH` if it has none)."""
    return manifest.get("search") or dict(EXACT_SEARCH)


def contents(manifest, arrays):
    """``(embeddings, ids, labels, metadata)`` of a file :func:`read` returned (labels and
    metadata None where it has none), or None for an empty index."""
    if not manifest["count"]:
        return None
    metadata = json.loads(str(arrays["metadata"])) if "metadata" in arrays else None
    return arrays["embeddings"], arrays["ids"], arrays.get("labels"), metadata
