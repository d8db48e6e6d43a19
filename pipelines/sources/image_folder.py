"""The ``"folder"`` source: images under ``root/<class>/<image>``, or a data
set already split into ``train/`` and ``test/`` folders; every file checked
once at construction, decoded and resized per batch in tf.data."""

import logging
import math
import os
import warnings

import numpy as np
import tensorflow as tf

from pipelines.sources.core import Source, Split, _class_split
from pipelines.sources.decoding import (IMAGE_EXTENSIONS, _check_resize, _EncodedLoader, _size_pair,
                                        is_hidden_or_system)

log = logging.getLogger(__name__)


def _scan(paths):
    """Native (height, width, channels) of each file, decoded in one parallel
    tf.data pass; -1 rows for files that cannot be read or decoded."""
    def check(i, path):
        image = tf.io.decode_image(tf.io.read_file(path), channels=0, expand_animations=False)
        return i, tf.shape(image)

    ds = tf.data.Dataset.from_tensor_slices((np.arange(len(paths), dtype=np.int64), paths))
    ds = ds.map(check, num_parallel_calls=tf.data.AUTOTUNE).ignore_errors(log_warning=False)
    shapes = np.full((len(paths), 3), -1, dtype=np.int64)
    for idx, shape in ds.batch(1024).as_numpy_iterator():
        shapes[idx] = shape
    return shapes


#: A resize by more than this factor (up or down, on either side) is warned about.
RESIZE_WARNING_FACTOR = 4.0


def _native_settings(shapes, image_size, channels, where):
    """``(image_size, channels)``: the given ones, or the files' own (the most
    common size; 1 channel when every file is gray, else 3), with a warning when
    the given ones resize the files a lot or do not match their channels."""
    sizes, counts = np.unique(shapes[:, :2], axis=0, return_counts=True)
    common = tuple(int(v) for v in sizes[np.argmax(counts)])
    gray = shapes[:, 2] <= 2  # gray, or gray + alpha
    if image_size is None:
        image_size = common
        if len(sizes) > 1:
            log.info("Images under %s have %d sizes; resizing all to the most common one, %s.",
                     where, len(sizes), common)
    if channels is None:
        channels = 1 if gray.all() else 3
    image_size = _size_pair(image_size)
    factor = np.maximum(np.asarray(image_size)[None, :] / shapes[:, :2], shapes[:, :2] / np.asarray(image_size)[None, :])
    worst = factor.max(axis=1)
    if worst.max() > RESIZE_WARNING_FACTOR:
        at = int(np.argmax(worst))
        warnings.warn(
            f"image_size {image_size[0]}×{image_size[1]} resizes the images under {where} by up to "
            f"{worst.max():.1f}× (e.g. a {shapes[at, 0]}×{shapes[at, 1]} file; most are {common[0]}×"
            f"{common[1]}): set the size near the files' own (image.size, or data.options.image_size), "
            "or leave it out to keep the files' size.", UserWarning, stacklevel=3)
    if channels == 3 and gray.all():
        warnings.warn(
            f"The images under {where} are grayscale, but channels=3 repeats the gray channel 3 times: "
            "set channels to 1 (image.channels: 1), or leave it out to keep the files' channels.",
            UserWarning, stacklevel=3)
    elif channels == 1 and not gray.all():
        warnings.warn(
            f"{int((~gray).sum())} image(s) under {where} are in colour, and channels=1 converts them to "
            "gray: set channels to 3 (image.channels: 3) to keep the colour.", UserWarning, stacklevel=3)
    return image_size, channels


def _class_dirs(root):
    return sorted(e.name for e in os.scandir(root) if e.is_dir() and not is_hidden_or_system(e.name))


def _note_skipped(root):
    """One warning line naming the hidden / system folders of ``root`` and the count of
    hidden image-named files in its class folders, when there are any."""
    folders = sorted(e.name for e in os.scandir(root) if e.is_dir() and is_hidden_or_system(e.name))
    hidden = [f for c in _class_dirs(root) for f in os.listdir(os.path.join(root, c))
              if f.startswith(".") and f.lower().endswith(IMAGE_EXTENSIONS)]
    parts = []
    if folders:
        parts.append(f"hidden / system folders {folders} (not classes)")
    if hidden:
        parts.append(f"{len(hidden)} hidden file(s) such as {hidden[0]!r} (macOS metadata, not images)")
    if parts:
        log.warning("Skipped under %s: %s.", root, "; ".join(parts))


def _split_layout(root):
    """True when ``root`` holds ``train/`` and ``test/`` folders of class folders
    (the layout of most downloaded data sets) rather than class folders."""
    subdirs = set(_class_dirs(root))
    return {"train", "test"} <= subdirs and all(
        _class_dirs(os.path.join(root, part)) for part in ("train", "test"))


def _list_images(root, on_error, verify):
    """``(class_dirs, paths, labels, shapes, skipped)`` of ``root/<class>/<image>``.

    ``shapes``: native (h, w, c) of every file (verify) or of the first one."""
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise ValueError(f"Image folder {root!r} does not exist; expected root/<class>/<image>.")
    class_dirs = _class_dirs(root)
    _note_skipped(root)
    if not class_dirs:
        raise ValueError(
            f"Image folder {root!r} has no class sub-directories; expected root/<class>/<image> "
            f"with images ending in {IMAGE_EXTENSIONS}."
        )
    paths, labels = [], []
    for cid, cname in enumerate(class_dirs):
        cdir = os.path.join(root, cname)
        files = sorted(
            f for f in os.listdir(cdir)
            if not f.startswith(".") and f.lower().endswith(IMAGE_EXTENSIONS)
            and os.path.isfile(os.path.join(cdir, f))
        )
        if not files:
            raise ValueError(
                f"Class directory {cdir!r} has no images (extensions {IMAGE_EXTENSIONS}); "
                "remove it or add images."
            )
        paths.extend(os.path.join(cdir, f) for f in files)
        labels.extend([cid] * len(files))
    paths = np.asarray(paths)
    labels = np.asarray(labels, dtype=np.int32)

    skipped = []
    # Every file is decoded once (verify), or the first one only: their own sizes and channels.
    shapes = _scan(paths if verify else paths[:1])
    if verify:
        bad = np.flatnonzero(shapes[:, 0] < 0)
        if len(bad) and on_error == "raise":
            names = [str(p) for p in paths[bad[:5]]]
            raise ValueError(
                f"{len(bad)} image file(s) cannot be read or decoded, e.g. {names}; fix or remove "
                "them, or pass on_error='skip' to leave them out."
            )
        if len(bad):
            skipped = [str(p) for p in paths[bad]]
            log.warning("Skipped %d unreadable image(s) under %s, e.g. %s", len(bad), root, skipped[:3])
            keep = np.ones(len(paths), dtype=bool)
            keep[bad] = False
            paths, labels, shapes = paths[keep], labels[keep], shapes[keep]
            emptied = sorted(set(range(len(class_dirs))) - set(np.unique(labels).tolist()))
            if emptied:
                raise ValueError(
                    f"Class directory {os.path.join(root, class_dirs[emptied[0]])!r} has no readable "
                    "images after skipping corrupt files; remove it or add valid images."
                )
    return class_dirs, paths, labels, shapes[shapes[:, 0] >= 0], skipped


def folder(root=None, image_size=None, channels=None, resize="pad", train_classes=None,
           test_classes=None, on_error="raise", verify=True, train_root=None, test_root=None):
    """Images under ``root/<class>/<image>``, decoded and resized in tf.data.

    Classes are the sub-directories of ``root`` in sorted order; the label is
    the class's index in that order. By default the first ceil(L/2) classes
    train and the rest test. Images are decoded with ``channels`` channels,
    scaled to [0, 1] and resized to ``image_size`` (``resize="pad"`` keeps the
    aspect ratio and zero-pads, as Hong et al. §6; ``"stretch"`` does not).
    ``image_size=None`` keeps the files' own size (the most common one, when
    they differ); ``channels=None`` their channels (1 when every file is gray,
    else 3). A size that resizes the files by more than
    :data:`RESIZE_WARNING_FACTOR`, or channels that do not match the files
    (3 for gray files, 1 for colour ones), is warned about.

    A data set already split: ``root`` holding ``train/<class>/<image>`` and
    ``test/<class>/<image>`` (detected), or ``train_root`` and ``test_root``.
    The folders are then the split (``train_classes`` / ``test_classes`` do
    not apply); a class name in both is one class seen in both splits
    (closed-set retrieval on the test split).

    With ``verify=True`` every file is decoded once at construction (in
    parallel in tf.data) so that a corrupt or unreadable image is reported
    up front, naming the file: ``on_error="raise"`` raises a ValueError,
    ``on_error="skip"`` leaves it out and records it in
    ``source.skipped_files``. Files with other extensions are ignored, and so
    are hidden files and folders (".DS_Store", "._x.jpg") and system folders
    (:data:`SYSTEM_FOLDERS`, e.g. ``__MACOSX``), with one warning line naming them.
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}.")
    if channels not in (1, 3, None):
        raise ValueError(f"channels must be 1 (grayscale) or 3 (RGB), got {channels!r}.")
    _check_resize(resize)
    if image_size is not None:
        image_size = _size_pair(image_size)
    if (train_root is None) != (test_root is None):
        raise ValueError("train_root and test_root go together; give both (or root alone).")
    if train_root is not None and root is not None:
        raise ValueError("give either root or train_root / test_root, not both.")
    if train_root is None and root is None:
        raise ValueError("the folder source needs root (root/<class>/<image>, or root/train and "
                         "root/test), or train_root and test_root.")
    if train_root is None and os.path.isdir(root) and _split_layout(root):
        train_root, test_root = os.path.join(root, "train"), os.path.join(root, "test")
        others = sorted(set(_class_dirs(root)) - {"train", "test"})
        log.info("%s holds train/ and test/ folders: they are the split%s.", root,
                 f" (ignoring {others})" if others else "")
    if train_root is not None:
        if train_classes is not None or test_classes is not None:
            raise ValueError(
                "train_classes / test_classes choose classes of one folder; with train/ and test/ "
                "folders the folders are the split: leave them out, or give one root of class folders."
            )
        parts = {name: _list_images(part, on_error, verify)
                 for name, part in (("train", train_root), ("test", test_root))}
        where = f"{train_root} and {test_root}"
    else:
        parts = {"all": _list_images(root, on_error, verify)}
        where = os.fspath(root)
    shapes = np.concatenate([part[3] for part in parts.values()])
    skipped = [f for part in parts.values() for f in part[4]]
    if len(shapes):
        image_size, channels = _native_settings(shapes, image_size, channels, where)
    else:  # the first file is unreadable and verify is off: the decoder will say so
        image_size, channels = _size_pair(image_size or 256), channels or 3
    shape = (*image_size, channels)

    def build(part, ids, split_name):
        class_dirs, paths, labels = part[:3]

        def make():
            keep = np.isin(labels, np.asarray(ids, dtype=np.int32))
            loader = _EncodedLoader(paths[keep], True, image_size, channels, resize)
            # The class directory's name is the user's class id.
            split = Split(split_name, np.asarray(class_dirs)[labels[keep]], shape, loader)
            split.files = paths[keep]
            return split
        return make

    if "all" in parts:
        class_dirs = parts["all"][0]
        classes = list(range(len(class_dirs)))
        names = {c: n for c, n in zip(classes, class_dirs)}
        train, test = _class_split(classes, class_dirs, train_classes, test_classes,
                                   math.ceil(len(classes) / 2))
        builders = {"train": build(parts["all"], train, "train"), "test": build(parts["all"], test, "test")}
    else:
        names = None
        builders = {name: build(part, list(range(len(part[0]))), name) for name, part in parts.items()}
    return Source("folder", builders, class_names=names, skipped_files=skipped)
