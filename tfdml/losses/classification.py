"""The classification family: softmax cross-entropy over scaled cosines to learned class
weights, with a margin on the example's own class.

The class weights are the same object as the proxies of ProxyNCA and Proxy-Anchor
(:class:`~tfdml.losses.proxies.Proxies`, through :class:`~tfdml.losses.proxies.ProxyLoss`):
sized by the training split's classes (``num_classes``), indexed by the contiguous
``label`` column (a label outside [0, num_classes) is refused, also under XLA), trained
at ``proxy_lr_multiplier`` × the learning rate, saved and resumed with the model, never
exported with the encoder.

All four losses are one formula, per example i of label y with class cosines
cos θ_j = x̂_i · ŵ_j (unit vectors; with K sub-centres per class, the largest over them):

    L_i = −log( e^{s ψ(cos θ_y)} / (e^{s ψ(cos θ_y)} + Σ_{j≠y} e^{s cos θ_j}) )

with the scale s and the target-class transform ψ of each paper; the batch loss is the
mean of L_i over the examples (``tuple_reduction="mean"``; "sum" sums them,
"mean_active" averages over the examples with L_i > 0).

Conventions beside pytorch-metric-learning (PML): the scale, the mean over the batch and
the additive margins are PML's too; ArcFace's margin is in radians here (the paper's
m = 0.5) where PML takes degrees (28.6); PML's ``NormalizedSoftmaxLoss`` normalises the
class weights and takes the embeddings as given, where Zhai & Wu (and this loss)
normalise both.
"""

import math

import keras
import tensorflow as tf

from tfdml import distances as distances_lib
from tfdml.losses import arguments
from tfdml.losses.proxies import ProxyLoss


def unit_rows_stddev(num_classes, embedding_dim):
    """1/√embedding_dim: class vectors of norm ≈ 1 (the losses normalise them; the
    initial norm only sets the size of a step relative to the vector)."""
    del num_classes
    return 1.0 / math.sqrt(embedding_dim)


def class_cosines(embeddings, weights, centers_per_class):
    """cos θ [B, C]: the cosine of each embedding with each class's weight, the largest
    over the class's ``centers_per_class`` rows (rows c·K .. c·K + K − 1) when K > 1.

    With K > 1 the unit weights are first laid out sub-centre-major ([K, C, d]), so that
    the largest is taken over K contiguous [B, C] slabs: the same values as a maximum over
    the last axis of [B, C, K], at about half the cost forward and backward (a reduction
    over an innermost axis of 3 is slow on CPU)."""
    unit_embeddings = distances_lib.l2_normalize(embeddings)
    unit_weights = distances_lib.l2_normalize(weights)
    if centers_per_class == 1:
        return tf.matmul(unit_embeddings, unit_weights, transpose_b=True)
    dim = tf.shape(weights)[1]
    by_center = tf.reshape(tf.transpose(tf.reshape(unit_weights, tf.stack([-1, centers_per_class, dim])), [1, 0, 2]),
                           tf.stack([-1, dim]))
    cos = tf.matmul(unit_embeddings, by_center, transpose_b=True)
    grouped = tf.reshape(cos, tf.stack([tf.shape(cos)[0], centers_per_class, -1]))
    return tf.reduce_max(grouped, axis=1)


def margin_cross_entropy(cos, labels, scale, target):
    """−log softmax of the logits s·cos θ_j with the own class's logit s·ψ(cos θ_y)
    (``target`` = ψ(cos θ_y) [B]): [B] terms, stable (log-sum-exp)."""
    own = tf.one_hot(labels, tf.shape(cos)[1], dtype=cos.dtype) > 0
    logits = scale * tf.where(own, target[:, None], cos)
    return tf.reduce_logsumexp(logits, axis=1) - scale * target


def angular_margin(cos, margin):
    """cos(θ + m) = cos θ cos m − sin θ sin m, θ = arccos(cos) ∈ [0, π]: the same value
    as arccos followed by cos, with a finite gradient at θ = 0 and π (where arccos'
    derivative is infinite); sin θ = √(1 − cos²θ) through
    :func:`tfdml.distances.safe_sqrt`."""
    cos = tf.clip_by_value(cos, -1.0, 1.0)
    sin = distances_lib.safe_sqrt(1.0 - cos * cos)
    return cos * math.cos(margin) - sin * math.sin(margin)


class CosineSoftmaxLoss(ProxyLoss):
    """Base of the classification family (not registered): subclasses set :attr:`scale`
    and :meth:`target_logit` (ψ), and pass ``centers_per_class`` for sub-centres."""

    default_tuple_reduction = "mean"
    proxy_stddev = staticmethod(unit_rows_stddev)

    @property
    def scale(self):
        raise NotImplementedError

    def target_logit(self, cos_own):
        """ψ(cos θ_y) [B]; the plain cosine without a margin."""
        return cos_own

    def example_terms(self, labels, embeddings, proxies):
        """L_i [B] of each example."""
        cos = class_cosines(embeddings, proxies, self.centers_per_class)
        cos_own = tf.gather(cos, labels, axis=1, batch_dims=1)
        return margin_cross_entropy(cos, labels, self.scale, self.target_logit(cos_own))

    def compute(self, targets, embeddings):
        labels, proxies = self.labels_and_proxies(targets, embeddings)
        terms = self.example_terms(labels, embeddings, proxies)
        return self.reduce(terms, tf.ones_like(terms))


@keras.saving.register_keras_serializable(package="tfdml")
class NormalizedSoftmaxLoss(CosineSoftmaxLoss):
    """Zhai & Wu 2019 ("Classification is a Strong Baseline for Deep Metric Learning",
    BMVC), the normalized softmax loss of §3 (the equation number is not cited here
    because it was not re-checked): softmax cross-entropy over the cosines of the
    L2-normalised embedding and class weights, divided by a temperature σ:

        L_i = −log( exp(x̂_i·ŵ_y / σ) / Σ_j exp(x̂_i·ŵ_j / σ) ),

    the family's formula with s = 1/σ and no margin. Default σ = 0.05 (the paper's and
    PML's). The paper's other parts (layer normalisation of the embedding, class-balanced
    batches, the weights' learning rate) are the model's, the design's and
    ``proxy_lr_multiplier``'s (default 1: the weights train with the network).

    Args:
      num_classes, embedding_dim: classes of the training split, size of an embedding.
      temperature: σ > 0.
      proxy_lr_multiplier, seed, **kwargs: see :class:`~tfdml.losses.proxies.ProxyLoss`.
    """

    def __init__(self, num_classes=None, embedding_dim=None, temperature=0.05, proxy_lr_multiplier=1.0,
                 **kwargs):
        super().__init__(num_classes=num_classes, embedding_dim=embedding_dim,
                         proxy_lr_multiplier=proxy_lr_multiplier, **kwargs)
        self.temperature = arguments.check_positive("temperature", temperature)

    @property
    def scale(self):
        return 1.0 / self.temperature

    def get_config(self):
        config = super().get_config()
        config.update(temperature=self.temperature)
        return config


@keras.saving.register_keras_serializable(package="tfdml")
class CosFaceLoss(CosineSoftmaxLoss):
    """Wang et al. 2018 ("CosFace: Large Margin Cosine Loss for Deep Face Recognition",
    CVPR), the large margin cosine loss, Eq. 4:

        L_lmc = 1/N Σ_i −log( e^{s (cos θ_{y_i,i} − m)} /
                              (e^{s (cos θ_{y_i,i} − m)} + Σ_{j≠y_i} e^{s cos θ_{j,i}}) ),

    cos θ_{j,i} = Ŵ_j·x̂_i (weights and features normalised, Eq. 5): ψ = cos θ − m.
    Defaults s = 64, m = 0.35 (the paper's, and PML's ``CosFaceLoss``'s).

    Args:
      num_classes, embedding_dim: classes of the training split, size of an embedding.
      scale: s > 0.
      margin: m >= 0 (an additive cosine margin).
      proxy_lr_multiplier, seed, **kwargs: see :class:`~tfdml.losses.proxies.ProxyLoss`.
    """

    def __init__(self, num_classes=None, embedding_dim=None, scale=64.0, margin=0.35, proxy_lr_multiplier=1.0,
                 **kwargs):
        super().__init__(num_classes=num_classes, embedding_dim=embedding_dim,
                         proxy_lr_multiplier=proxy_lr_multiplier, **kwargs)
        self._scale = arguments.check_positive("scale", scale)
        self.margin = arguments.check_positive("margin", margin, allow_zero=True)

    @property
    def scale(self):
        return self._scale

    def target_logit(self, cos_own):
        return cos_own - self.margin

    def get_config(self):
        config = super().get_config()
        config.update(scale=self.scale, margin=self.margin)
        return config


@keras.saving.register_keras_serializable(package="tfdml")
class ArcFaceLoss(CosineSoftmaxLoss):
    """Deng et al. 2019 ("ArcFace: Additive Angular Margin Loss for Deep Face
    Recognition", CVPR), the additive angular margin loss, Eq. 3:

        L_3 = −1/N Σ_i log( e^{s cos(θ_{y_i} + m)} /
                            (e^{s cos(θ_{y_i} + m)} + Σ_{j≠y_i} e^{s cos θ_j}) ),

    θ_j the angle between the normalised weight W_j and feature x_i: ψ = cos(θ + m),
    computed as cos θ cos m − sin θ sin m (:func:`angular_margin`, finite gradient at
    θ = 0). Eq. 3 as written: for θ_y > π − m the target logit is not the smallest
    cosine (the authors' code then switches to cos θ − m sin m); as in PML, no such
    switch here. Defaults s = 64, m = 0.5 rad (the paper's; PML's ``ArcFaceLoss`` takes
    its margin in degrees, 28.6).

    Args:
      num_classes, embedding_dim: classes of the training split, size of an embedding.
      scale: s > 0.
      margin: m >= 0 in radians (an additive angular margin).
      proxy_lr_multiplier, seed, **kwargs: see :class:`~tfdml.losses.proxies.ProxyLoss`.
    """

    def __init__(self, num_classes=None, embedding_dim=None, scale=64.0, margin=0.5, proxy_lr_multiplier=1.0,
                 **kwargs):
        super().__init__(num_classes=num_classes, embedding_dim=embedding_dim,
                         proxy_lr_multiplier=proxy_lr_multiplier, **kwargs)
        self._scale = arguments.check_positive("scale", scale)
        self.margin = arguments.check_positive("margin", margin, allow_zero=True)
        if self.margin >= math.pi:
            raise ValueError(f"margin is an angle in radians in [0, π), got {margin!r} (ArcFace's "
                             "default 0.5 rad is 28.6 degrees).")

    @property
    def scale(self):
        return self._scale

    def target_logit(self, cos_own):
        return angular_margin(cos_own, self.margin)

    def get_config(self):
        config = super().get_config()
        config.update(scale=self.scale, margin=self.margin)
        return config


@keras.saving.register_keras_serializable(package="tfdml")
class SubCenterArcFaceLoss(ArcFaceLoss):
    """Deng et al. 2020 ("Sub-center ArcFace: Boosting Face Recognition by Large-Scale
    Noisy Web Faces", ECCV), §3: K sub-centres W_{j,k} per class; the cosine of a class
    is the largest over its sub-centres, cos θ_j = max_k Ŵ_{j,k}·x̂_i (max pooling over
    the K sub-centres), and the loss is ArcFace's Eq. 3 (:class:`ArcFaceLoss`) on those
    cosines. The paper's later step (keep the dominant sub-centre, drop the examples far
    from it) is not part of the loss and not done here. Defaults K = 3, s = 64,
    m = 0.5 rad (the paper's; PML's ``SubCenterArcFaceLoss``: ``sub_centers=3``, margin
    28.6 degrees).

    Args:
      num_classes, embedding_dim: classes of the training split, size of an embedding.
      centers_per_class: K >= 1, the sub-centres of a class (PML's ``sub_centers``).
      scale, margin, proxy_lr_multiplier, seed, **kwargs: see :class:`ArcFaceLoss`.
    """

    multiple_centers = True

    def __init__(self, num_classes=None, embedding_dim=None, centers_per_class=3, scale=64.0, margin=0.5,
                 proxy_lr_multiplier=1.0, **kwargs):
        super().__init__(num_classes=num_classes, embedding_dim=embedding_dim, scale=scale, margin=margin,
                         proxy_lr_multiplier=proxy_lr_multiplier, centers_per_class=centers_per_class, **kwargs)
