"""What every tfdml loss shares: :class:`MetricLoss`, the contract.

A ``keras.losses.Loss`` whose ``y_true`` is either plain integer labels ([B] or [B, 1])
or the batch-contract dict (see :mod:`tfdml.targets`), whose ``y_pred`` is the [B, d]
batch of embeddings and whose ``call`` returns the scalar loss of the batch. It resolves
the ``distance``, the ``sampler`` (:mod:`tfdml.samplers`), the per-call seed
(:class:`tfdml.losses.seeds.SeedState`), the tuple reduction
(:mod:`tfdml.losses.reductions`) and a cross-batch memory (:mod:`tfdml.memory`), runs the
input checks (:mod:`tfdml.input_checks`) and serialises them. Its subclasses
compute with the batch helpers (:mod:`tfdml.losses.batch`) against the candidates
``call`` hands them (:mod:`tfdml.candidates`): the loss object does not change
during a call.
"""

import inspect

import keras
import tensorflow as tf

from tfdml import masks as masks_lib
from tfdml import targets as targets_lib
from tfdml import xla
from tfdml.losses import reductions, routes
from tfdml.losses.arguments import check_distance, check_scalar_reduction, refuse_sample_weight, scope_name
from tfdml.losses.batch import BatchHelpers, resolve_sampler
from tfdml.input_checks import assert_valid, check_views, importance_check, nan_if_invalid, whole_number_check
from tfdml.losses.seeds import SeedState


def _memory_module():
    from tfdml import memory  # tfdml.memory imports nothing of the losses

    return memory


class MetricLoss(BatchHelpers, keras.losses.Loss):
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
    ``compute(targets, embeddings, candidates=None)`` returning the scalar loss
    (:meth:`compute`). Constructor
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
    #: :meth:`distances`, :meth:`candidate_mask` and :meth:`candidate_labels` (the memory's
    #: rows are candidates, never anchors).
    memory_refusal = ("its terms are not computed from the anchors x candidates matrix of "
                      "MetricLoss.distances / candidate_mask, which is where a memory adds its rows")
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
        memory's rows (the memory's :class:`tfdml.candidates.Candidates`, passed to
        ``compute``), then the batch is written to the memory."""
        memory = self.memory
        if memory is None or memory.is_paused:
            return self.compute(targets, embeddings)
        batch_candidates = masks_lib.candidate_mask(targets.label, targets.pair_id)
        candidates = memory.candidates(targets, embeddings, batch_candidates, importance=self.importance)
        value = self.compute(targets, embeddings, candidates)
        with tf.control_dependencies([value]):
            updates = memory.update(targets, embeddings)
        with tf.control_dependencies(updates):
            return tf.identity(value)

    def compute(self, targets, embeddings, candidates=None):
        """The scalar loss of the batch: ``targets`` (:class:`tfdml.targets.Targets`), the
        [B, d] ``embeddings``, mined against ``candidates``
        (:class:`tfdml.candidates.Candidates`; None: the batch alone). A loss that takes a
        memory (``memory_refusal`` None) receives the memory's candidates and passes them on
        to the batch helpers (:meth:`distances`, :meth:`pair_weights`, :meth:`sample`,
        :meth:`importance_weights`, :meth:`reduce`); other losses may define
        ``compute(targets, embeddings)``."""
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
