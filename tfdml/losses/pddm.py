"""PDDM loss: hard quadruplets mined by the learned PDDM similarity, the double-header
hinge on its scores and an embedding hinge on the features (Huang, Loy & Tang, NeurIPS
2016, "Local Similarity-Aware Deep Feature Embedding")."""

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
    """k̂_i [B]: the negative of i with the highest score S_ik (the lowest index among
    ties; 0 for a row without negatives, which the loss leaves out). No gradient."""
    masked = tf.where(negatives, tf.stop_gradient(scores), tf.fill(tf.shape(scores), scores.dtype.min))
    return primitives.first_argmax(masked, axis=1)


def hardest_positive_pair(scores, valid):
    """[B, B] bool: the valid pair (i, j) with the lowest score S_ij (the first in row-major
    order among ties), or no pair when none is valid. No gradient."""
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

    Mining, per batch, by S (without gradient): the hard positive pair (i, j) is the
    positive pair with the lowest S_ij (``positives="hardest"``), and the hard negatives
    are k̂ = argmax_k S_ik over the negatives of i and l̂ = argmax_l S_jl over those of j.
    On that quadruplet (i, j, k̂, l̂):

        E_m = [α + S_ik̂ − S_ij]_+ + [α + S_jl̂ − S_ij]_+      (the double-header hinge)
        E_e = [β + D²_ij − D²_ik̂]_+ + [β + D²_ij − D²_jl̂]_+   (on the features)
        loss = E_m + λ E_e,

    D² the squared Euclidean distance of the embeddings. E_m trains the unit (and the
    features through it); E_e, through the mined tuples, trains the features. The
    equation numbers of the paper could not be read where this loss was written: none is
    cited, and the default values of α, β and λ are tfdml's, not the paper's.

    ``variant="triplet"`` keeps only the first header of each hinge (the triplet (i, j,
    k̂) mined by S, trained with E_m + λ E_e of one header each: "PDDM Triplet" of the
    comparison tables); ``"quadruplet"`` is the double header. ``positives="all"``
    scores every ordered positive pair (i, j) with its own hard negatives k̂_i, k̂_j and
    averages the terms (``tuple_reduction``) instead of taking the one hardest pair.

    A positive pair counts only when both ends have a negative in the batch; a batch
    without one (one class, no positive pair) gives 0 with zero gradient. Evaluation and
    exports use the encoder's embeddings with the configured retrieval distance (the
    unit is not exported); :func:`tfdml.pddm.pddm_scores` ranks a gallery by S with the
    trained unit (``loss.unit``).

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
