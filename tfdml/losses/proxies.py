"""What the losses with learned class vectors share: one (or K) learned vectors per
training class, called proxies (ProxyNCA, Proxy-Anchor), class weights (normalized
softmax, CosFace, ArcFace) or centres (sub-center ArcFace, SoftTriple); one mechanism
for all of them.

* :class:`Proxies`: the Keras layer holding the [num_classes · K, embedding_dim]
  variable (K = ``centers_per_class``; row c·K + k is the k-th vector of class c). A
  loss lists it in ``parameter_layers``, so
  :class:`tfdml.models.EmbeddingModel` tracks it: the optimizer trains it, and
  ``model.keras``, checkpoints and backups save and restore it. It is not part
  of the encoder, so evaluation and exports (``model.export``, ``saved_model/``,
  the lookup) never see it.
* :class:`ProxyLoss`: the base of these losses (:class:`~tfdml.losses.ProxyNCALoss`,
  :class:`~tfdml.losses.ProxyAnchorLoss`, :mod:`tfdml.losses.classification`,
  :class:`~tfdml.losses.SoftTripleLoss`): ``num_classes`` (the classes of the
  training split, which ``train.py`` fills in) and ``embedding_dim`` (the
  config's ``model.embedding_dim``) size the proxies; the batch's ``label``
  column (contiguous 0..L−1, :mod:`tfdml.targets`) indexes them, checked by an
  :class:`~tfdml.input_checks.InputCheck` (so an id outside [0, num_classes) is
  refused, also under XLA). Raw int64 ids never size or index proxies.

Learning rate of the proxies: both papers' code trains the proxies with a
larger step than the network. ``proxy_lr_multiplier`` is that factor; the loss
exposes it as ``lr_multipliers`` ({proxy layer name: factor}), which
``train.py`` and :meth:`tfdml.models.EmbeddingModel.compile` hand to the
:mod:`tfdml.optimizers` variants (the one mechanism for per-variable learning
rates; :func:`tfdml.optimizers.with_loss_multipliers` refuses an optimizer that
cannot apply them). A plain ``keras.Model`` never trains the proxies: the loss
refuses it (:mod:`tfdml.losses.routes`).
"""

import math

import keras
import numpy as np
import tensorflow as tf

from tfdml import input_checks
from tfdml.losses import arguments, base


def check_size(name, value, minimum, what):
    """``value`` as an int if it is one >= ``minimum``, else a ValueError naming ``what`` it counts."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum} ({what}), got {value!r}.")
    return int(value)


@keras.saving.register_keras_serializable(package="tfdml")
class Proxies(keras.layers.Layer):
    """``centers_per_class`` (K) trainable vectors per class: ``proxies`` of shape
    [num_classes · K, embedding_dim] (row c·K + k: the k-th vector of class c), created
    (and the layer built) in ``__init__``, drawn from N(0, ``stddev``²) with ``seed``.
    The losses normalise them, so ``stddev`` only sets their initial norm (and with it
    the initial size of a step relative to the vector)."""

    def __init__(self, num_classes, embedding_dim, stddev=1.0, seed=None, centers_per_class=1, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = check_size("num_classes", num_classes, 1, "the classes of the training split")
        self.embedding_dim = check_size("embedding_dim", embedding_dim, 1, "the size of an embedding")
        self.centers_per_class = check_size("centers_per_class", centers_per_class, 1,
                                             "the vectors learned per class")
        self.stddev = arguments.check_positive("stddev", stddev)
        self.seed = seed
        self.proxies = self.add_weight(
            name="proxies", shape=(self.num_classes * self.centers_per_class, self.embedding_dim),
            initializer=keras.initializers.RandomNormal(stddev=self.stddev, seed=seed))
        self.built = True

    def input_checks(self):
        """``label`` in [0, num_classes): the index of the example's proxy."""
        return [input_checks.index_check("label", "num_classes", self.num_classes, "classes of the training split")]

    def call(self, inputs):  # pragma: no cover - never used as a layer in a model
        return inputs

    def get_config(self):
        config = super().get_config()
        config.update(num_classes=self.num_classes, embedding_dim=self.embedding_dim,
                      stddev=self.stddev, seed=self.seed, centers_per_class=self.centers_per_class)
        return config


def masked_log1p_sum_exp(logits, mask, axis):
    """log(1 + Σ_{mask} exp(logits)) along ``axis``, stably (the largest logit, or 0,
    factored out); an empty set gives log 1 = 0 with zero gradient."""
    mask = tf.cast(mask, logits.dtype)
    masked = tf.where(mask > 0, logits, tf.zeros_like(logits))
    top = tf.stop_gradient(tf.maximum(tf.reduce_max(masked, axis=axis, keepdims=True), 0.0))
    total = tf.exp(-top) + tf.reduce_sum(mask * tf.exp(masked - top), axis=axis, keepdims=True)
    return tf.squeeze(top + tf.math.log(total), axis=axis)


def masked_log_sum_exp(logits, mask, axis):
    """log Σ_{mask} exp(logits) along ``axis``, stably (the largest included logit
    factored out; excluded logits add exactly 0). Every slice must include one logit."""
    included = tf.cast(mask, logits.dtype) > 0
    masked = tf.where(included, logits, tf.fill(tf.shape(logits), logits.dtype.min))
    top = tf.stop_gradient(tf.reduce_max(masked, axis=axis, keepdims=True))
    total = tf.reduce_sum(tf.where(included, tf.exp(masked - top), tf.zeros_like(logits)),
                          axis=axis, keepdims=True)
    return tf.squeeze(top + tf.math.log(total), axis=axis)


class ProxyLoss(base.MetricLoss):
    """Base of the losses with learned class vectors (not registered). Subclasses set
    ``proxy_stddev(num_classes, embedding_dim)`` (the papers' initialisation) and implement
    ``compute``; one with several vectors per class passes ``centers_per_class``.

    Args:
      num_classes: classes of the training split (labels 0..num_classes−1); ``train.py``
        passes it.
      embedding_dim: size of the embeddings (``train.py`` passes ``model.embedding_dim``).
      proxy_lr_multiplier: learning rate of the proxies ÷ that of the network (> 0),
        exposed as :attr:`lr_multipliers`.
      seed: seed of the proxies' initialisation (``train.py`` passes the run's seed).
      centers_per_class: K >= 1 vectors per class, for the losses whose
        ``multiple_centers`` is True (the others refuse K != 1).
      **kwargs: ``tuple_reduction``, ``name``, ``reduction``, ``dtype`` of
        :class:`~tfdml.losses.base.MetricLoss`.

    No sampler (the proxies replace the mining of tuples) and no ``importance`` (a
    term compares an example with class proxies, not pairs of examples, so the
    batch design's pair weights W_ij do not apply).
    """

    takes_distance = False
    min_classes = 1
    #: True for the losses that learn several vectors per class (``centers_per_class``).
    multiple_centers = False

    def __init__(self, num_classes=None, embedding_dim=None, proxy_lr_multiplier=1.0, seed=None,
                 centers_per_class=1, **kwargs):
        owner = type(self).__name__
        if "distance" in kwargs:
            raise ValueError(f"{owner} fixes its own comparison of embeddings and proxies and takes no "
                             "distance; remove distance.")
        if kwargs.get("sampler") is not None:
            raise ValueError(f"{owner} compares each example with the class proxies, which replace the "
                             f"mining of tuples: it takes no sampler; remove sampler={kwargs['sampler']!r} "
                             "(loss.sampler: none, or leave it empty).")
        kwargs.pop("sampler", None)
        if kwargs.get("importance"):
            raise ValueError(f"{owner} has no importance-weighted form: its terms compare examples with "
                             "class proxies, not pairs of examples, so the design's pair weights W_ij "
                             "do not apply; use importance=False.")
        super().__init__(seed=seed, **kwargs)
        if num_classes is None or embedding_dim is None:
            raise ValueError(f"{owner} learns one proxy per training class and needs num_classes (the "
                             "classes of the training split) and embedding_dim (the size of an "
                             "embedding); train.py passes both.")
        num_classes = check_size("num_classes", num_classes, self.min_classes,
                                  "the classes of the training split")
        if centers_per_class != 1 and not self.multiple_centers:
            raise ValueError(f"{owner} learns one vector per class; remove centers_per_class="
                             f"{centers_per_class!r} (sub_center_arcface and soft_triple learn several).")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be an int or None, got {seed!r}.")
        self.proxy_lr_multiplier = arguments.check_positive("proxy_lr_multiplier", proxy_lr_multiplier)
        self.proxy_layer = Proxies(num_classes, embedding_dim,
                                   stddev=self.proxy_stddev(num_classes, embedding_dim),
                                   seed=seed, centers_per_class=centers_per_class,
                                   name=f"{self.name}_proxies")

    @staticmethod
    def proxy_stddev(num_classes, embedding_dim):
        raise NotImplementedError

    @property
    def num_classes(self):
        return self.proxy_layer.num_classes

    @property
    def embedding_dim(self):
        return self.proxy_layer.embedding_dim

    @property
    def centers_per_class(self):
        return self.proxy_layer.centers_per_class

    @property
    def parameter_layers(self):
        return [self.proxy_layer] + super().parameter_layers

    @property
    def lr_multipliers(self):
        """{name of the proxies' layer: ``proxy_lr_multiplier``}, for
        :class:`tfdml.optimizers.LRMultipliers` (which matches it against the proxy
        variable's path, ``<name>/proxies``)."""
        return {self.proxy_layer.name: self.proxy_lr_multiplier}

    def input_checks(self):
        return super().input_checks() + self.proxy_layer.input_checks()

    def labels_and_proxies(self, targets, embeddings):
        """The [B] int32 labels (already checked and cleaned by :meth:`call`) and the
        [C·K, d] proxies in the embeddings' dtype."""
        if embeddings.shape[-1] is not None and embeddings.shape[-1] != self.embedding_dim:
            raise ValueError(f"{type(self).__name__} has proxies of size embedding_dim="
                             f"{self.embedding_dim}, but the embeddings have size {embeddings.shape[-1]}; "
                             "build the loss with the model's embedding_dim.")
        labels = tf.cast(tf.reshape(targets.label, [-1]), tf.int32)
        return labels, tf.cast(self.proxy_layer.proxies, embeddings.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(num_classes=self.num_classes, embedding_dim=self.embedding_dim,
                      proxy_lr_multiplier=self.proxy_lr_multiplier, seed=self.seed)
        if self.multiple_centers:
            config.update(centers_per_class=self.centers_per_class)
        return config


def he_fan_out_stddev(num_classes, embedding_dim):
    """√(2 / num_classes): PyTorch's ``kaiming_normal_(mode='fan_out')`` of a
    [num_classes, embedding_dim] tensor (Kim et al.'s code)."""
    del embedding_dim
    return math.sqrt(2.0 / num_classes)

