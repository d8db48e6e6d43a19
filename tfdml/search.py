"""A nearest-neighbour index over embeddings (exact, or approximate with faiss), with user
ids and a file format.

:class:`Index` keeps embeddings with the ids the user gives them and answers
exact top-k queries with :func:`tfdml.metrics.knn.knn`, the same chunked
search the retrieval metrics use: memory grows with ``chunk_size × N``, never
with ``Q × N``, and equal distances rank the entry added first first (the
gallery keeps insertion order, also after :meth:`Index.remove`). Scores are
computed in float32, as in the metrics: "equal" means equal after rounding
(exact duplicates always are).

Conventions:

* **Distances** are "smaller is closer": ``"euclidean"`` is the euclidean
  distance, ``"cosine"`` is the cosine *distance* ``1 - cos(q, g)`` (in
  [0, 2]), so one threshold rule (``distance <= threshold``) serves both.
* **Ids** are int64 (any value of int64, kept exactly: they never pass through
  a float) or strings; one kind per index. A duplicate id is refused, in one
  call and across calls: :meth:`Index.remove` it first to replace it.
* **Labels** (optional, int64 or strings) are the classes of the entries;
  :func:`calibrate` needs them. **Metadata** (optional) is one JSON-serialisable
  value per entry, returned by :meth:`Index.metadata_for`.
* ``k`` larger than the index returns ``len(index)`` columns.

Calibration (:func:`calibrate`) turns held-out queries with known classes
into a match threshold (for a precision or recall target, or the best F1): a
query "matches" when its nearest entry is within the threshold, and the match
is right when that entry has the query's label. No threshold (``None``)
matches nothing.

File format (:meth:`Index.save`, :meth:`Index.load`): one ``.npz`` file,
written atomically through :mod:`tfdml.files`, holding the arrays
``embeddings`` (float32 [N, d]), ``ids`` (int64 or unicode [N]), ``labels``
(optional, int64 or unicode [N]), ``metadata`` (a JSON string, a list of N
values, optional) and ``manifest``: a JSON string with ``format``
(``"tfdml.search.Index"``), ``version`` (:data:`FORMAT_VERSION`),
``distance``, ``count``, ``dim``, ``id_kind``, ``label_kind``, ``sha256``,
the checksum of the other arrays (SHA-256 over, in name order, each array's
``"name:dtype:shape;"`` then its C-order bytes), and ``search`` (optional;
:attr:`Index.search_settings`: the backend, ``approximate`` and its
parameters; files without it load as exact TensorFlow search). The file never
holds a faiss structure: it is rebuilt from the embeddings. Nothing is pickled.

Approximate search (``Index(backend="faiss", approximate="hnsw" | "ivf")``)
trades recall for speed on large indexes: see :class:`Index`.

Serving (:func:`export_lookup`) writes a SavedModel whose ``lookup`` embeds,
searches a copy of the index and thresholds, with TensorFlow alone.
"""

import dataclasses
import hashlib
import io
import json
import os
import zipfile

import numpy as np

from tfdml import distance_names
from tfdml import files
from tfdml.metrics import knn as _knn

#: Distances an :class:`Index` can search by.
DISTANCES = ("cosine", "euclidean")

#: Search backends of an :class:`Index`.
BACKENDS = ("tensorflow", "faiss")

#: Approximate faiss structures of an :class:`Index` (``None``: exact search).
APPROXIMATE = ("hnsw", "ivf")

#: Defaults of the approximate structures' parameters (see :class:`Index`).
HNSW_DEFAULTS = {"hnsw_m": 32, "ef_construction": 80, "ef_search": 64}
IVF_DEFAULTS = {"nlist": None, "nprobe": 16}

#: Version of the file format written by :meth:`Index.save`.
FORMAT_VERSION = 1
_FORMAT = "tfdml.search.Index"


def _check_distance(distance):
    if distance not in DISTANCES:
        raise ValueError(
            f"Unknown index distance {distance!r}; choose one of {', '.join(DISTANCES)} "
            "(cosine is reported as the distance 1 - cosine similarity)."
        )
    return distance


def _import_faiss():
    try:
        import faiss
    except ImportError:
        raise ValueError(
            "backend='faiss' needs the faiss package: pip install faiss-cpu (or tfdml[faiss]), "
            "or use backend='tensorflow'."
        ) from None
    return faiss


def _search_params(backend, approximate, params):
    """Validated approximate-search settings: ``{"approximate", <its parameters>}``."""
    if approximate is None:
        given = {k: v for k, v in params.items() if v is not None}
        if given:
            raise ValueError(
                f"{', '.join(sorted(given))} only apply to approximate search; pass "
                "approximate='hnsw' (hnsw_m, ef_construction, ef_search) or approximate='ivf' "
                "(nlist, nprobe), or drop them for exact search."
            )
        return {"approximate": None}
    if approximate not in APPROXIMATE:
        raise ValueError(
            f"Unknown approximate search {approximate!r}; choose one of "
            f"{', '.join(APPROXIMATE)}, or None for exact search."
        )
    if backend != "faiss":
        raise ValueError(
            f"approximate={approximate!r} needs backend='faiss' (the tensorflow backend is "
            "exact only)."
        )
    defaults = HNSW_DEFAULTS if approximate == "hnsw" else IVF_DEFAULTS
    wrong = sorted(k for k, v in params.items() if v is not None and k not in defaults)
    if wrong:
        raise ValueError(
            f"{', '.join(wrong)} do not apply to approximate={approximate!r}; its parameters "
            f"are {', '.join(defaults)}."
        )
    out = {"approximate": approximate}
    for name, default in defaults.items():
        value = params.get(name)
        value = default if value is None else value
        if value is not None:
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
                    or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")
            value = int(value)
        out[name] = value
    if approximate == "hnsw" and out["hnsw_m"] < 2:
        raise ValueError(f"hnsw_m must be at least 2, got {out['hnsw_m']}.")
    return out


def as_keys(values, name="ids"):
    """``values`` as an int64 or unicode [N] NumPy array; floats and bools refused.

    Integers of any int64 value are kept exactly (a Python int above 2**63 - 1
    is refused rather than rounded); bytes are decoded as UTF-8.
    """
    if hasattr(values, "numpy"):
        values = values.numpy()
    if isinstance(values, (str, bytes, int, np.integer)):
        values = [values]
    if isinstance(values, np.ndarray) and values.dtype == object:
        values = values.reshape(-1).tolist()
    items = list(values) if not isinstance(values, np.ndarray) else None
    arr = np.asarray(values) if items is None else None
    if arr is None:
        if all(isinstance(v, (str, bytes, np.str_, np.bytes_)) for v in items):
            arr = np.array([v.decode("utf-8") if isinstance(v, bytes) else str(v)
                            for v in items], dtype=str)
        elif all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                 for v in items):
            too_big = [v for v in items if not -(2**63) <= int(v) < 2**63]
            if too_big:
                raise ValueError(
                    f"{name} must fit in int64; {too_big[0]} does not. Use strings for "
                    "larger identifiers."
                )
            arr = np.array([int(v) for v in items], dtype=np.int64)
        else:
            kinds = sorted({type(v).__name__ for v in items})
            raise ValueError(
                f"{name} must be all integers or all strings, got {', '.join(kinds)}; "
                "floats are refused because they round large integers."
            )
    arr = arr.reshape(-1) if arr.ndim != 1 else arr
    if arr.dtype.kind == "S":
        arr = np.char.decode(arr, "utf-8")
    if arr.dtype.kind == "u":
        if arr.size and arr.max() > np.iinfo(np.int64).max:
            raise ValueError(f"{name} must fit in int64; use strings for larger identifiers.")
        arr = arr.astype(np.int64)
    if arr.dtype.kind == "i":
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "U":
        return arr
    if arr.size == 0:
        return np.zeros((0,), np.int64)
    raise ValueError(
        f"{name} must be integers (int64) or strings, got dtype {arr.dtype}; floats are "
        "refused because they round large integers: cast ids to int64 or str."
    )


def _kind(keys):
    return "int64" if keys.dtype.kind == "i" else "str"


def _embeddings(x, name, dim=None):
    if hasattr(x, "numpy"):
        x = x.numpy()
    x = np.asarray(x)
    if x.ndim == 1 and dim is not None and x.shape[0] == dim:
        x = x[None]
    if x.ndim != 2:
        raise ValueError(
            f"{name} must be a rank-2 array [num_vectors, dim], got shape {x.shape}; "
            "pool or flatten to one vector per example."
        )
    if not np.issubdtype(x.dtype, np.number):
        raise ValueError(f"{name} must be numeric, got dtype {x.dtype}.")
    if dim is not None and x.shape[1] != dim:
        raise ValueError(
            f"{name} have dimension {x.shape[1]} but the index holds {dim}-dimensional "
            "embeddings; embed them with the same model (and output layer) as the index."
        )
    x = x.astype(np.float32, copy=False)
    bad = ~np.all(np.isfinite(x), axis=1)
    if bad.any():
        raise ValueError(
            f"{name} have {int(bad.sum())} row(s) with NaN or Inf (first: row "
            f"{int(np.argmax(bad))}); fix the model or its inputs, or drop those rows."
        )
    return x


class Index:
    """Nearest-neighbour search over embeddings with user ids, exact by default.

    Args:
      distance: ``"euclidean"`` or ``"cosine"`` (reported as ``1 - cos``).
      chunk_size: queries per chunk of the search (default: as many as keep
        one chunk's [chunk, N] score matrix under 32 MiB).
      backend: ``"tensorflow"`` (:func:`tfdml.metrics.knn.knn`, the metrics'
        code) or ``"faiss"`` (a faiss index, ``pip install faiss-cpu`` or the
        ``faiss`` extra; faster on large indexes). Exact search is exact with
        both; faiss may order equal distances differently and round them
        differently in the last bits.
      approximate: ``None`` (default: exact search, a flat faiss index),
        ``"hnsw"`` or ``"ivf"`` (``backend="faiss"`` only). **Approximate
        search returns the true nearest neighbours only most of the time**:
        a returned list can miss some of the exact top-k and hold farther
        entries instead (its distances are still the true distances of the
        entries returned, sorted). Measure recall@k against exact search on
        your data (``benchmarks/bench_search.py`` does on random vectors)
        before relying on it. The interface (ids, distances, ``match``,
        ``save``/``load``) is the same.

        * ``"hnsw"`` (``faiss.IndexHNSWFlat``, a graph): ``hnsw_m`` neighbours
          per node (default 32; more: higher recall, more memory and a slower
          build), ``ef_construction`` (default 80; the build's search width,
          more: a better graph, slower build) and ``ef_search`` (default 64,
          raised to ``k`` when smaller; the query's search width: **more gives
          higher recall and fewer queries/s**). No training; the build costs
          far more than a flat index.
        * ``"ivf"`` (``faiss.IndexIVFFlat``, k-means cells): ``nlist`` cells
          (default ``round(sqrt(N))``, at most ``N // 39`` so that k-means has
          39 points per centroid) trained by faiss's k-means (fixed seed, so
          the same data gives the same cells) on the index's embeddings, and
          ``nprobe`` cells visited per query (default 16, at most ``nlist``;
          **more gives higher recall and fewer queries/s**; ``nprobe =
          nlist`` is exact); an ``nlist`` above N is lowered to N.

        A query for which the structure finds fewer than ``k`` entries (IVF
        cells holding fewer, an HNSW graph that does not reach them) is
        searched again exactly, so every query gets ``min(k, N)`` entries.

        The faiss structure is built (and, for IVF, trained) on the first
        search after :meth:`add` or :meth:`remove`: each of those rebuilds it
        whole, so add in large batches. Recall depends on the data: clustered
        embeddings (a trained model's) are easier than random vectors.
      hnsw_m, ef_construction, ef_search, nlist, nprobe: the parameters above;
        giving one that does not apply to ``approximate`` is a ValueError.
    """

    def __init__(self, distance="euclidean", chunk_size=None, backend="tensorflow",
                 approximate=None, *, hnsw_m=None, ef_construction=None, ef_search=None,
                 nlist=None, nprobe=None):
        self.distance = _check_distance(distance)
        self.chunk_size = chunk_size
        if backend not in BACKENDS:
            raise ValueError(
                f"Unknown index backend {backend!r}; choose one of {', '.join(BACKENDS)}."
            )
        self._params = _search_params(backend, approximate, {
            "hnsw_m": hnsw_m, "ef_construction": ef_construction, "ef_search": ef_search,
            "nlist": nlist, "nprobe": nprobe})
        if backend == "faiss":
            _import_faiss()
        self.backend = backend
        self._faiss = None  # built on the first faiss search, dropped by add / remove
        self._frame = None  # the TensorFlow backend's PreparedGallery: likewise
        self._embeddings = None
        self._ids = None
        self._labels = None
        self._metadata = None

    @property
    def approximate(self):
        """``None`` (exact search), ``"hnsw"`` or ``"ivf"``."""
        return self._params["approximate"]

    @property
    def search_settings(self):
        """``{"backend", "approximate", <its parameters>}``, as :meth:`save` stores them."""
        return {"backend": self.backend, **self._params}

    def set_search_width(self, ef_search=None, nprobe=None):
        """Change the query-time width of an approximate index, without rebuilding it.

        ``ef_search`` (HNSW) or ``nprobe`` (IVF): more gives higher recall and
        fewer queries/s (see :class:`Index`). Returns the index.
        """
        given = {"ef_search": ef_search, "nprobe": nprobe}
        params = {k: v for k, v in self._params.items() if k != "approximate"}
        params.update({k: v for k, v in given.items() if v is not None})
        self._params = _search_params(self.backend, self.approximate, params)
        return self

    def _kwargs(self):
        return {k: v for k, v in self._params.items()}

    # -- contents ---------------------------------------------------------
    def __len__(self):
        return 0 if self._ids is None else int(self._ids.shape[0])

    @property
    def dim(self):
        return None if self._embeddings is None else int(self._embeddings.shape[1])

    @property
    def embeddings(self):
        """The [N, d] embeddings, read-only: the search structures are built from them
        (change the index through :meth:`add` and :meth:`remove`)."""
        if self._embeddings is None:
            return None
        view = self._embeddings.view()
        view.flags.writeable = False
        return view

    def _drop_search_structures(self):
        """Forget what the searches built from the embeddings (faiss index, prepared gallery)."""
        self._faiss = None
        self._frame = None

    @property
    def ids(self):
        return self._ids

    @property
    def labels(self):
        return self._labels

    def metadata_for(self, ids):
        """The metadata stored with ``ids`` (``None`` where none was given)."""
        positions = self._positions(ids)
        meta = self._metadata or [None] * len(self)
        return [meta[p] for p in positions]

    def _positions(self, ids):
        keys = as_keys(ids)
        where = {k: i for i, k in enumerate(self._ids.tolist())} if len(self) else {}
        missing = [k for k in keys.tolist() if k not in where]
        if missing:
            raise ValueError(
                f"{len(missing)} id(s) are not in the index (first: {missing[0]!r}); "
                "check them against Index.ids."
            )
        return [where[k] for k in keys.tolist()]

    def add(self, embeddings, ids, metadata=None, labels=None):
        """Add ``embeddings`` [n, d] under ``ids`` (n int64 or strings, all new).

        ``labels``: n classes (int64 or strings), needed by :func:`calibrate`;
        give them in every call or in none. ``metadata``: n JSON-serialisable
        values. Duplicate ids are refused: remove the old entry first.
        """
        x = _embeddings(embeddings, "embeddings", self.dim)
        keys = as_keys(ids)
        if keys.shape[0] != x.shape[0]:
            raise ValueError(
                f"Got {x.shape[0]} embeddings but {keys.shape[0]} ids; give one id per row."
            )
        if x.shape[0] == 0:
            return self
        if len(self) and _kind(keys) != _kind(self._ids):
            raise ValueError(
                f"The index holds {_kind(self._ids)} ids, got {_kind(keys)} ids; "
                "use one kind of id per index."
            )
        uniq, counts = np.unique(keys, return_counts=True)
        if (counts > 1).any():
            raise ValueError(
                f"Duplicate ids in this call (first: {uniq[counts > 1][0].item()!r}); "
                "every entry needs its own id."
            )
        if len(self):
            clash = np.intersect1d(keys, self._ids)
            if clash.size:
                raise ValueError(
                    f"{clash.size} id(s) are already in the index (first: {clash[0].item()!r});"
                    " remove them with Index.remove first to replace them, or use new ids."
                )
        if labels is not None:
            labels = as_keys(labels, "labels")
            if labels.shape[0] != x.shape[0]:
                raise ValueError(f"Got {x.shape[0]} embeddings but {labels.shape[0]} labels.")
        if len(self) and (labels is None) != (self._labels is None):
            raise ValueError(
                "Give labels in every call to Index.add or in none: "
                + ("the index has labels, this call has none."
                   if labels is None else "the index has no labels, this call has some.")
            )
        if len(self) and labels is not None and _kind(labels) != _kind(self._labels):
            raise ValueError("Labels must be of one kind (all int64 or all strings).")
        if metadata is not None:
            metadata = list(metadata)
            if len(metadata) != x.shape[0]:
                raise ValueError(f"Got {x.shape[0]} embeddings but {len(metadata)} metadata.")
            try:
                json.dumps(metadata)
            except TypeError as err:
                raise ValueError(f"metadata must be JSON-serialisable: {err}.") from None
        new_meta = metadata if metadata is not None else [None] * x.shape[0]
        self._drop_search_structures()
        if not len(self):
            self._embeddings, self._ids, self._labels = x.copy(), keys, labels
            self._metadata = list(new_meta) if metadata is not None else None
        else:
            self._embeddings = np.concatenate([self._embeddings, x])
            self._ids = np.concatenate([self._ids, keys])
            if labels is not None:
                self._labels = np.concatenate([self._labels, labels])
            if metadata is not None or self._metadata is not None:
                old = self._metadata or [None] * (len(self._ids) - x.shape[0])
                self._metadata = old + list(new_meta)
        return self

    def add_model(self, model, dataset, ids=None, metadata=None, verbose=1):
        """Embed a ``tf.data`` dataset with ``model`` and add the embeddings.

        For an image folder, ``python search.py build --images FOLDER`` (or
        ``pipelines.sources.image_files`` / ``load_image_files``) decodes the
        files: tfdml itself never imports the data side.

        Elements are ``x`` or ``(x, y)`` batches; ``y`` becomes the labels (a
        dict ``y``, as in the batch contract of :mod:`tfdml.targets`: its
        ``"label"``).
        ``ids``: one per example, or ``None`` for consecutive integers after the
        largest int id so far (0 for an empty index). A ``keras.utils.Progbar``
        shows the batches done (``verbose=0`` silences it).
        """
        import keras
        import tensorflow as tf

        total = int(dataset.cardinality())
        bar = keras.utils.Progbar(total if total >= 0 else None, verbose=verbose,
                                  unit_name="batch")
        chunks, ys = [], []
        for step, element in enumerate(dataset):
            x, y = (element[0], element[1]) if isinstance(element, (tuple, list)) else (
                element, None)
            out = model(x, training=False)
            chunks.append(np.asarray(tf.convert_to_tensor(out)))
            if isinstance(y, dict):
                y = y.get("label")
            if y is not None:
                ys.append(np.asarray(y))
            bar.update(step + 1)
        if not chunks:
            raise ValueError("The dataset is empty: nothing to add to the index.")
        x = np.concatenate(chunks)
        labels = None
        if ys:
            y = np.concatenate(ys)
            if y.dtype.kind == "f":
                raise ValueError(
                    "The dataset's labels are floats; labels must be int64 or strings "
                    "(cast them in the pipeline, e.g. tf.cast(y, tf.int64))."
                )
            labels = y.reshape(-1)
        if ids is None:
            if len(self) and _kind(self._ids) != "int64":
                raise ValueError("The index has string ids: pass ids= to add_model.")
            start = int(self._ids.max()) + 1 if len(self) else 0
            ids = np.arange(start, start + x.shape[0], dtype=np.int64)
        return self.add(x, ids, metadata=metadata, labels=labels)

    def remove(self, ids):
        """Remove the entries of ``ids`` (all must be present); the rest keep their order."""
        if not len(self):
            raise ValueError("The index is empty: there is nothing to remove.")
        positions = self._positions(ids)
        self._drop_search_structures()
        keep = np.ones(len(self), bool)
        keep[positions] = False
        self._embeddings, self._ids = self._embeddings[keep], self._ids[keep]
        if self._labels is not None:
            self._labels = self._labels[keep]
        if self._metadata is not None:
            self._metadata = [m for m, k in zip(self._metadata, keep) if k]
        if not len(self):
            self.__init__(self.distance, self.chunk_size, self.backend, **self._kwargs())
        return self

    # -- search -----------------------------------------------------------
    def _search_positions(self, queries, k):
        if not len(self):
            raise ValueError(
                "The index is empty: add embeddings (Index.add or Index.add_model) before "
                "searching it."
            )
        if int(k) < 1:
            raise ValueError(f"k must be a positive integer, got {k}.")
        q = _embeddings(queries, "queries", self.dim)
        if q.shape[0] == 0:
            return np.zeros((0, 0), np.int64), np.zeros((0, 0), np.float32)
        if self.backend == "faiss":
            return self._faiss_search(q, int(k))
        if self._frame is None:  # once per content: centring the gallery costs more than a small search
            self._frame = _knn.PreparedGallery(self._embeddings, self.distance)
        pos, values = _knn.knn(q, self._frame, k=int(k), distance=self.distance,
                               chunk_size=self.chunk_size)
        if distance_names.is_similarity(self.distance):  # 1 - cos, clipped: identical vectors give 0, not -1e-7
            values = np.maximum(1.0 - values, 0.0).astype(np.float32)
        return pos, values

    def _faiss_search(self, q, k):
        faiss = _import_faiss()
        cosine = distance_names.is_similarity(self.distance)

        def prepare(x):
            x = np.array(x, np.float32, order="C")
            if cosine:
                x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
            return x

        if self._faiss is None:
            self._faiss = self._build_faiss(faiss, prepare(self._embeddings))
        k = min(k, len(self))
        q = prepare(q)
        kind, p = self._params["approximate"], self._params
        if kind == "hnsw":
            params = faiss.SearchParametersHNSW(efSearch=max(p["ef_search"], k))
            values, pos = self._faiss.search(q, k, params=params)
        elif kind == "ivf":
            nlist = self._faiss.nlist
            values, pos = self._faiss.search(
                q, k, params=faiss.SearchParametersIVF(nprobe=min(p["nprobe"], nlist)))
        else:
            values, pos = self._faiss.search(q, k)
        short = np.flatnonzero((pos < 0).any(axis=1))
        if short.size:  # fewer than k found (IVF cells too small, HNSW graph): exact search
            metric = faiss.METRIC_INNER_PRODUCT if cosine else faiss.METRIC_L2
            values[short], pos[short] = faiss.knn(q[short], prepare(self._embeddings), k,
                                                  metric=metric)
        if cosine:
            values = np.maximum(1.0 - values, 0.0)
        else:
            values = np.sqrt(np.maximum(values, 0.0))
        return pos.astype(np.int64), values.astype(np.float32)

    def _build_faiss(self, faiss, x):
        cosine = distance_names.is_similarity(self.distance)
        metric = faiss.METRIC_INNER_PRODUCT if cosine else faiss.METRIC_L2
        kind, p, d = self._params["approximate"], self._params, self.dim
        if kind == "hnsw":
            index = faiss.IndexHNSWFlat(d, p["hnsw_m"], metric)
            index.hnsw.efConstruction = p["ef_construction"]
        elif kind == "ivf":
            n = x.shape[0]
            nlist = p["nlist"] or int(round(np.sqrt(n)))
            nlist = max(1, min(nlist, n // 39 if p["nlist"] is None else n))
            quantizer = (faiss.IndexFlatIP if cosine else faiss.IndexFlatL2)(d)
            index = faiss.IndexIVFFlat(quantizer, d, nlist, metric)  # keeps quantizer alive
            index.cp.seed = 1234  # faiss's default, stated: the same data gives the same cells
            index.train(x)
        else:
            index = (faiss.IndexFlatIP if cosine else faiss.IndexFlatL2)(d)
        index.add(x)
        return index

    def search(self, queries, k=1):
        """The ``k`` nearest entries of each query (exact unless ``approximate`` is set).

        Returns ``(ids, distances)``: [Q, k'] ids (int64 or str, as added),
        nearest first (equal distances: the entry added first first), and
        float32 [Q, k'] distances, ``k' = min(k, len(index))``.
        """
        pos, values = self._search_positions(queries, k)
        return self._ids[pos], values

    def match(self, queries, threshold, k=1):
        """:meth:`search`, plus ``is_match`` [Q, k']: ``distances <= threshold``.

        ``threshold``: a distance, a :class:`Calibration`, ``None`` (no
        threshold was chosen: ``is_match`` is False everywhere) or
        ``float("inf")`` (every neighbour matches).
        """
        limit = _match_limit(threshold)
        ids, values = self.search(queries, k)
        return ids, values, values <= limit

    def match_labels(self, queries, threshold, no_match_label=None):
        """The class of each query: its nearest entry's label where that entry is
        within ``threshold`` (as in :meth:`match`), else ``no_match_label``.

        Returns [Q] labels (int64 or str, as the index's). ``no_match_label``:
        default -1 for int64 labels, ``""`` for strings; it must not be a class
        of the index, or a match and a no-match would read alike.
        """
        if self._labels is None:
            raise ValueError("The index has no labels: add its entries with "
                             "Index.add(..., labels=...) to match queries to classes.")
        kind = _kind(self._labels)
        if no_match_label is None:
            no_match_label = -1 if kind == "int64" else ""
        if (kind == "str") != isinstance(no_match_label, str) or isinstance(no_match_label, bool):
            raise ValueError(f"The index has {kind} labels; pass a no_match_label of that kind "
                             f"(got {no_match_label!r}).")
        if np.any(self._labels == no_match_label):
            raise ValueError(f"no_match_label {no_match_label!r} is a class of the index; pass "
                             "another (e.g. a value no entry has).")
        limit = _match_limit(threshold)
        pos, values = self._search_positions(queries, 1)
        if not pos.size:
            return self._labels[:0]
        return np.where(values[:, 0] <= limit, self._labels[pos[:, 0]],
                        np.asarray(no_match_label, self._labels.dtype if kind == "int64" else str))

    def single_lookup(self, query, k=1, model=None):
        """The ``k`` nearest entries of one query, as a list of dicts ``{"rank",
        "id", "distance", "label", "metadata"}``, nearest first (``label`` and
        ``metadata`` None when the index has none).

        ``query``: one embedding [d], or with ``model`` one model input without
        the batch axis (e.g. an image [H, W, C]), embedded by ``model``.
        """
        query = np.asarray(query.numpy() if hasattr(query, "numpy") else query)
        if model is not None:
            query = np.asarray(model(query[None].astype(np.float32), training=False))
        elif query.ndim == 1:
            query = query[None]
        if query.ndim != 2 or query.shape[0] != 1:
            raise ValueError(f"single_lookup takes one query (an embedding [d], or one model "
                             f"input with model=), got shape {query.shape}; use Index.search "
                             "for a batch.")
        pos, values = self._search_positions(query, k)
        meta = self._metadata or [None] * len(self)
        return [{"rank": r + 1, "id": self._ids[p].item(), "distance": float(values[0, r]),
                 "label": None if self._labels is None else self._labels[p].item(),
                 "metadata": meta[p]} for r, p in enumerate(pos[0].tolist())]

    # -- files ------------------------------------------------------------
    def _arrays(self):
        arrays = {"embeddings": self._embeddings if len(self) else np.zeros((0, 0), np.float32),
                  "ids": self._ids if len(self) else np.zeros((0,), np.int64)}
        if self._labels is not None:
            arrays["labels"] = self._labels
        if self._metadata is not None:
            arrays["metadata"] = np.array(json.dumps(self._metadata))
        return arrays

    def save(self, path):
        """Write the index to ``path`` (an ``.npz``) atomically; see the module doc."""
        arrays = self._arrays()
        manifest = {
            "format": _FORMAT,
            "version": FORMAT_VERSION,
            "distance": self.distance,
            "count": len(self),
            "dim": self.dim,
            "id_kind": _kind(self._ids) if len(self) else None,
            "label_kind": _kind(self._labels) if self._labels is not None else None,
            "sha256": _checksum(arrays),
            "search": self.search_settings,
        }
        path = os.fspath(path)
        with files.atomic_path(path, suffix=".npz") as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, manifest=np.array(json.dumps(manifest)), **arrays)
        return path

    @classmethod
    def load(cls, path, chunk_size=None, backend=None):
        """Read an index written by :meth:`save`; a damaged file is a ValueError.

        ``backend=None`` searches as the saved index did (its backend,
        ``approximate`` and parameters; files without them: exact, TensorFlow).
        ``backend="tensorflow"`` loads it for exact TensorFlow search;
        ``backend="faiss"`` keeps saved approximate settings, if any. The file
        holds the embeddings, not the faiss structure: that is rebuilt (and an
        IVF retrained, with the same result) on the first search.
        """
        manifest, arrays = _read_file(path)
        saved = manifest.get("search") or {"backend": "tensorflow", "approximate": None}
        settings = {k: v for k, v in saved.items() if k != "backend"}
        if backend is None:
            backend = saved.get("backend", "tensorflow")
        if backend == "tensorflow":
            settings = {"approximate": None}
        index = cls(manifest["distance"], chunk_size=chunk_size, backend=backend, **settings)
        if manifest["count"]:
            index._embeddings = arrays["embeddings"]
            index._ids = arrays["ids"]
            index._labels = arrays.get("labels")
            if "metadata" in arrays:
                index._metadata = json.loads(str(arrays["metadata"]))
        return index


def _read_file(path):
    """The manifest and arrays of an index file, checked."""
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
    if manifest.get("format") != _FORMAT:
        raise ValueError(f"{path} is not a tfdml index (format {manifest.get('format')!r}).")
    if manifest.get("version") != FORMAT_VERSION:
        raise ValueError(
            f"{path} has index format version {manifest.get('version')}; this tfdml reads "
            f"version {FORMAT_VERSION}: upgrade tfdml or rebuild the index."
        )
    if _checksum(arrays) != manifest.get("sha256"):
        raise ValueError(f"The checksum of {path} does not match its content; {fix}.")
    return manifest, arrays


def _checksum(arrays):
    digest = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


@dataclasses.dataclass
class Calibration:
    """Precision, recall and F1 of "match if nearest distance <= t", for every t.

    ``thresholds`` are the distinct nearest-neighbour distances of the
    calibration queries, ascending; at threshold ``t`` the accepted queries are
    those with nearest distance ``<= t``. A *true positive* is an accepted
    query whose nearest entry has its label; ``precision = TP / accepted``,
    ``recall = TP / (queries whose nearest entry has their label)``.
    ``threshold`` is the one :func:`calibrate` chose for ``metric`` and
    ``target`` (``target_precision``: the target when ``metric`` is
    ``"precision"``, else None).
    """

    thresholds: np.ndarray
    precision: np.ndarray
    recall: np.ndarray
    f1: np.ndarray
    threshold: float
    target_precision: float
    distance: str
    metric: str = "precision"
    target: float = None

    def at(self, threshold):
        """``{"threshold", "precision", "recall", "f1"}`` at the largest tabulated
        threshold ``<= threshold`` (precision NaN below the smallest)."""
        i = int(np.searchsorted(self.thresholds, threshold, side="right")) - 1
        if i < 0:
            return {"threshold": float(threshold), "precision": float("nan"), "recall": 0.0,
                    "f1": 0.0}
        return {"threshold": float(self.thresholds[i]), "precision": float(self.precision[i]),
                "recall": float(self.recall[i]), "f1": float(self.f1[i])}

    def plot(self, path):
        """The precision / recall / F1 against threshold curve as a PNG (written atomically)."""
        from tfdml import plots

        return plots.threshold_curve(self.thresholds, self.precision, self.recall, path,
                                     f1=self.f1, threshold=self.threshold,
                                     target_precision=self.target_precision)


#: What :func:`calibrate` can choose a threshold for.
CALIBRATION_METRICS = ("precision", "recall", "f1")


def _calibration_target(metric, target, target_precision):
    if metric not in CALIBRATION_METRICS:
        raise ValueError(f"Unknown calibration metric {metric!r}; choose one of "
                         f"{', '.join(CALIBRATION_METRICS)}.")
    if target_precision is not None:
        if metric != "precision":
            raise ValueError(f"target_precision applies to metric='precision'; for "
                             f"metric={metric!r} pass target=.")
        if target is not None and float(target) != float(target_precision):
            raise ValueError(f"Got target_precision={target_precision} and target={target}; "
                             "pass one.")
        target = target_precision
    if metric == "f1":
        if target is not None:
            raise ValueError("metric='f1' takes no target: it chooses the threshold of the "
                             "highest F1.")
        return None
    if target is None:
        if metric == "recall":
            raise ValueError("metric='recall' needs a target, e.g. target=0.9.")
        target = 0.99
    if not 0.0 < float(target) <= 1.0:
        raise ValueError(f"target must be in (0, 1], got {target}.")
    return float(target)


def calibrate(index, queries, labels, target_precision=None, *, metric="precision", target=None):
    """Choose a match threshold for ``index`` from held-out ``queries`` and their ``labels``.

    The index must have labels (``Index.add(..., labels=)``), of the same kind
    (int64 or strings) as ``labels``. A query is accepted at threshold ``t``
    when its nearest entry is within ``t``, and right when that entry has its
    label (see :class:`Calibration`). The threshold, by ``metric``:

    * ``"precision"`` (default): the largest ``t`` whose precision is at least
      ``target`` (default 0.99; ``target_precision`` is the same argument);
    * ``"recall"``: the smallest ``t`` whose recall is at least ``target``
      (required);
    * ``"f1"``: the ``t`` of the highest F1 (the smallest of equal ones); no
      target.

    Returns a :class:`Calibration`; pass it to :meth:`Index.match`. If no
    threshold reaches the target, a ValueError says the best value found.
    """
    target = _calibration_target(metric, target, target_precision)
    if len(index) and index.labels is None:
        raise ValueError(
            "The index has no labels: add its entries with Index.add(..., labels=...) "
            "(or (x, y) batches in add_model) to calibrate it."
        )
    labels = as_keys(labels, "labels")
    pos, dist = index._search_positions(queries, 1)
    if labels.shape[0] != pos.shape[0]:
        raise ValueError(f"Got {pos.shape[0]} queries but {labels.shape[0]} labels.")
    if pos.shape[0] == 0:
        raise ValueError("calibrate needs at least one query.")
    if _kind(labels) != _kind(index.labels):
        raise ValueError(
            f"The index has {_kind(index.labels)} labels but the queries' labels are "
            f"{_kind(labels)}; use the same kind of label for both."
        )
    d = dist[:, 0].astype(np.float64)
    correct = index.labels[pos[:, 0]] == labels
    order = np.argsort(d, kind="stable")
    d, correct = d[order], correct[order]
    tp = np.cumsum(correct)
    # The last position of each distinct distance: everything up to it is accepted.
    last = np.flatnonzero(np.append(d[1:] != d[:-1], True))
    thresholds, tp, accepted = d[last], tp[last], last + 1
    precision = tp / accepted
    recall = tp / max(int(correct.sum()), 1)
    denom = precision + recall
    f1 = np.where(denom > 0, 2 * precision * recall / np.where(denom > 0, denom, 1), 0.0)
    if not correct.any() and metric != "precision":
        raise ValueError(
            f"No threshold reaches {metric} {target if target is not None else 'above 0'}: no "
            "query's nearest entry has its class; train the model further, or check the labels."
        )
    if metric == "f1":
        chosen = int(np.argmax(f1))
    elif metric == "recall":
        chosen = int(np.flatnonzero(recall >= target)[0])
    else:
        ok = np.flatnonzero(precision >= target)
        if not ok.size:
            raise ValueError(
                f"No threshold reaches precision {target}: the best is "
                f"{precision.max():.4f} (at distance {thresholds[np.argmax(precision)]:.4g}); "
                "lower target_precision, or train the model further."
            )
        chosen = int(ok[-1])
    return Calibration(thresholds.astype(np.float32), precision, recall, f1,
                       float(thresholds[chosen]), target if metric == "precision" else None,
                       index.distance, metric, target)


def _match_limit(threshold):
    """The float32 distance limit of ``is_match``: ``None`` (no threshold) is
    -inf, so that nothing matches; a NaN is refused."""
    if isinstance(threshold, Calibration):
        threshold = threshold.threshold
    if threshold is None:
        return np.float32(-np.inf)
    try:
        limit = np.float32(threshold)
    except (TypeError, ValueError):
        raise ValueError(f"threshold must be a distance, a Calibration or None, got {threshold!r}.") from None
    if np.isnan(limit):
        raise ValueError("threshold is NaN; pass a distance, a Calibration, or None (nothing matches).")
    return limit


def _lookup_module(model, index, k, threshold, input_signature):
    import tensorflow as tf

    distance = index.distance
    # The same frame as tfdml.metrics.knn.ranking_frame: on the sphere for
    # cosine (to_sphere, in the graph for queries), then centred on the
    # gallery (the query of zeros becomes minus the gallery's mean).
    frame = _knn.PreparedGallery(index.embeddings, distance)
    minus_c = -frame.centre[None, :]
    k_eff = min(int(k), len(index))
    limit = _match_limit(threshold)

    class Lookup(tf.Module):
        def __init__(self):
            super().__init__(name="tfdml_lookup")
            self.model = model
            self.gallery = tf.Variable(frame.rows, trainable=False, name="gallery")
            # Computed once here: in the graph, every lookup would read the gallery again for them.
            self.gallery_norms = tf.Variable(frame.squared_norms, trainable=False, name="gallery_norms")
            self.offset = tf.Variable(minus_c[0], trainable=False, name="offset")
            self.ids = tf.Variable(index.ids, trainable=False, name="ids")
            self.threshold = tf.Variable(limit, trainable=False, name="threshold")
            self.embed = tf.function(self._embed, input_signature=input_signature)
            self.lookup = tf.function(self._lookup, input_signature=input_signature)

        def _embed(self, inputs):
            return tf.cast(self.model(inputs, training=False), tf.float32)

        def _lookup(self, inputs):
            e = self._embed(inputs)
            if distance_names.is_similarity(distance):
                e = _knn.to_sphere(e)
            values, positions = tf.math.top_k(_knn.scores(e + self.offset, self.gallery, self.gallery_norms),
                                              k=k_eff, sorted=True)
            if distance_names.is_similarity(distance):
                dist = tf.maximum(-0.5 * values, 0.0)  # 1 - cos = d²/2 on the sphere
            else:
                dist = tf.sqrt(tf.maximum(-values, 0.0))
            return {"ids": tf.gather(self.ids, positions), "distances": dist,
                    "is_match": dist <= self.threshold}

    return Lookup()


def _input_signature(model):
    """``[tf.TensorSpec([None, ...])]`` of a one-input model, from its ``inputs``, else
    those of its ``encoder`` (a :class:`tfdml.models.EmbeddingModel`, which has no
    ``inputs`` once loaded from a ``.keras`` file), else the shape it was built with."""
    import tensorflow as tf

    for part in (model, getattr(model, "encoder", None)):
        inputs = getattr(part, "inputs", None)
        if inputs and len(inputs) == 1:
            shape, dtype = inputs[0].shape, inputs[0].dtype or tf.float32
        else:
            built = part.get_build_config() if hasattr(part, "get_build_config") else None
            shape, dtype = (built or {}).get("input_shape"), tf.float32
        if isinstance(shape, (list, tuple)) and len(shape) > 1 and all(
                d is None or isinstance(d, int) for d in shape):
            return [tf.TensorSpec([None, *shape[1:]], dtype, name="inputs")]
    raise ValueError(
        "Cannot read the model's input shape (it needs exactly one input, and to have been "
        "built or called once); pass input_signature=[tf.TensorSpec([None, ...], tf.float32)]."
    )


def export_lookup(model, index, path, k=10, threshold=None, input_signature=None):
    """Write a SavedModel at ``path`` that embeds, searches ``index`` and thresholds.

    Load it with TensorFlow alone (``tf.saved_model.load(path)``); it has

    * ``lookup(inputs)`` -> ``{"ids": [B, k'] int64 or string, "distances":
      float32 [B, k'], "is_match": bool [B, k']}``, the same top-k as
      :meth:`Index.search` on ``embed(inputs)`` (ties: entry added first first),
      ``k' = min(k, len(index))``, ``is_match = distances <= threshold``;
    * ``embed(inputs)`` -> float32 [B, d], the model's embeddings;

    also registered as the serving signatures ``"lookup"`` (the default) and
    ``"embed"`` (output ``{"embeddings"}``). ``threshold``: a distance, a
    :class:`Calibration`, ``None`` (no threshold, e.g. a calibration that
    failed: ``is_match`` is False for every neighbour, never True) or
    ``float("inf")`` (every neighbour is a match).
    ``input_signature``: a list of one ``tf.TensorSpec``; default: the
    model's input shape (``model.inputs``, its encoder's for a loaded
    :class:`tfdml.models.EmbeddingModel`, or the shape it was built with).
    The index is copied into the SavedModel as variables (searched whole per
    batch: memory ∝ batch × N); the directory is written atomically
    (:func:`tfdml.files.atomic_directory`).
    """
    import tensorflow as tf

    if not len(index):
        raise ValueError("The index is empty: add embeddings before exporting a lookup.")
    if int(k) < 1:
        raise ValueError(f"k must be a positive integer, got {k}.")
    _match_limit(threshold)  # a bad threshold fails before any tracing
    if input_signature is None:
        input_signature = _input_signature(model)
    module = _lookup_module(model, index, k, threshold, input_signature)
    probe = module.embed.get_concrete_function()
    if probe.structured_outputs.shape[-1] != index.dim:
        raise ValueError(
            f"The model's embeddings have dimension {probe.structured_outputs.shape[-1]} but "
            f"the index holds {index.dim}; export the model that built the index."
        )
    signatures = {
        "lookup": module.lookup.get_concrete_function(),
        "serving_default": module.lookup.get_concrete_function(),
        "embed": tf.function(lambda inputs: {"embeddings": module.embed(inputs)},
                             input_signature=input_signature).get_concrete_function(),
    }
    path = os.fspath(path)
    with files.atomic_directory(path) as tmp:
        tf.saved_model.save(module, tmp, signatures=signatures)
    return path


def describe(path):
    """A one-paragraph description of the index file ``path`` (checksum verified)."""
    manifest, _ = _read_file(path)
    index = Index.load(path, backend="tensorflow")  # describing needs no faiss
    id_kind = _kind(index.ids) if len(index) else "none"
    labels = "none" if index.labels is None else _kind(index.labels)
    saved = manifest.get("search") or {"backend": "tensorflow", "approximate": None}
    search = f"search: {saved.get('backend', 'tensorflow')}"
    if saved.get("approximate"):
        params = ", ".join(f"{k}={v}" for k, v in saved.items()
                           if k not in ("backend", "approximate") and v is not None)
        search += f" approximate {saved['approximate']}" + (f" ({params})" if params else "")
    else:
        search += " exact"
    return (f"{path}: {len(index)} entries, dim {index.dim}, distance {index.distance}, "
            f"{id_kind} ids, labels: {labels}, {search}, format version {FORMAT_VERSION}, "
            "checksum ok")


def describe_all(paths):
    """Describe every index file of ``paths`` (a folder: the ``.npz`` files under it),
    going on past damaged ones. Yields ``(path, description, None)`` or ``(path,
    None, error message)``, then ``(None, summary line, None)``; see :func:`describe`."""
    ok = bad = 0
    for given in paths:
        given = os.fspath(given)
        found = [given]
        if os.path.isdir(given):
            found = sorted(os.path.join(d, f) for d, _, names in os.walk(given)
                           for f in names if f.endswith(".npz"))
            if not found:
                bad += 1
                yield given, None, f"{given} holds no .npz index files."
                continue
        for path in found:
            try:
                text = describe(path)
            except (ValueError, OSError) as err:
                bad += 1
                yield path, None, str(err) if path in str(err) else f"{path}: {err}"
            else:
                ok += 1
                yield path, text, None
    total = ok + bad
    yield None, (f"{total} index file{'s' if total != 1 else ''}: {ok} ok"
                 + (f", {bad} bad" if bad else "")), None


def report_all(paths, prog):
    """Print :func:`describe_all` (errors on stderr, prefixed with ``prog``); the exit
    status: 0 if every file is a sound index, else 2."""
    import sys

    code = 0
    for path, text, error in describe_all(paths):
        if error is not None:
            print(f"{prog}: error: {error}", file=sys.stderr)
            code = 2
        else:
            print(text)
    return code


def main(argv=None):
    """``python -m tfdml.search INDEX.npz|FOLDER ...``: describe index files (exit 2 if
    one is damaged)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tfdml.search",
                                     description="Check and describe tfdml.search index files.")
    parser.add_argument("paths", nargs="+", metavar="INDEX.npz|FOLDER")
    args = parser.parse_args(argv)
    return report_all(args.paths, "python -m tfdml.search")


if __name__ == "__main__":
    raise SystemExit(main())
