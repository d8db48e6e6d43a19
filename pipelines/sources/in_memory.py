"""The ``"arrays"`` source: in-memory ``features`` [N, ...] and ``labels`` [N] (any
numeric data, not only images)."""

import numpy as np

from pipelines.sources.core import _array_source


def arrays(features, labels, train_classes=None, test_classes=None):
    """In-memory (features, labels); values kept as given, loaded as float32; first half of classes train."""
    features = np.asarray(features)
    if features.ndim < 2:
        raise ValueError(f"features must be [N, ...] with one row per example, got shape {features.shape}.")
    if not (np.issubdtype(features.dtype, np.number) or features.dtype == bool):
        raise ValueError(f"features must be numeric, got dtype {features.dtype}.")
    # Stored as given (uint8 stays compact), cast to float32 when loaded.
    return _array_source("arrays", features, labels, 1.0, features.shape[1:],
                         train_classes, test_classes)
