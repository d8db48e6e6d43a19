"""What a batch design refuses: arguments out of range and a training split it cannot draw from."""

import numpy as np


def labels_of(split_or_labels):
    labels = getattr(split_or_labels, "labels", split_or_labels)
    labels = np.asarray(labels)
    if labels.ndim != 1:
        labels = labels.reshape(-1)
    if labels.size == 0:
        raise ValueError("The training split has no examples; a batch design needs labelled examples.")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"Labels must be integer class ids, got dtype {labels.dtype}.")
    return labels.astype(np.int32)


def positive_int(value, name, minimum=1, why=""):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}{why}, got {value!r}.")
    return int(value)



def split_batch_arg(m, count, batch_size, count_name):
    """Resolve ``count`` (classes per batch) from ``batch_size`` when that is given."""
    if (count is None) == (batch_size is None):
        raise ValueError(f"Give exactly one of {count_name} and batch_size.")
    if batch_size is not None:
        batch_size = positive_int(batch_size, "batch_size")
        if batch_size % m:
            raise ValueError(
                f"batch_size={batch_size} is not divisible by m={m}; use a multiple of m "
                f"(e.g. {m * max(2, batch_size // m)})."
            )
        count = batch_size // m
    return count

