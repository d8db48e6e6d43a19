"""Image folders (issue 17): the files' own size and channels by default, warnings
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
    import experiment
    from tfdml import config

    write_folder(tmp_path / "imgs", shape=(12, 12, 1))
    base = {"data": {"source": "folder", "options": {"root": str(tmp_path / "imgs")}}}
    cfg = config.validate({**base, "image": {"size": 16, "channels": 1}})
    assert experiment.source_options(cfg)["image_size"] == 16
    split = experiment.build_source(cfg).split("train")
    assert split.image_shape == (16, 16, 1)
    # The model's input is the source's images: no second resize.
    assert experiment.input_shape_for(cfg, split.image_shape) == (16, 16, 1)
    # Nothing set: the files' own 12×12×1, for the source and the model.
    cfg = config.validate(base)
    split = experiment.build_source(cfg).split("train")
    assert experiment.input_shape_for(cfg, split.image_shape) == (12, 12, 1)
    # data.options wins where given (load size), image.size stays the model's input.
    cfg = config.validate({"data": {"source": "folder", "options": {"root": str(tmp_path / "imgs"),
                                                                    "image_size": 20}},
                           "image": {"size": 16}})
    assert experiment.source_options(cfg)["image_size"] == 20
    # Sources without image options get nothing added.
    assert "image_size" not in experiment.source_options(config.validate({"image": {"size": 16}}))
