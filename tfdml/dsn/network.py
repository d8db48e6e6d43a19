"""The sampler network's layers (Duan et al. 2019, §3.2, §4.2): the DSN input, the trunk
shared by every head, and the pairwise heads whose outputs are the logits H of Eq. 4.

DSN input: the paper feeds the images to a network "much shallower" than the
embedding network, whose two sampler networks "share the parameters of the
convolutional and fully connected layers" (§3.2, §4.2). Two trunks compute the
per-example features h of the pool (``trunk``):

- ``"conv"`` (the paper's input): the raw images through ``depth`` blocks of a
  3 × 3 convolution (``channels`` filters, ReLU) and 2 × 2 max pooling, then a
  fully connected ReLU layer of ``width`` units;
- ``"mlp"`` (the cheaper default): the pool downsampled by area averaging (an
  integer factor ``floor(H / input_size)`` per side; non-image inputs are
  flattened) through ``depth`` fully connected ReLU layers.

Either costs one small network over the pool and one pairwise head over
[M, P] candidate pairs, and never runs the embedding network: only the
selected examples are embedded. A pair (i, j) of trunk features h is described
by [h_i ⊙ h_j, |h_i − h_j|]; a class by the mean of its members' trunk features
in the pool.
"""

import keras
import tensorflow as tf



def cheap_features(x, input_size=7):
    """The DSN's input: ``x`` [P, H, W, C] averaged over ``f × f`` blocks with
    f = max(1, floor(max(H, W) / input_size)), then flattened; other ranks are flattened."""
    x = tf.convert_to_tensor(x)
    if not x.dtype.is_floating:
        x = tf.cast(x, tf.float32)
    if x.shape.rank == 4 and input_size:
        factor = max(1, int(max(x.shape[1], x.shape[2])) // int(input_size))
        if factor > 1:
            x = tf.nn.avg_pool2d(x, ksize=factor, strides=factor, padding="SAME")
    return tf.reshape(x, [tf.shape(x)[0], -1])


def feature_dim(input_shape, input_size=7):
    """Length of :func:`cheap_features` for one example of shape ``input_shape`` (no batch axis)."""
    shape = [int(d) for d in input_shape]
    if len(shape) == 3 and input_size:
        factor = max(1, max(shape[0], shape[1]) // int(input_size))
        shape = [-(-shape[0] // factor), -(-shape[1] // factor), shape[2]]
    size = 1
    for d in shape:
        size *= d
    return size


def pair_features(u, v):
    """[h_i ⊙ h_j, |h_i − h_j|] for u [M, w] and v [P, w] -> [M, P, 2w]."""
    u, v = u[:, None, :], v[None, :, :]
    return tf.concat([u * v, tf.abs(u - v)], axis=-1)


def _check_int(value, name, owner, minimum=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{owner}: {name} must be an integer >= {minimum}, got {value!r}.")
    return value


#: The DSN trunks (module docstring): the paper's convolutional one on the raw images, and
#: an MLP on area-averaged pixels.
TRUNKS = ("mlp", "conv")


class SamplerNetwork(keras.layers.Layer):
    """Shared parts of the DSN: the input, the trunk and pairwise heads.

    Args:
      width: units of the trunk's output and of the heads' hidden layer.
      depth: layers of the trunk (≥ 1): Dense-ReLU layers (``"mlp"``) or
        convolution + pooling blocks (``"conv"``).
      input_size: downsampling target of :func:`cheap_features` (0: no
        downsampling); the ``"mlp"`` trunk's input only (the ``"conv"`` trunk
        reads the raw images).
      trunk: ``"mlp"`` or ``"conv"`` (Duan §3.2; see the module docstring).
      channels: filters of each convolution of the ``"conv"`` trunk.
      seed: seed of the weight initialisers (``None``: Keras' global seed).
    """

    kind = None
    heads = ()

    @staticmethod
    def noise_rows(num):
        """Rows of uniform noise :meth:`select` needs for ``num`` tuples."""
        raise NotImplementedError

    def __init__(self, width=64, depth=2, input_size=7, trunk="mlp", channels=32, seed=None, **kwargs):
        super().__init__(**kwargs)
        owner = type(self).__name__
        self.width = _check_int(width, "width", owner)
        self.depth = _check_int(depth, "depth", owner)
        self.input_size = _check_int(input_size, "input_size", owner, minimum=0)
        self.channels = _check_int(channels, "channels", owner)
        if trunk not in TRUNKS:
            raise ValueError(f"{owner}: unknown trunk {trunk!r}; choose one of {', '.join(TRUNKS)}.")
        self.trunk_kind = trunk
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"{owner}: seed must be an int or None, got {seed!r}.")
        self.seed = seed
        counter = iter(range(1000))

        def init():
            return keras.initializers.GlorotUniform(
                seed=None if seed is None else seed * 1000 + next(counter)
            )

        dtype = self.dtype_policy
        if trunk == "conv":
            self.trunk = []
            for i in range(depth):
                self.trunk.append(keras.layers.Conv2D(
                    channels, 3, padding="same", activation="relu", kernel_initializer=init(),
                    dtype=dtype, name=f"trunk_conv{i}"))
                self.trunk.append(keras.layers.MaxPooling2D(2, padding="same", dtype=dtype,
                                                            name=f"trunk_pool{i}"))
            self.trunk.append(keras.layers.Flatten(dtype=dtype, name="trunk_flatten"))
            self.trunk.append(keras.layers.Dense(
                width, activation="relu", kernel_initializer=init(), dtype=dtype, name="trunk_dense"))
        else:
            self.trunk = [
                keras.layers.Dense(
                    width, activation="relu", kernel_initializer=init(), dtype=dtype, name=f"trunk{i}"
                )
                for i in range(depth)
            ]
        # Flat list (hidden, logit, hidden, logit, ...) in the order of ``heads``.
        self.head_layers = []
        for head in self.heads:
            self.head_layers.append(
                keras.layers.Dense(width, activation="relu", kernel_initializer=init(), dtype=dtype,
                                   name=f"{head}_hidden")
            )
            self.head_layers.append(
                keras.layers.Dense(1, kernel_initializer=init(), dtype=dtype, name=f"{head}_logit")
            )

    # -- building ------------------------------------------------------------
    def build(self, input_shape):
        """``input_shape``: shape of the pool's *inputs* x, [P, ...]."""
        example = tuple(input_shape)[1:]
        if self.trunk_kind == "conv":
            if len(example) != 3 or any(d is None for d in example):
                raise ValueError(
                    f"{type(self).__name__}: trunk='conv' reads images of a known shape [P, H, W, C]; "
                    f"the pool's inputs have shape {tuple(input_shape)}. Use trunk='mlp' for other inputs."
                )
            shape = (None,) + tuple(int(d) for d in example)
        else:
            shape = (None, feature_dim(example, self.input_size))
        for layer in self.trunk:
            layer.build(shape)
            shape = layer.compute_output_shape(shape)
        for head in self.heads:
            hidden, logit = self._head(head)
            hidden.build((None, self.head_input_units(head)))
            logit.build((None, self.width))
        self.built = True

    def head_input_units(self, head):
        return 2 * self.width

    # -- pieces --------------------------------------------------------------
    def features(self, x):
        """The DSN input of the pool, in the layer's dtype: the images (``"conv"``) or
        :func:`cheap_features` (``"mlp"``)."""
        if self.trunk_kind == "conv":
            return tf.cast(x, self.compute_dtype)
        return tf.cast(cheap_features(x, self.input_size), self.compute_dtype)

    def embed(self, features):
        """Trunk features h [P, width] of the pool (shared by all heads, Fig. 2a)."""
        h = features
        for layer in self.trunk:
            h = layer(h)
        return h

    def _head(self, name):
        i = self.heads.index(name)
        return self.head_layers[2 * i], self.head_layers[2 * i + 1]

    def head(self, name, pair_features):
        """Logits H of Eq. 4 from [M, P, units] pair descriptions -> [M, P]."""
        hidden, logit = self._head(name)
        return tf.squeeze(logit(hidden(pair_features)), axis=-1)

    def call(self, x):
        """Trunk features of the pool inputs ``x`` (for building / inspection)."""
        return self.embed(self.features(x))

    def get_config(self):
        config = super().get_config()
        config.update(width=self.width, depth=self.depth, input_size=self.input_size,
                      trunk=self.trunk_kind, channels=self.channels, seed=self.seed)
        return config

