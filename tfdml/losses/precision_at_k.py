"""Top-k precision loss ℓ_k on misplaced sets (Lu et al. 2019 §3.3)."""

import keras
import tensorflow as tf

from tfdml import distances as distances_lib
from tfdml import masks
from tfdml.losses import arguments, base, batch


@keras.saving.register_keras_serializable(package="tfdml")
class PrecisionAtKLoss(base.MetricLoss):
    """Lu et al. 2019, Eq. 5 with the large-margin scores of Eq. 4:

        ŝ = s + γ (1 − y),     ℓ_k(a) = Σ_{z_i ∈ N} ŝ_i − Σ_{z_i ∈ P} ŝ_i

    for each query a of the batch, with s the cosine similarity (§3.1) to the
    candidates (the other examples; those sharing ``pair_id`` when the batch has
    one), y_i = 1 for candidates of the query's class, and (P, N) the misplaced
    positive / negative sets of Eq. 6–7 (n₊ < k) or Eq. 9–10 (n₊ ≥ k), chosen
    by :class:`tfdml.samplers.TopKMisplacedSampler` on ŝ (no gradient through
    the choice).

    Reduction (``tuple_reduction="sum"``): Σ over queries, as in Algorithm 1.
    "mean" divides by the number of queries with at least one candidate.

    Args:
      k: the k of Prec@k (5 in the paper).
      gamma: margin γ > 0 (0.1 in the paper).
      **kwargs: the base arguments of :class:`~tfdml.losses.base.MetricLoss`
        (``tuple_reduction``, ``name``, ...), except ``distance`` and ``sampler``.
    """

    sampler_kinds = ("sets",)
    needs_tuples = True  # the misplaced sets of a query among several candidates
    takes_distance = False
    default_tuple_reduction = "sum"
    fixed_arguments = {"distance": "scores cosine similarities (Lu et al. §3.1)",
                       "sampler": "selects the misplaced sets with TopKMisplacedSampler(k) (Eq. 6-10)"}

    def __init__(self, k=5, gamma=0.1, **kwargs):
        arguments.refuse_fixed("PrecisionAtKLoss", kwargs, **self.fixed_arguments)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}.")
        sampler = batch.samplers_module().TopKMisplacedSampler(k=k)
        super().__init__(distance="cosine", sampler=sampler, **kwargs)
        self.k = k
        self.gamma = arguments.check_positive("gamma", gamma)

    def compute(self, targets, embeddings):
        labels = targets.label
        candidates = self.candidate_mask(targets)
        sim = distances_lib.cosine_similarity(embeddings)
        different = tf.cast(tf.logical_not(masks.same_label(labels)), sim.dtype)
        scores = sim + self.gamma * different  # Eq. 4
        selection = self.sampler(
            tf.stop_gradient(scores),
            labels,
            candidates=candidates,
            seed=None,
            embedding_dim=embeddings.shape[-1],
        )
        zeros = tf.zeros_like(scores)
        per_query = tf.reduce_sum(
            tf.where(selection.negative, scores, zeros), axis=1
        ) - tf.reduce_sum(tf.where(selection.positive, scores, zeros), axis=1)
        queries = tf.cast(tf.reduce_any(candidates, axis=1), sim.dtype)
        return self.reduce(per_query, queries)

    def get_config(self):
        config = super().get_config()
        config.pop("sampler", None)
        config.pop("seed", None)
        config.update(k=self.k, gamma=self.gamma)
        return config
