"""Distance weighted sampling (Wu et al. 2017, §4 and §5)."""

import math

import keras
import tensorflow as tf

from tfdml.kernels import distance_weighted as _fast
from tfdml.kernels import chosen
from tfdml.samplers import base

# Distances are clipped just below 2 (the diameter of the unit sphere) so that
# log(1 - d²/4) stays finite.
_MAX_DISTANCE = 2.0 - 1e-4


def _check_embedding_dim(embedding_dim, owner):
    if embedding_dim is None:
        raise ValueError(
            f"{owner} needs embedding_dim, the dimension n of the (unit-normalised) embeddings: "
            "q(d) of Wu et al. §4 depends on it. Pass embedding_dim=embeddings.shape[-1] to the "
            "call, or to the constructor."
        )
    if isinstance(embedding_dim, bool) or not hasattr(embedding_dim, "__index__") or int(embedding_dim) < 2:
        raise ValueError(f"{owner}: embedding_dim must be an integer >= 2, got {embedding_dim!r}.")
    return int(embedding_dim)


def _check_params(cutoff, nonzero_loss_cutoff, lam, owner):
    cutoff = float(cutoff)
    if not 0.0 <= cutoff < 2.0:
        raise ValueError(f"{owner}: cutoff must lie in [0, 2) (distances on the unit sphere), got {cutoff}.")
    if nonzero_loss_cutoff is not None:
        nonzero_loss_cutoff = float(nonzero_loss_cutoff)
        if nonzero_loss_cutoff <= 0.0:
            raise ValueError(
                f"{owner}: nonzero_loss_cutoff must be positive (or None to keep all negatives), "
                f"got {nonzero_loss_cutoff}."
            )
    if lam is not None:
        lam = float(lam)
        if not lam > 0.0:
            raise ValueError(f"{owner}: lam (the clip λ on q(d)^-1) must be positive or None, got {lam}.")
    return cutoff, nonzero_loss_cutoff, lam


def log_inverse_density(dist, embedding_dim, cutoff=0.5):
    """``log q(d)^{-1}`` of Wu et al. 2017, §4, with d clipped to [cutoff, 2 - 1e-4].

    q is the normalised density of the distance between two points uniform on
    the unit sphere S^{n-1}:

        q(d) = d^{n-2} [1 - d²/4]^{(n-3)/2} / B(1/2, (n-1)/2),   0 < d < 2,

    (B = the Beta function; the constant makes λ an upper bound on the actual
    1/q). Computed in log space: for n = 128, q(d)^{-1} overflows float32 for
    any d < 1.
    """
    n = float(embedding_dim)
    d = tf.clip_by_value(dist, cutoff, _MAX_DISTANCE)
    log_beta = math.lgamma(0.5) + math.lgamma((n - 1.0) / 2.0) - math.lgamma(n / 2.0)
    log_q = (n - 2.0) * tf.math.log(d) + (n - 3.0) / 2.0 * tf.math.log(1.0 - 0.25 * tf.square(d))
    return log_beta - log_q


def distance_weighted_probabilities(
    dist,
    labels,
    candidates=None,
    embedding_dim=None,
    cutoff=0.5,
    nonzero_loss_cutoff=1.4,
    lam=None,
):
    """[B, M] row-stochastic Pr(n* = n | a) of distance weighted sampling (Wu et al. 2017, §4).

        Pr(n* = n | a) ∝ min(λ, q(D_an)^{-1})                 (Wu et al., §4)

    over the candidate negatives n of anchor a, with

    * D_an clipped below at ``cutoff`` (Wu's implementation uses 0.5): this keeps
      log q finite at d = 0 and bounds the weight of very close negatives, and
      above at 2 - 1e-4 so that log(1 - d²/4) stays finite;
    * weight 0 for D_an >= ``nonzero_loss_cutoff`` (default 1.4, Wu's value):
      such negatives give no margin loss (``None`` keeps them all);
    * ``lam`` = λ: optional clip on q^{-1} with q normalised as in
      :func:`log_inverse_density`; ``None`` leaves the bound to ``cutoff``.

    The weights are formed in log space and normalised per row after
    subtracting the row maximum. A row whose candidate negatives all have
    weight 0 (all beyond ``nonzero_loss_cutoff``) falls back to the uniform
    distribution over its candidate negatives; a row without candidate
    negatives is all zeros. ``dist`` should be the euclidean distance of
    unit-normalised embeddings (q lives on the unit sphere).

    The result carries no gradient.
    """
    owner = "distance_weighted_probabilities"
    embedding_dim = _check_embedding_dim(embedding_dim, owner)
    cutoff, nonzero_loss_cutoff, lam = _check_params(cutoff, nonzero_loss_cutoff, lam, owner)
    dist, labels, candidates = base._prepare(dist, labels, candidates)
    return _probabilities(dist, labels, candidates, embedding_dim, cutoff, nonzero_loss_cutoff, lam)


def _probabilities(dist, labels, candidates, embedding_dim, cutoff, nonzero_loss_cutoff, lam):
    _, neg = base.split_candidates(labels, candidates)
    log_weight = log_inverse_density(dist, embedding_dim, cutoff)
    if lam is not None:
        log_weight = tf.minimum(log_weight, tf.cast(math.log(lam), dist.dtype))
    weighted = neg
    if nonzero_loss_cutoff is not None:
        weighted = tf.logical_and(neg, dist < nonzero_loss_cutoff)
    log_weight = tf.where(weighted, log_weight, tf.constant(-float("inf"), dist.dtype))
    row_max = tf.reduce_max(log_weight, axis=1, keepdims=True)
    row_max = tf.where(tf.math.is_finite(row_max), row_max, tf.zeros_like(row_max))
    weight = tf.where(weighted, tf.exp(log_weight - row_max), tf.zeros_like(dist))
    weight = weight / tf.maximum(tf.reduce_sum(weight, axis=1, keepdims=True), 1e-30)
    negatives = tf.cast(neg, dist.dtype)
    uniform = negatives / tf.maximum(tf.reduce_sum(negatives, axis=1, keepdims=True), 1.0)
    return tf.where(tf.reduce_any(weighted, axis=1, keepdims=True), weight, uniform)


def draw(cdf, last, uniform, rows):
    """Inverse-CDF draw: for each uniform in [0, 1) (any shape) and its row a of ``cdf``
    (the same shape), the first column whose cumulative probability exceeds it, the
    uniform scaled to the row's total mass (1 up to rounding); never past ``last[a]``."""
    total = tf.gather(cdf[:, -1], rows)
    drawn = chosen.count_less_equal(cdf, uniform * total, rows=rows)  # first column with cdf > u: probs > 0
    return tf.minimum(drawn, tf.gather(last, rows))


def draw_negatives(cdf, last, uniform, valid):
    """[B, M] int32: the negative drawn for every valid slot (a, p) by :func:`draw` with
    its uniform ``uniform[a, p]``, 0 elsewhere. The reference path
    (:func:`_draw_every_slot`) draws for every slot; a device may search only the valid
    ones (:data:`tfdml.kernels.CHOICES`, ``"distance_weighted"``), with the same
    negatives: :func:`tfdml.kernels.distance_weighted.draw_negatives` chooses. A form
    whose shapes depend on the data runs only outside XLA, which needs fixed shapes."""
    return _fast.draw_negatives(cdf, last, uniform, valid, draw, _draw_every_slot)


def _draw_every_slot(cdf, last, uniform, valid):
    """The reference path of :func:`draw_negatives`: a draw for every slot of the grid."""
    rows = tf.broadcast_to(tf.range(tf.shape(cdf)[0])[:, None], tf.shape(valid))
    return tf.where(valid, draw(cdf, last, uniform, rows), 0)


@keras.saving.register_keras_serializable(package="tfdml")
class DistanceWeightedSampler(base.Sampler):
    """Distance weighted negatives for every positive pair (Wu et al. 2017, §4 and §5).

    Wu et al. §5: "we use all positive pairs, and sample one negative for
    each anchor of each positive pair" (kind ``"triplets"``). For every ordered
    candidate positive pair (a, p), slot ``a * M + p`` of the returned
    :class:`~tfdml.samplers.TripletSelection` (T = B·M: B anchors, M candidates,
    M = B for the batch alone) holds a negative n
    drawn independently from

        Pr(n* = n | a) ∝ min(λ, q(D_an)^{-1})               (Wu et al., §4)

    as computed by :func:`distance_weighted_probabilities` (cutoff clip,
    no weight beyond ``nonzero_loss_cutoff``, uniform fallback when all
    weights are 0). ``mask`` is true where (a, p) is a candidate positive pair
    and a has a candidate negative.

    Args:
      cutoff: lower clip of D_an (0.5 in Wu et al.'s implementation).
      nonzero_loss_cutoff: negatives at D_an >= this get weight 0 (1.4 =
        margin-loss β + α in Wu et al.); ``None`` keeps all.
      lam: λ, the clip on q(d)^{-1} (q normalised); ``None``: no clip.
      embedding_dim: default n when the call gives none.

    Needs ``seed`` and ``embedding_dim`` (the call's value wins). The draw is
    an inverse-CDF search on the row's cumulative probabilities with uniform
    numbers built from stateless philox bits (one per slot of the grid; only the
    valid slots are searched, and the negative of an invalid slot is 0); it gives
    the same negatives with and without ``jit_compile`` (up to float rounding of
    the CDF, i.e. unless a uniform falls within ~1e-7 of a bin edge). Cost
    O(B·M + B·(m − 1)·log M) for M candidates with m examples per class.
    """

    kind = "triplets"
    needs_seed = True
    # q(d) is the density of the euclidean distance between points uniform on
    # the unit sphere (Wu §4): any other distance, or unnormalised embeddings,
    # would weight the negatives by the wrong density.
    requires_distance = "euclidean"
    requires_unit_sphere = True

    def __init__(self, cutoff=0.5, nonzero_loss_cutoff=1.4, lam=None, embedding_dim=None):
        owner = "DistanceWeightedSampler"
        self.cutoff, self.nonzero_loss_cutoff, self.lam = _check_params(cutoff, nonzero_loss_cutoff, lam, owner)
        self.embedding_dim = None if embedding_dim is None else _check_embedding_dim(embedding_dim, owner)

    def probabilities(self, dist, labels, candidates=None, embedding_dim=None):
        """The [B, M] sampling distribution this sampler draws from."""
        return distance_weighted_probabilities(
            dist, labels, candidates, self._dim(embedding_dim), self.cutoff, self.nonzero_loss_cutoff, self.lam
        )

    def _dim(self, embedding_dim):
        dim = self.embedding_dim if embedding_dim is None else embedding_dim
        return _check_embedding_dim(dim, "DistanceWeightedSampler")

    def sample(self, dist, labels, candidates, seed=None, embedding_dim=None):
        dim = self._dim(embedding_dim)
        size, columns = tf.shape(dist)[0], tf.shape(dist)[1]
        probs = _probabilities(dist, labels, candidates, dim, self.cutoff, self.nonzero_loss_cutoff, self.lam)
        cdf = tf.cumsum(probs, axis=1)
        # Guard against u rounding onto the total: never past the last column of positive mass.
        last = columns - 1 - tf.argmax(tf.reverse(tf.cast(probs > 0, tf.int32), axis=[1]), axis=1, output_type=tf.int32)
        pos, neg = base.split_candidates(labels, candidates)
        valid = tf.logical_and(pos, tf.reduce_any(neg, axis=1, keepdims=True))
        # One uniform per slot (a, p); only the valid slots are searched (B·(m − 1) of the B·M).
        uniform = tf.cast(base.uniform01(tf.stack([size, columns]), seed), dist.dtype)
        negative = draw_negatives(cdf, last, uniform, valid)
        return base.GridTripletSelection(
            tf.repeat(tf.range(size, dtype=tf.int32), columns), tf.tile(tf.range(columns, dtype=tf.int32), [size]),
            tf.reshape(negative, [-1]), tf.reshape(valid, [-1])
        )

    def get_config(self):
        return {
            "cutoff": self.cutoff,
            "nonzero_loss_cutoff": self.nonzero_loss_cutoff,
            "lam": self.lam,
            "embedding_dim": self.embedding_dim,
        }
