"""The batch contract, model side: what a loss receives as ``y_true``.

A batch's targets are either plain integer labels (shape [B] or [B, 1]) or the
dict of columns described in DESIGN.md:

======================  =========  =============================================
column                  dtype      meaning
======================  =========  =============================================
``label``               int32      class id
``class_size``          float32    N_c of the example's class (training split)
``w_pos``, ``w_neg``    float32    design constants: W_ij = w_pos·N_i(N_i−1) for a
                                   positive pair, w_neg·N_i·N_j for a negative one
``pair_id``             int32      optional: only pairs sharing it are scored
``example_id``          int32      optional: index of the example in the training
                                   split (for per-image parameters, Wu's β_img)
======================  =========  =============================================

:func:`unpack` turns either form into a :class:`Targets` tuple whose missing
columns are ``None``.
"""

import collections

import tensorflow as tf

COLUMNS = ("label", "class_size", "w_pos", "w_neg", "pair_id", "example_id")
REQUIRED_COLUMNS = ("label",)

Targets = collections.namedtuple("Targets", COLUMNS)


def _flat(x, dtype):
    x = tf.convert_to_tensor(x)
    if x.shape.rank is not None and x.shape.rank > 1:
        x = tf.reshape(x, [-1])
    return tf.cast(x, dtype)


def unpack(y_true):
    """Normalise ``y_true`` (labels or a batch-contract dict) to :class:`Targets`.

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
            "label": _flat(y_true["label"], tf.int32),
            "class_size": None,
            "w_pos": None,
            "w_neg": None,
            "pair_id": None,
            "example_id": None,
        }
        for name in ("class_size", "w_pos", "w_neg"):
            if name in y_true and y_true[name] is not None:
                cols[name] = _flat(y_true[name], tf.float32)
        for name in ("pair_id", "example_id"):
            if y_true.get(name) is not None:
                cols[name] = _flat(y_true[name], tf.int32)
        return Targets(**cols)
    return Targets(_flat(y_true, tf.int32), None, None, None, None, None)


def has_importance(targets):
    """True when the targets carry the columns needed for importance weights."""
    return (
        targets.class_size is not None
        and targets.w_pos is not None
        and targets.w_neg is not None
    )
