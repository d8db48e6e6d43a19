"""``keras.applications`` backbones with ``weights="imagenet"`` (download) or a local file.

For users whose machines can download: the Keras ImageNet weights are fetched
by Keras on first use (``~/.keras/models``). ``weights=PATH`` loads a local
weights file written for the same architecture and ``include_top`` setting
(e.g. by ``model.save_weights`` or downloaded by hand), so the same config
also works offline. ``weights=None`` gives a randomly initialised network.

Every backbone returned here takes RGB floats in ``input_range`` (default
``(0, 255)``): a ``preprocess`` rescaling layer maps them onto the range the
Keras network was trained with (``[-1, 1]`` for ResNet50V2 / MobileNetV2;
``[0, 255]`` for the networks that carry their own preprocessing:
MobileNetV3, EfficientNet, EfficientNetV2, ConvNeXt).
"""

from __future__ import annotations

import os

import keras

from tfdml.backbones.preprocessing import input_rescaling

__all__ = ["APPLICATIONS", "build_application"]

# name -> (keras.applications constructor, input range the weights expect,
#          extra constructor kwargs)
_MINUS_ONE_ONE = (-1.0, 1.0)
_ZERO_255 = (0.0, 255.0)
APPLICATIONS = {
    "resnet50v2": ("ResNet50V2", _MINUS_ONE_ONE, {}),
    "resnet101v2": ("ResNet101V2", _MINUS_ONE_ONE, {}),
    "mobilenet_v2": ("MobileNetV2", _MINUS_ONE_ONE, {}),
    "mobilenet_v3_small": ("MobileNetV3Small", _ZERO_255, {"include_preprocessing": True}),
    "mobilenet_v3_large": ("MobileNetV3Large", _ZERO_255, {"include_preprocessing": True}),
    "efficientnet_b0": ("EfficientNetB0", _ZERO_255, {}),
    "efficientnet_b1": ("EfficientNetB1", _ZERO_255, {}),
    "efficientnet_b2": ("EfficientNetB2", _ZERO_255, {}),
    "efficientnet_b3": ("EfficientNetB3", _ZERO_255, {}),
    "efficientnetv2_b0": ("EfficientNetV2B0", _ZERO_255, {"include_preprocessing": True}),
    "efficientnetv2_s": ("EfficientNetV2S", _ZERO_255, {"include_preprocessing": True}),
    "convnext_tiny": ("ConvNeXtTiny", _ZERO_255, {"include_preprocessing": True}),
}


def build_application(
    name,
    weights="imagenet",
    input_shape=(224, 224, 3),
    include_top=False,
    pooling="avg",
    input_range=(0, 255),
):
    """Build a ``keras.applications`` backbone behind a ``preprocess`` layer.

    Args:
      name: a key of :data:`APPLICATIONS`.
      weights: ``"imagenet"`` (downloaded by Keras; needs network on first
        use), ``None`` (random), or the path of a local weights file for the
        same architecture and ``include_top`` (``.weights.h5`` or ``.h5``).
      input_shape: ``(H, W, 3)``.
      include_top: keep the 1000-class ImageNet classifier (softmax output).
      pooling: ``"avg"``, ``"max"`` or ``None`` when ``include_top`` is False.
      input_range: pixel range of the RGB float input, or ``None`` if the
        input is already in the network's own range.

    Returns:
      A ``keras.Model`` named ``name`` wrapping the application.
    """
    if name not in APPLICATIONS:
        raise ValueError(
            f"unknown keras.applications backbone {name!r}; valid names: {sorted(APPLICATIONS)}"
        )
    if pooling not in ("avg", "max", None):
        raise ValueError(f"pooling must be 'avg', 'max' or None, got {pooling!r}")
    if weights == "bundled":
        raise ValueError(
            f"{name!r} has no bundled weights (only 'efficientnet_lite0' ships them in a pip "
            "package); use weights='imagenet' (downloads), a local file path, or None."
        )
    if weights is not None and weights != "imagenet":
        if not isinstance(weights, (str, os.PathLike)):
            raise ValueError(f"weights must be 'imagenet', None or a file path, got {weights!r}")
        if not os.path.isfile(weights):
            raise FileNotFoundError(
                f"weights file {os.fspath(weights)!r} does not exist; pass 'imagenet' "
                f"(downloads), None, or the path of a weights file for {name}."
            )
        weights = os.fspath(weights)
    ctor_name, target_range, extra = APPLICATIONS[name]
    input_shape = tuple(input_shape)
    if len(input_shape) != 3 or input_shape[-1] != 3:
        raise ValueError(f"input_shape must be (height, width, 3) RGB, got {input_shape!r}")
    ctor = getattr(keras.applications, ctor_name)
    network = ctor(
        include_top=include_top,
        weights=weights,
        input_shape=input_shape,
        pooling=None if include_top else pooling,
        **extra,
    )
    inputs = keras.Input(shape=input_shape, name="image")
    x = inputs
    pre = input_rescaling(input_range, target_range)
    if pre is not None:
        x = pre(x)
    return keras.Model(inputs, network(x), name=name)
