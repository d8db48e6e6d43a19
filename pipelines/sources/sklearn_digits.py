"""The ``"digits"`` source: scikit-learn's ``load_digits`` (8×8×1, 1,797 images)."""

import numpy as np

from pipelines.sources.core import _array_source


def digits(train_classes=None, test_classes=None):
    """scikit-learn digits: 8×8×1 in [0, 1] (raw 0–16 / 16), classes 0–4 train, 5–9 test."""
    from sklearn.datasets import load_digits

    data = load_digits()
    pixels = data.images.reshape(-1, 8, 8, 1).astype(np.float32)
    return _array_source("digits", pixels, data.target.astype(np.int32), 1.0 / 16.0, (8, 8, 1),
                         train_classes, test_classes, default_train=5)
