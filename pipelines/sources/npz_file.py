"""The ``"npz"`` source: images and labels in a NumPy ``.npz`` file, optionally
with the file's own open-set split (a boolean ``test`` array)."""

import os
import zipfile

import numpy as np

from pipelines.sources.core import _array_source, class_labels


def npz(path=None, images="images", labels="labels", test=None, train_classes=None, test_classes=None):
    """Arrays of a NumPy ``.npz`` file: ``images`` [N, H, W] or [N, H, W, C] and ``labels`` [N].

    ``images`` and ``labels`` name the file's arrays. uint8 images are scaled
    by 1/255 to [0, 1]; other dtypes are kept as given. ``test`` names a
    boolean array [N] that marks the test examples: the split is then the
    file's own (it must be by class, open set: a class with examples on both
    sides is refused), and ``train_classes`` / ``test_classes`` do not apply.
    Without ``test``, sorted labels, first half train, as the arrays source.
    ``study/kanji_fonts.py`` writes such a file (``test="test"``,
    ``labels="codepoints"``).
    """
    if path is None:
        raise ValueError("the npz source needs path (a .npz file with images and labels arrays).")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"npz file {path!r} does not exist; give the path of a .npz file.")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a readable .npz file (not a zip archive of .npy arrays, as "
                         "numpy.savez writes).")
    try:
        with np.load(path, allow_pickle=False) as data:
            missing = [key for key in (images, labels, test) if key is not None and key not in data.files]
            if missing:
                raise ValueError(
                    f"{path} has no array {missing[0]!r}; its arrays are {sorted(data.files)}: set the "
                    "npz source's images / labels / test options to their names."
                )
            pixels, ids = data[images], data[labels]
            marks = None if test is None else data[test]
    except (OSError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(f"{path} is not a readable .npz file ({err}).") from None
    if pixels.ndim == 3:
        pixels = pixels[..., None]
    if pixels.ndim != 4:
        raise ValueError(f"{path}: {images!r} must be [N, H, W] or [N, H, W, C] images, got shape {pixels.shape}.")
    scale = 1.0 / 255.0 if pixels.dtype == np.uint8 else 1.0
    if marks is not None:
        if train_classes is not None or test_classes is not None:
            raise ValueError(f"the {test!r} array of {path} is the split; leave out train_classes / test_classes.")
        marks = np.asarray(marks).reshape(-1).astype(bool)
        ids = class_labels(ids, f"{path}: {labels!r}")
        if len(marks) != len(ids):
            raise ValueError(f"{path}: {test!r} has {len(marks)} entries for {len(ids)} labels; give one per example.")
        both = np.intersect1d(ids[marks], ids[~marks])
        if len(both):
            raise ValueError(
                f"{path}: classes {both[:5].tolist()} have examples in both splits; {test!r} must split by "
                "class (open set)."
            )
        train_classes = np.unique(ids[~marks]).tolist()
        test_classes = np.unique(ids[marks]).tolist()
    return _array_source("npz", pixels, ids, scale, pixels.shape[1:], train_classes, test_classes)
