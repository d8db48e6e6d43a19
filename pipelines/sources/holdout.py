"""The validation split held out of the training split (:func:`hold_out`)."""

import numpy as np


#: How :func:`hold_out` picks the validation split out of the training split.
VALIDATION_MODES = ("classes", "examples")


def hold_out(split, fraction, mode="classes", seed=0):
    """Split ``split`` (the training split) into ``(train, validation)``.

    ``mode="classes"`` (open set, as the test split): round(fraction × L)
    whole classes, at least 1 and at most L − 1, go to validation.
    ``mode="examples"``: of each class with n ≥ 2 examples, round(fraction × n)
    examples (at least 1, at most n − 1) go to validation; the classes are the
    training ones. The choice depends only on ``seed``, the labels and the
    example order (NumPy's PCG64 generator: the same on every machine). Both
    returned splits have labels 0..L−1 of their own and keep the class ids.
    """
    if mode not in VALIDATION_MODES:
        raise ValueError(f"validation mode {mode!r} is not one of {VALIDATION_MODES}.")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 < fraction < 1.0:
        raise ValueError(f"validation fraction must lie strictly between 0 and 1, got {fraction!r}.")
    rng = np.random.default_rng(seed)
    labels = split.labels
    if mode == "classes":
        if split.num_classes < 2:
            raise ValueError(
                f"the training split has {split.num_classes} class; holding out validation classes "
                "needs at least 2 (use validation mode 'examples', or more training classes)."
            )
        count = min(max(1, int(round(fraction * split.num_classes))), split.num_classes - 1)
        held = np.sort(rng.permutation(split.num_classes)[:count])
        in_val = np.isin(labels, held)
    else:
        in_val = np.zeros(labels.size, dtype=bool)
        for c in range(split.num_classes):
            members = np.flatnonzero(labels == c)
            if members.size < 2:
                continue
            count = min(max(1, int(round(fraction * members.size))), members.size - 1)
            in_val[rng.permutation(members)[:count]] = True
        if not in_val.any():
            raise ValueError("no training class has 2 examples or more; nothing can be held out.")
    return (split.subset(np.flatnonzero(~in_val), split.name),
            split.subset(np.flatnonzero(in_val), "validation"))
