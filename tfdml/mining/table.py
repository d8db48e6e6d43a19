"""The table of smart mining (Harwood et al., "Smart Mining for Deep Metric Learning", ICCV
2017): for every example of the training split, its k nearest neighbours of another
class, found through a nearest-neighbour index of the split's embeddings
(:class:`tfdml.search.Index`: exact, or approximate with faiss's HNSW graph or IVF cells in
the place of the paper's FANNG graph)."""

import numpy as np

__all__ = ["hard_negative_table"]


def hard_negative_table(embeddings, labels, k, distance="euclidean", backend="tensorflow",
                        approximate=None, **search_params):
    """``[N, k]`` int32: row i holds the indices (rows of ``embeddings``) of the ``k``
    nearest examples to example i whose label differs from ``labels[i]``, nearest first.

    ``embeddings`` [N, d], ``labels`` [N] (integers). ``distance``, ``backend``,
    ``approximate`` and ``search_params`` (``hnsw_m``, ``ef_search``, ``nlist``, ``nprobe``,
    ...) make the :class:`tfdml.search.Index` that is searched; each example queries it for
    its ``k + N_c`` nearest entries (N_c the size of its class), enough for k of another
    class under exact search. An approximate search may return fewer than k of another
    class among them: the row is then filled with the nearest ones found again in order
    (never an example of the same class), so the table keeps its shape.

    Raises ValueError when some class leaves fewer than ``k`` examples of other classes.
    """
    from tfdml.search import Index

    x = np.asarray(embeddings, np.float32)
    y = np.asarray(labels).reshape(-1)
    if x.ndim != 2 or x.shape[0] != y.shape[0]:
        raise ValueError(f"embeddings must be [N, d] with one label per row; got {x.shape} and "
                         f"{y.shape[0]} labels.")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"labels must be integer class ids, got dtype {y.dtype}.")
    k = int(k)
    if k < 1:
        raise ValueError(f"k must be a positive integer, got {k}.")
    classes, dense, sizes = np.unique(y, return_inverse=True, return_counts=True)
    n = x.shape[0]
    if n - sizes.max() < k:
        raise ValueError(f"k={k} neighbours of another class, but the largest class leaves "
                         f"{n - int(sizes.max())} examples of other classes; use k <= "
                         f"{n - int(sizes.max())}.")
    index = Index(distance=distance, backend=backend, approximate=approximate, **search_params)
    index.add(x, np.arange(n, dtype=np.int64))
    table = np.empty((n, k), np.int32)
    # One search per distinct width: classes of one size share it.
    for size in np.unique(sizes):
        rows = np.flatnonzero(sizes[dense] == size)
        found, _ = index.search(x[rows], k=min(n, k + int(size)))
        found = found.astype(np.int64)
        other = dense[found] != dense[rows][:, None]
        # Each row's hits of another class first, in search order; a row with fewer than k
        # repeats them cyclically to fill its k slots.
        hits = np.take_along_axis(found, np.argsort(~other, axis=1, kind="stable"), axis=1)
        count = other.sum(axis=1)
        slots = np.arange(k)[None, :] % np.maximum(count, 1)[:, None]
        table[rows] = np.take_along_axis(hits, slots, axis=1)
        for row in rows[count == 0]:  # approximate search found none: exact search for this row
            table[row] = _exact_other_class(x, dense, row, k, distance)
    return table


def _exact_other_class(x, dense, row, k, distance):
    """The k nearest examples to ``row`` of another class, by exact search (cosine: the
    order of 1 − cos, the Euclidean order of the unit rows)."""
    z = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12) if distance == "cosine" else x
    exact = np.argsort(np.linalg.norm(z - z[row], axis=1), kind="stable")
    return np.resize(exact[dense[exact] != dense[row]][:k], k)
