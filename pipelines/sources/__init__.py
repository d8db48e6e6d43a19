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
``"mnist5k"``       default. 5,000 MNIST digits shipped with the package
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

Modules: :mod:`~pipelines.sources.core` (splits, sources, class labels),
:mod:`~pipelines.sources.decoding` (image files), one module per source
(``mnist``, ``sklearn_digits``, ``in_memory``, ``npz_file``,
``image_folder``, ``tfds_benchmarks``), :mod:`~pipelines.sources.holdout`
(validation split) and :mod:`~pipelines.sources.registry` (:func:`register` and the table of
sources by name). Every public name is importable from here.
"""

from pipelines.sources.core import SPLITS, Source, Split, check_finite, class_labels
from pipelines.sources.decoding import (IMAGE_EXTENSIONS, SYSTEM_FOLDERS, decode_pixels, image_files,
                                        is_hidden_or_system, load_image_files)
from pipelines.sources.holdout import VALIDATION_MODES, hold_out
from pipelines.sources.image_folder import RESIZE_WARNING_FACTOR, folder
from pipelines.sources.in_memory import arrays
from pipelines.sources.mnist import mnist5k
from pipelines.sources.npz_file import npz
from pipelines.sources.registry import SOURCES, get_source, register
from pipelines.sources.sklearn_digits import digits
from pipelines.sources.tfds_benchmarks import TFDS_DATASETS, TFDS_DOWNLOAD_HOST, tfds

__all__ = [
    "Split", "Source", "class_labels", "check_finite", "get_source", "register", "hold_out", "SOURCES", "SPLITS",
    "IMAGE_EXTENSIONS", "VALIDATION_MODES", "SYSTEM_FOLDERS", "RESIZE_WARNING_FACTOR", "TFDS_DATASETS",
    "TFDS_DOWNLOAD_HOST", "mnist5k", "digits", "folder", "tfds", "arrays", "npz", "image_files",
    "load_image_files", "decode_pixels", "is_hidden_or_system",
]
