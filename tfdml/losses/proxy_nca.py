"""ProxyNCA (Movshovitz-Attias et al. 2017, "No Fuss Distance Metric Learning using Proxies", ICCV)."""

import keras
import tensorflow as tf

from tfdml import distances as distances_lib
from tfdml.losses import arguments
from tfdml.losses.proxies import ProxyLoss, masked_log_sum_exp


@keras.saving.register_keras_serializable(package="tfdml")
class ProxyNCALoss(ProxyLoss):
    """Movshovitz-Attias et al. 2017, the Proxy-NCA loss (§3: NCA over one proxy per class,
    the static proxy assignment, with embeddings and proxies normalised to fixed norms;
    the equation number of the paper is not cited here because it was not re-checked):

        L(x, y) = −log( exp(−d(x, p_y)) / Σ_{z ≠ y} exp(−d(x, p_z)) )
                = d(x, p_y) + log Σ_{z ≠ y} exp(−d(x, p_z)),
        d(x, p) = ‖ s_x x/‖x‖ − s_p p/‖p‖ ‖²,

    with one learned proxy p_z per training class z (:class:`~tfdml.losses.proxies.Proxies`),
    the example's own proxy p_y against all other classes' proxies (the paper's
    denominator leaves the positive out; it is not a softmax cross-entropy). Every
    example of the batch is a term; ``tuple_reduction="mean"`` averages them ("sum" sums
    them; "mean_active" is refused: a term may be negative).

    Scales (``embedding_scale`` s_x, ``proxy_scale`` s_p): the paper normalises
    embeddings and proxies to fixed norms N_x, N_p; unit norms make the logits
    −d ∈ [−4, 0] and train poorly. The default s_x = s_p = 3 is the setting of the
    reimplementation that Kim et al. 2020 build on (dichotomies/proxy-nca, its CUB /
    Cars runs "scaling_x 3, scaling_p 3"; Teh et al. 2020, ProxyNCA++, read it as the
    temperature 1/9 of ‖x − p‖²).

    Proxies: initialised N(0, 1/8²) (dichotomies/proxy-nca: ``randn / 8``, norms ≈ 1
    for 64 dimensions); learning rate × ``proxy_lr_multiplier`` (default 100: the
    reimplementation's config trains proxies with lr 5.0 against 0.045 for the
    network, ≈ 111×; 100 as in Kim et al.'s code for Proxy-Anchor).

    Args:
      num_classes: classes of the training split, >= 2 (a class needs another class
        in the denominator).
      embedding_dim: size of the embeddings.
      embedding_scale: s_x > 0.
      proxy_scale: s_p > 0.
      proxy_lr_multiplier, seed, **kwargs: see :class:`~tfdml.losses.proxies.ProxyLoss`.
    """

    default_tuple_reduction = "mean"
    min_classes = 2

    def __init__(self, num_classes=None, embedding_dim=None, embedding_scale=3.0, proxy_scale=3.0,
                 proxy_lr_multiplier=100.0, **kwargs):
        super().__init__(num_classes=num_classes, embedding_dim=embedding_dim,
                         proxy_lr_multiplier=proxy_lr_multiplier, **kwargs)
        if self.tuple_reduction == "mean_active":
            raise ValueError(
                "ProxyNCALoss(tuple_reduction='mean_active'): a term d(x, p_y) + log Σ exp(−d(x, p_z)) "
                "can be negative, so 'active' (> 0) means nothing; use 'mean' (the default) or 'sum'.")
        self.embedding_scale = arguments.check_positive("embedding_scale", embedding_scale)
        self.proxy_scale = arguments.check_positive("proxy_scale", proxy_scale)

    @staticmethod
    def proxy_stddev(num_classes, embedding_dim):
        del num_classes, embedding_dim
        return 1.0 / 8.0

    def proxy_distances(self, embeddings, proxies):
        """d(x_i, p_z) [B, C]: squared euclidean distance of the scaled unit vectors."""
        x = self.embedding_scale * distances_lib.l2_normalize(embeddings)
        p = self.proxy_scale * distances_lib.l2_normalize(proxies)
        sq = (tf.reduce_sum(x * x, axis=1, keepdims=True) + tf.reduce_sum(p * p, axis=1)[None, :]
              - 2.0 * tf.matmul(x, p, transpose_b=True))
        return tf.maximum(sq, 0.0)

    def example_terms(self, labels, embeddings, proxies):
        """L(x_i, y_i) [B] of each example."""
        d = self.proxy_distances(embeddings, proxies)
        own = tf.one_hot(labels, tf.shape(proxies)[0], dtype=d.dtype)
        return tf.reduce_sum(own * d, axis=1) + masked_log_sum_exp(-d, 1.0 - own, axis=1)

    def compute(self, targets, embeddings):
        labels, proxies = self.labels_and_proxies(targets, embeddings)
        terms = self.example_terms(labels, embeddings, proxies)
        return self.reduce(terms, tf.ones_like(terms))

    def get_config(self):
        config = super().get_config()
        config.update(embedding_scale=self.embedding_scale, proxy_scale=self.proxy_scale)
        return config
