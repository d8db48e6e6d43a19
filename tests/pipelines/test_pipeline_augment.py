"""Train / eval transforms: exact crops, flips, determinism per seed, grayscale -> RGB."""

import numpy as np
import pytest
import tensorflow as tf

from pipelines import augment


@pytest.fixture(scope="module")
def batch():
    return np.random.default_rng(0).random((64, 12, 10, 3)).astype("float32")


def _find_crop(out, image, size):
    """Offsets (and mirror flag) at which ``out`` is an exact crop of ``image``."""
    h, w = size
    hits = []
    for y in range(image.shape[0] - h + 1):
        for x in range(image.shape[1] - w + 1):
            crop = image[y: y + h, x: x + w]
            if np.allclose(out, crop, atol=1e-5):
                hits.append((y, x, False))
            if np.allclose(out, crop[:, ::-1], atol=1e-5):
                hits.append((y, x, True))
    return hits


def test_train_random_crop_is_an_exact_crop_or_its_mirror(batch):
    t = augment.TrainTransform(size=(8, 7), scale=None, flip=True)
    out = t(batch, seed=[1, 2]).numpy()
    assert out.shape == (64, 8, 7, 3)
    mirrored, offsets = [], set()
    for k in range(len(batch)):
        hits = _find_crop(out[k], batch[k], (8, 7))
        assert len(hits) == 1, f"image {k} is not a crop of its input"
        offsets.add(hits[0][:2])
        mirrored.append(hits[0][2])
    # Flip with probability 1/2 (binomial, 5 sd) and offsets vary.
    assert abs(np.mean(mirrored) - 0.5) < 5 * np.sqrt(0.25 / len(batch))
    assert len(offsets) > 5


def test_train_transform_is_deterministic_per_seed(batch):
    t = augment.TrainTransform(size=8, scale=(0.3, 1.0))
    a, b, c = t(batch, seed=[0, 5]), t(batch, seed=[0, 5]), t(batch, seed=[0, 6])
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.allclose(a.numpy(), c.numpy())
    assert a.shape == (64, 8, 8, 3) and 0.0 <= a.numpy().min() and a.numpy().max() <= 1.0
    single = t(batch[0], seed=[0, 5])
    assert single.shape == (8, 8, 3)


def test_random_resized_crop_boxes_follow_scale_and_ratio():
    boxes = augment.random_crop_boxes(
        tf.constant([3, 4]), 500, 101, 201, (32, 32), scale=(0.2, 0.6), ratio=(0.5, 2.0)
    ).numpy()
    y1, x1, y2, x2 = boxes.T
    ch, cw = (y2 - y1) * 100 + 1, (x2 - x1) * 200 + 1  # crop height / width in pixels
    assert boxes.min() >= -1e-6 and boxes.max() <= 1 + 1e-6
    area = ch * cw / (101 * 201)
    clipped = (ch >= 101 - 1e-3) | (cw >= 201 - 1e-3)
    assert np.all((area[~clipped] > 0.2 - 1e-4) & (area[~clipped] < 0.6 + 1e-4))
    aspect = cw / ch
    assert np.all((aspect[~clipped] > 0.5 - 1e-4) & (aspect[~clipped] < 2.0 + 1e-4))
    assert clipped.mean() < 0.5


def test_eval_center_crop(batch):
    out = augment.EvalTransform(size=6, resize_to=10)(batch).numpy()
    # Shorter side 10 -> no resampling; center crop of 6 from 12×10: rows 3..8, cols 2..7.
    np.testing.assert_allclose(out, batch[:, 3:9, 2:8], atol=1e-6)
    with pytest.raises(ValueError, match="resize_to"):
        augment.EvalTransform(size=224, resize_to=200)


def test_transforms_run_inside_tf_data(batch):
    t = augment.TrainTransform(size=8)
    ds = tf.data.Dataset.from_tensor_slices(batch).batch(16).map(
        lambda x: t(x, seed=tf.constant([1, 1]))
    )
    assert next(iter(ds)).shape == (16, 8, 8, 3)


def test_to_model_input_channels_and_size():
    gray = np.random.default_rng(1).random((2, 5, 5, 1)).astype("float32")
    rgb = augment.to_model_input(gray, channels=3).numpy()
    assert rgb.shape == (2, 5, 5, 3)
    for c in range(3):
        np.testing.assert_array_equal(rgb[..., c], gray[..., 0])
    colour = np.random.default_rng(2).random((2, 5, 5, 3)).astype("float32")
    luma = augment.to_model_input(colour, channels=1).numpy()
    # ITU-R BT.601 luma weights (what tf.image.rgb_to_grayscale uses).
    np.testing.assert_allclose(luma[..., 0], colour @ np.array([0.2989, 0.5870, 0.1140]), atol=1e-4)
    assert augment.to_model_input(gray[0], size=9).shape == (9, 9, 3)
    with pytest.raises(ValueError, match="channels"):
        augment.to_model_input(gray, channels=2)


def test_bad_arguments():
    with pytest.raises(ValueError, match="scale"):
        augment.TrainTransform(scale=(0.5, 0.2))
    with pytest.raises(ValueError, match="size"):
        augment.TrainTransform(size=0)
