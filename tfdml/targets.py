"""The batch contract, model side: what a loss receives as ``y_true``.

A batch's targets are either plain integer labels (shape [B] or [B, 1]) or the
dict of columns described in docs/design.md:

======================  =========  =============================================
column                  dtype      meaning
======================  =========  =============================================
``label``               integer    class id (int32 or int64; compared exactly)
``class_size``          float32    N_c of the example's class (training split)
``w_pos``, ``w_neg``    float32    design constants: W_ij = w_pos·N_i(N_i−1) for a
                                   positive pair, w_neg·N_i·N_j for a negative one
``w_triplet``           float32    optional design constant (group, m-per-class):
                                   W_apn = w_triplet·N_a(N_a−1)·N_n for a triplet
                                   (:func:`tfdml.importance.triplet_weights`)
``w_memory``            float32    optional design constant ((m, n)-group only):
                                   N(N−1)·(mn/L)², the weights of a cross-batch
                                   memory's pairs
                                   (:func:`tfdml.importance.memory_pair_weights`)
``pair_id``             integer    optional: only pairs sharing it are scored
``example_id``          integer    optional: index of the example in the training
                                   split (for per-image parameters, Wu's β_img)
======================  =========  =============================================

:func:`unpack` turns either form into a :class:`Targets` tuple whose missing
columns are ``None``.

Integer identities never pass through a float: ``label``, ``pair_id`` and
``example_id`` come out as int64, so two classes are the same class exactly
when their ids are equal, for any int64 id (hashed ids reach 2⁶³) and in any
dtype policy (a float32 holds integers exactly only up to 2²⁴, a bfloat16 up
to 2⁸). Keras' ``Loss.__call__`` casts ``y_true`` to the loss dtype;
:class:`tfdml.losses.MetricLoss` does not. Ids that *arrive* as floats: a
whole number is taken (:func:`unpack` warns once that larger ids may have
merged), a fraction (a label 1.5) is refused, never rounded: every tfdml loss
checks the id columns as they arrive (``unpack(y, round_ids=False)``, the
whole-number :class:`~tfdml.input_checks.InputCheck` s of
:meth:`tfdml.losses.MetricLoss.input_checks`).
"""

import collections
import warnings

import tensorflow as tf

COLUMNS = ("label", "class_size", "w_pos", "w_neg", "pair_id", "example_id", "w_triplet", "w_memory")
#: The integer identity columns (compared exactly, never through a float).
ID_COLUMNS = ("label", "pair_id", "example_id")
REQUIRED_COLUMNS = ("label",)

Targets = collections.namedtuple("Targets", COLUMNS)


def _flat(x, dtype):
    x = tf.convert_to_tensor(x)
    if x.shape.rank is not None and x.shape.rank > 1:
        x = tf.reshape(x, [-1])
    return tf.cast(x, dtype)


_warned_float_ids = set()


def _ids(x, name, round_ids=True):
    """An integer column as int64 [B]. Floats are rounded to the nearest
    integer, with a warning: a float cannot tell ids apart beyond its mantissa.
    ``round_ids=False``: the column as it arrives, [B] in its own dtype."""
    x = tf.convert_to_tensor(x)
    if not round_ids:
        return tf.reshape(x, [-1]) if x.shape.rank is not None and x.shape.rank > 1 else x
    if x.dtype.is_floating:
        if name not in _warned_float_ids:
            _warned_float_ids.add(name)
            warnings.warn(
                f"The '{name}' column arrives as {x.dtype.name}; ids above "
                f"{_EXACT_INTEGERS_UP_TO.get(x.dtype.name, 2 ** 8)} "
                "are no longer exact in it and distinct classes may merge. Feed integer labels "
                "(int32 or int64) from the dataset.",
                stacklevel=3,
            )
        x = tf.round(x)
    return _flat(x, tf.int64)


# Every integer up to this magnitude is exact in the float format (2^(mantissa bits + 1)).
_EXACT_INTEGERS_UP_TO = {"float16": 2**11, "bfloat16": 2**8, "float32": 2**24, "float64": 2**53}


def unpack(y_true, round_ids=True):
    """Normalise ``y_true`` (labels or a batch-contract dict) to :class:`Targets`.

    ``round_ids=False`` leaves the id columns (:data:`ID_COLUMNS`) as they arrive
    (flattened, in their own dtype), for the checks that refuse a fraction.
    Raises ``ValueError`` naming the problem when a dict lacks ``label`` or has
    a column that is not part of the contract.
    """
    if isinstance(y_true, Targets):
        return y_true
    if isinstance(y_true, dict):
        unknown = sorted(set(y_true) - set(COLUMNS))
        if unknown:
            raise ValueError(
                f"Unknown target column(s) {unknown}; the batch contract has {list(COLUMNS)}."
            )
        if "label" not in y_true:
            raise ValueError(
                "The targets dict has no 'label' column; every batch needs integer class labels."
            )
        cols = {
            "label": _ids(y_true["label"], "label", round_ids),
            "class_size": None,
            "w_pos": None,
            "w_neg": None,
            "pair_id": None,
            "example_id": None,
            "w_triplet": None,
            "w_memory": None,
        }
        for name in ("class_size", "w_pos", "w_neg", "w_triplet", "w_memory"):
            if name in y_true and y_true[name] is not None:
                cols[name] = _flat(y_true[name], tf.float32)
        for name in ("pair_id", "example_id"):
            if y_true.get(name) is not None:
                cols[name] = _ids(y_true[name], name, round_ids)
        return Targets(**cols)
    return Targets(_ids(y_true, "label", round_ids), *([None] * (len(COLUMNS) - 1)))


def has_importance(targets):
    """True when the targets carry the columns needed for importance weights."""
    return (
        targets.class_size is not None
        and targets.w_pos is not None
        and targets.w_neg is not None
    )
