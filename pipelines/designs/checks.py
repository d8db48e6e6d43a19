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



def option_value(spec, value, name):
    """``value`` of the argument ``name`` checked against its range in a design's
    ``config_options`` entry ``spec`` (``min``: an integer >= it; ``between``: a number
    strictly inside), the message saying why the bound holds."""
    why = f" ({spec['why']})" if spec.get("why") else ""
    if "min" in spec:
        return positive_int(value, name, spec["min"], why)
    low, high = spec["between"]
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not low < float(value) < high:
        raise ValueError(f"{name} must lie strictly between {low:g} and {high:g}{why}, got {value!r}.")
    return float(value)


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

