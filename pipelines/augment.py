"""Image transforms for training and evaluation, in tf.image, running inside tf.data.

The papers' protocol (Hong et al. §6, Wu et al. §5): images resized (and
zero-padded, see ``pipelines.sources``) to 256×256; training takes random
224×224 crops and horizontal mirroring; testing takes a single center crop.

* :class:`TrainTransform` — random crop of ``size`` (the papers' setting,
  ``scale=None``) or an Inception-style random *resized* crop (``scale=(lo,
  hi)`` of the area, aspect ratio in ``ratio``), then a random horizontal flip.
  Vectorised over the batch: one ``crop_and_resize`` call with a box per image.
* :class:`EvalTransform` — resize so the shorter side is ``resize_to``, then
  center crop ``size``.
* :func:`to_model_input` — grayscale → RGB (or back) and an optional resize,
  for pretrained backbones that expect 3 channels.

Transforms take float32 images in [0, 1], batched [B, H, W, C] or single
[H, W, C], and a stateless ``seed`` (shape [2] int) so that a batch stream
is replayable: ``design.batches(split, seed, transform=TrainTransform())``.
"""

import numpy as np
import tensorflow as tf

__all__ = ["TrainTransform", "EvalTransform", "random_crop_boxes", "to_model_input"]


def _as_batch(images):
    images = tf.convert_to_tensor(images, tf.float32)
    if images.shape.rank == 3:
        return images[None], True
    if images.shape.rank != 4:
        raise ValueError(f"Expected images [H, W, C] or [B, H, W, C], got shape {images.shape}.")
    return images, False


def _size_pair(size, name="size"):
    if isinstance(size, (int, np.integer)):
        size = (int(size), int(size))
    size = tuple(int(s) for s in size)
    if len(size) != 2 or min(size) < 1:
        raise ValueError(f"{name} must be a positive int or (height, width), got {size!r}.")
    return size


def _seed_or_random(seed):
    if seed is None:
        return tf.random.uniform([2], maxval=2**31 - 1, dtype=tf.int32)
    return tf.convert_to_tensor(seed)


def random_crop_boxes(seed, batch, height, width, size, scale=None, ratio=(3 / 4, 4 / 3)):
    """[batch, 4] normalised boxes (y1, x1, y2, x2) for ``tf.image.crop_and_resize``.

    ``scale=None``: a crop of exactly ``size`` pixels at a uniform integer
    offset (pixel-aligned, no resampling when the input is at least ``size``).
    Otherwise: area fraction ~ U(scale), log aspect ratio ~ U(log ratio), the
    crop clipped to the image, offset uniform.
    """
    h_out, w_out = size
    u = tf.random.stateless_uniform([4, batch], seed, dtype=tf.float32)
    hf, wf = float(height), float(width)
    if scale is None:
        ch = tf.fill([batch], min(float(h_out), hf))
        cw = tf.fill([batch], min(float(w_out), wf))
        y0 = tf.floor(u[0] * (hf - ch + 1.0))
        x0 = tf.floor(u[1] * (wf - cw + 1.0))
    else:
        area = (scale[0] + (scale[1] - scale[0]) * u[0]) * hf * wf
        log_r = np.log(ratio[0]) + (np.log(ratio[1]) - np.log(ratio[0])) * u[1]
        aspect = tf.exp(log_r)  # width / height
        cw = tf.minimum(tf.sqrt(area * aspect), wf)
        ch = tf.minimum(tf.sqrt(area / aspect), hf)
        y0 = u[2] * (hf - ch)
        x0 = u[3] * (wf - cw)
    # crop_and_resize maps y in [0, 1] to pixel centres [0, H-1].
    dy, dx = max(hf - 1.0, 1.0), max(wf - 1.0, 1.0)
    return tf.stack([y0 / dy, x0 / dx, (y0 + ch - 1.0) / dy, (x0 + cw - 1.0) / dx], axis=1)


class TrainTransform:
    """Random crop (or random resized crop) + horizontal flip, per image.

    Args:
      size: output (height, width) or int; the papers use 224 from 256.
      scale: ``None`` for a plain random crop of ``size`` (Hong §6, Wu §5), or
        the (min, max) fraction of the image area of a random resized crop.
      ratio: aspect-ratio range (width / height) of the random resized crop.
      flip: mirror each image horizontally with probability 1/2.
    """

    def __init__(self, size=224, scale=None, ratio=(3 / 4, 4 / 3), flip=True):
        self.size = _size_pair(size)
        if scale is not None:
            scale = tuple(float(s) for s in scale)
            if len(scale) != 2 or not 0.0 < scale[0] <= scale[1] <= 1.0:
                raise ValueError(f"scale must be (min, max) with 0 < min <= max <= 1, got {scale!r}.")
        ratio = tuple(float(r) for r in ratio)
        if len(ratio) != 2 or not 0.0 < ratio[0] <= ratio[1]:
            raise ValueError(f"ratio must be (min, max) with 0 < min <= max, got {ratio!r}.")
        self.scale, self.ratio, self.flip = scale, ratio, bool(flip)

    def __call__(self, images, seed=None):
        images, single = _as_batch(images)
        seed = _seed_or_random(seed)
        k_crop, k_flip = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
        batch = tf.shape(images)[0]
        height, width = images.shape[1], images.shape[2]
        if height is None or width is None:
            raise ValueError("TrainTransform needs images with a static height and width.")
        boxes = random_crop_boxes(k_crop, batch, height, width, self.size, self.scale, self.ratio)
        out = tf.image.crop_and_resize(images, boxes, tf.range(batch), self.size)
        if self.flip:
            mirror = tf.random.stateless_uniform([batch], k_flip) < 0.5
            out = tf.where(mirror[:, None, None, None], tf.reverse(out, axis=[2]), out)
        out = tf.clip_by_value(out, 0.0, 1.0)
        return out[0] if single else out


class EvalTransform:
    """Resize (shorter side to ``resize_to``, aspect kept) then center crop ``size``."""

    def __init__(self, size=224, resize_to=256):
        self.size = _size_pair(size)
        self.resize_to = int(resize_to)
        if self.resize_to < max(self.size):
            raise ValueError(
                f"resize_to={resize_to} is smaller than the crop size {self.size}; use resize_to >= size."
            )

    def __call__(self, images, seed=None):
        images, single = _as_batch(images)
        height, width = images.shape[1], images.shape[2]
        if height is None or width is None:
            raise ValueError("EvalTransform needs images with a static height and width.")
        factor = self.resize_to / min(height, width)
        new_h, new_w = max(round(height * factor), self.size[0]), max(round(width * factor), self.size[1])
        out = tf.image.resize(images, (new_h, new_w))
        top, left = (new_h - self.size[0]) // 2, (new_w - self.size[1]) // 2
        out = out[:, top: top + self.size[0], left: left + self.size[1], :]
        out = tf.clip_by_value(out, 0.0, 1.0)
        return out[0] if single else out


def to_model_input(image, channels=3, size=None):
    """Match a backbone's input: 1 → 3 channels by repetition (3 → 1 by luminance), optional resize.

    Works on [H, W, C] or [B, H, W, C]; values keep their [0, 1] scale (a
    backbone's own preprocessing, e.g. ImageNet normalisation, comes after).
    """
    image = tf.convert_to_tensor(image, tf.float32)
    have = image.shape[-1]
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, got {channels!r}.")
    if have == 1 and channels == 3:
        image = tf.repeat(image, 3, axis=-1)
    elif have == 3 and channels == 1:
        image = tf.image.rgb_to_grayscale(image)
    elif have != channels:
        raise ValueError(f"Cannot turn {have}-channel images into {channels}-channel ones.")
    if size is not None:
        image = tf.image.resize(image, _size_pair(size))
    return image
