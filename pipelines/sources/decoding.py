"""Image files: which files are images (:data:`IMAGE_EXTENSIONS`, hidden and
system names left out), how they are found (:func:`image_files`) and decoded
(:func:`decode_pixels`, :func:`load_image_files`), and the per-batch loader
of encoded images shared by the folder and TFDS sources."""

import os

import numpy as np
import tensorflow as tf

from pipelines.sources.core import _resident


IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")


def decode_pixels(contents, channels):
    """Decode any supported image file (jpg, png, bmp, gif) to ``channels``
    (1 or 3) float32 channels in [0, 1]: decode as stored, then convert.

    Decoders accept different channel requests (GIF only 3, BMP no
    conversion to 1), so asking the decoder for ``channels`` fails on valid
    files. Colour (3 or 4 channels) becomes gray by ITU-R 601 luma
    (``tf.image.rgb_to_grayscale``), gray (1 or 2) is repeated to RGB; an
    alpha channel is dropped.
    """
    image = tf.io.decode_image(contents, channels=0, expand_animations=False)
    image = tf.image.convert_image_dtype(image, tf.float32)  # [0, 1]
    colour = tf.shape(image)[-1] >= 3
    if channels == 1:
        image = tf.cond(colour, lambda: tf.image.rgb_to_grayscale(image[..., :3]),
                        lambda: image[..., :1])
    else:
        image = tf.cond(colour, lambda: image[..., :3],
                        lambda: tf.tile(image[..., :1], [1, 1, channels]))
    image.set_shape([None, None, channels])
    return image


def _decode(contents, image_size, channels, resize, origin=""):
    image = decode_pixels(contents, channels)
    # Integer pixel formats cannot hold NaN; this guards any decoder that can.
    finite = tf.debugging.Assert(
        tf.reduce_all(tf.math.is_finite(image)),
        ["image has NaN or Inf pixel values after decoding:", origin],
    )
    with tf.control_dependencies([finite]):
        image = tf.identity(image)
    if resize == "pad":
        image = tf.image.resize_with_pad(image, image_size[0], image_size[1])
    else:
        image = tf.image.resize(image, image_size)
    image = tf.clip_by_value(image, 0.0, 1.0)
    image.set_shape([image_size[0], image_size[1], channels])
    return image


class _EncodedLoader:
    """Decodes image files (``paths``) or encoded bytes (``blobs``) per batch."""

    def __init__(self, items, from_files, image_size, channels, resize):
        self._numpy = items
        self._items = _resident(items)
        self._from_files = from_files
        self._image_size = image_size
        self._channels = channels
        self._resize = resize

    def subset(self, indices):
        return _EncodedLoader(self._numpy[indices], self._from_files, self._image_size,
                              self._channels, self._resize)

    def decode_one(self, item):
        contents = tf.io.read_file(item) if self._from_files else item
        origin = item if self._from_files else "an encoded image"
        return _decode(contents, self._image_size, self._channels, self._resize, origin)

    def __call__(self, indices):
        items = tf.gather(self._items, indices)
        h, w = self._image_size
        return tf.map_fn(
            self.decode_one,
            items,
            fn_output_signature=tf.TensorSpec([h, w, self._channels], tf.float32),
        )


def _size_pair(image_size):
    if isinstance(image_size, (int, np.integer)):
        image_size = (int(image_size), int(image_size))
    image_size = tuple(int(s) for s in image_size)
    if len(image_size) != 2 or min(image_size) < 1:
        raise ValueError(f"image_size must be a positive int or (height, width), got {image_size!r}.")
    return image_size


def _check_resize(resize):
    if resize not in ("pad", "stretch"):
        raise ValueError(f"resize must be 'pad' (keep aspect, zero-pad, Hong §6) or 'stretch', got {resize!r}.")


#: Folders that operating systems, archivers and NAS boxes add, never classes:
#: macOS zip resource forks, Synology / QNAP thumbnails and recycle bins,
#: Windows' recycle bin and volume data, ext4's lost+found (compared
#: case-insensitively). Names starting with "." are hidden and skipped too.
SYSTEM_FOLDERS = ("__MACOSX", "@eaDir", "@Recycle", "#recycle", "$RECYCLE.BIN",
                  "System Volume Information", "lost+found")
_SYSTEM_FOLDERS = {name.lower() for name in SYSTEM_FOLDERS}


def is_hidden_or_system(name):
    """True for a hidden file or folder (".DS_Store", "._x.jpg" AppleDouble files,
    ".git") or a system folder (:data:`SYSTEM_FOLDERS`): never a class nor an image."""
    return name.startswith(".") or name.lower() in _SYSTEM_FOLDERS


def image_files(path):
    """Sorted image files under the folder ``path``, recursively (or ``[path]``
    for one image file); a ``ValueError`` when there are none."""
    path = os.fspath(path)
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise ValueError(f"{path!r}: no such image file or folder.")
    found = []
    for root, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not is_hidden_or_system(d))
        found += [os.path.join(root, n) for n in sorted(names)
                  if not n.startswith(".") and n.lower().endswith(IMAGE_EXTENSIONS)]
    if not found:
        raise ValueError(f"{path!r} holds no images (extensions {IMAGE_EXTENSIONS}).")
    return found


def load_image_files(files, image_size, channels):
    """float32 [N, H, W, C] in [0, 1]: each file decoded (:func:`decode_pixels`),
    converted to ``channels`` and resized (stretched) to ``image_size``."""
    size = _size_pair(image_size)
    images = []
    for path in files:
        try:
            image = decode_pixels(tf.io.read_file(path), channels)
        except tf.errors.OpError:
            raise ValueError(f"{path!r} cannot be read or decoded as an image.") from None
        images.append(tf.image.resize(image, size).numpy())
    return np.clip(np.stack(images), 0.0, 1.0).astype(np.float32)
