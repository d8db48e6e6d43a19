"""The two-view design (every image twice, each copy augmented on its own) and SimCLR's
augmentation (pipelines.view_augment): layout, epochs, determinism, errors; the blur against
a NumPy convolution; a model trained on the batches with a loss of two views, under XLA."""

import numpy as np
import pytest
import tensorflow as tf

from pipelines import designs, sources, view_augment


def _split(n=30, size=8, channels=3, classes=6):
    feats = np.random.default_rng(0).random((n, size, size, channels)).astype("float32")
    return sources.get_source("arrays", features=feats, labels=np.arange(n) % classes).split("train")


def test_each_image_twice_rows_first_views_then_second_views():
    labels = np.repeat(np.arange(5), 4)  # 20 examples
    design = designs.TwoViewDesign(images=4)
    assert design.batch_size == 8 and design.two_views and not design.grouped_by_class
    for cols in design.index_batches(labels, seed=1).take(3):
        ids = cols["example_id"].numpy()
        assert set(cols) == {"label", "class_size", "example_id"}  # no importance columns
        np.testing.assert_array_equal(ids[:4], ids[4:])
        assert len(set(ids[:4])) == 4
        np.testing.assert_array_equal(cols["label"].numpy(), labels[ids])
        np.testing.assert_array_equal(cols["class_size"].numpy(), np.full(8, 4.0))


def test_an_epoch_shows_every_image_at_most_once_and_epochs_differ():
    labels = np.arange(23) % 3
    design = designs.TwoViewDesign(batch_size=10)  # 5 images, 4 batches per epoch, 3 dropped
    assert design.batches_per_epoch(labels) == 4
    firsts = [c["example_id"].numpy()[:5] for c in design.index_batches(labels, seed=2).take(8)]
    for epoch in (firsts[:4], firsts[4:]):
        seen = np.concatenate(epoch)
        assert len(set(seen)) == 20
    assert not np.array_equal(np.concatenate(firsts[:4]), np.concatenate(firsts[4:]))


def test_same_seed_same_views_and_the_two_views_differ():
    split = _split()
    design = designs.TwoViewDesign(images=6)
    (x1, c1), = design.batches(split, seed=3).take(1)
    (x2, c2), = design.batches(split, seed=3).take(1)
    (x3, _), = design.batches(split, seed=4).take(1)
    assert x1.shape == (12, 8, 8, 3)
    np.testing.assert_array_equal(x1.numpy(), x2.numpy())
    np.testing.assert_array_equal(c1["example_id"].numpy(), c2["example_id"].numpy())
    assert not np.array_equal(x1.numpy(), x3.numpy())
    x = x1.numpy()
    assert all(not np.allclose(x[i], x[i + 6]) for i in range(6))  # independent augmentation
    assert x.min() >= 0.0 and x.max() <= 1.0


def test_a_given_transform_replaces_the_default():
    split = _split()
    identity = view_augment.ViewTransform(scale=(1.0, 1.0), ratio=(1.0, 1.0), flip=False, jitter=0.0,
                                          grayscale=0.0, blur=0.0)
    (x, cols), = designs.TwoViewDesign(images=5).batches(split, seed=0, transform=identity).take(1)
    np.testing.assert_allclose(x.numpy(), split.load(cols["example_id"]).numpy(), atol=1e-6)


@pytest.mark.parametrize("make, match", [
    (lambda: designs.TwoViewDesign(images=1), "images must be an integer >= 2"),
    (lambda: designs.TwoViewDesign(batch_size=7), "odd"),
    (lambda: designs.TwoViewDesign(), "exactly one of images and batch_size"),
    (lambda: designs.TwoViewDesign(images=20).validate(np.arange(10)), "use images <= 10"),
    (lambda: view_augment.ViewTransform(jitter=1.5), "jitter must be a probability"),
    (lambda: view_augment.ViewTransform(scale=(0.5, 2.0)), "max <= 1"),
])
def test_bad_arguments_are_refused(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def np_blur(image, sigma, radius):
    """A Gaussian of ``sigma`` (weights e^{−t²/2σ²}, normalised) along rows then columns,
    borders reflected, by loops."""
    w = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
    w /= w.sum()
    padded = np.pad(image, [(radius, radius), (radius, radius), (0, 0)], mode="reflect")
    h, wd = image.shape[:2]
    rows = np.zeros((h, wd + 2 * radius, image.shape[2]))
    for i in range(h):
        for t in range(2 * radius + 1):
            rows[i] += w[t] * padded[i + t]
    out = np.zeros(image.shape)
    for j in range(wd):
        for t in range(2 * radius + 1):
            out[:, j] += w[t] * rows[:, j + t]
    return out


def test_gaussian_blur_is_a_separable_gaussian_per_image():
    images = np.random.default_rng(1).random((3, 9, 7, 2)).astype("float32")
    sigma = np.array([0.5, 1.0, 2.0], np.float32)
    got = view_augment.gaussian_blur(tf.constant(images), tf.constant(sigma), 2).numpy()
    for b in range(3):
        np.testing.assert_allclose(got[b], np_blur(images[b].astype(np.float64), sigma[b], 2), atol=1e-5)


def test_grayscale_always_and_the_jitter_is_per_image():
    images = tf.constant(np.tile(np.random.default_rng(2).random((1, 8, 8, 3)), (6, 1, 1, 1)), tf.float32)
    gray = view_augment.ViewTransform(scale=(1.0, 1.0), ratio=(1.0, 1.0), flip=False, jitter=0.0, grayscale=1.0,
                                      blur=0.0)(images, seed=[1, 2]).numpy()
    np.testing.assert_allclose(gray[..., 0], gray[..., 2], atol=1e-6)
    jittered = view_augment.ViewTransform(scale=(1.0, 1.0), ratio=(1.0, 1.0), flip=False, jitter=1.0,
                                          grayscale=0.0, blur=0.0)(images, seed=[1, 2]).numpy()
    assert len({round(float(v), 5) for v in jittered.mean(axis=(1, 2, 3))}) == 6


def test_a_model_trains_on_two_view_batches_with_each_loss_of_two_views_under_xla():
    import keras

    import tfdml

    split = _split(n=24, size=8, channels=1, classes=4)
    data = designs.TwoViewDesign(images=6).batches(split, seed=0)
    for loss in (tfdml.losses.NTXentLoss(), tfdml.losses.SupConLoss(), tfdml.losses.VICRegLoss(),
                 tfdml.losses.BarlowTwinsLoss()):
        encoder = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(), keras.layers.Dense(8)])
        model = tfdml.models.EmbeddingModel(encoder)
        model.compile(optimizer="sgd", loss=loss, jit_compile=True)
        history = model.fit(data, steps_per_epoch=2, epochs=1, verbose=0)
        assert np.isfinite(history.history["loss"][-1]), type(loss).__name__
