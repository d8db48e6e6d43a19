"""The backbones trained from scratch on the bundled data: a small CNN and an MLP."""

import keras


def small_cnn(input_shape, width=32, sync_batchnorm=True, pooling="avg", name="small_cnn"):
    """A small convolutional backbone for the bundled 28×28 / 8×8 data.

    Three conv-BN-ReLU stages (width, 2·width, 4·width), the first two followed
    by 2×2 max-pooling where the image is large enough, then global average
    pooling. Inputs are float images [H, W, C]. With ``sync_batchnorm`` the
    batch statistics are computed over the global batch under a distribution
    strategy (otherwise each replica normalises with its own slice, and the
    result differs from single-device training). ``pooling="flatten"`` keeps
    the spatial layout of the last feature map instead of averaging it away
    (on digits, where a stroke is matters as much as what it is).
    """
    if pooling not in ("avg", "flatten"):
        raise ValueError(f"small_cnn pooling must be 'avg' or 'flatten', got {pooling!r}.")
    inputs = keras.Input(shape=tuple(input_shape), name="image")
    x = inputs
    size = min(input_shape[0], input_shape[1])
    for stage, filters in enumerate((width, 2 * width, 4 * width)):
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False, name=f"conv{stage}")(x)
        x = keras.layers.BatchNormalization(synchronized=sync_batchnorm, name=f"bn{stage}")(x)
        x = keras.layers.ReLU(name=f"relu{stage}")(x)
        if stage < 2 and size >= 8:
            x = keras.layers.MaxPooling2D(2, name=f"pool{stage}")(x)
            size //= 2
    if pooling == "avg":
        x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    else:
        x = keras.layers.Flatten(name="flatten")(x)
    return keras.Model(inputs, x, name=name)


def mlp(input_shape, width=128, depth=2, name="mlp"):
    """A fully connected backbone for non-image features (flattens its input)."""
    inputs = keras.Input(shape=tuple(input_shape), name="features")
    x = keras.layers.Flatten(name="flatten")(inputs)
    for i in range(depth):
        x = keras.layers.Dense(width, activation="relu", name=f"dense{i}")(x)
    return keras.Model(inputs, x, name=name)
