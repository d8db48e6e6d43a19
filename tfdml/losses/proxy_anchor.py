"""Proxy-Anchor loss (Kim et al. 2020, "Proxy Anchor Loss for Deep Metric Learning", CVPR)."""

import keras
import tensorflow as tf

from tfdml import distances as distances_lib
from tfdml.losses import arguments
from tfdml.losses.proxies import ProxyLoss, he_fan_out_stddev, masked_log1p_sum_exp


@keras.saving.register_keras_serializable(package="tfdml")
class ProxyAnchorLoss(ProxyLoss):
    """Kim et al. 2020, Eq. 4:

        ℓ(X) = 1/|P⁺| Σ_{p ∈ P⁺} log(1 + Σ_{x ∈ X_p⁺} e^{−α (s(x, p) − δ)})
             + 1/|P|  Σ_{p ∈ P}  log(1 + Σ_{x ∈ X_p⁻} e^{ α (s(x, p) + δ)})

    with s the cosine similarity, P all proxies (one per training class,
    :class:`~tfdml.losses.proxies.Proxies`), P⁺ the proxies of the classes present in
    the batch X, X_p⁺ the batch examples of p's class and X_p⁻ the others. Each proxy
    is an anchor over the whole batch: a proxy whose class is absent only has the
    negative term, and a proxy without negatives (a batch of its class alone) adds
    log 1 = 0 there. The reduction is the equation's own (1/|P⁺|, 1/|P|);
    ``tuple_reduction`` stays "mean".

    Defaults from the paper (§4.1) and the authors' code (tjddus9597/Proxy-Anchor-CVPR2020):
    α = 32, δ = 0.1; proxies initialised as ``kaiming_normal_(mode='fan_out')``
    (N(0, 2/num_classes)) and trained with learning rate × 100 (``proxy_lr_multiplier``;
    ``code/train.py``: ``'lr': float(args.lr) * 100`` for the proxies).

    Args:
      num_classes: classes of the training split (>= 1).
      embedding_dim: size of the embeddings.
      alpha: α > 0 (scale).
      delta: δ >= 0 (margin).
      proxy_lr_multiplier, seed, **kwargs: see :class:`~tfdml.losses.proxies.ProxyLoss`.
    """

    default_tuple_reduction = "mean"

    def __init__(self, num_classes=None, embedding_dim=None, alpha=32.0, delta=0.1,
                 proxy_lr_multiplier=100.0, **kwargs):
        super().__init__(num_classes=num_classes, embedding_dim=embedding_dim,
                         proxy_lr_multiplier=proxy_lr_multiplier, **kwargs)
        if self.tuple_reduction != "mean":
            raise ValueError(
                f"ProxyAnchorLoss(tuple_reduction={self.tuple_reduction!r}): Kim et al. Eq. 4 fixes "
                "its own averages (1/|P+| over the proxies of the batch's classes, 1/|P| over all "
                "proxies); leave tuple_reduction at 'mean'.")
        self.alpha = arguments.check_positive("alpha", alpha)
        self.delta = arguments.check_positive("delta", delta, allow_zero=True)

    proxy_stddev = staticmethod(he_fan_out_stddev)

    def proxy_terms(self, labels, embeddings, proxies):
        """(positive [C], negative [C], present [C]): each proxy's two log terms of Eq. 4
        and whether its class is in the batch (P⁺)."""
        sim = tf.matmul(distances_lib.l2_normalize(embeddings), distances_lib.l2_normalize(proxies),
                        transpose_b=True)  # s(x, p) [B, C]
        own = tf.one_hot(labels, tf.shape(proxies)[0], dtype=sim.dtype)
        positive = masked_log1p_sum_exp(-self.alpha * (sim - self.delta), own, axis=0)
        negative = masked_log1p_sum_exp(self.alpha * (sim + self.delta), 1.0 - own, axis=0)
        present = tf.cast(tf.reduce_sum(own, axis=0) > 0, sim.dtype)
        return positive, negative, present

    def compute(self, targets, embeddings):
        labels, proxies = self.labels_and_proxies(targets, embeddings)
        positive, negative, present = self.proxy_terms(labels, embeddings, proxies)
        num_present = tf.maximum(tf.reduce_sum(present), 1.0)
        num_proxies = tf.cast(tf.shape(proxies)[0], positive.dtype)
        return tf.reduce_sum(present * positive) / num_present + tf.reduce_sum(negative) / num_proxies

    def get_config(self):
        config = super().get_config()
        config.update(alpha=self.alpha, delta=self.delta)
        return config
