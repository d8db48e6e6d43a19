"""Balanced contrastive loss (Hong et al., Eq. 15; weights η of Eq. 16 corrected)."""

import keras
import tensorflow as tf

from tfdml import input_checks
from tfdml.losses import arguments
from tfdml.losses.weighted_contrastive import WeightedContrastiveLoss


@keras.saving.register_keras_serializable(package="tfdml")
class BalancedContrastiveLoss(WeightedContrastiveLoss):
    """Hong et al. Eq. 15 in the mini-batch form Eq. 23:

        L = 1/B Σ_(i,j) W_ij ( Y_ij g(D_ij) + (1 − Y_ij) η_ij h(D_ij) ),
        η_ij = λ / (L − 1) · (N_{y_i} − 1) / N_{y_j}

    λ is the expected number of negative examples compared with each positive
    pair (§5.1; Hong et al. use λ = 256), L the number of classes of the
    training split and N_c the size of class c there (the ``class_size``
    column of the batch contract).

    Erratum: Eq. 16 prints η_ij = λ/(L−1) · (N_{y_i}−1)/N_{y_i}. Eq. 14 gives,
    for an anchor i, λ/(L−1) · h(D_{iK_l}) per positive pair (i, j) and
    negative class l, with K_l uniform on the N_l examples of class l; there
    are N_{y_i} − 1 positive pairs with anchor i, so the negative pair (i, k)
    carries λ/(L−1) · (N_{y_i} − 1)/N_{y_k}, which is Eq. 15 and the summary
    after Eq. 25. This class implements that η.

    W_ij: as in :class:`WeightedContrastiveLoss` (1 without importance columns,
    or with ``importance=False``: Hong et al.'s "without IS" rows, whose η
    still balances the classes).

    Needs the batch-contract dict with a ``class_size`` column; plain labels
    raise ``ValueError`` (η depends on the training-split class sizes).

    Args:
      margin: α > 0 of h(d) = [α − d]_+².
      lam: λ > 0 of Eq. 13–16 (the number of negatives per positive pair; not
        Wu's λ of distance weighted sampling).
      num_classes: L ≥ 2, the number of classes of the training split.
      importance: weight each pair by W_ij (default True).
    """

    memory_refusal = ("its η_ij (Hong et al. Eq. 15) reads the class size of both ends of a "
                      "negative pair from the batch, which memory rows do not keep")

    def __init__(self, margin=1.0, lam=256.0, num_classes=None, importance=True, **kwargs):
        arguments.refuse_fixed(type(self).__name__, kwargs,
                          eta="weighs negative pairs by class sizes (Eq. 15, with lam)")
        super().__init__(margin=margin, eta=1.0, importance=importance, **kwargs)
        self.lam = arguments.check_positive("lam", lam)
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(
                "BalancedContrastiveLoss needs num_classes=L, the number of classes in the "
                f"training split (an int >= 2), got {num_classes!r}."
            )
        self.num_classes = num_classes

    def input_checks(self):
        """η reads ``class_size`` with or without importance weights."""
        checks = super().input_checks()
        if all(check.column != "class_size" for check in checks):
            checks.append(input_checks.importance_check("class_size"))
        return checks

    def negative_weights(self, targets, dtype):
        if targets.class_size is None:
            raise ValueError(
                "BalancedContrastiveLoss needs the class sizes N_c of the training split: pass "
                "y as the batch-contract dict with a 'class_size' column (see tfdml.targets), "
                "not plain labels."
            )
        n = tf.cast(targets.class_size, dtype)
        safe_n = tf.where(n > 0, n, tf.ones_like(n))
        scale = self.lam / (self.num_classes - 1.0)
        return scale * (n[:, None] - 1.0) / safe_n[None, :]

    def get_config(self):
        config = super().get_config()
        del config["eta"]
        config.update(lam=self.lam, num_classes=self.num_classes)
        return config
