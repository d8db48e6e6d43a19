"""SoftTriple loss (Qian et al. 2019, "SoftTriple Loss: Deep Metric Learning Without
Triplet Sampling", ICCV)."""

import keras
import numpy as np
import tensorflow as tf

from tfdml import distances as distances_lib
from tfdml.losses import arguments
from tfdml.losses.classification import CosineSoftmaxLoss, margin_cross_entropy, unit_rows_stddev


@keras.saving.register_keras_serializable(package="tfdml")
class SoftTripleLoss(CosineSoftmaxLoss):
    """Qian et al. 2019, §3 (the equation numbers are not cited here because they were not
    re-checked). K centres w_c^k per class (unit vectors, the class weights of
    :class:`~tfdml.losses.proxies.Proxies`); with x̂_i the normalised embedding:

    * the relaxed similarity of an example to a class, a soft max over the class's
      centres with entropy weight γ:

          S'_{i,c} = Σ_k [exp(x̂_i·w_c^k / γ) / Σ_{k'} exp(x̂_i·w_c^{k'} / γ)] x̂_i·w_c^k;

    * the SoftTriple loss, a softmax over the classes with scale λ and margin δ:

          ℓ_i = −log( exp(λ (S'_{i,y} − δ)) / (exp(λ (S'_{i,y} − δ)) + Σ_{j≠y} exp(λ S'_{i,j})) );

    * the centre regulariser (an L2,1 norm that lets similar centres merge), per class
      R(w_c) = Σ_{t<s} ‖w_c^s − w_c^t‖₂, added to the mean over the batch as

          L = 1/N Σ_i ℓ_i + τ Σ_c R(w_c) / (C K (K − 1)).

    With K = 1 the regulariser is 0 and S' is the cosine (the normalized softmax with a
    margin). Defaults K = 10, λ = 20, γ = 0.1, δ = 0.01, τ = 0.2 (the paper's, and its
    code's, idstcv/SoftTriple); centres initialised N(0, 1/d) and trained at 100× the
    learning rate (that code: ``--centerlr 0.01`` against ``--modellr 0.0001``).

    Conventions beside the authors' code and pytorch-metric-learning (PML): the norm in R
    is exact here (its gradient is finite where two centres coincide,
    :func:`tfdml.distances.safe_sqrt`), where the authors' code adds 10⁻⁵ under the
    square root; PML's ``SoftTripleLoss`` leaves R out unless a weight regulariser is
    passed (set ``tau=0`` for that); both average ℓ_i over the batch, as here.
    ``tuple_reduction="sum"`` sums the ℓ_i instead; the regulariser is added as it is.

    Args:
      num_classes, embedding_dim: classes of the training split, size of an embedding.
      centers_per_class: K >= 1.
      la: λ > 0 (scale).
      gamma: γ > 0 (entropy weight of the soft max over centres).
      margin: δ >= 0.
      tau: τ >= 0 (weight of the centre regulariser).
      proxy_lr_multiplier, seed, **kwargs: see :class:`~tfdml.losses.proxies.ProxyLoss`.
    """

    proxy_stddev = staticmethod(unit_rows_stddev)
    multiple_centers = True

    def __init__(self, num_classes=None, embedding_dim=None, centers_per_class=10, la=20.0, gamma=0.1,
                 margin=0.01, tau=0.2, proxy_lr_multiplier=100.0, **kwargs):
        super().__init__(num_classes=num_classes, embedding_dim=embedding_dim,
                         proxy_lr_multiplier=proxy_lr_multiplier, centers_per_class=centers_per_class,
                         **kwargs)
        self.la = arguments.check_positive("la", la)
        self.gamma = arguments.check_positive("gamma", gamma)
        self.margin = arguments.check_positive("margin", margin, allow_zero=True)
        self.tau = arguments.check_positive("tau", tau, allow_zero=True)

    @property
    def scale(self):
        return self.la

    def relaxed_similarities(self, embeddings, proxies):
        """S' [B, C]: the soft max over each class's K centres."""
        cos = tf.matmul(distances_lib.l2_normalize(embeddings), distances_lib.l2_normalize(proxies),
                        transpose_b=True)
        grouped = tf.reshape(cos, tf.stack([tf.shape(cos)[0], self.num_classes, self.centers_per_class]))
        weights = tf.nn.softmax(grouped / self.gamma, axis=2)
        return tf.reduce_sum(weights * grouped, axis=2)

    def example_terms(self, labels, embeddings, proxies):
        """ℓ_i [B] of each example."""
        sim = self.relaxed_similarities(embeddings, proxies)
        own = tf.gather(sim, labels, axis=1, batch_dims=1)
        return margin_cross_entropy(sim, labels, self.la, own - self.margin)

    def center_regularizer(self, proxies):
        """Σ_c R(w_c) / (C K (K − 1)) (0 for K = 1)."""
        k = self.centers_per_class
        if k == 1:
            return tf.zeros([], proxies.dtype)
        centres = tf.reshape(distances_lib.l2_normalize(proxies), [self.num_classes, k, -1])
        gram = tf.matmul(centres, centres, transpose_b=True)  # [C, K, K]
        upper = tf.constant(np.triu(np.ones((k, k)), 1), proxies.dtype)  # t < s
        norms = distances_lib.safe_sqrt(tf.maximum(2.0 - 2.0 * gram, 0.0))
        return tf.reduce_sum(upper * norms) / float(self.num_classes * k * (k - 1))

    def compute(self, targets, embeddings):
        labels, proxies = self.labels_and_proxies(targets, embeddings)
        terms = self.example_terms(labels, embeddings, proxies)
        value = self.reduce(terms, tf.ones_like(terms))
        if self.tau == 0:
            return value
        return value + self.tau * self.center_regularizer(proxies)

    def get_config(self):
        config = super().get_config()
        config.update(la=self.la, gamma=self.gamma,
                      margin=self.margin, tau=self.tau)
        return config
