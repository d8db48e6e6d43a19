"""Input checks: the conditions a loss's target columns must meet, each stated as a count of
the rows that break it (XLA keeps a count where it drops an assert).

* :class:`InputCheck`: one condition of one column (a label inside ``[0, num_classes)``, a
  finite non-negative importance weight), with its error and the value that cleans a row;
* :func:`whole_number_check`, :func:`index_check`, :func:`importance_check`: the checks the
  losses list in :meth:`tfdml.losses.MetricLoss.input_checks`;
* :func:`check_views`, :func:`assert_valid`, :func:`nan_if_invalid`: how a loss applies them
  (read the columns, assert in a caller's graph, NaN with zero gradient under XLA).
"""

import collections

import tensorflow as tf

from tfdml import errors
from tfdml import targets as targets_lib


class InputCheck(collections.namedtuple("InputCheck",
                                        ["column", "requirement", "fix", "valid", "replacement"])):
    """A condition every value of one target column must meet for a loss's result to
    mean anything, stated as a count of the rows that break it: XLA drops in-graph
    asserts (``tf.debugging.assert_*``, ``tf.Assert``) but keeps a count.

    * ``column``: a :data:`tfdml.targets.COLUMNS` name (a batch without it passes);
    * ``requirement``: what a value must be, e.g. ``"must lie in [0, num_classes=4)"``;
    * ``fix``: what the user changes;
    * ``valid``: ``valid(values)`` -> [B] bool, the rows of the column's [B] tensor that
      meet it;
    * ``replacement``: a value that meets it, which :meth:`clean` puts in place of the
      rows that do not, so that the loss of such a batch computes on values it accepts
      (an index a gather takes, a finite weight: no Inf or NaN in the gradient).

    :meth:`MetricLoss.input_checks` lists a loss's checks; the loss raises
    :class:`tfdml.errors.InvalidInputError` eagerly, asserts in a caller's graph
    (:meth:`MetricLoss.call`) and is NaN under XLA, and :class:`tfdml.models.EmbeddingModel`
    counts the rows in its step and raises after it (:meth:`error`)."""

    __slots__ = ()
    #: False: the check reads the unpacked targets (:func:`tfdml.targets.unpack`); True: the
    #: columns as they arrive (``unpack(y, round_ids=False)``), before a float id is rounded.
    on_arrival = False

    def invalid_rows(self, targets):
        """int32 scalar: the rows of ``targets`` (:class:`tfdml.targets.Targets`) that break it."""
        values = getattr(targets, self.column)
        if values is None:
            return tf.constant(0, tf.int32)
        return tf.reduce_sum(tf.cast(tf.logical_not(self.valid(values)), tf.int32))

    def clean(self, targets):
        """``targets`` with the rows that break the check holding ``replacement`` instead."""
        values = getattr(targets, self.column)
        if values is None:
            return targets
        replacement = tf.cast(self.replacement, values.dtype)
        return targets._replace(**{self.column: tf.where(self.valid(values), values, replacement)})

    def error(self, owner, count, where="of the batch", seen=None):
        """The :class:`~tfdml.errors.InvalidInputError` for ``count`` rows ``where`` (None:
        a number known only at run time), listing the offending values ``seen`` (a numpy
        array) when given."""
        if count is None:
            rows = f"some examples {where} do not"
        else:
            count = int(count)
            rows = f"{count} example{'' if count == 1 else 's'} {where} do{'es' if count == 1 else ''} not"
        if seen is not None and len(seen):
            shown = sorted(set(seen.tolist()), key=lambda v: (v != v, v))  # NaN last
            listed = ", ".join(str(seen.dtype.type(v)) for v in shown[:5])
            rows += f" (got {listed}{', ...' if len(shown) > 5 else ''})"
        return errors.InvalidInputError(f"{owner}: the '{self.column}' column {self.requirement}, "
                                        f"but {rows}. {self.fix}")

    def raise_if_broken(self, owner, targets):
        """Eagerly: raise :meth:`error` when a row of ``targets`` breaks the check."""
        values = getattr(targets, self.column)
        if values is None:
            return
        broken = tf.logical_not(self.valid(values)).numpy()
        if broken.any():
            raise self.error(owner, broken.sum(), seen=values.numpy()[broken])


class WholeNumberCheck(InputCheck):
    """An :class:`InputCheck` of an id column as it arrives: a float must be a whole number."""

    __slots__ = ()
    on_arrival = True

    def invalid_rows(self, targets):
        values = getattr(targets, self.column)
        if values is None or not values.dtype.is_floating:
            return tf.constant(0, tf.int32)  # an integer column is whole (statically)
        return super().invalid_rows(targets)


def whole_number_check(column):
    """The :class:`WholeNumberCheck` of the id column ``column`` (:data:`tfdml.targets.ID_COLUMNS`):
    a float id is taken when whole (1.0), refused when it has a fraction (1.5), which
    rounding would silently turn into another id."""

    def valid(values):
        if not values.dtype.is_floating:
            return tf.ones_like(values, dtype=tf.bool)
        return tf.logical_and(tf.math.is_finite(values), tf.equal(values, tf.round(values)))

    return WholeNumberCheck(column, "must hold whole numbers (integer ids)",
                            f"'{column}' holds ids: feed it as integers (int32 or int64) from the dataset.",
                            valid, 0)


def check_views(checks, y_true, targets=None):
    """The targets each of ``checks`` reads from ``y_true``: the unpacked ``targets``
    (unpacked here when None), or the columns as they arrive for a check ``on_arrival``."""
    targets = targets_lib.unpack(y_true) if targets is None else targets
    arrived = targets_lib.unpack(y_true, round_ids=False) if any(c.on_arrival for c in checks) else None
    return [arrived if check.on_arrival else targets for check in checks]


def index_check(column, argument, size, what):
    """The :class:`InputCheck` of an integer column that indexes ``size`` learned values
    (``argument=size`` of the loss): 0 <= value < size, compared in int64 (2**32 + 2 is not 2)."""

    def valid(values):
        values = tf.cast(values, tf.int64)
        return tf.logical_and(values >= 0, values < size)

    return InputCheck(column, f"must lie in [0, {argument}={size})",
                      f"Number the {what} 0..{size - 1} in '{column}', or raise {argument} to their number.",
                      valid, 0)


#: The lower bound of each importance column (:mod:`tfdml.importance`): a class size N_c
#: counts the example itself, the design constants are >= 0.
IMPORTANCE_LOWER_BOUNDS = {"class_size": 1.0, "w_pos": 0.0, "w_neg": 0.0, "w_triplet": 0.0,
                           "w_memory": 0.0}


def importance_check(column):
    """The :class:`InputCheck` of an importance column: finite and at least its bound in
    :data:`IMPORTANCE_LOWER_BOUNDS` (a negative W_ij would flip the sign of its pair's term)."""
    bound = IMPORTANCE_LOWER_BOUNDS[column]
    meaning = ("N_c, the number of training examples of the example's class"
               if column == "class_size" else "a constant of the batch design (Hong et al. Eq. 24/25)")
    return InputCheck(
        column, f"must be finite and >= {bound:g}",
        f"'{column}' is {meaning}; fix the pipeline that writes it (see tfdml.targets), or train "
        "without importance weights.",
        lambda values: tf.logical_and(tf.math.is_finite(values), values >= bound), bound)


def assert_valid(owner, checks, counts):
    """``counts`` (one int32 count per check), each behind an assert that it is 0 whose
    message is the check's error (names quoted with backticks): how a loss in a caller's graph without XLA stops on
    invalid targets (XLA drops asserts; there the NaN of :func:`nan_if_invalid` remains).
    A count known to be 0 while tracing gets no assert."""
    checked = []
    for check, count in zip(checks, counts):
        if tf.get_static_value(count) == 0:
            checked.append(count)
            continue
        # TensorFlow prints the message C-escaped (\' for a quote): quote with backticks.
        message = str(check.error(owner, None)).replace("'", "`")
        with tf.control_dependencies([tf.debugging.Assert(tf.equal(count, 0), [message])]):
            checked.append(tf.identity(count))
    return checked


def nan_if_invalid(value, invalid_rows):
    """``value``, or NaN when ``invalid_rows`` (an int32 scalar) > 0. The gradient of the
    NaN branch is zero, so no weight learns from such a batch."""
    return tf.where(invalid_rows > 0, tf.constant(float("nan"), value.dtype), value)
