"""Barlow Twins (Zbontar et al. 2021, Eq. 1): the cross-correlation of two views towards the identity."""

import keras
import tensorflow as tf

from tfdml.losses import base
from tfdml.losses import views
from tfdml.losses.vicreg import refuse_tuple_reduction

_EPSILON = 1e-12  # inside the norms of Eq. 2: a dimension constant over the batch correlates 0


def cross_correlation(z_a, z_b, weight):
    """Eq. 2 on outputs centred over the batch's rows of weight 1: [d, d]
    C_ij = Σ_b z^A_bi z^B_bj / (√(Σ_b (z^A_bi)²) √(Σ_b (z^B_bj)²))."""
    a, _ = views.weighted_centre(z_a, weight)
    b, _ = views.weighted_centre(z_b, weight)
    norm_a = tf.sqrt(tf.reduce_sum(tf.square(a), axis=0) + _EPSILON)
    norm_b = tf.sqrt(tf.reduce_sum(tf.square(b), axis=0) + _EPSILON)
    return tf.matmul(a, b, transpose_a=True) / (norm_a[:, None] * norm_b[None, :])


@keras.saving.register_keras_serializable(package="tfdml")
class BarlowTwinsLoss(base.MetricLoss):
    """Barlow Twins, Zbontar et al. 2021 Eq. 1:

        L_BT = Σ_i (1 − C_ii)² + λ Σ_i Σ_{j≠i} C_ij²

    with C the cross-correlation (Eq. 2) of the two views' embeddings along the batch,
    each dimension centred over the batch (the paper's Algorithm 1 normalises
    z − mean(z)), so C_ij is the correlation of dimension i of the first views with
    dimension j of the second, in [−1, 1]. Default λ = 5·10⁻³, the paper's.

    Convention: Eq. 2's cosine of the centred dimensions; Algorithm 1 divides by the
    (unbiased) standard deviations and by n, which scales C by (n−1)/n.

    Pairs: the rows that show the same instance (:func:`tfdml.losses.views.instance_ids`:
    ``example_id`` of a two-view batch, else the labels), first and second view in
    batch order (:func:`tfdml.losses.views.view_pairs`). The class labels of a two-view
    batch are not read. A batch without a pair has loss 0; a dimension constant over
    the batch (e.g. a single pair) correlates 0 with every other.

    Args:
      lam: λ ≥ 0, weight of the redundancy-reduction term.
      **kwargs: those of :class:`~tfdml.losses.MetricLoss` except ``distance``;
        ``tuple_reduction`` is "mean" only.
    """

    needs_tuples = True  # needs two views of an instance in the batch
    #: Its positives are the views of one instance (rows sharing an ``example_id``): a
    #: batch design must show each image twice (``Design.two_views``); configs check it.
    needs_two_views = True
    takes_distance = False
    fixed_arguments = {"distance": "correlates the embeddings' dimensions"}

    def __init__(self, lam=5e-3, **kwargs):
        base.refuse_fixed("BarlowTwinsLoss", kwargs, **self.fixed_arguments)
        refuse_tuple_reduction("BarlowTwinsLoss", kwargs)
        super().__init__(**kwargs)
        self.lam = base.check_positive("lam", lam, allow_zero=True)

    def compute(self, targets, embeddings):
        views.refuse_pair_id("BarlowTwinsLoss", targets)
        z, z_prime, weight = views.paired_views(embeddings, views.instance_ids(targets))
        c = cross_correlation(z, z_prime, weight)
        diagonal = tf.linalg.diag_part(c)
        off_diagonal = tf.reduce_sum(tf.square(c)) - tf.reduce_sum(tf.square(diagonal))
        loss = tf.reduce_sum(tf.square(1.0 - diagonal)) + self.lam * off_diagonal
        return tf.where(tf.reduce_sum(weight) > 0, loss, tf.zeros_like(loss))

    def get_config(self):
        config = super().get_config()
        config.update(lam=self.lam)
        return config
