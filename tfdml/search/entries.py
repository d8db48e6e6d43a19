"""What an :class:`~tfdml.search.Index` holds, checked on the way in: its distance, its
ids and labels (:func:`as_keys`) and its embeddings.

* **Distances** are "smaller is closer": ``"euclidean"`` is the euclidean
  distance, ``"cosine"`` is the cosine *distance* ``1 - cos(q, g)`` (in
  [0, 2]), so one threshold rule (``distance <= threshold``) serves both.
* **Ids** and **labels** are int64 (any value of int64, kept exactly: they
  never pass through a float) or strings; one kind per index.
"""

import numpy as np

from tfdml import distance_names

#: Distances an :class:`~tfdml.search.Index` can search by (what it reports for each:
#: :data:`tfdml.distance_names.REPORTED`).
DISTANCES = ("cosine", "euclidean")


def check_distance(distance):
    """``distance`` if an index can search by it, else a ValueError naming the choices."""
    return distance_names.check(distance, DISTANCES, what="index distance",
                                hint=" (cosine is reported as the distance 1 - cosine similarity)")


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


def kind(keys):
    """``"int64"`` or ``"str"``: the kind of an :func:`as_keys` array."""
    return "int64" if keys.dtype.kind == "i" else "str"


def as_embeddings(x, name, dim=None):
    """``x`` as a finite float32 [n, dim] array (one vector [dim] becomes [1, dim]),
    or a ValueError naming the problem and the fix; ``dim=None``: any dimension."""
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
