"""Facility-location clustering loss (Song, Jegelka, Rathod, Murphy, CVPR 2017, "Deep Metric
Learning via Facility Location"): "StructClustering" / "Clustering" in the seeds' tables."""

import keras
import tensorflow as tf

from tfdml.losses import base
from tfdml.losses import facility_inference as inference

#: Refinement rounds of §3.4 (the paper leaves the number open; the authors' TensorFlow
#: implementation, ``tf.contrib.losses.metric_learning.cluster_loss``, runs 5).
DEFAULT_REFINEMENT_STEPS = 5


@keras.saving.register_keras_serializable(package="tfdml")
class FacilityLocationLoss(base.MetricLoss):
    """The structured clustering loss of Song et al. 2017 (§3.1–3.4):

        F(X, S)  = −Σ_i min_{j ∈ S} d(x_i, x_j)                        (§3.1, facility location)
        F̃(X, y*) = Σ_k max_{j: y*_j = k} F(X_{y* = k}, {j})             (§3.2, oracle score)
        Δ(g(S), y*) = 1 − NMI(g(S), y*)                                (§3.2, structured margin)
        ℓ(X, y*) = [max_{|S| = K} {F(X, S) + γ Δ(g(S), y*)} − F̃(X, y*)]_+   (§3.2)

    over the batch's B examples and its K classes; g(S) assigns each example to its
    nearest medoid. The max over S is the paper's greedy loss-augmented inference (§3.3)
    followed by ``refinement_steps`` rounds of its local refinement (§3.4), all in the
    graph with fixed shapes (:mod:`tfdml.losses.facility_inference`). The gradient is the
    paper's subgradient: F and F̃ differentiated with their medoids held fixed.

    NMI: ``nmi_average="geometric"`` is I / sqrt(H(Ω) H(C)), the normalisation of the
    paper and of its TensorFlow implementation (scikit-learn's default then);
    ``"arithmetic"`` is 2I / (H(Ω) + H(C)). One class in the batch: NMI = 1 and the loss
    is 0 (the oracle is optimal); every example its own class: 0 too.

    No sampler (the loss scores the whole batch's clustering), no importance weights
    (a max over clusterings is no sum of pair terms), no memory. Reduction: one value per
    batch, ``tuple_reduction`` "mean" only. Cost: K greedy steps and
    ``refinement_steps`` × K refinement steps, each two [B, B] × [B, B] products of counts.

    Args:
      gamma: γ ≥ 0, the weight of the structured margin (the paper tunes it per
        dataset; ``margin_multiplier`` in the authors' implementation).
      refinement_steps: rounds of the §3.4 refinement (0: greedy inference only).
      nmi_average: ``"geometric"`` (the paper) or ``"arithmetic"``.
      **kwargs: ``distance`` (default Euclidean, the paper's ||·||), ``name``,
        ``reduction``, ``dtype`` of :class:`~tfdml.losses.base.MetricLoss`.
    """

    default_tuple_reduction = "mean"

    def __init__(self, gamma=1.0, refinement_steps=DEFAULT_REFINEMENT_STEPS, nmi_average="geometric", **kwargs):
        super().__init__(**kwargs)
        if self.tuple_reduction != "mean":
            raise ValueError(
                f"FacilityLocationLoss(tuple_reduction={self.tuple_reduction!r}): the loss is one "
                "hinge over the batch's clustering, not a sum over tuples; leave tuple_reduction at 'mean'."
            )
        self.gamma = base.check_positive("gamma", gamma, allow_zero=True)
        if isinstance(refinement_steps, bool) or not isinstance(refinement_steps, int) or refinement_steps < 0:
            raise ValueError(f"refinement_steps must be an int >= 0 (rounds of §3.4), got {refinement_steps!r}.")
        self.refinement_steps = refinement_steps
        if nmi_average not in inference.NMI_AVERAGES:
            raise ValueError(f"nmi_average must be one of {inference.NMI_AVERAGES}, got {nmi_average!r}.")
        self.nmi_average = nmi_average

    def medoids(self, dist, labels):
        """The loss-augmented medoids (int32 [B], slot → example, −1 beyond K) and the
        batch's classes, from distances held constant."""
        dist = tf.stop_gradient(dist)
        classes = inference.BatchClasses(labels)
        chosen = inference.greedy_medoids(dist, classes, self.gamma, self.nmi_average)
        chosen = inference.refine_medoids(dist, chosen, classes, self.gamma, self.nmi_average,
                                          self.refinement_steps)
        return chosen, classes

    def compute(self, targets, embeddings):
        labels = tf.reshape(targets.label, [-1])
        dist = base.distance_matrix(embeddings, self.distance)
        chosen, classes = self.medoids(dist, labels)
        assign = inference.assignment(tf.stop_gradient(dist), chosen)
        rows = tf.range(tf.shape(dist)[0])
        nearest = tf.gather(chosen, assign)
        score = -tf.reduce_sum(tf.gather_nd(dist, tf.stack([rows, nearest], axis=1)))  # F(X, S)
        oracle = inference.oracle_medoids(tf.stop_gradient(dist), labels)
        oracle_score = -tf.reduce_sum(tf.gather_nd(dist, tf.stack([rows, oracle], axis=1)))  # F̃(X, y*)
        margin = 1.0 - inference.nmi_of_assignment(assign, classes, self.nmi_average)
        return tf.nn.relu(score + tf.cast(self.gamma * margin, dist.dtype) - oracle_score)

    def get_config(self):
        config = super().get_config()
        config.update(gamma=self.gamma, refinement_steps=self.refinement_steps, nmi_average=self.nmi_average)
        return config
