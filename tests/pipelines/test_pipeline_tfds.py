"""TFDS benchmark sources, offline with ``tfds.testing.mock_data`` (nothing is downloaded)."""

import numpy as np
import pytest
import tensorflow as tf

tfds = pytest.importorskip("tensorflow_datasets")

from pipelines import sources  # noqa: E402
from pipelines.sources import tfds_benchmarks  # noqa: E402

# (dataset, number of training classes in the papers' split: Hong §6 / Wu §5)
BENCHMARKS = [("cars196", 98), ("caltech_birds2011", 100), ("stanford_online_products", 11318)]


@pytest.mark.parametrize("dataset,num_train", BENCHMARKS)
def test_tfds_benchmark_split_by_class(dataset, num_train):
    with tfds.testing.mock_data(num_examples=40):
        src = sources.get_source("tfds", dataset=dataset, image_size=16)
        train, test = src.split("train"), src.split("test")
    assert train.num_examples + test.num_examples == 40
    assert max(train.class_ids) < num_train <= min(test.class_ids)
    assert train.image_shape == (16, 16, 3)
    x = train.load([0, 1]).numpy()
    assert x.shape == (2, 16, 16, 3) and x.dtype == np.float32
    assert 0.0 <= x.min() and x.max() <= 1.0
    image, label = next(iter(test.dataset()))
    assert image.shape == (16, 16, 3) and label.dtype == tf.int32
    assert int(label) == test.labels[0]


def test_tfds_decodes_the_stored_images():
    """A controlled mock: known PNG bytes and labels come back decoded, scaled and split."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(6, 8, 8, 3), dtype=np.uint8)
    labels = np.array([0, 97, 98, 195, 5, 120])

    def as_dataset(self, split, decoders=None, **kwargs):
        del self, split, kwargs
        assert decoders is not None  # the source asks for undecoded image bytes
        blobs = [tf.io.encode_png(im).numpy() for im in images]
        return tf.data.Dataset.from_tensor_slices({"image": blobs, "label": labels})

    with tfds.testing.mock_data(as_dataset_fn=as_dataset):
        src = sources.get_source("tfds", dataset="cars196", image_size=8, resize="stretch")
        train, test = src.split("train"), src.split("test")
    np.testing.assert_array_equal(train.class_ids[train.labels], [0, 97, 5])
    np.testing.assert_array_equal(test.class_ids[test.labels], [98, 195, 120])
    np.testing.assert_array_equal(train.labels, [0, 2, 1])  # contiguous: 0, 5, 97 -> 0, 1, 2
    np.testing.assert_allclose(train.load([0, 1, 2]).numpy(), images[[0, 1, 4]] / 255.0, atol=1e-6)


def test_tfds_lfw_identities_by_name():
    names = [b"Zoe", b"Ann", b"Bob", b"Ann", b"Zoe", b"Cid"]

    def as_dataset(self, split, decoders=None, **kwargs):
        blobs = [tf.io.encode_png(np.full((4, 4, 3), k, np.uint8)).numpy() for k in range(len(names))]
        return tf.data.Dataset.from_tensor_slices({"image": blobs, "label": names})

    with tfds.testing.mock_data(as_dataset_fn=as_dataset):
        src = sources.get_source("tfds", dataset="lfw", image_size=4)
    assert src.class_names == {0: "Ann", 1: "Bob", 2: "Cid", 3: "Zoe"}
    assert src.split("train").class_sizes == {0: 2, 1: 1}
    assert src.split("test").class_sizes == {0: 1, 1: 2}
    assert src.split("test").class_names == {0: "Cid", 1: "Zoe"}


def test_tfds_unknown_dataset():
    with pytest.raises(ValueError, match="choose one of"):
        sources.get_source("tfds", dataset="imagenet2012")


@pytest.mark.parametrize("download", [False, True])
def test_tfds_offline_says_where_to_put_the_files_after_one_probe(tmp_path, monkeypatch, download):
    """Offline, TFDS's download retries must not end in a ConnectionError
    traceback, nor download=False in an AssertionError one.
    No traffic leaves the machine here: the reachability probe is replaced, and
    one probe (none without download) is all the source makes before it refuses."""
    probes = []
    # The tfds source reads the probe from its own module: patch it there.
    monkeypatch.setattr(tfds_benchmarks, "_network_reachable", lambda *a, **k: probes.append(1) or False)
    with pytest.raises(ValueError, match=r"'cars196' is not prepared.*downloads/manual"):
        sources.get_source("tfds", dataset="cars196", data_dir=str(tmp_path), download=download)
    assert len(probes) == (1 if download else 0)


def test_tfds_extra_brings_what_tfds_needs_offline():
    """The extra lists importlib_resources, which tensorflow-datasets imports
    when it prepares data but does not declare."""
    import configparser
    import os

    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(os.path.dirname(__file__), "..", "..", "setup.cfg"))
    for extra in ("tfds", "test"):
        assert "importlib_resources" in cfg["options.extras_require"][extra].split()
