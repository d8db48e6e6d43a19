"""NT-Xent, the contrastive loss of SimCLR (Chen et al. 2020, Eq. 1), on two views of each instance."""

import keras

from tfdml.losses import views
from tfdml.losses.supcon import ContrastOfViews


@keras.saving.register_keras_serializable(package="tfdml")
class NTXentLoss(ContrastOfViews):
    """NT-Xent (normalised temperature-scaled cross entropy), Chen et al. 2020 Eq. 1:
    for a positive pair (i, j), two views of one image,

        ℓ(i, j) = −log( exp(sim(z_i, z_j)/τ) / Σ_{k≠i} exp(sim(z_i, z_k)/τ) ),

    sim the cosine similarity, and the loss the mean of ℓ over both orders of every
    pair, 1/(2N) Σ_k [ℓ(2k−1, 2k) + ℓ(2k, 2k−1)], the other 2(N−1) rows of the batch
    being the negatives.

    Positives are the rows that show the same instance
    (:func:`tfdml.losses.views.instance_ids`: the ``example_id`` column of a two-view
    batch, else the labels): the class labels are not read, so training with it is
    self-supervised. An instance seen more than twice has several positives, and
    the term is then Khosla et al.'s L^sup_out with instances as classes
    (:func:`tfdml.losses.supcon.contrast_terms`); a row whose instance appears once
    adds nothing.

    Reduction: the mean over the rows with a positive (``tuple_reduction="mean"``,
    Eq. 1's 1/(2N)); ``"sum"`` the sum.

    Args:
      temperature: τ > 0 (0.1, the paper's setting for its large-batch ImageNet runs;
        pytorch-metric-learning's ``NTXentLoss`` defaults to 0.07).
      **kwargs: those of :class:`~tfdml.losses.MetricLoss` except ``distance``.
    """

    #: Its positives are the views of one instance (rows sharing an ``example_id``): a
    #: batch design must show each image twice (``Design.two_views``); configs check it.
    needs_two_views = True

    def identity(self, targets):
        return views.instance_ids(targets)
