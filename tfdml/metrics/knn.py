"""Exact k-nearest-neighbour search in TensorFlow, by chunks of queries.

The [Q, N] matrix of query-to-gallery scores is never built whole: queries are
processed ``chunk_size`` at a time, one matmul (:func:`tfdml.primitives.scores`)
and one ``tf.math.top_k`` per chunk, so memory grows with ``chunk_size × N``.

Two settings, as in the retrieval protocols of Wu et al. 2017 §5 (Song et al.'s
leave-one-out on the test classes) and In-Shop style query/gallery splits:

* **leave-one-out** (``gallery=None``): every query searches all the other
  examples; the query itself is removed by index (so an exact duplicate of a
  query is still a valid neighbour).
* **query / gallery**: queries search a separate gallery; nothing is removed.

Conventions (shared by :mod:`tfdml.metrics.retrieval`):

* A *score* is "larger is closer": minus the squared euclidean distance, which
  orders pairs as Wu's D_ij does; for cosine similarity (Lu et al. 2019 §3.1)
  the rows are put on the unit sphere first, where ``cos = 1 - d²/2``
  (:func:`ranking_frame`). On unit-norm embeddings every distance therefore
  ranks on the same numbers and gives the same neighbour order.
* **Ties** in :func:`knn`: equal scores are returned lower gallery index
  first (``tf.math.top_k`` is stable), whatever the distance.
* **k larger than the gallery**: the search returns ``min(k, N_eff)``
  neighbours, ``N_eff`` being the gallery size (minus one in leave-one-out).
"""

import numpy as np
import tensorflow as tf

from tfdml import distance_names as _distance_names
from tfdml import primitives

#: Distances a retrieval metric can rank by.
RETRIEVAL_DISTANCES = _distance_names.DISTANCES

#: Default budget for one chunk's [chunk, N] float32 score matrix (elements).
DEFAULT_CHUNK_ELEMENTS = 2**23


def as_embeddings(x, name="embeddings"):
    """A finite float32 [N, d] NumPy array, or a ValueError saying what is wrong."""
    if isinstance(x, tf.Tensor):
        x = x.numpy()
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(
            f"{name} must be a rank-2 array [num_examples, dim], got shape {x.shape}; "
            "flatten or pool the model output to one vector per example."
        )
    if x.shape[0] == 0:
        raise ValueError(f"{name} is empty: evaluation needs at least one example.")
    if not np.issubdtype(x.dtype, np.number):
        raise ValueError(f"{name} must be numeric, got dtype {x.dtype}.")
    x = x.astype(np.float32, copy=False)
    if not np.all(np.isfinite(x)):
        bad = int(np.sum(~np.all(np.isfinite(x), axis=1)))
        raise ValueError(
            f"{name} has {bad} row(s) with NaN or Inf: the model diverged or its input "
            "was not normalised; no ranking can be computed."
        )
    return x


def check_distance(distance):
    """``distance`` if a retrieval metric can rank by it (:data:`RETRIEVAL_DISTANCES`)."""
    return _distance_names.check(distance, RETRIEVAL_DISTANCES, what="retrieval distance")


def chunk_size_for(num_gallery, chunk_size=None, max_elements=DEFAULT_CHUNK_ELEMENTS):
    """Queries per chunk: ``chunk_size`` if given, else as many as fit ``max_elements``."""
    if chunk_size is not None:
        chunk_size = int(chunk_size)
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {chunk_size}.")
        return chunk_size
    return int(max(16, min(4096, max_elements // max(int(num_gallery), 1))))


def unit_tolerance(dim):
    """How far ``||x||²`` may be from 1 for ``x`` to count as a unit vector: ``max(1e-6, d·2⁻²⁴)``.

    That is float32's rounding bound for a ``d``-term dot product, so such a row
    is a unit vector to working precision (an L2-normalised model output is).
    """
    return float(max(1e-6, int(dim) * 2.0**-24))


def to_sphere(x):
    """``x`` (TF, float32 [N, d]) with every row that is not already unit-norm normalised.

    Rows within :func:`unit_tolerance` of unit norm are kept bit for bit, so
    cosine ranks a model's L2-normalised embeddings on exactly the numbers
    euclidean ranks them on. Used in eager (:func:`ranking_frame`) and inside
    exported graphs (:func:`tfdml.search.export_lookup`): one rule.
    """
    x = tf.convert_to_tensor(x, tf.float32)
    squared_norm = tf.reduce_sum(tf.square(x), axis=1, keepdims=True)
    is_unit = tf.abs(squared_norm - 1.0) <= unit_tolerance(x.shape[-1])
    return tf.where(is_unit, x, tf.math.l2_normalize(x, axis=1))


def ranking_frame(query, gallery, distance="euclidean"):
    """``(query, gallery)`` as every distance is ranked: on the sphere for cosine, centred.

    **One ranking for all distances.** Scores are always minus the squared
    euclidean distance (:func:`tfdml.primitives.scores`). For cosine the rows are first put on
    the unit sphere (:func:`to_sphere`), where ``cos = 1 - d²/2`` orders pairs
    exactly as ``d`` does. So on unit-norm embeddings cosine, euclidean and
    squared euclidean rank on the same float32 numbers and return the same
    neighbour order, ties included (lower gallery index first).

    **Centring.** Both are then measured from the mean of the gallery's finite
    rows. Distances do not change, but their expansion in :func:`tfdml.primitives.scores`
    keeps its accuracy for nearly collapsed embeddings (an untrained model's,
    near duplicates), as :func:`tfdml.distances.pairwise_squared_euclidean`
    does for a batch, with one pass over the data instead of one per chunk of
    queries. The same array for both (leave-one-out) stays one array.

    Raises a ValueError for cosine when a row has zero norm (no direction).
    """
    same = query is gallery
    if _distance_names.is_similarity(distance):
        check_directions(query, "query")
    centred, centre = _centred_gallery(gallery, distance)
    return (centred if same else frame_queries(query, centre, distance, checked=True)), centred


def _centred_gallery(gallery, distance):
    """``(gallery in the frame, its centre)``: on the sphere for cosine, then centred."""
    if _distance_names.is_similarity(distance):
        check_directions(gallery, "gallery")
        gallery = to_sphere(gallery).numpy()
    centre = frame_centre(gallery)
    return gallery - centre, centre


def frame_queries(query, centre, distance="euclidean", checked=False):
    """``query`` in the frame of a gallery centred on ``centre`` (:func:`ranking_frame`)."""
    if _distance_names.is_similarity(distance):
        if not checked:
            check_directions(query, "query")
        query = to_sphere(query).numpy()
    return query - centre


def gallery_tensors(centred):
    """``(rows, squared norms)`` of a gallery already in the frame, as tensors: computed
    once for every chunk of queries scored against it (:func:`tfdml.primitives.scores`)."""
    rows = tf.constant(centred)
    return rows, primitives.squared_norms(rows)


class PreparedGallery:
    """A gallery put in the ranking frame once, for many :func:`knn` calls.

    Given a plain array, :func:`knn` checks the gallery, puts it on the sphere
    (cosine), centres it (:func:`ranking_frame`) and computes its squared
    norms on every call: passes over the whole gallery that cost more than
    the search itself when a call has few queries (``Index.search`` of one
    query; benchmarks/RESULTS.md, "Lookups of a few queries").
    This holds the result: the centred rows as one float32 tensor (one copy of
    the gallery), their squared norms and the centre. :func:`knn` on it returns
    exactly what it returns on the array. It does not follow later changes of
    the array it was made from: make a new one then (``Index`` does, on
    ``add`` and ``remove``).
    """

    def __init__(self, gallery, distance="euclidean"):
        self.distance = check_distance(distance)
        centred, self.centre = _centred_gallery(as_embeddings(gallery, "gallery"), distance)
        self.rows, self.squared_norms = gallery_tensors(centred)

    @property
    def shape(self):
        return tuple(self.rows.shape)


def check_directions(x, name):
    """Raise a ValueError naming the all-zero rows of ``x``: cosine has no direction for them."""
    zero = np.flatnonzero(~np.any(x != 0, axis=1))
    if zero.size:
        raise ValueError(
            f"{name} row(s) {zero[:5].tolist()} are all zeros: cosine similarity "
            "has no direction to compare; drop them or rank by euclidean distance."
        )


def frame_centre(gallery):
    """The mean of the gallery's finite rows, in the gallery's dtype: the origin of the frame."""
    finite = np.all(np.isfinite(gallery), axis=1, keepdims=True)
    c = np.zeros(gallery.shape[1], np.float64)
    if finite.any():
        c = np.mean(gallery, axis=0, dtype=np.float64, where=finite)
    return c.astype(gallery.dtype)


def squared_to_distances(d2, distance="euclidean"):
    """Squared euclidean distances (in the frame) as the distance the user named (cosine: similarity)."""
    d2 = np.maximum(np.asarray(d2, np.float64), 0.0)
    if _distance_names.is_similarity(distance):
        return np.clip(1.0 - 0.5 * d2, -1.0, 1.0).astype(np.float32)
    return (np.sqrt(d2) if distance == "euclidean" else d2).astype(np.float32)


#: Budget (elements) for the [rows, k, d] differences of :func:`exact_neighbours`.
_EXACT_ELEMENTS = 2**22


def exact_neighbours(query, gallery, indices):
    """``(indices, d2)`` of found neighbours, squared distances from the differences, re-ordered.

    The matmul expansion ranks a whole gallery fast but rounds a distance to
    about ``2⁻²⁴·(||q||² + ||g||²)``: an exact duplicate away from the centre
    comes out at ~3e-4, not 0. The ``k`` neighbours found are few, so their
    squared distances are recomputed from ``q - g`` in float64 (exact
    duplicates: 0) and the row re-sorted by them, equal values lower index
    first. Both arrays are in the frame of :func:`ranking_frame`.
    """
    indices = np.asarray(indices, np.int64)
    d2 = np.empty(indices.shape, np.float64)
    rows = max(1, _EXACT_ELEMENTS // max(1, indices.shape[1] * gallery.shape[1]))
    for start in range(0, indices.shape[0], rows):
        q = query[start : start + rows, None, :].astype(np.float64)
        found = indices[start : start + rows]
        found = (tf.gather(gallery, found).numpy() if isinstance(gallery, tf.Tensor)
                 else gallery[found])  # a PreparedGallery's rows are a tensor
        diff = q - found.astype(np.float64)
        d2[start : start + rows] = np.einsum("qkd,qkd->qk", diff, diff)
    order = np.lexsort((indices, d2), axis=1)
    return np.take_along_axis(indices, order, 1), np.take_along_axis(d2, order, 1)


def self_indices(start, size, leave_one_out):
    """int32 [size]: the gallery index of each query of a chunk, or -1 (keep all)."""
    if leave_one_out:
        return np.arange(start, start + size, dtype=np.int32)
    return np.full(size, -1, np.int32)


@tf.function(reduce_retracing=True, autograph=False)
def _topk_chunk(query, gallery, gallery_squared_norms, self_index, k):
    s = primitives.exclude_self(primitives.scores(query, gallery, gallery_squared_norms), self_index)
    return tf.math.top_k(s, k=k, sorted=True)


def knn(query, gallery=None, k=1, distance="euclidean", chunk_size=None, query_index=None):
    """The ``k`` nearest gallery items of every query, exact, by chunks.

    Args:
      query: [Q, d] embeddings.
      gallery: [N, d] embeddings, a :class:`PreparedGallery` of them (for
        many calls on one gallery), or ``None`` for leave-one-out within ``query``.
      k: neighbours per query; capped at the gallery size (``N - 1`` in
        leave-one-out), so the result may have fewer columns than ``k``.
      distance: ``"euclidean"``, ``"squared_euclidean"`` or ``"cosine"``.
      chunk_size: queries per chunk (memory ∝ chunk_size × N); default: as
        many as keep one chunk's score matrix under 32 MiB.
      query_index: int [Q], for queries that are themselves gallery items
        (e.g. a few picked queries searched against the whole set): each
        query's own gallery index, removed from its results (-1: none).
        Leave-one-out uses ``arange(Q)``. With it, ``k`` is capped at N - 1.

    Returns:
      ``(indices, values)``: int64 [Q, k'] gallery indices, nearest first
      (equal distances: lower index first, whichever distance is named), and
      float32 [Q, k'] distances (cosine: similarities), ``k' = min(k, N_eff)``.
      The neighbours are found by the chunked matmul and then measured and
      ordered from their differences (:func:`exact_neighbours`): exact
      duplicates are at distance 0.
    """
    check_distance(distance)
    query = as_embeddings(query, "query")
    leave_one_out = gallery is None
    prepared = gallery if isinstance(gallery, PreparedGallery) else None
    if prepared is not None and prepared.distance != distance:
        raise ValueError(f"The gallery was prepared for {prepared.distance!r}, not {distance!r}: "
                         f"prepare it again with distance={distance!r}.")
    if prepared is None:
        gallery = query if leave_one_out else as_embeddings(gallery, "gallery")
    if gallery.shape[1] != query.shape[1]:
        raise ValueError(
            f"query and gallery dimensions differ ({query.shape[1]} vs {gallery.shape[1]})."
        )
    if int(k) < 1:
        raise ValueError(f"k must be a positive integer, got {k}.")
    if query_index is not None:
        query_index = np.asarray(query_index, np.int32).reshape(-1)
        if query_index.size != query.shape[0]:
            raise ValueError("query_index must give one gallery index (or -1) per query.")
    excludes = leave_one_out or query_index is not None
    n_eff = gallery.shape[0] - int(excludes)
    k_eff = min(int(k), n_eff)
    num_q = query.shape[0]
    if k_eff <= 0:
        return np.zeros((num_q, 0), np.int64), np.zeros((num_q, 0), np.float32)
    chunk = chunk_size_for(gallery.shape[0], chunk_size)
    if prepared is None:
        query, gallery = ranking_frame(query, gallery, distance)
        g, g_norms = gallery_tensors(gallery)
    else:
        query = frame_queries(query, prepared.centre, distance)
        gallery = g = prepared.rows
        g_norms = prepared.squared_norms
    out_i, out_v = [], []
    for start in range(0, num_q, chunk):
        q = tf.constant(query[start : start + chunk])
        self_index = (self_indices(start, q.shape[0], leave_one_out) if query_index is None
                      else query_index[start : start + chunk])
        _, i = _topk_chunk(q, g, g_norms, tf.constant(self_index), k_eff)
        i, d2 = exact_neighbours(query[start : start + chunk], gallery, i.numpy())
        out_i.append(i)
        out_v.append(d2)
    return np.concatenate(out_i), squared_to_distances(np.concatenate(out_v), distance)
