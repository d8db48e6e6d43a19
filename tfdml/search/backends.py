"""How an :class:`~tfdml.search.Index` searches its embeddings: one interface,
:class:`Backend`, and one class per way of searching, chosen by the index's
``backend=`` and ``approximate=`` names through one table (:func:`backend_for`).

=================  ===============  =========================================
``backend``        ``approximate``  class
=================  ===============  =========================================
``"tensorflow"``   ``None``         :class:`TensorFlowExact` (the metrics' kNN)
``"faiss"``        ``None``         :class:`FaissFlat` (exact)
``"faiss"``        ``"hnsw"``       :class:`FaissHNSW` (a graph)
``"faiss"``        ``"ivf"``        :class:`FaissIVF` (k-means cells)
=================  ===============  =========================================

The parameters of each class and their defaults are its :attr:`Backend.defaults`
(see :class:`~tfdml.search.Index` for what they do); one validation
(:meth:`Backend.checked`) serves them all. The faiss structures are never
saved: they are rebuilt from the embeddings.
"""

import numpy as np

from tfdml import distance_names
from tfdml.metrics import knn as _knn


def import_faiss():
    """The faiss module, or a ValueError saying how to install it."""
    try:
        import faiss
    except ImportError:
        raise ValueError(
            "backend='faiss' needs the faiss package: pip install faiss-cpu (or tfdml[faiss]), "
            "or use backend='tensorflow'."
        ) from None
    return faiss


class Backend:
    """One way of searching an index's embeddings.

    Made with the index's distance, chunk size and parameters (checked against
    :attr:`defaults`, missing ones set to their default). The first
    :meth:`search` after :meth:`reset` builds the backend's structure from the
    embeddings (:meth:`build`); later searches reuse it until the index
    changes and calls :meth:`reset` again.

    A subclass sets :attr:`name`, :attr:`approximate`, :attr:`defaults` and
    :attr:`minimums`, and implements :meth:`build` and :meth:`query`.
    """

    #: The ``backend=`` name of the index.
    name = None
    #: The ``approximate=`` name (``None``: exact search).
    approximate = None
    #: Parameter name -> default (``None``: computed when the structure is built).
    defaults = {}
    #: Parameter name -> smallest valid value, where it is above 1.
    minimums = {}

    def __init__(self, distance, chunk_size=None, **params):
        self.distance = distance
        self.chunk_size = chunk_size
        self.params = self.checked(params)
        self.structure = None

    @classmethod
    def checked(cls, params):
        """``params`` (name -> value, ``None``: the default) checked, in :attr:`defaults` order."""
        given = {k: v for k, v in params.items() if v is not None}
        if cls.approximate is None:
            if given:
                choices = " or ".join(f"approximate={c.approximate!r} ({', '.join(c.defaults)})"
                                      for c in _TABLE.values() if c.approximate is not None)
                raise ValueError(
                    f"{', '.join(sorted(given))} only apply to approximate search; pass "
                    f"{choices}, or drop them for exact search."
                )
            return {}
        wrong = sorted(k for k in given if k not in cls.defaults)
        if wrong:
            raise ValueError(
                f"{', '.join(wrong)} do not apply to approximate={cls.approximate!r}; its "
                f"parameters are {', '.join(cls.defaults)}."
            )
        out = {}
        for name, default in cls.defaults.items():
            value = given.get(name, default)
            if value is not None:
                if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
                        or value < 1:
                    raise ValueError(f"{name} must be a positive integer, got {value!r}.")
                value = int(value)
            out[name] = value
        for name, least in cls.minimums.items():
            if out[name] < least:
                raise ValueError(f"{name} must be at least {least}, got {out[name]}.")
        return out

    @property
    def settings(self):
        """``{"backend", "approximate", <parameters>}``, as index files store them."""
        return {"backend": self.name, "approximate": self.approximate, **self.params}

    def set_params(self, **params):
        """Change parameters (``None``: unchanged) without dropping the built structure."""
        self.params = self.checked({**self.params, **{k: v for k, v in params.items()
                                                      if v is not None}})

    def reset(self):
        """Forget the structure built from the embeddings (they changed)."""
        self.structure = None

    def search(self, embeddings, queries, k):
        """``(positions int64 [Q, k'], distances float32 [Q, k'])`` of the ``k`` nearest rows
        of ``embeddings`` [N, d] to each of ``queries`` [Q, d] (both checked float32, Q and
        N > 0), nearest first, ``k' = min(k, N)``; cosine as ``1 - cos``."""
        if self.structure is None:
            self.structure = self.build(embeddings)
        return self.query(embeddings, queries, k)

    def build(self, embeddings):
        """The structure :meth:`query` searches, made from ``embeddings``."""
        raise NotImplementedError

    def query(self, embeddings, queries, k):
        """:meth:`search`, once :attr:`structure` is built."""
        raise NotImplementedError


class TensorFlowExact(Backend):
    """Exact search with :func:`tfdml.metrics.knn.knn`, the retrieval metrics' code: by
    chunks of ``chunk_size`` queries, equal distances ranking the row added first first."""

    name = "tensorflow"

    def build(self, embeddings):
        # Once per content: centring the gallery costs more than a small search.
        return _knn.PreparedGallery(embeddings, self.distance)

    def query(self, embeddings, queries, k):
        pos, values = _knn.knn(queries, self.structure, k=k, distance=self.distance,
                               chunk_size=self.chunk_size)
        if distance_names.is_similarity(self.distance):
            # 1 - cos, clipped: identical vectors give 0, not -1e-7.
            values = np.maximum(1.0 - values, 0.0).astype(np.float32)
        return pos, values


class FaissFlat(Backend):
    """Exact search with a flat faiss index (inner product on unit vectors for cosine).

    The subclasses change the structure (:meth:`new`) and how it is searched
    (:meth:`search_structure`); a query for which it finds fewer than ``k``
    rows is searched again exactly, so every query gets ``min(k, N)`` rows.
    """

    name = "faiss"

    def __init__(self, distance, chunk_size=None, **params):
        super().__init__(distance, chunk_size, **params)
        import_faiss()

    def _prepare(self, x):
        x = np.array(x, np.float32, order="C")
        if distance_names.is_similarity(self.distance):
            x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        return x

    def _metric(self, faiss):
        return faiss.METRIC_INNER_PRODUCT if distance_names.is_similarity(self.distance) \
            else faiss.METRIC_L2

    def _flat(self, faiss, d):
        return (faiss.IndexFlatIP if distance_names.is_similarity(self.distance)
                else faiss.IndexFlatL2)(d)

    def new(self, faiss, x):
        """An empty faiss index for the prepared rows ``x`` (trained if it needs it)."""
        return self._flat(faiss, x.shape[1])

    def search_structure(self, faiss, q, k):
        """``(values, positions)`` of ``faiss.Index.search`` with this backend's width."""
        return self.structure.search(q, k)

    def build(self, embeddings):
        faiss = import_faiss()
        x = self._prepare(embeddings)
        index = self.new(faiss, x)
        index.add(x)
        return index

    def query(self, embeddings, queries, k):
        faiss = import_faiss()
        k = min(k, embeddings.shape[0])
        q = self._prepare(queries)
        values, pos = self.search_structure(faiss, q, k)
        short = np.flatnonzero((pos < 0).any(axis=1))
        if short.size:  # fewer than k found (IVF cells too small, HNSW graph): exact search
            values[short], pos[short] = faiss.knn(q[short], self._prepare(embeddings), k,
                                                  metric=self._metric(faiss))
        if distance_names.is_similarity(self.distance):
            values = np.maximum(1.0 - values, 0.0)
        else:
            values = np.sqrt(np.maximum(values, 0.0))
        return pos.astype(np.int64), values.astype(np.float32)


class FaissHNSW(FaissFlat):
    """``faiss.IndexHNSWFlat``: ``hnsw_m`` neighbours per node, built with width
    ``ef_construction``, searched with width ``max(ef_search, k)``."""

    approximate = "hnsw"
    defaults = {"hnsw_m": 32, "ef_construction": 80, "ef_search": 64}
    minimums = {"hnsw_m": 2}

    def new(self, faiss, x):
        index = faiss.IndexHNSWFlat(x.shape[1], self.params["hnsw_m"], self._metric(faiss))
        index.hnsw.efConstruction = self.params["ef_construction"]
        return index

    def search_structure(self, faiss, q, k):
        params = faiss.SearchParametersHNSW(efSearch=max(self.params["ef_search"], k))
        return self.structure.search(q, k, params=params)


class FaissIVF(FaissFlat):
    """``faiss.IndexIVFFlat``: ``nlist`` k-means cells (default ``round(sqrt(N))``, at
    most ``N // 39``; a given one at most N), ``min(nprobe, nlist)`` visited per query."""

    approximate = "ivf"
    defaults = {"nlist": None, "nprobe": 16}

    def new(self, faiss, x):
        n, d = x.shape
        nlist = self.params["nlist"] or int(round(np.sqrt(n)))
        nlist = max(1, min(nlist, n // 39 if self.params["nlist"] is None else n))
        quantizer = self._flat(faiss, d)
        index = faiss.IndexIVFFlat(quantizer, d, nlist, self._metric(faiss))  # keeps quantizer alive
        index.cp.seed = 1234  # faiss's default, stated: the same data gives the same cells
        index.train(x)
        return index

    def search_structure(self, faiss, q, k):
        nprobe = min(self.params["nprobe"], self.structure.nlist)
        return self.structure.search(q, k, params=faiss.SearchParametersIVF(nprobe=nprobe))


#: ``(backend, approximate)`` -> the class that searches so.
_TABLE = {(cls_.name, cls_.approximate): cls_
          for cls_ in (TensorFlowExact, FaissFlat, FaissHNSW, FaissIVF)}

#: Search backends of an :class:`~tfdml.search.Index`.
BACKENDS = tuple(dict.fromkeys(name for name, _ in _TABLE))

#: Approximate structures of an :class:`~tfdml.search.Index` (``None``: exact search).
APPROXIMATE = tuple(dict.fromkeys(kind for _, kind in _TABLE if kind is not None))

#: Defaults of the approximate structures' parameters (see :class:`~tfdml.search.Index`).
HNSW_DEFAULTS = FaissHNSW.defaults
IVF_DEFAULTS = FaissIVF.defaults


def backend_for(backend, approximate):
    """The :class:`Backend` class of ``backend`` and ``approximate``, or a ValueError
    naming the choices."""
    if backend not in BACKENDS:
        raise ValueError(
            f"Unknown index backend {backend!r}; choose one of {', '.join(BACKENDS)}."
        )
    if approximate is not None and approximate not in APPROXIMATE:
        raise ValueError(
            f"Unknown approximate search {approximate!r}; choose one of "
            f"{', '.join(APPROXIMATE)}, or None for exact search."
        )
    if (backend, approximate) not in _TABLE:
        offered = " or ".join(f"backend={name!r}" for name, kind in _TABLE if kind == approximate)
        own = [repr(kind) for name, kind in _TABLE if name == backend and kind is not None]
        has = f"offers approximate={' or '.join(own)} only" if own else "is exact only"
        raise ValueError(f"approximate={approximate!r} needs {offered} (the {backend} backend {has}).")
    return _TABLE[backend, approximate]
