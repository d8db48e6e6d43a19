# Over 400 lines: MetricLoss, the contract every loss shares, is one class; the helpers above it are the checks it runs.
"""What every tfdml loss shares.

* :class:`MetricLoss`: a ``keras.losses.Loss`` whose ``y_true`` is either plain
  integer labels ([B] or [B, 1]) or the batch-contract dict (see
  :mod:`tfdml.targets`), whose ``y_pred`` is the [B, d] batch of embeddings and
  whose ``call`` returns the scalar loss of the batch. It resolves the
  ``distance``, the ``sampler`` (:mod:`tfdml.samplers`), the per-call seed and
  the tuple reduction (:mod:`tfdml.losses.reductions`), and serialises them.
* :class:`SeedState`: the layer that holds a loss's ``keras.random.SeedGenerator``
  so that checkpoints save and restore the position of its random stream.
* :func:`triplets_to_pairs` / :func:`select_pairs`: the one place where a
  triplet selection becomes pair multiplicities, so that any pair loss accepts
  any sampler.
* :meth:`MetricLoss.input_checks` lists the conditions a loss's target columns must meet
  (:mod:`tfdml.losses.input_checks`).

Seeds. A loss built with ``seed=s`` draws the sampler seed ``[s, c]`` (int32)
on its c-th call (c = 0, 1, ...): deterministic for a given ``s``, different
from call to call, and restored from a checkpoint together with the model.
"""

import collections
import inspect
import re

import keras
import tensorflow as tf

from tfdml import distance_names
from tfdml import distances as distances_lib
from tfdml import importance as importance_lib
from tfdml import kernels
from tfdml import masks as masks_lib
from tfdml import targets as targets_lib
from tfdml import xla
from tfdml.losses import reductions, routes
from tfdml.losses.input_checks import assert_valid, check_views, importance_check, nan_if_invalid, whole_number_check

PairWeights = collections.namedtuple("PairWeights", ["pos_weight", "neg_weight"])


@keras.saving.register_keras_serializable(package="tfdml")
class SeedState(keras.layers.Layer):
    """Holds the ``keras.random.SeedGenerator`` of a loss's sampler.

    The generator's state is tracked as a non-trainable weight of this layer (for
    ``model.save_weights`` and ``.keras`` files) and as its attribute ``state`` (for
    ``tf.train.Checkpoint``), so every save route restores the random stream of a loss
    whose ``parameter_layers`` the model tracks.
    """

    def __init__(self, seed=None, **kwargs):
        super().__init__(**kwargs)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be an int or None, got {seed!r}.")
        self.seed = seed
        # Bypass the layer's automatic SeedGenerator tracking (which would list
        # the state twice and not save it) and track the state as a weight.
        object.__setattr__(self, "generator", keras.random.SeedGenerator(seed))
        self._track_variable(self.generator.state)
        self.state = self.generator.state  # the same weight, as a child TensorFlow's checkpoints walk
        self.built = True

    def next(self):
        """The [2] int32 seed for this call (then advance the stream)."""
        return tf.cast(self.generator.next(), tf.int32)

    def call(self, inputs):  # pragma: no cover - never used as a layer in a model
        return inputs

    def get_config(self):
        config = super().get_config()
        config["seed"] = self.seed
        return config


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

    samplers = _samplers_module()
    if not isinstance(selection, samplers.GridTripletSelection):
        return PairWeights(counts(selection, selection.positive), counts(selection, selection.negative))
    # slot a·M + p is the pair (a, p)
    pos = tf.reshape(tf.cast(selection.mask, dtype), tf.stack([batch_size, columns]))
    width = listed_slots()
    if width is None:
        return PairWeights(pos, counts(selection, selection.negative))
    # Scatter the B·width listed valid slots rather than all B·M (the same counts).
    narrow, widest = samplers.base.compact_grid(selection, width)
    neg = tf.cond(widest <= width,
                  lambda: counts(narrow, narrow.negative), lambda: counts(selection, selection.negative))
    return PairWeights(pos, neg)


def listed_slots():
    """How many valid slots per anchor a grid selection is compacted to, or None.

    The reference path computes a triplet loss on all B·M slots (B anchors, M
    candidates) of a grid selection, weighted by 0 where not valid. A device may compute on fewer
    (:data:`tfdml.kernels.CHOICES`, ``"triplet_slots"``): ``"listed_slots"`` lists up
    to ``width`` valid slots per anchor (fixed shapes, :func:`~tfdml.samplers.base.
    compact_grid`; this answers its width), ``"valid_slots"`` keeps the valid slots
    alone (:meth:`MetricLoss.sample`; a shape known at run time, so never under XLA).
    The same triplets, so the same loss."""
    choice = kernels.choose("triplet_slots")
    return choice.params["width"] if choice.form == "listed_slots" else None


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


def _memory_module():
    from tfdml import memory  # tfdml.memory imports nothing of the losses

    return memory


def _samplers_module():
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
    samplers = _samplers_module()  # registers the samplers' Keras classes before a saved config is read
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


def check_distance(distance):
    """``distance`` if it names one of :data:`tfdml.distances.DISTANCES` (a name, so the loss
    can be serialised), else :func:`tfdml.distance_names.check`'s error."""
    return distance_names.check(distance, hint=" (a name, so that the loss can be saved)")


def importance_matrix(targets, dtype):
    """[B, B] importance weights W_ij = P_U/Q of the batch design (Hong et al. Eq. 23–25,
    :func:`tfdml.importance.pair_weights`) in ``dtype``, or ``None`` when the batch
    carries no importance columns (plain labels): every pair then weighs 1."""
    w = importance_lib.pair_weights(targets)
    return None if w is None else tf.cast(w, dtype)


def scope_name(name):
    """``name`` as a TensorFlow root name scope (``[A-Za-z0-9.][A-Za-z0-9_.\\-/>]*``): any
    other character becomes ``_``, a leading ``_``/``-``/``/``/``>`` is dropped; ``"loss"`` if
    nothing is left. Keras names a loss after its class, so a class ``_Private`` is named
    ``__private``, which TensorFlow refuses as a root scope in graph mode."""
    cleaned = re.sub(r"[^A-Za-z0-9_.\-/>]", "_", str(name)).lstrip("_-/>")
    return cleaned or "loss"


def refuse_sample_weight(owner):
    """Raise the one error for a per-example ``sample_weight`` given to a tuple loss.

    A tfdml loss is a sum over tuples (pairs, triplets, N-pair sets) that span
    examples, so a weight per example has no single meaning (anchor only? every
    member?); it is refused rather than applied to the scalar or dropped.
    """
    raise ValueError(
        f"{owner} scores tuples of examples, not single examples, and takes no per-example "
        "sample_weight; remove sample_weight from fit() (or from the dataset's third "
        "element), and weight tuples through the batch design's importance columns "
        "(see tfdml.targets and tfdml.importance) instead."
    )


#: Keras reductions that leave one scalar as it is; "none" / None ask for per-sample values.
SCALAR_REDUCTIONS = ("sum_over_batch_size", "sum", "mean", "mean_with_sample_weight")


def check_scalar_reduction(owner, reduction):
    """Refuse a Keras ``reduction`` that asks for per-sample values.

    A tfdml loss reduces its per-tuple terms itself (``tuple_reduction``) and
    returns one scalar, which every Keras reduction in :data:`SCALAR_REDUCTIONS`
    leaves unchanged. ``"none"`` (or None) would silently return that scalar
    where per-sample values are expected, so it is refused."""
    if reduction in SCALAR_REDUCTIONS:
        return
    raise ValueError(
        f"{owner}(reduction={reduction!r}): a tfdml loss returns one value over tuples of "
        "examples (pairs, triplets), not one per example, so Keras' per-sample reduction has "
        "nothing to return. Leave reduction at its default; choose how tuples are averaged with "
        "tuple_reduction (tfdml.losses.reductions.REDUCTIONS), and get per-tuple values from the "
        "loss's terms (e.g. TripletLoss.tuple_terms)."
    )


def refuse_fixed(owner, kwargs, **reasons):
    """Refuse a base argument that the loss ``owner`` fixes itself: ``reasons`` maps each
    such argument name to why (``distance="scores dot products ..."``)."""
    for name, reason in reasons.items():
        if name in kwargs:
            raise ValueError(f"{owner} {reason} and takes no {name}; remove {name}.")


def check_positive(name, value, allow_zero=False):
    try:
        ok = float(value) >= 0 if allow_zero else float(value) > 0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a number {bound}, got {value!r}.")
    return float(value)


class MetricLoss(keras.losses.Loss):
    """Base class of tfdml losses (not registered; use a subclass).

    Subclasses say what they can do in class attributes, which configs read
    (:mod:`tfdml_app.config` keeps no tables of losses):

    * ``sampler_kinds``: the selection kinds they accept (empty for losses
      without a sampler);
    * ``sampler_required``: ``sampler=None`` is refused (a triplet loss has no
      terms without a triplet sampler);
    * ``needs_tuples``: the formula itself compares an anchor with positives
      and negatives of the same batch, so a batch of isolated pairs (the
      p-random design) gives it nothing (a sampler may need tuples too, see
      ``Sampler.needs_tuples``);

    and ``default_tuple_reduction``, and implement
    ``compute(targets, embeddings)`` returning the scalar loss. Constructor
    arguments named ``num_classes`` (classes of the training split) and
    ``seed`` are filled in by ``train.py``.

    Args:
      distance: name of the pairwise distance (:data:`tfdml.distances.DISTANCES`);
        a similarity is used as ``1 − s``.
      sampler: ``None``, a name for :func:`tfdml.samplers.get`, a sampler
        object or its serialised config.
      seed: int seed of the sampler's random stream (see module docstring);
        ``None`` draws one.
      tuple_reduction: one of :data:`tfdml.losses.reductions.REDUCTIONS`
        (default: the class's ``default_tuple_reduction``, or ``"mean"`` with
        ``importance``).
      importance: weight every pair term by the batch design's W_ij = P_U/Q
        (Hong et al. Eq. 23, with Eq. 24 / 25), for losses built from pairs
        (``supports_importance``). With ``tuple_reduction="mean"`` the
        mini-batch loss is then unbiased for the loss over all pairs of the
        training split (a constant number of pairs per design batch, as
        Eq. 23's 1/B); with a sampler, W corrects the design and the
        sampler's own choice stays part of the objective. A batch without the
        importance columns (plain labels) weighs every pair 1.
      name, reduction, dtype: as for ``keras.losses.Loss``. ``call`` returns a
        scalar, which Keras' scalar reductions leave as it is; ``"none"`` is
        refused (:func:`check_scalar_reduction`).
      memory: a cross-batch memory (:mod:`tfdml.memory`: ``None``, a dict such as
        ``{"size": 4096, "warmup_steps": 1000}`` or a ``CrossBatchMemory``) for the
        losses whose ``memory_refusal`` is None: the anchors of the batch are mined
        and scored against the batch and the memory (Wang et al. 2020, XBM), and the
        batch is written to it after the loss. With ``importance=True`` (losses whose
        ``memory_importance`` is True, all pairs, ``tuple_reduction="mean"``) every pair,
        of the batch or against the memory, is weighted by
        :func:`tfdml.importance.memory_pair_weights` and the sum divided by that
        function's fixed C: unbiased for the loss over all pairs of the split with the
        (m, n)-group design (its ``w_memory`` column) and a memory of whole batches.
    """

    sampler_kinds = ()
    sampler_required = False
    needs_tuples = False
    takes_distance = True
    #: The one distance the loss's equation is written for (e.g. ``"cosine"`` for losses
    #: of similarities), or None when ``distance`` may be any of :data:`DISTANCES`.
    fixed_distance = None
    default_tuple_reduction = "mean"
    #: True for losses whose terms are pair terms, which ``importance=True`` weights.
    supports_importance = False
    #: The batch columns ``importance=True`` reads (:mod:`tfdml.importance`), checked by
    #: :meth:`input_checks`.
    importance_columns = ("class_size", "w_pos", "w_neg")
    #: Base arguments the loss sets itself, each with why (a loss that passes the others
    #: on as ``**kwargs`` refuses these with :func:`refuse_fixed`; configs do not offer them).
    fixed_arguments = {}
    #: Why a cross-batch memory (:mod:`tfdml.memory`) cannot supply this loss's candidates,
    #: or None when its terms are functions of the anchors × candidates matrix of
    #: :meth:`distances`, :meth:`candidates` and :meth:`candidate_labels` (the memory's
    #: rows are candidates, never anchors).
    memory_refusal = ("its terms are not computed from the anchors x candidates matrix of "
                      "MetricLoss.distances / candidates, which is where a memory adds its rows")
    #: True when ``importance=True`` with a memory is derived for this loss: its value is a
    #: weighted sum of pair terms over all pairs of the [B, M] matrix, reduced by
    #: :meth:`reduce` (:func:`tfdml.importance.memory_pair_weights`).
    memory_importance = False

    @classmethod
    def fits_sampler_distance(cls, sampler, distance=None):
        """False when ``sampler`` assumes a distance (its ``requires_distance``) that this
        loss does not compute with: ``distance``, or when None the loss's
        :attr:`fixed_distance` (None: any distance, so it fits)."""
        required = getattr(sampler, "requires_distance", None)
        distance = cls.fixed_distance if distance is None else distance
        return required is None or not cls.takes_distance or distance is None or distance == required

    def __init__(
        self,
        distance="euclidean",
        sampler=None,
        seed=None,
        tuple_reduction=None,
        name=None,
        reduction="sum_over_batch_size",
        dtype=None,
        importance=False,
        memory=None,
    ):
        check_scalar_reduction(type(self).__name__, reduction)
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.importance = bool(importance)
        if self.importance and not self.supports_importance:
            raise ValueError(
                f"{type(self).__name__} has no importance-weighted form: the weights P_U/Q "
                "(Hong et al. Eq. 23-25; tfdml.importance for triplets) are defined for pair "
                "and triplet terms; use contrastive, margin or triplet with importance=True, "
                "or importance=False."
            )
        self.distance = check_distance(distance)
        if self.fixed_distance is not None and self.distance != self.fixed_distance:
            raise ValueError(
                f"{type(self).__name__} is defined on {self.fixed_distance} distances (see its "
                f"docstring); got distance={distance!r}: use distance={self.fixed_distance!r}."
            )
        if sampler is not None and not self.sampler_kinds:
            raise ValueError(f"{type(self).__name__} takes no sampler; got sampler={sampler!r}.")
        if sampler is None and self.sampler_required:
            default = inspect.signature(type(self).__init__).parameters.get("sampler")
            example = "" if default is None else f", e.g. sampler={default.default!r}"
            raise ValueError(
                f"{type(self).__name__} needs a "
                f"{' or '.join(kind.rstrip('s') for kind in self.sampler_kinds)} sampler{example}."
            )
        self.sampler = resolve_sampler(sampler, self.sampler_kinds, type(self).__name__)
        if not self.fits_sampler_distance(self.sampler, self.distance):
            required = self.sampler.requires_distance
            raise ValueError(
                f"{type(self.sampler).__name__} assumes {required} distances between unit-norm "
                f"embeddings, but {type(self).__name__} was built with distance={self.distance!r}; "
                f"use distance={required!r} (with an L2-normalising model), or another sampler."
            )
        if tuple_reduction is None:
            tuple_reduction = "mean" if self.importance else self.default_tuple_reduction
        self.tuple_reduction = reductions.check_reduction(tuple_reduction)
        self.seed = seed
        self._seed_state = None
        if self.sampler is not None and getattr(self.sampler, "needs_seed", False):
            self._seed_state = SeedState(seed, name=f"{self.name}_seed")
        self._candidates_view = None
        self._importance_denominator = None
        self.memory = None
        if memory is not None:
            self._check_memory()
            self.memory = _memory_module().get(memory, name=f"{self.name}_memory")

    def _check_memory(self):
        """Refuse a memory this loss cannot use, naming why."""
        owner = type(self).__name__
        if self.memory_refusal is not None:
            raise ValueError(f"{owner} cannot use a cross-batch memory: {self.memory_refusal}. "
                             "Remove memory, or use a pair or triplet loss such as contrastive or triplet.")
        if not self.importance:
            return
        where = f"{owner}(importance=True) with a cross-batch memory: "
        fix = " Use importance=False with a memory, or importance=True without one."
        if "w_triplet" in self.importance_columns:
            raise ValueError(where + "the triplet weights of memory tuples are not derived (the "
                             "memory pairs' weights are, tfdml.importance.memory_pair_weights, for "
                             "the contrastive losses)." + fix)
        if not self.memory_importance:
            raise ValueError(where + "the weights of memory pairs are derived for the contrastive "
                             "losses over all pairs (tfdml.importance.memory_pair_weights), whose "
                             f"value is a weighted sum of pair terms; not for {owner}'s terms." + fix)
        if self.sampler is not None:
            raise ValueError(where + "the weights of memory pairs are derived for all pairs of "
                             "the batch and the memory (tfdml.importance.memory_pair_weights); "
                             "remove the sampler." + fix)
        if self.tuple_reduction != "mean":
            raise ValueError(where + "the weighted pair terms are divided by a fixed expected "
                             'number of pairs (tfdml.importance.memory_pair_weights); use '
                             'tuple_reduction="mean".' + fix)

    # -- state ---------------------------------------------------------------
    @property
    def parameter_layers(self):
        """Keras layers holding this loss's state (learned parameters, seeds, a memory)."""
        layers = [self._seed_state] if self._seed_state is not None else []
        return layers + ([self.memory] if self.memory is not None else [])

    @property
    def needs_positive_pairs(self):
        """True when a batch without a positive pair gives this loss nothing to score (its
        value 0, no gradient): the formula or its sampler compares an anchor's positives with
        its negatives (``needs_tuples``; e.g. multi-similarity's mining, Wang et al. 2019 §3.3,
        keeps the negatives that come near a positive), and no cross-batch memory supplies
        positives from earlier batches. :class:`tfdml.models.EmbeddingModel` counts such
        training batches and warns."""
        return self.memory is None and bool(self.needs_tuples or getattr(self.sampler, "needs_tuples", False))

    def next_seed(self):
        """The sampler seed of this call ([2] int32), or ``None`` without randomness."""
        return None if self._seed_state is None else self._seed_state.next()

    # -- input checks --------------------------------------------------------
    def input_checks(self):
        """The :class:`InputCheck` s this loss needs its targets to pass (subclasses add
        theirs): without them its value would be silently wrong (a gather out of range,
        a weight of the wrong sign). Eagerly :meth:`call` raises
        :class:`tfdml.errors.InvalidInputError` before computing; in a graph and under
        XLA (which drops asserts) it computes on the cleaned targets
        (:meth:`InputCheck.clean`) and returns NaN, with zero gradient, and
        :class:`tfdml.models.EmbeddingModel` raises the error after the step.

        Every loss checks that its id columns hold whole numbers
        (:func:`whole_number_check`)."""
        checks = [whole_number_check(column) for column in targets_lib.ID_COLUMNS]
        if self.sampler is not None:  # the batch its sampler's rule needs (Sampler.input_checks)
            checks += list(self.sampler.input_checks())
        if not self.importance:
            return checks
        columns = self.importance_columns + (("w_memory",) if self.memory is not None else ())
        return checks + [importance_check(column) for column in columns]

    # -- batch helpers -------------------------------------------------------
    def distances(self, embeddings):
        """[B, M] distances of the anchors (the batch) to the candidates: the batch itself
        (M = B), followed by a memory's rows while :meth:`compute` runs with one."""
        square = distance_matrix(embeddings, self.distance)
        view = self._candidates_view
        if view is None:
            return square
        cross = distances_lib.pairwise(embeddings, view.embeddings, distance=self.distance)
        if distances_lib.is_similarity(self.distance):
            cross = 1.0 - cross
        return tf.concat([square, tf.cast(cross, square.dtype)], axis=1)

    def candidates(self, targets):
        """[B, M] bool: the candidate pairs (:func:`tfdml.masks.candidate_mask`; with a
        memory, its usable rows after the batch's columns)."""
        if self._candidates_view is not None:
            return self._candidates_view.mask
        return masks_lib.candidate_mask(targets.label, targets.pair_id)

    def candidate_labels(self, targets):
        """[M] labels of the candidates (the batch's, then a memory's rows)."""
        if self._candidates_view is not None:
            return self._candidates_view.labels
        return targets.label

    def sample(self, dist, targets, embeddings, candidates=None):
        """Run the sampler on ``dist`` (no gradient) with this call's seed.

        Where the table chooses ``"valid_slots"`` (:func:`listed_slots`; on CPU in
        graph mode) a triplet selection is cut to its valid slots
        (:func:`tfdml.samplers.base.valid_triplets`): the loss then gathers, and its
        gradient scatters, B·(m − 1) semi-hard triplets rather than B² slots. Never
        under XLA, which needs fixed shapes: there the selection keeps its T slots
        and :meth:`over_triplets` may compact it."""
        if candidates is None:
            candidates = self.candidates(targets)
        selection = self.sampler(
            tf.stop_gradient(dist),
            self.candidate_labels(targets),
            candidates=candidates,
            seed=self.next_seed(),
            embedding_dim=embeddings.shape[-1],
        )
        samplers = _samplers_module()
        if (isinstance(selection, samplers.TripletSelection) and not xla.is_compiling()
                and kernels.choose("triplet_slots").form == "valid_slots"):
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
        (:func:`listed_slots`; on CPU under XLA), for a grid selection (B·M slots), on
        its valid slots alone whenever every anchor has at most ``width`` of them.

        The shape stays fixed: the valid slots are compacted to B·width
        (:func:`tfdml.samplers.base.compact_grid`) and a ``tf.cond`` takes that
        form, or the full grid when some anchor has more valid slots (width 16: a
        class of more than 17 examples). Both give the same result; ``compute``
        returns the same shapes for both (the triplet losses: their scalar loss).
        In graph mode on CPU :meth:`sample` has already cut the selection to its
        valid slots."""
        samplers = _samplers_module()
        width = listed_slots()
        if not (isinstance(selection, samplers.GridTripletSelection) and width is not None):
            return compute(selection)
        narrow, widest = samplers.base.compact_grid(selection, width)
        return tf.cond(widest <= width, lambda: compute(narrow), lambda: compute(selection))

    def importance_weights(self, targets, dtype):
        """W_ij [B, B] when built with ``importance=True`` and the batch has the columns, else
        None. While :meth:`compute` runs with a memory: W_ij [B, B + K] of
        :func:`tfdml.importance.memory_pair_weights`, whose fixed denominator :meth:`reduce`
        then divides by."""
        if not self.importance:
            return None
        view = self._candidates_view
        if view is None:
            return importance_matrix(targets, dtype)
        result = importance_lib.memory_pair_weights(
            targets, view.labels[tf.shape(targets.label)[0]:], view.class_sizes, view.usable)
        if result is None:
            return None
        weights, self._importance_denominator = result
        return tf.cast(weights, dtype)

    def triplet_importance_weights(self, targets, selection, dtype):
        """W_apn [T] of a ``TripletSelection`` (:func:`tfdml.importance.triplet_weights`)
        when built with ``importance=True`` and the batch has ``w_triplet``, else None."""
        if not self.importance:
            return None
        w = importance_lib.triplet_weights(targets, selection.anchor, selection.positive,
                                           selection.negative)
        return None if w is None else tf.cast(w, dtype)

    def pair_weights(self, dist, targets, embeddings):
        """Pair multiplicities: all candidate pairs without a sampler, else the
        sampler's pairs (a triplet selection converted by :func:`triplets_to_pairs`)."""
        candidates = self.candidates(targets)
        if self.sampler is None:
            return all_pairs(self.candidate_labels(targets), candidates, dist.dtype)
        selection = self.sample(dist, targets, embeddings, candidates)
        # Not through over_triplets: the selection carries no gradient, so only the
        # negatives' scatter is compacted (triplets_to_pairs), not the loss's terms.
        return select_pairs(selection, tf.shape(dist)[0], dist.dtype, tf.shape(dist)[1])

    def reduce(self, losses, counts, weights=None, extra=None):
        """:func:`tfdml.losses.reductions.reduce_tuples`; weighted terms against a memory
        (:meth:`importance_weights`) are summed and divided by the fixed denominator of
        :func:`tfdml.importance.memory_pair_weights` instead."""
        fixed = self._importance_denominator
        if fixed is not None and weights is not None:
            total = reductions.reduce_tuples(losses, counts, "sum", weights=weights, extra=extra)
            return total / tf.cast(fixed, total.dtype)
        return reductions.reduce_tuples(
            losses, counts, self.tuple_reduction, weights=weights, extra=extra
        )

    # -- keras.losses.Loss ---------------------------------------------------
    @tf.autograph.experimental.do_not_convert
    def __call__(self, y_true, y_pred, sample_weight=None):
        """As ``keras.losses.Loss.__call__``, except that ``y_true`` is not cast
        to the loss dtype: labels and ids are identities, and a float (float32
        above 2²⁴, bfloat16 above 2⁸) merges distinct ones. Only the
        embeddings take the loss dtype; :func:`tfdml.targets.unpack` keeps the
        integer columns integer and casts the float ones itself.

        ``call`` returns the scalar loss of the whole batch (its tuples span
        examples), so a per-example ``sample_weight`` has nothing to weight:
        it is refused rather than applied to the scalar.

        Like ``keras.losses.Loss.__call__`` (Keras is on autograph's do-not-convert
        list), the loss is not converted by autograph inside a caller's
        ``tf.function``: ``compute`` and everything it calls is plain TensorFlow
        (``tf.cond`` / ``tf.while_loop``, never a Python ``if`` on a tensor), so
        converting it would only cost tracing time.

        A loss with learned state (trainable variables in ``parameter_layers``) refuses
        a Keras model that would not train it (:mod:`tfdml.losses.routes`)."""
        if sample_weight is not None:
            refuse_sample_weight(type(self).__name__)
        learned = [layer for layer in self.parameter_layers if layer.trainable_variables]
        if learned:
            routes.refuse_untracked_state(type(self).__name__, learned)
        with tf.name_scope(scope_name(self.name)):
            y_pred = tf.convert_to_tensor(y_pred)
            if y_pred.dtype != self.dtype:
                y_pred = tf.cast(y_pred, self.dtype)
            return self.call(y_true, y_pred)

    def call(self, y_true, y_pred):
        targets = targets_lib.unpack(y_true)
        embeddings = tf.convert_to_tensor(y_pred)
        if embeddings.shape.rank != 2:
            raise ValueError(
                f"{type(self).__name__} expects y_pred of shape [batch, dim], got {embeddings.shape}."
            )
        checks = self.input_checks()
        if not checks:
            return self._compute_with_memory(targets, tf.cast(embeddings, self.dtype))
        owner = type(self).__name__
        views = check_views(checks, y_true, targets)
        if tf.executing_eagerly():
            for check, view in zip(checks, views):
                check.raise_if_broken(owner, view)
        counts = [check.invalid_rows(view) for check, view in zip(checks, views)]
        if not tf.executing_eagerly() and not xla.is_compiling() and not routes.caller_counts_checks():
            counts = assert_valid(owner, checks, counts)
        invalid = tf.add_n(counts)
        for check in checks:
            targets = check.clean(targets)
        return nan_if_invalid(self._compute_with_memory(targets, tf.cast(embeddings, self.dtype)), invalid)

    def _compute_with_memory(self, targets, embeddings):
        """:meth:`compute`; with a memory that is not paused, against the batch and the
        memory (:mod:`tfdml.memory`), then the batch is written to the memory."""
        memory = self.memory
        if memory is None or memory.is_paused:
            return self.compute(targets, embeddings)
        batch_candidates = masks_lib.candidate_mask(targets.label, targets.pair_id)
        self._candidates_view = memory.candidates(targets, embeddings, batch_candidates)
        try:
            value = self.compute(targets, embeddings)
        finally:
            self._candidates_view = None
            self._importance_denominator = None
        with tf.control_dependencies([value]):
            updates = memory.update(targets, embeddings)
        with tf.control_dependencies(updates):
            return tf.identity(value)

    def compute(self, targets, embeddings):
        raise NotImplementedError

    def get_config(self):
        config = super().get_config()
        config["dtype"] = self.dtype
        if self.takes_distance:
            config["distance"] = self.distance
        if self.sampler_kinds:
            config["sampler"] = (
                None if self.sampler is None else keras.saving.serialize_keras_object(self.sampler)
            )
            config["seed"] = self.seed
        config["tuple_reduction"] = self.tuple_reduction
        if self.supports_importance:
            config["importance"] = self.importance
        if self.memory is not None:
            config["memory"] = {"size": self.memory.size, "warmup_steps": self.memory.warmup_steps,
                                "embedding_dim": self.memory.embedding_dim}
        return config
