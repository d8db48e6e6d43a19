"""Optimizers with per-layer learning-rate multipliers.

Duan et al. 2019 §4 train the embedding head with a 10× higher learning rate
than the pretrained backbone. Keras 3 optimizers have one learning rate; the
classes here scale it, inside ``update_step``, for every variable whose path
has a component named in ``lr_multipliers`` (e.g. ``{"embedding": 10.0}`` for
the head built by :func:`tfdml.models.build_encoder`, whose variables are
``embedding/kernel`` and ``embedding/bias``). For Adam this is exactly a 10×
step size for those variables, which scaling their gradients would not be
(Adam is invariant to the gradient's scale).
"""

import keras


def _check_multipliers(multipliers):
    out = {}
    for key, value in dict(multipliers or {}).items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"lr_multipliers keys must be layer names, got {key!r}.")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"lr_multipliers[{key!r}] must be a number > 0, got {value!r}.")
        out[key] = float(value)
    return out


class LRMultipliers:
    """Mixin for a Keras optimizer: ``learning_rate × lr_multipliers[layer]``."""

    def __init__(self, *args, lr_multipliers=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lr_multipliers = _check_multipliers(lr_multipliers)

    def multiplier(self, variable):
        """The factor for ``variable``: the first multiplier whose key is a
        component of the variable's path, else 1."""
        parts = str(getattr(variable, "path", variable.name)).split("/")
        for key, value in self.lr_multipliers.items():
            if key in parts:
                return value
        return 1.0

    def update_step(self, gradient, variable, learning_rate):
        factor = self.multiplier(variable)
        if factor != 1.0:
            learning_rate = learning_rate * factor
        return super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        config = super().get_config()
        config["lr_multipliers"] = dict(self.lr_multipliers)
        return config


@keras.saving.register_keras_serializable(package="tfdml")
class Adam(LRMultipliers, keras.optimizers.Adam):
    """``keras.optimizers.Adam`` with ``lr_multipliers``."""


@keras.saving.register_keras_serializable(package="tfdml")
class AdamW(LRMultipliers, keras.optimizers.AdamW):
    """``keras.optimizers.AdamW`` with ``lr_multipliers``."""


@keras.saving.register_keras_serializable(package="tfdml")
class SGD(LRMultipliers, keras.optimizers.SGD):
    """``keras.optimizers.SGD`` with ``lr_multipliers``."""
