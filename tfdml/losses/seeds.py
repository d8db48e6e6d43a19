"""The layer that holds a loss's sampler seed stream.

A loss built with ``seed=s`` draws the sampler seed ``[s, c]`` (int32) on its c-th call
(c = 0, 1, ...): deterministic for a given ``s``, different from call to call, and
restored from a checkpoint together with the model.
"""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="tfdml")
class SeedState(keras.layers.Layer):
    """Holds the ``keras.random.SeedGenerator`` of a loss's sampler.

    The generator's state is tracked as a non-trainable weight of this layer (for
    ``model.save_weights`` and ``.keras`` files) and as its attribute ``state`` (for
    ``tf.train.Checkpoint``), so every save route restores the random stream of a loss
    whose ``parameter_layers`` the model tracks.
    """

    def __init__(self, seed=None, **kwargs):
        super().__init__(**kwargs)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be an int or None, got {seed!r}.")
        self.seed = seed
        # Bypass the layer's automatic SeedGenerator tracking (which would list
        # the state twice and not save it) and track the state as a weight.
        object.__setattr__(self, "generator", keras.random.SeedGenerator(seed))
        self._track_variable(self.generator.state)
        self.state = self.generator.state  # the same weight, as a child TensorFlow's checkpoints walk
        self.built = True

    def next(self):
        """The [2] int32 seed for this call (then advance the stream)."""
        return tf.cast(self.generator.next(), tf.int32)

    def call(self, inputs):  # pragma: no cover - never used as a layer in a model
        return inputs

    def get_config(self):
        config = super().get_config()
        config["seed"] = self.seed
        return config
