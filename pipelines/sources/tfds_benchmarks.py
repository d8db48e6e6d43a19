"""The ``"tfds"`` source: TensorFlow Datasets benchmarks (Cars196, CUB-200-2011,
Stanford Online Products, LFW identities) with the papers' class split; needs
the optional extra ``tensorflow-datasets``. Prepared data loads without any
network; a download is tried only when asked for and the server is reachable."""

import math
import os

import numpy as np

from pipelines.sources.core import Source, Split, _class_split, class_labels
from pipelines.sources.decoding import _check_resize, _EncodedLoader, _size_pair


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
