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


#: The Keras optimizers that have a variant here, by class and by the name ``compile`` takes.
VARIANTS = {keras.optimizers.Adam: Adam, keras.optimizers.AdamW: AdamW, keras.optimizers.SGD: SGD}


def with_loss_multipliers(optimizer, loss):
    """``optimizer`` (what ``compile`` takes: a name, a config or an instance) applying the
    ``lr_multipliers`` of ``loss`` (e.g. a proxy loss's ``proxy_lr_multiplier``):

    * none of them != 1: ``optimizer`` as it is;
    * a name or config of Adam / AdamW / SGD: the variant of this module with that
      config and the multipliers;
    * an :class:`LRMultipliers` optimizer: the same object, given the multipliers whose
      keys it lacks (its own keys keep their values);
    * any other optimizer: ValueError naming the fix, since it cannot apply them and the
      variables would train at the base learning rate, silently."""
    wanted = {key: value for key, value in _check_multipliers(getattr(loss, "lr_multipliers", None)).items()
              if value != 1.0}
    if not wanted:
        return optimizer
    if isinstance(optimizer, (str, dict)):
        resolved = keras.optimizers.get(optimizer)
        variant = VARIANTS.get(type(resolved))
        if variant is not None:
            return variant.from_config({**resolved.get_config(), "lr_multipliers": wanted})
        optimizer = resolved
    if isinstance(optimizer, LRMultipliers):
        for key, value in wanted.items():
            optimizer.lr_multipliers.setdefault(key, value)
        return optimizer
    owner = type(loss).__name__
    raise ValueError(
        f"{owner} trains some of its variables with a scaled learning rate (lr_multipliers={wanted}), "
        f"which {type(optimizer).__name__} cannot apply: they would train at the base rate. Pass "
        "optimizer=tfdml.optimizers.Adam(learning_rate, lr_multipliers=loss.lr_multipliers) (or AdamW / "
        "SGD, or the name 'adam' / 'adamw' / 'sgd'), or build the loss without them "
        "(proxy_lr_multiplier=1.0)."
    )
