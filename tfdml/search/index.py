"""The :class:`Index`: embeddings under user ids, with labels and metadata, searched
exactly or approximately by one of :mod:`tfdml.search.backends`.

Exact search with the TensorFlow backend is :func:`tfdml.metrics.knn.knn`, the
same chunked search the retrieval metrics use: memory grows with
``chunk_size × N``, never with ``Q × N``, and equal distances rank the entry
added first first (the gallery keeps insertion order, also after
:meth:`Index.remove`). Scores are computed in float32, as in the metrics:
"equal" means equal after rounding (exact duplicates always are).

Conventions (see also :mod:`tfdml.search.entries`):

* A duplicate id is refused, in one call and across calls: :meth:`Index.remove`
  it first to replace it.
* **Labels** (optional) are the classes of the entries;
  :func:`~tfdml.search.calibrate` needs them. **Metadata** (optional) is one
  JSON-serialisable value per entry, returned by :meth:`Index.metadata_for`.
* ``k`` larger than the index returns ``len(index)`` columns.
"""

import json

import numpy as np

from tfdml.search import backends
from tfdml.search import fileformat
from tfdml.search.calibration import match_limit
from tfdml.search.embedding import embed_dataset
from tfdml.search.entries import as_embeddings, as_keys, check_distance, kind


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
        check_distance(distance)
        # Its structure is built on the first search, dropped by add / remove.
        self._backend = backends.backend_for(backend, approximate)(
            distance, chunk_size, hnsw_m=hnsw_m, ef_construction=ef_construction,
            ef_search=ef_search, nlist=nlist, nprobe=nprobe)
        self._embeddings = self._ids = self._labels = self._metadata = None

    @property
    def distance(self):
        """``"euclidean"`` or ``"cosine"`` (reported as ``1 - cos``)."""
        return self._backend.distance

    @property
    def backend(self):
        """``"tensorflow"`` or ``"faiss"``."""
        return self._backend.name

    @property
    def approximate(self):
        """``None`` (exact search), ``"hnsw"`` or ``"ivf"``."""
        return self._backend.approximate

    @property
    def chunk_size(self):
        """Queries per chunk of the TensorFlow search (``None``: the default budget)."""
        return self._backend.chunk_size

    @chunk_size.setter
    def chunk_size(self, value):
        self._backend.chunk_size = value

    @property
    def search_settings(self):
        """``{"backend", "approximate", <its parameters>}``, as :meth:`save` stores them."""
        return self._backend.settings

    def set_search_width(self, ef_search=None, nprobe=None):
        """Change the query-time width of an approximate index, without rebuilding it.

        ``ef_search`` (HNSW) or ``nprobe`` (IVF): more gives higher recall and
        fewer queries/s (see :class:`Index`). Returns the index.
        """
        self._backend.set_params(ef_search=ef_search, nprobe=nprobe)
        return self

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

        ``labels``: n classes (int64 or strings), needed by :func:`~tfdml.search.calibrate`;
        give them in every call or in none. ``metadata``: n JSON-serialisable
        values. Duplicate ids are refused: remove the old entry first.
        """
        x = as_embeddings(embeddings, "embeddings", self.dim)
        keys = as_keys(ids)
        if keys.shape[0] != x.shape[0]:
            raise ValueError(
                f"Got {x.shape[0]} embeddings but {keys.shape[0]} ids; give one id per row."
            )
        if x.shape[0] == 0:
            return self
        if len(self) and kind(keys) != kind(self._ids):
            raise ValueError(
                f"The index holds {kind(self._ids)} ids, got {kind(keys)} ids; "
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
        if len(self) and labels is not None and kind(labels) != kind(self._labels):
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
        self._backend.reset()
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
        x, labels = embed_dataset(model, dataset, verbose)
        if ids is None:
            if len(self) and kind(self._ids) != "int64":
                raise ValueError("The index has string ids: pass ids= to add_model.")
            start = int(self._ids.max()) + 1 if len(self) else 0
            ids = np.arange(start, start + x.shape[0], dtype=np.int64)
        return self.add(x, ids, metadata=metadata, labels=labels)

    def remove(self, ids):
        """Remove the entries of ``ids`` (all must be present); the rest keep their order."""
        if not len(self):
            raise ValueError("The index is empty: there is nothing to remove.")
        positions = self._positions(ids)
        self._backend.reset()
        keep = np.ones(len(self), bool)
        keep[positions] = False
        self._embeddings, self._ids = self._embeddings[keep], self._ids[keep]
        if self._labels is not None:
            self._labels = self._labels[keep]
        if self._metadata is not None:
            self._metadata = [m for m, k in zip(self._metadata, keep) if k]
        if not len(self):  # as new: any dimension, kind of id and labels again
            self._embeddings = self._ids = self._labels = self._metadata = None
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
        q = as_embeddings(queries, "queries", self.dim)
        if q.shape[0] == 0:
            return np.zeros((0, 0), np.int64), np.zeros((0, 0), np.float32)
        return self._backend.search(self._embeddings, q, int(k))

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

        ``threshold``: a distance, a :class:`~tfdml.search.Calibration`, ``None`` (no
        threshold was chosen: ``is_match`` is False everywhere) or
        ``float("inf")`` (every neighbour matches).
        """
        limit = match_limit(threshold)
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
        label_kind = kind(self._labels)
        if no_match_label is None:
            no_match_label = -1 if label_kind == "int64" else ""
        if (label_kind == "str") != isinstance(no_match_label, str) or isinstance(no_match_label, bool):
            raise ValueError(f"The index has {label_kind} labels; pass a no_match_label of that kind "
                             f"(got {no_match_label!r}).")
        if np.any(self._labels == no_match_label):
            raise ValueError(f"no_match_label {no_match_label!r} is a class of the index; pass "
                             "another (e.g. a value no entry has).")
        limit = match_limit(threshold)
        pos, values = self._search_positions(queries, 1)
        if not pos.size:
            return self._labels[:0]
        return np.where(values[:, 0] <= limit, self._labels[pos[:, 0]],
                        np.asarray(no_match_label, self._labels.dtype if label_kind == "int64" else str))

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
    def save(self, path):
        """Write the index to ``path`` (an ``.npz``) atomically; see
        :mod:`tfdml.search.fileformat`. Returns ``path`` as a string."""
        return fileformat.write(path, self.distance, self._embeddings, self._ids,
                                labels=self._labels, metadata=self._metadata,
                                search=self.search_settings)

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
        manifest, arrays = fileformat.read(path)
        saved = fileformat.search_settings(manifest)
        settings = {k: v for k, v in saved.items() if k != "backend"}
        if backend is None:
            backend = saved.get("backend", "tensorflow")
        if backend == "tensorflow":
            settings = {"approximate": None}
        index = cls(manifest["distance"], chunk_size=chunk_size, backend=backend, **settings)
        found = fileformat.contents(manifest, arrays)
        if found is not None:
            index._embeddings, index._ids, index._labels, index._metadata = found
        return index

