"""The batch helpers of every loss: what ``compute`` mines and reduces with.

* :class:`BatchHelpers`, the methods :class:`tfdml.losses.base.MetricLoss` gives its
  subclasses: [B, M] distances of the anchors (the batch) to the candidates, the
  candidates' mask and labels, the sampler's selection, pair multiplicities, importance
  weights and the tuple reduction. Each takes ``candidates``: what the anchors are mined
  against (:class:`tfdml.candidates.Candidates`, from ``MetricLoss.call``); None is the
  batch alone.
* :func:`triplets_to_pairs` / :func:`select_pairs`: the one place where a triplet
  selection becomes pair multiplicities, so that any pair loss accepts any sampler.
* :func:`resolve_sampler`: a loss's sampler from a name, an object or a saved config.
"""

import collections

import keras
import tensorflow as tf

from tfdml import candidates as candidates_lib
from tfdml import distances as distances_lib
from tfdml import importance as importance_lib
from tfdml import masks as masks_lib
from tfdml import targets as targets_lib
from tfdml.kernels import chosen
from tfdml.losses import reductions

PairWeights = collections.namedtuple("PairWeights", ["pos_weight", "neg_weight"])


def triplets_to_pairs(selection, batch_size, dtype=tf.float32, columns=None):
    """Pair multiplicities [B, M] of a ``TripletSelection`` (M = ``columns``, the
    candidates; default B, the batch alone).

    Each selected triplet (a, p, n) (``mask`` true) adds 1 to the positive pair
    (a, p) and 1 to the negative pair (a, n); this is how Wu et al. 2017 §5
    feed pair losses (contrastive, margin) from triplet samplers: one negative
    per end of each positive pair.
    """
    columns = batch_size if columns is None else columns
    zeros = tf.zeros(tf.stack([batch_size, columns]), dtype)

    def counts(selection, other):
        """Multiplicity of the pairs (anchor, other) over the selection's valid slots."""
        rows = tf.clip_by_value(tf.cast(selection.anchor, tf.int32), 0, batch_size - 1)
        cols = tf.clip_by_value(tf.cast(other, tf.int32), 0, columns - 1)
        return tf.tensor_scatter_nd_add(zeros, tf.stack([rows, cols], axis=1), tf.cast(selection.mask, dtype))

    samplers = samplers_module()
    if not isinstance(selection, samplers.GridTripletSelection):
        return PairWeights(counts(selection, selection.positive), counts(selection, selection.negative))
    # slot a·M + p is the pair (a, p)
    pos = tf.reshape(tf.cast(selection.mask, dtype), tf.stack([batch_size, columns]))
    width = chosen.listed_slots_width()
    if width is None:
        return PairWeights(pos, counts(selection, selection.negative))
    # Scatter the B·width listed valid slots rather than all B·M (the same counts).
    narrow, widest = samplers.base.compact_grid(selection, width)
    neg = tf.cond(widest <= width,
                  lambda: counts(narrow, narrow.negative), lambda: counts(selection, selection.negative))
    return PairWeights(pos, neg)


def all_pairs(labels, candidates, dtype=tf.float32):
    """Multiplicity 1 for every candidate positive / negative pair."""
    pos, neg = masks_lib.split_by_label(labels, candidates)
    return PairWeights(tf.cast(pos, dtype), tf.cast(neg, dtype))


def select_pairs(selection, batch_size, dtype=tf.float32, columns=None):
    """Pair multiplicities [B, M] from a ``PairSelection`` or a ``TripletSelection``
    (M = ``columns``, default B)."""
    if hasattr(selection, "pos_weight"):
        return PairWeights(
            tf.cast(selection.pos_weight, dtype), tf.cast(selection.neg_weight, dtype)
        )
    if hasattr(selection, "anchor"):
        return triplets_to_pairs(selection, batch_size, dtype, columns)
    raise ValueError(
        f"Expected a PairSelection or a TripletSelection, got {type(selection).__name__}."
    )

def samplers_module():
    try:
        from tfdml import samplers
    except ModuleNotFoundError as err:  # pragma: no cover - samplers ship with tfdml
        raise ValueError(
            "This loss needs tfdml.samplers, which is not available in this installation."
        ) from err
    return samplers


def resolve_sampler(sampler, kinds, owner):
    """A sampler object from a name, an object or a serialised config.

    Raises ``ValueError`` when its ``kind`` is not one of ``kinds``.
    """
    if sampler is None:
        return None
    samplers = samplers_module()  # registers the samplers' Keras classes before a saved config is read
    if isinstance(sampler, dict):
        sampler = keras.saving.deserialize_keras_object(sampler)
    sampler = samplers.get(sampler)
    kind = getattr(sampler, "kind", None)
    if kind not in kinds:
        raise ValueError(
            f"{owner} needs a sampler that selects {' or '.join(kinds)}, but "
            f"{type(sampler).__name__} selects {kind!r}; pass one of those kinds."
        )
    return sampler

def distance_matrix(embeddings, distance):
    """[B, B] distances (larger = farther) for the named ``distance``.

    A similarity (cosine, Lu et al. 2019 §3.1) becomes the distance ``1 − s``,
    so margins keep their meaning and samplers see larger = farther.
    """
    values = distances_lib.pairwise(embeddings, distance=distance)
    if distances_lib.is_similarity(distance):
        values = 1.0 - values
    return values

def importance_matrix(targets, dtype):
    """[B, B] importance weights W_ij = P_U/Q of the batch design (Hong et al. Eq. 23–25,
    :func:`tfdml.importance.pair_weights`) in ``dtype``, or ``None`` when the batch
    carries no importance columns (plain labels): every pair then weighs 1."""
    w = importance_lib.pair_weights(targets)
    return None if w is None else tf.cast(w, dtype)


class BatchHelpers:
    """The batch helpers of :class:`tfdml.losses.base.MetricLoss` (a mixin: it reads the
    loss's ``distance``, ``sampler``, ``importance``, ``tuple_reduction`` and
    ``next_seed``)."""

    def distances(self, embeddings, candidates=None):
        """[B, M] distances of the anchors (the batch) to the candidates: the batch itself
        (M = B), followed by ``candidates``' rows after the batch's (a memory's)."""
        square = distance_matrix(embeddings, self.distance)
        if candidates_lib.is_batch(candidates):
            return square
        cross = distances_lib.pairwise(embeddings, candidates.embeddings, distance=self.distance)
        if distances_lib.is_similarity(self.distance):
            cross = 1.0 - cross
        return tf.concat([square, tf.cast(cross, square.dtype)], axis=1)

    def candidate_mask(self, targets, candidates=None):
        """[B, M] bool: the candidate pairs (the batch's :func:`tfdml.masks.candidate_mask`,
        or ``candidates.mask``)."""
        if candidates is not None:
            return candidates.mask
        return masks_lib.candidate_mask(targets.label, targets.pair_id)

    def candidate_labels(self, targets, candidates=None):
        """[M] labels of the candidates (the batch's, or ``candidates.labels``)."""
        if candidates is not None:
            return candidates.labels
        return targets.label

    def sample(self, dist, targets, embeddings, candidates=None):
        """Run the sampler on ``dist`` [B, M] (no gradient) with this call's seed.

        Where the table chooses ``"valid_slots"``
        (:func:`tfdml.kernels.chosen.keeps_valid_slots_only`; on CPU in graph mode) a
        triplet selection is cut to its valid slots
        (:func:`tfdml.samplers.base.valid_triplets`): the loss then gathers, and its
        gradient scatters, B·(m − 1) semi-hard triplets rather than B² slots. Never
        under XLA, which needs fixed shapes: there the selection keeps its T slots
        and :meth:`over_triplets` may compact it."""
        selection = self.sampler(
            tf.stop_gradient(dist),
            self.candidate_labels(targets, candidates),
            candidates=self.candidate_mask(targets, candidates),
            seed=self.next_seed(),
            embedding_dim=embeddings.shape[-1],
        )
        samplers = samplers_module()
        if isinstance(selection, samplers.TripletSelection) and chosen.keeps_valid_slots_only():
            selection = samplers.base.valid_triplets(selection)
        return selection

    def xla_is_slower(self, y_true):
        """The sampler's :meth:`~tfdml.samplers.base.Sampler.xla_is_slower` for this
        batch's labels (None without a sampler): ``jit_compile="loss"`` then runs the
        loss without XLA (:class:`tfdml.models.CompiledLoss`)."""
        if self.sampler is None:
            return None
        return self.sampler.xla_is_slower(targets_lib.unpack(y_true).label)

    def over_triplets(self, selection, compute):
        """``compute(selection)``; where the table chooses ``"listed_slots"``
        (:func:`tfdml.kernels.chosen.listed_slots_width`; on CPU under XLA), for a grid
        selection (B·M slots), on its valid slots alone whenever every anchor has at most
        ``width`` of them.

        The shape stays fixed: the valid slots are compacted to B·width
        (:func:`tfdml.samplers.base.compact_grid`) and a ``tf.cond`` takes that
        form, or the full grid when some anchor has more valid slots (width 16: a
        class of more than 17 examples). Both give the same result; ``compute``
        returns the same shapes for both (the triplet losses: their scalar loss).
        In graph mode on CPU :meth:`sample` has already cut the selection to its
        valid slots."""
        samplers = samplers_module()
        width = chosen.listed_slots_width()
        if not (isinstance(selection, samplers.GridTripletSelection) and width is not None):
            return compute(selection)
        narrow, widest = samplers.base.compact_grid(selection, width)
        return tf.cond(widest <= width, lambda: compute(narrow), lambda: compute(selection))

    def importance_weights(self, targets, dtype, candidates=None):
        """W_ij [B, M] when built with ``importance=True`` and the batch has the columns, else
        None: the batch's (:func:`importance_matrix`), or against a memory
        ``candidates.importance_weights`` (:func:`tfdml.importance.memory_pair_weights`),
        whose fixed denominator :meth:`reduce` then divides by."""
        if not self.importance:
            return None
        if candidates_lib.is_batch(candidates):
            return importance_matrix(targets, dtype)
        weights = candidates.importance_weights
        return None if weights is None else tf.cast(weights, dtype)

    def triplet_importance_weights(self, targets, selection, dtype):
        """W_apn [T] of a ``TripletSelection`` (:func:`tfdml.importance.triplet_weights`)
        when built with ``importance=True`` and the batch has ``w_triplet``, else None."""
        if not self.importance:
            return None
        w = importance_lib.triplet_weights(targets, selection.anchor, selection.positive,
                                           selection.negative)
        return None if w is None else tf.cast(w, dtype)

    def pair_weights(self, dist, targets, embeddings, candidates=None):
        """Pair multiplicities [B, M]: all candidate pairs without a sampler, else the
        sampler's pairs (a triplet selection converted by :func:`triplets_to_pairs`)."""
        if self.sampler is None:
            return all_pairs(self.candidate_labels(targets, candidates),
                             self.candidate_mask(targets, candidates), dist.dtype)
        selection = self.sample(dist, targets, embeddings, candidates)
        # Not through over_triplets: the selection carries no gradient, so only the
        # negatives' scatter is compacted (triplets_to_pairs), not the loss's terms.
        return select_pairs(selection, tf.shape(dist)[0], dist.dtype, tf.shape(dist)[1])

    def reduce(self, losses, counts, weights=None, extra=None, candidates=None):
        """:func:`tfdml.losses.reductions.reduce_tuples`; weighted terms against a memory
        (:meth:`importance_weights`) are summed and divided by the fixed
        ``candidates.importance_denominator`` of :func:`tfdml.importance.memory_pair_weights`
        instead."""
        fixed = None if candidates is None else candidates.importance_denominator
        if fixed is not None and weights is not None:
            total = reductions.reduce_tuples(losses, counts, "sum", weights=weights, extra=extra)
            return total / tf.cast(fixed, total.dtype)
        return reductions.reduce_tuples(
            losses, counts, self.tuple_reduction, weights=weights, extra=extra
        )
