"""Image folders: the files' own size and channels by default, warnings
for a large resize or mismatched channels, and image.size / image.channels as
the one place of the image settings."""

import warnings

import numpy as np
import pytest
import tensorflow as tf

from pipelines import sources


def write_folder(root, classes=("a", "b", "c", "d"), per_class=2, shape=(12, 12, 1), seed=0):
    """root/<class>/<k>.png: random uint8 PNGs of ``shape``; returns {path: pixels}."""
    rng = np.random.default_rng(seed)
    pixels = {}
    for name in classes:
        (root / name).mkdir(parents=True, exist_ok=True)
        for k in range(per_class):
            arr = rng.integers(0, 256, size=shape, dtype=np.uint8)
            tf.io.write_file(str(root / name / f"{k}.png"), tf.io.encode_png(arr))
            pixels[str(root / name / f"{k}.png")] = arr
    return pixels


def _no_warnings(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn()


@pytest.mark.parametrize("shape", [(12, 10, 1), (12, 10, 3)])
def test_default_keeps_the_files_size_and_channels(tmp_path, shape):
    pixels = write_folder(tmp_path, shape=shape)
    source = _no_warnings(lambda: sources.folder(tmp_path))
    train = source.split("train")
    assert train.image_shape == shape
    # Native size: decoding is exact (no resize), pixels / 255.
    np.testing.assert_allclose(train.load([0]).numpy()[0], pixels[str(train.files[0])] / 255.0, atol=1e-6)


def test_mixed_sizes_default_to_the_most_common(tmp_path):
    write_folder(tmp_path, classes=("a", "b", "c"), shape=(8, 8, 1))
    write_folder(tmp_path, classes=("d",), per_class=1, shape=(10, 10, 1))  # 6 files 8×8, 1 file 10×10
    assert sources.folder(tmp_path).split("train").image_shape == (8, 8, 1)


def test_a_large_resize_is_warned_about(tmp_path):
    write_folder(tmp_path, shape=(12, 12, 1))
    # 12 -> 64 is 5.3× > RESIZE_WARNING_FACTOR (4); 12 -> 40 is 3.3×: no warning.
    with pytest.warns(UserWarning, match=r"resizes the images under .* by up to 5\.3×"):
        sources.folder(tmp_path, image_size=64, channels=1)
    _no_warnings(lambda: sources.folder(tmp_path, image_size=40, channels=1))
    with pytest.warns(UserWarning, match=r"by up to 6\.0×"):  # 12 -> 2: down-sampling counts too
        sources.folder(tmp_path, image_size=(2, 12), channels=1)


def test_channels_that_do_not_match_the_files_are_warned_about(tmp_path):
    gray, colour = tmp_path / "gray", tmp_path / "colour"
    write_folder(gray, shape=(6, 6, 1))
    write_folder(colour, shape=(6, 6, 3))
    with pytest.warns(UserWarning, match="grayscale, but channels=3"):
        assert sources.folder(gray, channels=3).split("train").image_shape == (6, 6, 3)
    with pytest.warns(UserWarning, match="8 image.s. under .* are in colour"):
        assert sources.folder(colour, channels=1).split("train").image_shape == (6, 6, 1)


def test_image_section_feeds_the_folder_source(tmp_path):
    from tfdml_app import config, data

    write_folder(tmp_path / "imgs", shape=(12, 12, 1))
    base = {"data": {"source": "folder", "options": {"root": str(tmp_path / "imgs")}}}
    cfg = config.validate({**base, "image": {"size": 16, "channels": 1}})
    assert data.source_options(cfg)["image_size"] == 16
    split = data.build_source(cfg).split("train")
    assert split.image_shape == (16, 16, 1)
    # The model's input is the source's images: no second resize.
    assert data.input_shape_for(cfg, split.image_shape) == (16, 16, 1)
    # Nothing set: the files' own 12×12×1, for the source and the model.
    cfg = config.validate(base)
    split = data.build_source(cfg).split("train")
    assert data.input_shape_for(cfg, split.image_shape) == (12, 12, 1)
    # data.options wins where given (load size), image.size stays the model's input.
    cfg = config.validate({"data": {"source": "folder", "options": {"root": str(tmp_path / "imgs"),
                                                                    "image_size": 20}},
                           "image": {"size": 16}})
    assert data.source_options(cfg)["image_size"] == 20
    # Sources without image options get nothing added.
    assert "image_size" not in data.source_options(config.validate({"image": {"size": 16}}))


# -- data sets already split into train/ and test/ -----------------------------------


def _split_folder(root):
    write_folder(root / "train", classes=("a", "b", "c"), shape=(8, 8, 1), seed=1)
    write_folder(root / "test", classes=("c", "x"), per_class=3, shape=(8, 8, 1), seed=2)


def _check_split_layout(source, root):
    train, test = source.split("train"), source.split("test")
    assert list(train.class_ids) == ["a", "b", "c"] and train.num_examples == 6
    assert list(test.class_ids) == ["c", "x"] and test.num_examples == 6
    assert all(f.startswith(str(root / "train")) for f in train.files)
    assert all(f.startswith(str(root / "test")) for f in test.files)
    assert list(test.labels) == [0, 0, 0, 1, 1, 1] and test.class_names == {0: "c", 1: "x"}
    assert train.image_shape == test.image_shape == (8, 8, 1)


def test_root_with_train_and_test_folders_is_detected(tmp_path):
    _split_folder(tmp_path)
    _check_split_layout(sources.folder(tmp_path), tmp_path)


def test_train_root_and_test_root(tmp_path):
    _split_folder(tmp_path)
    source = sources.folder(train_root=tmp_path / "train", test_root=tmp_path / "test")
    _check_split_layout(source, tmp_path)


def test_split_layout_errors(tmp_path):
    _split_folder(tmp_path)
    with pytest.raises(ValueError, match="train_root and test_root go together"):
        sources.folder(train_root=tmp_path / "train")
    with pytest.raises(ValueError, match="either root or train_root"):
        sources.folder(tmp_path, train_root=tmp_path / "train", test_root=tmp_path / "test")
    with pytest.raises(ValueError, match="the folders are the split"):
        sources.folder(tmp_path, train_classes=2)
    # Class folders named train and test without class folders inside are ordinary classes.
    plain = tmp_path / "plain"
    write_folder(plain, classes=("test", "train", "zebra"), shape=(4, 4, 1))
    assert list(sources.folder(plain).split("train").class_ids) == ["test", "train"]


def test_a_folder_config_without_a_root_is_refused_before_any_output(tmp_path):
    from tfdml_app import config, fit
    from tfdml_app.errors import ExperimentError

    cfg = config.validate({"output_dir": str(tmp_path / "run"),
                           "data": {"source": "folder", "options": {"train_root": str(tmp_path)}}})
    with pytest.raises(ExperimentError, match="needs root .* or both train_root and test_root"):
        fit.run(cfg, verbose=0)
    assert not (tmp_path / "run").exists()
