"""The one input-scaling layer shared by every backbone.

Backbones declare the pixel range their weights expect (``target_range``);
users declare the range of the images they feed (``input_range``, e.g.
``(0, 255)`` for decoded JPEGs or ``(0, 1)`` for ``pipelines`` output). The
layer maps one linearly onto the other, so a model states in its config which
scale it takes.
"""

from __future__ import annotations

import keras

__all__ = ["input_rescaling", "check_range"]


def check_range(value, what="input_range"):
    """Validate a ``(low, high)`` pair and return it as floats."""
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(
            f"{what} must be a pair (low, high) such as (0, 255) or (0, 1), got {value!r}"
        ) from None
    if not high > low:
        raise ValueError(f"{what} needs high > low, got {value!r}")
    return low, high


def input_rescaling(input_range, target_range, name="preprocess"):
    """``keras.layers.Rescaling`` mapping ``input_range`` linearly onto ``target_range``.

    Returns ``None`` when ``input_range`` is ``None`` (inputs already scaled)
    or equal to ``target_range``.
    """
    if input_range is None:
        return None
    low, high = check_range(input_range)
    t_low, t_high = check_range(target_range, "target_range")
    if (low, high) == (t_low, t_high):
        return None
    scale = (t_high - t_low) / (high - low)
    return keras.layers.Rescaling(scale=scale, offset=t_low - low * scale, name=name)
