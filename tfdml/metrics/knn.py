"""Exact k-nearest-neighbour search in TensorFlow, by chunks of queries.

The [Q, N] matrix of query-to-gallery scores is never built whole: queries are
processed ``chunk_size`` at a time, one matmul (:func:`tfdml.distances.pairwise`)
and one ``tf.math.top_k`` per chunk, so memory grows with ``chunk_size × N``.

Two settings, as in the retrieval protocols of Wu et al. 2017 §5 (Song et al.'s
leave-one-out on the test classes) and In-Shop style query/gallery splits:

* **leave-one-out** (``gallery=None``): every query searches all the other
  examples; the query itself is removed by index (so an exact duplicate of a
  query is still a valid neighbour).
* **query / gallery**: queries search a separate gallery; nothing is removed.

Conventions (shared by :mod:`tfdml.metrics.retrieval`):

* A *score* is "larger is closer": cosine similarity (Lu et al. 2019 §3.1) or
  the negated squared euclidean distance (same order as Wu's D_ij).
* **Ties** in :func:`knn`: equal scores are returned lower gallery index
  first (``tf.math.top_k`` is stable).
* **k larger than the gallery**: the search returns ``min(k, N_eff)``
  neighbours, ``N_eff`` being the gallery size (minus one in leave-one-out).
"""

import numpy as np
import tensorflow as tf

from tfdml import distances as _distances

#: Distances a retrieval metric can rank by.
RETRIEVAL_DISTANCES = ("euclidean", "squared_euclidean", "cosine")

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
    if distance not in RETRIEVAL_DISTANCES:
        raise ValueError(
            f"Unknown retrieval distance {distance!r}; choose one of "
            f"{', '.join(RETRIEVAL_DISTANCES)}."
        )
    return distance


def chunk_size_for(num_gallery, chunk_size=None, max_elements=DEFAULT_CHUNK_ELEMENTS):
    """Queries per chunk: ``chunk_size`` if given, else as many as fit ``max_elements``."""
    if chunk_size is not None:
        chunk_size = int(chunk_size)
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {chunk_size}.")
        return chunk_size
    return int(max(16, min(4096, max_elements // max(int(num_gallery), 1))))


def scores(query, gallery, distance="euclidean"):
    """[Q, N] "larger is closer" scores: cosine similarity or minus squared euclidean.

    Ranking by squared euclidean distance equals ranking by euclidean distance
    (Wu D_ij) and skips the square root over the whole matrix. The squared
    distance is expanded around the origin, chunk by chunk: pass ``query`` and
    ``gallery`` through :func:`centre` once beforehand to keep small distances
    accurate (:func:`tfdml.distances.pairwise_squared_euclidean`).
    """
    if distance == "cosine":
        return _distances.cosine_similarity(query, gallery)
    return -_distances.pairwise_squared_euclidean(query, gallery, centre=False)


def centre(query, gallery, distance="euclidean"):
    """``(query, gallery)`` measured from the mean of the gallery's finite rows.

    Euclidean distances do not change, but their expansion in :func:`scores`
    keeps its accuracy for nearly collapsed embeddings (e.g. an untrained
    model's), as :func:`tfdml.distances.pairwise_squared_euclidean` does for a
    batch, with one pass over the data instead of one per chunk of queries.
    Cosine similarity is not translation invariant: returned unchanged. The
    same array for both (leave-one-out) stays one array.
    """
    if distance == "cosine":
        return query, gallery
    finite = np.all(np.isfinite(gallery), axis=1, keepdims=True)
    c = np.zeros(gallery.shape[1], np.float64)
    if finite.any():
        c = np.mean(gallery, axis=0, dtype=np.float64, where=finite)
    c = c.astype(gallery.dtype)
    centred = gallery - c
    return (centred if query is gallery else query - c), centred


def scores_to_distances(values, distance="euclidean"):
    """Turn scores from :func:`scores` back into the distance the user named."""
    if distance == "cosine":
        return values
    d2 = np.maximum(-np.asarray(values, np.float64), 0.0)
    return (np.sqrt(d2) if distance == "euclidean" else d2).astype(np.float32)


def exclude_self(score_chunk, self_index):
    """Score -inf where gallery column == ``self_index[i]`` (-1: exclude nothing)."""
    cols = tf.range(tf.shape(score_chunk)[1], dtype=self_index.dtype)
    is_self = tf.equal(cols[None, :], self_index[:, None])
    return tf.where(is_self, tf.constant(-np.inf, score_chunk.dtype), score_chunk)


def self_indices(start, size, leave_one_out):
    """int32 [size]: the gallery index of each query of a chunk, or -1 (keep all)."""
    if leave_one_out:
        return np.arange(start, start + size, dtype=np.int32)
    return np.full(size, -1, np.int32)


@tf.function(reduce_retracing=True)
def _topk_chunk(query, gallery, self_index, k, distance):
    s = exclude_self(scores(query, gallery, distance), self_index)
    return tf.math.top_k(s, k=k, sorted=True)


def knn(query, gallery=None, k=1, distance="euclidean", chunk_size=None, query_index=None):
    """The ``k`` nearest gallery items of every query, exact, by chunks.

    Args:
      query: [Q, d] embeddings.
      gallery: [N, d] embeddings, or ``None`` for leave-one-out within ``query``.
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
      (equal scores: lower index first), and float32 [Q, k'] distances
      (cosine: similarities), ``k' = min(k, N_eff)``.
    """
    check_distance(distance)
    query = as_embeddings(query, "query")
    leave_one_out = gallery is None
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
    query, gallery = centre(query, gallery, distance)
    g = tf.constant(gallery)
    out_i, out_v = [], []
    for start in range(0, num_q, chunk):
        q = tf.constant(query[start : start + chunk])
        self_index = (self_indices(start, q.shape[0], leave_one_out) if query_index is None
                      else query_index[start : start + chunk])
        v, i = _topk_chunk(q, g, tf.constant(self_index), k_eff, distance)
        out_i.append(i.numpy().astype(np.int64))
        out_v.append(v.numpy())
    return np.concatenate(out_i), scores_to_distances(np.concatenate(out_v), distance)
