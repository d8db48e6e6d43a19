"""SimCLR's augmentation (Chen et al. 2020, §3 and Appendix A), per image, in tf.image.

:class:`ViewTransform` draws every image's operations independently, so the two copies of an
image in a two-view batch (:class:`pipelines.designs.TwoViewDesign`) become two views. In
order, each with its own probability:

1. random resized crop: area fraction ~ U(``scale``), log aspect ratio ~ U(log ``ratio``),
   resized to ``size`` (:func:`pipelines.augment.random_crop_boxes`);
2. horizontal flip with probability 1/2 (``flip``);
3. colour jitter with probability ``jitter`` (SimCLR: 0.8), of strength s (``strength``):
   brightness x + δ, δ ~ U(−0.8s, 0.8s); contrast (x − x̄)·f + x̄ (x̄ the image's mean per
   channel), f ~ U(max(0, 1 − 0.8s), 1 + 0.8s); and on colour images saturation (HSV's S
   times f, same range) and hue (HSV's H + δ mod 1, δ ~ U(−0.2s, 0.2s)), each as
   ``tf.image.adjust_*`` does it and clipped to [0, 1]. SimCLR applies the four in a random
   order; here the order is fixed (brightness, contrast, saturation, hue);
4. grayscale with probability ``grayscale`` (SimCLR: 0.2; colour images);
5. Gaussian blur with probability ``blur`` (SimCLR: 0.5 on ImageNet, none on CIFAR-10),
   σ ~ U(``blur_sigma``), a kernel of 10 % of the image's height, reflected borders.

Images are float32 in [0, 1], [B, H, W, C] or [H, W, C], with a static size; ``seed`` is a
stateless [2] int seed, so that a stream of batches replays.
"""

import tensorflow as tf

from pipelines.augment import _as_batch, _seed_or_random, _size_pair, random_crop_boxes

__all__ = ["ViewTransform"]


def _probability(value, name):
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}.")
    return value


def _range(value, name, low=0.0):
    value = tuple(float(v) for v in value)
    if len(value) != 2 or not low < value[0] <= value[1]:
        raise ValueError(f"{name} must be (min, max) with {low} < min <= max, got {value!r}.")
    return value


def _per_image(mask, changed, images):
    return tf.where(mask[:, None, None, None], changed, images)


def _uniform(u, low, high):
    return low + (high - low) * u


def gaussian_blur(images, sigma, radius):
    """Each image [B, H, W, C] blurred by a Gaussian of its own ``sigma`` [B] (separable,
    kernel 2·radius + 1, reflected borders)."""
    if radius < 1:
        return images
    batch, channels = tf.shape(images)[0], images.shape[-1]
    offsets = tf.range(-radius, radius + 1, dtype=tf.float32)
    kernel = tf.exp(-0.5 * tf.square(offsets[None, :] / sigma[:, None]))
    kernel = kernel / tf.reduce_sum(kernel, axis=1, keepdims=True)  # [B, k]
    kernel = tf.repeat(kernel, channels, axis=0)  # [B·C, k], image-major like the channels below
    height, width = images.shape[1], images.shape[2]
    x = tf.pad(images, [[0, 0], [radius, radius], [radius, radius], [0, 0]], mode="REFLECT")
    x = tf.reshape(tf.transpose(x, [1, 2, 0, 3]), [1, height + 2 * radius, width + 2 * radius, -1])
    vertical = tf.transpose(kernel)[:, None, :, None]  # [k, 1, B·C, 1]
    horizontal = tf.transpose(kernel)[None, :, :, None]  # [1, k, B·C, 1]
    x = tf.nn.depthwise_conv2d(x, vertical, [1, 1, 1, 1], "VALID")
    x = tf.nn.depthwise_conv2d(x, horizontal, [1, 1, 1, 1], "VALID")
    x = tf.reshape(x, [height, width, batch, channels])
    return tf.transpose(x, [2, 0, 1, 3])


class ViewTransform:
    """SimCLR's augmentation of each image (module docstring), Chen et al. 2020 Appendix A.

    Args:
      size: output (height, width) or int; ``None``: the input's size.
      scale: (min, max) area fraction of the random resized crop (SimCLR: 0.08–1).
      ratio: (min, max) aspect ratio, width / height (SimCLR: 3/4–4/3).
      flip: mirror with probability 1/2.
      jitter: probability of the colour jitter (0 turns it off).
      strength: s, the jitter's strength (SimCLR: 1.0 on ImageNet, 0.5 on CIFAR-10).
      grayscale: probability of turning a colour image gray.
      blur: probability of the Gaussian blur.
      blur_sigma: (min, max) of the blur's σ in pixels.
    """

    def __init__(self, size=None, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), flip=True, jitter=0.8,
                 strength=1.0, grayscale=0.2, blur=0.5, blur_sigma=(0.1, 2.0)):
        self.size = None if size is None else _size_pair(size)
        self.scale = _range(scale, "scale")
        if self.scale[1] > 1.0:
            raise ValueError(f"scale must be (min, max) with max <= 1, got {scale!r}.")
        self.ratio = _range(ratio, "ratio")
        self.flip = bool(flip)
        self.jitter = _probability(jitter, "jitter")
        self.strength = float(strength)
        if self.strength < 0:
            raise ValueError(f"strength must be >= 0, got {strength!r}.")
        self.grayscale = _probability(grayscale, "grayscale")
        self.blur = _probability(blur, "blur")
        self.blur_sigma = _range(blur_sigma, "blur_sigma")

    def get_config(self):
        return {"size": self.size, "scale": self.scale, "ratio": self.ratio, "flip": self.flip,
                "jitter": self.jitter, "strength": self.strength, "grayscale": self.grayscale,
                "blur": self.blur, "blur_sigma": self.blur_sigma}

    def __call__(self, images, seed=None):
        images, single = _as_batch(images)
        height, width, channels = images.shape[1], images.shape[2], images.shape[3]
        if height is None or width is None or channels is None:
            raise ValueError("ViewTransform needs images with a static height, width and channels.")
        size = self.size or (height, width)
        keys = tf.random.experimental.stateless_split(_seed_or_random(seed), 3)
        batch = tf.shape(images)[0]
        boxes = random_crop_boxes(keys[0], batch, height, width, size, self.scale, self.ratio)
        x = tf.image.crop_and_resize(images, boxes, tf.range(batch), size)
        u = tf.random.stateless_uniform([10, batch], keys[1])
        if self.flip:
            x = _per_image(u[0] < 0.5, tf.reverse(x, axis=[2]), x)
        x = tf.clip_by_value(x, 0.0, 1.0)
        if self.jitter > 0 and self.strength > 0:
            x = _per_image(u[1] < self.jitter, self._jitter(x, u[2:6], channels), x)
        if self.grayscale > 0 and channels == 3:
            gray = tf.repeat(tf.image.rgb_to_grayscale(x), 3, axis=-1)
            x = _per_image(u[6] < self.grayscale, gray, x)
        radius = int(round(0.1 * size[0])) // 2
        if self.blur > 0 and radius >= 1:
            sigma = _uniform(u[8], *self.blur_sigma)
            x = _per_image(u[7] < self.blur, gaussian_blur(x, sigma, radius), x)
        x = tf.ensure_shape(tf.clip_by_value(x, 0.0, 1.0), [None, size[0], size[1], channels])
        return x[0] if single else x

    def _jitter(self, x, u, channels):
        s = self.strength
        low = max(0.0, 1.0 - 0.8 * s)
        x = tf.clip_by_value(x + _uniform(u[0], -0.8 * s, 0.8 * s)[:, None, None, None], 0.0, 1.0)
        mean = tf.reduce_mean(x, axis=[1, 2], keepdims=True)
        x = tf.clip_by_value((x - mean) * _uniform(u[1], low, 1.0 + 0.8 * s)[:, None, None, None] + mean, 0.0, 1.0)
        if channels != 3:
            return x
        hsv = tf.image.rgb_to_hsv(x)
        hue, saturation, value = tf.unstack(hsv, axis=-1)
        saturation = tf.clip_by_value(saturation * _uniform(u[2], low, 1.0 + 0.8 * s)[:, None, None], 0.0, 1.0)
        hue = tf.math.floormod(hue + _uniform(u[3], -0.2 * s, 0.2 * s)[:, None, None], 1.0)
        return tf.clip_by_value(tf.image.hsv_to_rgb(tf.stack([hue, saturation, value], axis=-1)), 0.0, 1.0)

