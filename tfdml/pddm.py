"""The position-dependent deep metric (PDDM) unit of Huang, Loy & Tang, NeurIPS 2016,
"Local Similarity-Aware Deep Feature Embedding": a learned similarity S_ij of two
features that looks at where the pair sits in the feature space (their mean), not
only at their difference.

* :class:`PDDMLayer`: the unit, a Keras layer with its own weights, scoring every
  pair of two sets of features at once ([A, d] × [B, d] → [A, B], no loop over pairs).
  :class:`tfdml.losses.PDDMLoss` owns one and lists it in ``parameter_layers``, so
  :class:`tfdml.models.EmbeddingModel` trains it and every save route keeps it; it is
  not part of the encoder, so exports never carry it.
* :func:`pddm_scores`: a query set scored against a gallery with a trained unit, in
  chunks of queries (memory grows with chunk × gallery × width), for ranking a
  gallery by the learned similarity instead of the Euclidean distance.

The unit as tfdml computes it:

    u1 = |f_i − f_j|,   v1 = (f_i + f_j) / 2,
    u = ReLU(W_u u1/‖u1‖ + b_u),   v = ReLU(W_v v1/‖v1‖ + b_v),
    c = ReLU(W_c [u/‖u‖ ; v/‖v‖] + b_c),
    S_ij = w_s · c + b_s,

with f the model's (L2-normalised) embeddings. S is symmetric in i and j and unbounded
(the last layer is linear). A zero vector (u1 of identical features, a u or v that the
ReLU zeroed) is normalised to zero, with a finite gradient
(:func:`tfdml.distances.l2_normalize`).

Not checked against the paper: its equation for the unit (the inputs, the layers, where
it normalises, the widths and the range of S) was not recovered from the paper's text,
so no equation number is cited; the unit above is tfdml's, built on the abstract's
idea of a metric "adaptive to local feature structure" (position-dependent), here
through the pair's mean beside its difference. What was recovered and checked is the hard quadruplet mining that S
drives (:class:`tfdml.losses.PDDMLoss`).
"""

import keras
import tensorflow as tf

from tfdml import distances as distances_lib


def _check_width(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1 (a layer width), got {value!r}.")
    return value


@keras.saving.register_keras_serializable(package="tfdml")
class PDDMLayer(keras.layers.Layer):
    """The PDDM unit: ``call(a)`` gives the [B, B] scores S of a batch of features,
    ``call([a, b])`` (or :meth:`scores`) the [A, B] scores of two sets.

    Weights, created (and the layer built) in ``__init__`` so that a loss owning the
    unit has them before the first step (as :class:`tfdml.losses.Proxies`):
    ``w_u``, ``w_v`` [embedding_dim, units], ``w_c`` [2·units, hidden_units], ``w_s``
    [hidden_units] and the biases, Glorot-uniform kernels drawn with ``seed``, zero
    biases. ``units`` and ``hidden_units`` are tfdml's defaults (the paper's layer
    widths were not recovered from its text).

    Args:
      embedding_dim: d, the size of a feature.
      units: width of the u and v layers.
      hidden_units: width of the c layer.
      seed: seed of the kernels' initialisation.
    """

    def __init__(self, embedding_dim, units=64, hidden_units=64, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.embedding_dim = _check_width("embedding_dim", embedding_dim)
        self.units = _check_width("units", units)
        self.hidden_units = _check_width("hidden_units", hidden_units)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be an int or None, got {seed!r}.")
        self.seed = seed

        def kernel(name, shape, offset):
            init = keras.initializers.GlorotUniform(seed=None if seed is None else seed + offset)
            return self.add_weight(name=name, shape=shape, initializer=init)

        def bias(name, shape):
            return self.add_weight(name=name, shape=shape, initializer="zeros")

        self.w_u = kernel("w_u", (self.embedding_dim, self.units), 0)
        self.b_u = bias("b_u", (self.units,))
        self.w_v = kernel("w_v", (self.embedding_dim, self.units), 1)
        self.b_v = bias("b_v", (self.units,))
        self.w_c = kernel("w_c", (2 * self.units, self.hidden_units), 2)
        self.b_c = bias("b_c", (self.hidden_units,))
        # a [hidden_units, 1] kernel read as a vector (Glorot bounds of fan_out = 1)
        self.w_s = self.add_weight(
            name="w_s", shape=(self.hidden_units,),
            initializer=keras.initializers.RandomUniform(
                -(6.0 / (self.hidden_units + 1)) ** 0.5, (6.0 / (self.hidden_units + 1)) ** 0.5,
                seed=None if seed is None else seed + 3))
        self.b_s = bias("b_s", ())
        self.built = True

    def scores(self, a, b=None):
        """S [A, B] of every pair (a_i, b_j) (b = a when None), in ``a``'s dtype (the
        weights are cast to it)."""
        a = tf.convert_to_tensor(a)
        b = a if b is None else tf.cast(b, a.dtype)
        if a.shape[-1] is not None and a.shape[-1] != self.embedding_dim:
            raise ValueError(f"PDDMLayer was built for features of size embedding_dim={self.embedding_dim}, "
                             f"got features of size {a.shape[-1]}; build it with the model's embedding_dim.")

        def weight(v):
            return tf.cast(v, a.dtype)

        def dense(x, kernel, bias):
            return tf.nn.relu(tf.einsum("abk,kn->abn", x, weight(kernel)) + weight(bias))

        u1 = distances_lib.l2_normalize(tf.abs(a[:, None, :] - b[None, :, :]))
        v1 = distances_lib.l2_normalize(0.5 * (a[:, None, :] + b[None, :, :]))
        u = distances_lib.l2_normalize(dense(u1, self.w_u, self.b_u))
        v = distances_lib.l2_normalize(dense(v1, self.w_v, self.b_v))
        c = dense(tf.concat([u, v], axis=-1), self.w_c, self.b_c)
        return tf.einsum("abn,n->ab", c, weight(self.w_s)) + weight(self.b_s)

    def call(self, inputs):
        if isinstance(inputs, (list, tuple)):
            return self.scores(*inputs)
        return self.scores(inputs)

    def get_config(self):
        config = super().get_config()
        config.update(embedding_dim=self.embedding_dim, units=self.units, hidden_units=self.hidden_units,
                      seed=self.seed)
        return config


def pddm_scores(unit, queries, gallery, chunk_size=256):
    """S [Q, G] of each query against each gallery row, by the trained ``unit``
    (a :class:`PDDMLayer`, e.g. ``loss.unit`` of a :class:`tfdml.losses.PDDMLoss`),
    ``chunk_size`` queries at a time. Larger is more similar: rank a gallery with
    ``tf.math.top_k(pddm_scores(...), k)``."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an int >= 1, got {chunk_size!r}.")
    queries = tf.convert_to_tensor(queries)
    gallery = tf.cast(gallery, queries.dtype)
    rows = [unit.scores(queries[start:start + chunk_size], gallery)
            for start in range(0, int(queries.shape[0]), chunk_size)]
    if not rows:
        return tf.zeros([0, tf.shape(gallery)[0]], queries.dtype)
    return tf.concat(rows, axis=0)
