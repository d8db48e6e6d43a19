"""get_backbone: names, keras.applications paths that need no download, clear errors."""

import numpy as np
import pytest

import tfdml
from tfdml import backbones
from tfdml.backbones import applications, get_backbone
from tfdml.backbones.preprocessing import input_rescaling


def test_names_listed_and_unknown_name_lists_them():
    names = backbones.available_backbones()
    assert "efficientnet_lite0" in names and "resnet50v2" in names
    assert "mobilenet_v3_large" in names and "efficientnet_b0" in names
    with pytest.raises(ValueError, match=r"resnet5O. \(did you mean .resnet50v2.\?\); choose one of .*efficientnet_lite0.*resnet50v2"):
        get_backbone("resnet5O")


@pytest.mark.parametrize(
    "input_range, target, x, expected",
    [
        ((0, 255), (-127 / 128, 128 / 128), [0.0, 127.0, 255.0], [-127 / 128, 0.0, 1.0]),
        ((0, 1), (-127 / 128, 128 / 128), [0.0, 127 / 255, 1.0], [-127 / 128, 0.0, 1.0]),
        ((0, 1), (-1, 1), [0.0, 0.5, 1.0], [-1.0, 0.0, 1.0]),
        ((0, 255), (-1, 1), [0.0, 127.5, 255.0], [-1.0, 0.0, 1.0]),
    ],
)
def test_input_rescaling_hand_values(input_range, target, x, expected):
    layer = input_rescaling(input_range, target)
    np.testing.assert_allclose(layer(np.array(x, np.float32)).numpy(), expected, atol=1e-6)


def test_input_rescaling_identity_and_errors():
    assert input_rescaling(None, (-1, 1)) is None
    assert input_rescaling((0, 255), (0, 255)) is None
    with pytest.raises(ValueError, match="high > low"):
        input_rescaling((1, 0), (-1, 1))
    with pytest.raises(ValueError, match="pair"):
        input_rescaling("0-255", (-1, 1))


def test_application_local_weights_file_roundtrip(tmp_path):
    """weights=PATH (no download): a file saved from one build restores the same outputs."""
    shape = (64, 64, 3)
    first = get_backbone("mobilenet_v3_small", weights=None, input_shape=shape)
    path = tmp_path / "mnv3s.weights.h5"
    first.get_layer("MobileNetV3Small").save_weights(path)
    second = get_backbone("mobilenet_v3_small", weights=str(path), input_shape=shape)
    x = np.random.default_rng(0).uniform(0, 255, (2,) + shape).astype(np.float32)
    a, b = first(x, training=False).numpy(), second(x, training=False).numpy()
    assert a.shape == (2, 576)
    np.testing.assert_array_equal(a, b)


def test_application_input_range_is_applied():
    """resnet50v2 expects [-1, 1]: the preprocess layer maps (0, 1) inputs there."""
    model = get_backbone("resnet50v2", weights=None, input_shape=(32, 32, 3), input_range=(0, 1))
    pre = model.get_layer("preprocess")
    np.testing.assert_allclose(pre(np.array([0.0, 0.5, 1.0], np.float32)).numpy(),
                               [-1.0, 0.0, 1.0], atol=1e-6)
    assert model.output_shape == (None, 2048)


def test_application_weight_errors(tmp_path):
    with pytest.raises(ValueError, match="no bundled weights.*efficientnet_lite0"):
        get_backbone("resnet50v2", weights="bundled")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        get_backbone("resnet50v2", weights=str(tmp_path / "nope.h5"))
    with pytest.raises(ValueError, match="pooling"):
        applications.build_application("resnet50v2", weights=None, pooling="sum")


def test_lite0_argument_errors():
    with pytest.raises(ValueError, match=r"\(height, width, 3\)"):
        get_backbone("efficientnet_lite0", weights=None, input_shape=(224, 224, 1))
    with pytest.raises(ValueError, match="1000 classes"):
        backbones.EfficientNetLite0(include_top=True, weights="bundled", classes=10)
    with pytest.raises(ValueError, match="pooling"):
        get_backbone("efficientnet_lite0", weights=None, pooling="sum")


def test_lite0_from_scratch_shapes():
    model = get_backbone("efficientnet_lite0", weights=None, input_shape=(64, 64, 3))
    assert model.output_shape == (None, 1280)
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    assert trainable == 4_652_008 - (1280 * 1000 + 1000)  # the state_dict minus the fc head


def test_lite0_keras_file_roundtrip(tmp_path):
    """A backbone saves to and loads from a .keras file with identical outputs."""
    model = get_backbone("efficientnet_lite0", weights=None, input_shape=(32, 32, 3),
                         input_range=(0, 1))
    path = tmp_path / "lite0.keras"
    model.save(path)
    loaded = tfdml.load_model(path)
    x = np.random.default_rng(1).uniform(0, 1, (2, 32, 32, 3)).astype(np.float32)
    np.testing.assert_array_equal(model(x, training=False).numpy(),
                                  loaded(x, training=False).numpy())


def test_one_get_backbone_for_scratch_pretrained_and_registered_backbones():
    from tfdml import models

    assert list(backbones.SCRATCH) == ["small_cnn", "mlp"] and models.BACKBONES == backbones.SCRATCH
    assert set(backbones.SCRATCH) <= set(backbones.BACKBONES)
    cnn = get_backbone("small_cnn", input_shape=(8, 8, 1), width=4)
    assert cnn.output_shape == models.small_cnn((8, 8, 1), width=4).output_shape == (None, 16)
    assert models.get_backbone("mlp", (4,), width=3).output_shape == (None, 3)

    def tiny(input_shape, width=2):
        return models.mlp(input_shape, width=width, depth=1, name="tiny")

    try:
        assert backbones.register("tiny")(tiny) is tiny
        assert models.get_backbone("tiny", (4,), width=5).output_shape == (None, 5)
        with pytest.raises(ValueError, match=r"'tiny' is already registered"):
            backbones.register("tiny")(models.mlp)
    finally:
        backbones.BACKBONES.pop("tiny", None)
