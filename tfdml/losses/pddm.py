"""PDDM loss: hard quadruplets mined by the learned PDDM similarity, the double-header
hinge on its scores and an embedding hinge on the features (Huang, Loy & Tang, NeurIPS
2016, "Local Similarity-Aware Deep Feature Embedding", arXiv:1610.08904)."""

import keras
import tensorflow as tf

from tfdml import distances as distances_lib
from tfdml import masks as masks_lib
from tfdml import primitives
from tfdml.losses import arguments, base
from tfdml.pddm import PDDMLayer

#: ``variant`` values: both headers of the hard positive pair, or the first one only.
VARIANTS = ("quadruplet", "triplet")
#: ``positives`` values: the one hardest positive pair of the batch, or every positive pair.
POSITIVES = ("hardest", "all")


def _check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}.")
    return value


def hardest_negatives(scores, negatives):
    """k̂_i [B]: the negative of i with the highest score, k̂_i = argmax_{(i,k)∈N} S_ik (the
    paper's hard negatives of the mined pair, arXiv:1610.08904 p. 4, taken for every row;
    the lowest index among ties; 0 for a row without negatives, which the loss leaves
    out). No gradient."""
    masked = tf.where(negatives, tf.stop_gradient(scores), tf.fill(tf.shape(scores), scores.dtype.min))
    return primitives.first_argmax(masked, axis=1)


def hardest_positive_pair(scores, valid):
    """[B, B] bool: the valid pair (î, ĵ) = argmin_{(i,j) valid} S_ij, the paper's "most
    dissimilar positive sample pair in the batch" (arXiv:1610.08904 p. 4); the first in
    row-major order among ties (so î < ĵ, S being symmetric), or no pair when none is
    valid. No gradient."""
    size = tf.shape(scores)[0]
    flat = tf.reshape(tf.where(valid, tf.stop_gradient(scores), tf.fill(tf.shape(scores), scores.dtype.max)),
                      [-1])
    first = primitives.first_argmin(flat)
    chosen = tf.reshape(tf.one_hot(first, size * size, on_value=True, off_value=False, dtype=tf.bool),
                        [size, size])
    return tf.logical_and(chosen, valid)


def pddm_terms(scores, sq_dist, negative_index, alpha, beta, lam, variant):
    """[B, B] term of each positive pair (i, j), with k̂ = ``negative_index`` the mined
    negatives:

        E_m = [α + S_ik̂_i − S_ij]_+ (+ [α + S_jk̂_j − S_ij]_+ for the quadruplet),
        E_e = [β + D²_ij − D²_ik̂_i]_+ (+ [β + D²_ij − D²_jk̂_j]_+ for the quadruplet),
        term = E_m + λ E_e."""
    s_neg = tf.gather(scores, negative_index, batch_dims=1)
    d_neg = tf.gather(sq_dist, negative_index, batch_dims=1)
    terms = tf.nn.relu(alpha + s_neg[:, None] - scores) + lam * tf.nn.relu(beta + sq_dist - d_neg[:, None])
    if variant == "quadruplet":
        terms += tf.nn.relu(alpha + s_neg[None, :] - scores) + lam * tf.nn.relu(beta + sq_dist - d_neg[None, :])
    return terms


@keras.saving.register_keras_serializable(package="tfdml")
class PDDMLoss(base.MetricLoss):
    """Huang, Loy & Tang 2016 (PDDM), the objective E_m + λ E_e on hard quadruplets mined
    with the learned similarity S of a :class:`tfdml.pddm.PDDMLayer` this loss owns.

    Mining, as the paper states it (arXiv:1610.08904 p. 4, in the text, unnumbered): one
    hard quadruplet from each batch, at each forward pass, by S (without gradient): the
    most dissimilar positive pair (î, ĵ) = argmin_{(i,j)∈P} S_ij, then the hard negatives
    of each of its two images, k̂ = argmax_{(î,k)∈N} S_îk and l̂ = argmax_{(ĵ,l)∈N} S_ĵl
    (P and N, the paper's P̂ and N̂, the batch's positive and negative pairs). The paper
    writes Ŝ in the positive pair's argmin and S in the negatives'; the passage read does
    not say how Ŝ differs from S, and tfdml mines both with S. On that quadruplet:

        E_m = [α + S_îk̂ − S_îĵ]_+ + [α + S_ĵl̂ − S_îĵ]_+      (the double-header hinge)
        E_e = [β + D²_îĵ − D²_îk̂]_+ + [β + D²_îĵ − D²_ĵl̂]_+   (on the features)
        loss = E_m + λ E_e,

    D² the squared Euclidean distance of the embeddings. E_m trains the unit (and the
    features through it); E_e, through the mined tuples, trains the features. The paper
    motivates E_m as a cheap way to widen the margin between the similarities of positive
    and negative pairs; the printed equations of E_m, E_e and of their sum, their numbers,
    and the paper's values of α, β and λ were not recovered from its text: the forms
    above are tfdml's reading (hinges on the mined quadruplet, margin α on S, margin β on
    D²) and the defaults α = β = 0.5, λ = 1 are tfdml's.

    Where tfdml differs on purpose: a positive pair counts only when both its images have
    a negative in the batch (fixed shapes: the mining is a masked argmin over the [B, B]
    scores); a batch without one (one class, no positive pair) gives 0 with zero gradient.
    Ties go to the lowest index.

    ``variant="triplet"`` keeps only the first header of each hinge (the triplet (î, ĵ,
    k̂)); ``"quadruplet"`` is the double header. ``positives="all"`` is tfdml's extension,
    not the paper's: every ordered positive pair (i, j) with its own hard negatives k̂_i,
    k̂_j, the terms averaged (``tuple_reduction``), instead of the one quadruplet a batch.

    Evaluation and exports use the encoder's embeddings with the configured retrieval
    distance (the unit is not exported); :func:`tfdml.pddm.pddm_scores` ranks a gallery by
    S with the trained unit (``loss.unit``). Which of the two the paper retrieves with was
    not recovered from its text.

    Args:
      embedding_dim: size of the embeddings (``train.py`` passes ``model.embedding_dim``).
      variant: one of :data:`VARIANTS`.
      positives: one of :data:`POSITIVES`.
      alpha: margin α > 0 of the double-header hinge on S.
      beta: margin β > 0 of the embedding hinge on D².
      lam: λ >= 0, the weight of E_e.
      units, hidden_units: widths of the unit (:class:`tfdml.pddm.PDDMLayer`).
      seed: seed of the unit's initialisation (``train.py`` passes the run's seed).
      **kwargs: ``tuple_reduction``, ``name``, ``reduction``, ``dtype`` of
        :class:`~tfdml.losses.MetricLoss`.

    No ``distance`` (S and D² are fixed), no ``sampler`` (S mines), no ``importance``
    (the mined quadruplet is not a pair of the design) and no cross-batch memory.
    """

    takes_distance = False
    needs_tuples = True

    def __init__(self, embedding_dim=None, variant="quadruplet", positives="hardest", alpha=0.5, beta=0.5,
                 lam=1.0, units=64, hidden_units=64, seed=None, **kwargs):
        owner = type(self).__name__
        arguments.refuse_fixed(owner, kwargs, distance="scores pairs with its learned PDDM unit and D² of "
                               "the embeddings", sampler="mines its quadruplets with the PDDM scores")
        if kwargs.get("importance"):
            raise ValueError(f"{owner} has no importance-weighted form: its tuples are mined by the "
                             "learned similarity, not pairs of the batch design; use importance=False.")
        kwargs.pop("importance", None)
        super().__init__(seed=seed, **kwargs)
        if embedding_dim is None:
            raise ValueError(f"{owner} learns a PDDM unit over the embeddings and needs embedding_dim (the "
                             "size of an embedding); train.py passes model.embedding_dim.")
        self.variant = _check_choice("variant", variant, VARIANTS)
        self.positives = _check_choice("positives", positives, POSITIVES)
        self.alpha = arguments.check_positive("alpha", alpha)
        self.beta = arguments.check_positive("beta", beta)
        self.lam = arguments.check_positive("lam", lam, allow_zero=True)
        self.unit = PDDMLayer(embedding_dim, units=units, hidden_units=hidden_units, seed=seed,
                              name=f"{self.name}_pddm")

    @property
    def embedding_dim(self):
        return self.unit.embedding_dim

    @property
    def parameter_layers(self):
        return [self.unit] + super().parameter_layers

    def compute(self, targets, embeddings):
        scores = self.unit.scores(embeddings)
        positive, negative = masks_lib.pair_masks(targets.label, targets.pair_id)
        has_negative = tf.reduce_any(negative, axis=1)
        valid = tf.logical_and(positive, tf.logical_and(has_negative[:, None], has_negative[None, :]))
        if self.positives == "hardest":
            valid = hardest_positive_pair(scores, valid)
        sq_dist = distances_lib.pairwise_squared_euclidean(embeddings)
        terms = pddm_terms(scores, sq_dist, hardest_negatives(scores, negative), self.alpha, self.beta,
                           self.lam, self.variant)
        return self.reduce(terms, tf.cast(valid, terms.dtype))

    def get_config(self):
        config = super().get_config()
        config.update(embedding_dim=self.embedding_dim, variant=self.variant, positives=self.positives,
                      alpha=self.alpha, beta=self.beta, lam=self.lam, units=self.unit.units,
                      hidden_units=self.unit.hidden_units, seed=self.seed)
        return config
