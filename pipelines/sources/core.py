"""The core of every source: :class:`Split`, :class:`Source`, the class-label
check (:func:`class_labels`), the split by class, the finite-input check and
the in-memory loader shared by the array sources.

A split holds the user's class id of every example, mapped once to
contiguous indices, and loads images by example index with a vectorised
loader (``load(indices)``, graph-safe). The sources build their splits
lazily from this module; it imports no other module of the package.
"""

import math
import os

import numpy as np
import tensorflow as tf


SPLITS = ("train", "test")


# Arrays up to this size are captured by tf.data functions as constants; larger
# ones live in a CPU tf.Variable (a graph constant is limited to 2 GB).
_CONSTANT_LIMIT_BYTES = 1 << 30


def _resident(array):
    """A tensor holding ``array`` that tf.data functions can gather from."""
    array = np.asarray(array)
    if array.dtype == object:
        # Encoded images of different lengths: no fixed-width numpy copy (that
        # would pad every item to the longest one).
        nbytes = sum(len(v) for v in array)
        array = list(array)
    else:
        nbytes = array.nbytes
    with tf.init_scope(), tf.device("/CPU:0"):
        if nbytes <= _CONSTANT_LIMIT_BYTES:
            return tf.constant(array)
        return tf.Variable(array, trainable=False, name="pipelines_resident")


class Split:
    """One split of a source: labels, class sizes and a vectorised image loader.

    Built from the user's class id of every example (``user_labels``: any
    integers or strings), which it maps once to contiguous indices.

    Attributes: ``name``, ``labels`` (np.int32 [N], class indices 0..L−1),
    ``class_ids`` ([L]: the user's id of each index, sorted), ``class_names``
    (dict index → display name: ``names[user id]`` when the source has names,
    else the id as text), ``class_sizes`` (dict index → N_c), ``num_classes``,
    ``num_examples``, ``image_shape`` (H, W, C), ``images`` (in-memory sources
    only: float32 [N, H, W, C] in [0, 1]). The index of an example in
    ``labels`` is its ``example_id``.
    """

    def __init__(self, name, user_labels, image_shape, loader, names=None):
        self.name = name
        user_labels = np.asarray(user_labels).reshape(-1)
        if user_labels.size == 0:
            raise ValueError(
                f"The '{name}' split has no examples; choose train_classes / test_classes "
                "so that both splits get at least one class with images."
            )
        self.class_ids, index, counts = np.unique(user_labels, return_inverse=True, return_counts=True)
        self.labels = index.reshape(-1).astype(np.int32)
        self.class_sizes = {i: int(n) for i, n in enumerate(counts)}
        self.class_names = {
            i: str(names[_key(cid)] if names is not None else _key(cid))
            for i, cid in enumerate(self.class_ids)
        }
        self.num_classes = len(self.class_ids)
        self.num_examples = int(self.labels.size)
        self.image_shape = tuple(int(d) for d in image_shape)
        self._loader = loader

    def __repr__(self):
        return (
            f"Split({self.name!r}, num_examples={self.num_examples}, "
            f"num_classes={self.num_classes}, image_shape={self.image_shape})"
        )

    def subset(self, indices, name):
        """A new split of the examples ``indices`` of this one (labels re-indexed
        to 0..L'−1 over the classes it keeps; class ids and names kept)."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        names = {_key(cid): self.class_names[i] for i, cid in enumerate(self.class_ids)}
        split = Split(name, self.class_ids[self.labels[indices]], self.image_shape,
                      self._loader.subset(indices), names=names)
        if getattr(self, "files", None) is not None:
            split.files = np.asarray(self.files)[indices]
        return split

    @property
    def images(self):
        """float32 [N, H, W, C] in [0, 1] (in-memory sources only)."""
        if not isinstance(self._loader, _ArrayLoader):
            raise AttributeError(
                f"The '{self.name}' split decodes images on the fly and keeps no in-memory "
                "'.images'; use .dataset() or .load(indices)."
            )
        return self._loader.numpy()

    @property
    def in_memory(self):
        return isinstance(self._loader, _ArrayLoader)

    def load(self, indices):
        """float32 [B, H, W, C] images of the examples ``indices`` (graph-safe)."""
        return self._loader(tf.convert_to_tensor(indices))

    def dataset(self, block=256):
        """Unbatched ``tf.data.Dataset`` of ``(image float32 [H,W,C] in [0,1], label int32)``.

        Examples come in split order (use ``.shuffle`` if needed); images are
        loaded ``block`` at a time with the vectorised loader.
        """
        labels = _resident(self.labels)
        count = self.num_examples

        def load_block(start):
            idx = tf.range(start, tf.minimum(start + block, count))
            return self._loader(idx), tf.gather(labels, idx)

        return (
            tf.data.Dataset.range(0, count, block)
            .map(load_block, num_parallel_calls=tf.data.AUTOTUNE)
            .unbatch()
        )


def _key(value):
    """A NumPy scalar as the plain Python value used as a dict key."""
    return value.item() if isinstance(value, np.generic) else value


def check_finite(features, what="features"):
    """Raise ``ValueError`` naming how many rows, and which, hold NaN or Inf.

    A non-finite input value makes the network's output undefined: on some
    CPUs' kernels it turns the embedding into NaN, on others a max or ReLU
    swallows it. Either way the run would be wrong, so it is refused here.
    """
    features = np.asarray(features)
    if not np.issubdtype(features.dtype, np.floating) or features.size == 0:
        return
    bad = np.flatnonzero(~np.isfinite(features.reshape(len(features), -1)).all(axis=1))
    if bad.size:
        shown = ", ".join(str(i) for i in bad[:10]) + (", ..." if bad.size > 10 else "")
        raise ValueError(
            f"{what} has {bad.size} row(s) with NaN or Inf values (rows {shown}); "
            "drop those rows or replace the values (e.g. np.nan_to_num) before training."
        )


class _ArrayLoader:
    """Gathers rows of an in-memory array, casts to float32 and scales."""

    def __init__(self, pixels, scale):
        self._numpy = pixels
        self._scale = float(scale)
        self._tensor = _resident(pixels)

    def numpy(self):
        return self._numpy.astype(np.float32) * np.float32(self._scale)

    def subset(self, indices):
        return _ArrayLoader(self._numpy[indices], self._scale)

    def __call__(self, indices):
        x = tf.cast(tf.gather(self._tensor, indices), tf.float32)
        return x * self._scale if self._scale != 1.0 else x


def _read_class_list(spec):
    if isinstance(spec, (str, os.PathLike)):
        path = os.fspath(spec)
        if not os.path.isfile(path):
            raise ValueError(f"Class list file {path!r} does not exist; give a text file with one class per line.")
        with open(path) as f:
            return [line.strip() for line in f if line.strip()]
    return list(spec)


def _class_split(classes, names, train_classes, test_classes, default_train):
    """Return (train_ids, test_ids) from the sorted global ``classes``.

    ``names[i]`` is the name of ``classes[i]``; list entries may be ids or names.
    """
    classes = list(classes)
    lookup = {}
    for cid, name in zip(classes, names):
        lookup[cid] = cid
        lookup[str(name)] = cid

    def resolve(spec, what):
        if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
            if not 0 <= spec <= len(classes):
                raise ValueError(f"{what}={spec} is outside [0, {len(classes)}] (the number of classes).")
            return classes[:spec] if what == "train_classes" else classes[len(classes) - spec:]
        ids = []
        for entry in _read_class_list(spec):
            key = entry.item() if isinstance(entry, np.generic) else entry
            if isinstance(key, bytes):
                key = key.decode("utf-8", "replace")
            if key not in lookup and str(key) not in lookup:
                raise ValueError(
                    f"{what} names class {entry!r}, which is not in the data; "
                    f"known classes start with {[str(n) for n in names[:5]]}."
                )
            ids.append(lookup[key] if key in lookup else lookup[str(key)])
        return ids

    if train_classes is None and test_classes is None:
        train = classes[:default_train]
        test = classes[default_train:]
    elif test_classes is None:
        train = resolve(train_classes, "train_classes")
        test = [c for c in classes if c not in set(train)]
    elif train_classes is None:
        test = resolve(test_classes, "test_classes")
        train = [c for c in classes if c not in set(test)]
    else:
        train = resolve(train_classes, "train_classes")
        test = resolve(test_classes, "test_classes")
        overlap = sorted(set(train) & set(test))
        if overlap:
            raise ValueError(
                f"train_classes and test_classes share classes {overlap[:5]}; the split is by class "
                "(open set), so give disjoint lists."
            )
    return list(train), list(test)


class Source:
    """A data source with an open-set ``"train"`` / ``"test"`` split by class.

    ``split(name)`` returns a :class:`Split`. Folder sources also expose
    ``skipped_files`` (corrupt files skipped with ``on_error="skip"``) and
    ``num_skipped``.
    """

    def __init__(self, name, splits, class_names=None, skipped_files=()):
        self.name = name
        self._splits = splits  # name -> callable building the Split (lazy)
        self._built = {}
        self.class_names = class_names
        self.skipped_files = list(skipped_files)

    @property
    def num_skipped(self):
        return len(self.skipped_files)

    def split(self, name):
        if name not in SPLITS:
            raise ValueError(f"Unknown split {name!r}; a source has the splits {list(SPLITS)}.")
        if name not in self._built:
            self._built[name] = self._splits[name]()
        return self._built[name]

    def __repr__(self):
        return f"Source({self.name!r})"


def class_labels(labels, what="labels"):
    """The user's class of every example as int64 ids or ``str`` names (a NumPy array [N]).

    The one place where labels are checked, for every source: integers (any
    int64; integral floats up to 2**53) or class names (``str``, or UTF-8
    ``bytes``, which become ``str``). :class:`Split` maps either to contiguous
    indices in sorted order and keeps the names for display. Booleans, other
    floats, empty names, and arrays that mix names with numbers or ``None``
    are refused with a ValueError.
    """
    labels = np.asarray(labels).reshape(-1)
    kind = labels.dtype.kind
    if kind == "O":
        if all(isinstance(v, (str, bytes)) for v in labels):
            kind = "U"
        elif all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                 for v in labels):
            return labels.astype(np.int64)
        else:
            types = sorted({type(v).__name__ for v in labels})
            raise ValueError(
                f"{what} mix class names and numbers (or None): types {types}; give every label "
                "as an integer class id, or every label as a class name (str)."
            )
    if kind in "US":
        try:
            names = np.asarray([v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in labels],
                               dtype=str)
        except UnicodeDecodeError:
            raise ValueError(f"{what} hold bytes that are not UTF-8 text; give class names as str "
                             "(or UTF-8 bytes).") from None
        blank = np.flatnonzero(np.char.strip(names) == "")
        if blank.size:
            raise ValueError(f"{what} hold an empty class name (e.g. row {blank[0]}); give every "
                             "example a non-empty class name.")
        return names
    if kind == "b":
        raise ValueError(f"{what} must be integer class ids or class names, got booleans; "
                         "give them as integers (e.g. labels.astype(int)) if they are classes.")
    if kind == "f" and np.all(labels == np.round(labels)):
        if np.abs(labels).max() > 2**53:
            raise ValueError(
                f"{what} are floats beyond 2**53, where a float64 no longer holds every integer; "
                "give them as int64."
            )
        return labels.astype(np.int64)
    if kind not in "iu":
        raise ValueError(f"{what} must be integer class ids or class names (str), got dtype "
                         f"{labels.dtype}.")
    return labels.astype(np.int64)


def _array_source(name, pixels, labels, scale, image_shape, train_classes, test_classes,
                  default_train=None, class_names=None):
    labels = np.asarray(labels).reshape(-1)
    if len(labels) != len(pixels):
        raise ValueError(
            f"features has {len(pixels)} rows but labels has {len(labels)}; give one label per example."
        )
    if len(labels) == 0:
        raise ValueError(f"The {name!r} source has no examples; give at least one (feature, label) row.")
    labels = class_labels(labels)
    check_finite(pixels)
    classes = [_key(c) for c in np.unique(labels)]
    names = [str(c) for c in classes] if class_names is None else [class_names[c] for c in classes]
    default = math.ceil(len(classes) / 2) if default_train is None else default_train
    train, test = _class_split(classes, names, train_classes, test_classes, default)

    def build(ids, split_name):
        def make():
            keep = np.isin(labels, np.asarray(ids, dtype=labels.dtype))
            return Split(split_name, labels[keep], image_shape, _ArrayLoader(pixels[keep], scale),
                         names=class_names)
        return make

    return Source(name, {"train": build(train, "train"), "test": build(test, "test")},
                  class_names=class_names)
