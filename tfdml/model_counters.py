"""The counters an :class:`tfdml.models.EmbeddingModel` keeps of its batches, and the
errors and warnings it raises from them after a step.

* Invalid inputs: a tfdml loss lists the conditions its target columns must meet
  (:meth:`tfdml.losses.base.MetricLoss.input_checks`). XLA drops in-graph asserts, so
  the train and test steps count the rows of the global batch that break each
  condition, and right after the step :meth:`BatchCounters.raise_for_invalid_inputs`
  raises :class:`tfdml.errors.InvalidInputError` naming the column, the valid values
  and the fix.
* Batches without a positive pair, for a loss that then scores nothing
  (``loss.needs_positive_pairs``): counted per epoch in the logs
  (:data:`NO_POSITIVES_LOG`) and warned about once per ``fit``.

The counters are variables of the model's distribution strategy, equal on every
replica and not tracked (not weights, not in checkpoints).
"""

import warnings

import tensorflow as tf

from tfdml import errors
from tfdml import masks as masks_lib
from tfdml import targets as targets_lib
from tfdml import input_checks as loss_input_checks

#: Name of the log entry that counts the training batches of an epoch without a positive
#: pair, for a loss that scores nothing on one (``loss.needs_positive_pairs``); in the
#: logs from the first such batch on.
NO_POSITIVES_LOG = "batches_without_positive_pairs"


class BatchCounters:
    """Mixin of :class:`tfdml.models.EmbeddingModel` (a ``keras.Model`` with a
    ``distribute_strategy`` and the compiled loss in ``_metric_loss``): the counters of
    invalid inputs and of batches without a positive pair, and the train / test
    functions that report them after each call."""

    def _set_input_checks(self, checks):
        """The loss's :class:`~tfdml.input_checks.InputCheck` s and one counter of broken rows
        per check of the global batch (float32, equal on every replica). Neither is tracked
        (not a weight, not in checkpoints, not in the logs)."""
        counts = None
        if checks:
            with self.distribute_strategy.scope():
                counts = tf.Variable(tf.zeros([len(checks)], tf.float32), trainable=False,
                                     name="invalid_inputs",
                                     aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        object.__setattr__(self, "_input_checks", list(checks))
        object.__setattr__(self, "_invalid_input_counts", counts)

    def _set_positive_pair_counter(self, needed):
        """When ``needed`` (the loss's ``needs_positive_pairs``), a counter of the training
        batches without a positive pair (float32, equal on every replica, not tracked)."""
        counter = None
        if needed:
            with self.distribute_strategy.scope():
                counter = tf.Variable(0.0, trainable=False, name=NO_POSITIVES_LOG,
                                      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        object.__setattr__(self, "_no_positive_batches", counter)
        object.__setattr__(self, "_warned_no_positives", False)

    @staticmethod
    def _add_counts(variable, counts, global_batch):
        """Add ``counts`` to ``variable``: of the global batch when ``global_batch``, else of
        this replica's slice (summed over replicas here, so every replica, and every worker,
        counts the same)."""
        context = tf.distribute.get_replica_context()
        if not global_batch and context is not None and context.num_replicas_in_sync > 1:
            counts = context.all_reduce(tf.distribute.ReduceOp.SUM, counts)
        variable.assign_add(counts)

    def _count_invalid_inputs(self, y, global_batch):
        """Add the rows of ``y`` that break each input check to the counters."""
        if self._invalid_input_counts is None:
            return
        views = loss_input_checks.check_views(self._input_checks, y)
        counts = tf.stack([tf.cast(check.invalid_rows(view), tf.float32)
                           for check, view in zip(self._input_checks, views)])
        self._add_counts(self._invalid_input_counts, counts, global_batch)

    def _count_batch_without_positive_pairs(self, y, global_batch):
        """Add 1 to the counter when the batch ``y`` holds no positive candidate pair."""
        if self._no_positive_batches is None:
            return
        targets = targets_lib.unpack(y)
        positive, _ = masks_lib.pair_masks(targets.label, targets.pair_id)
        self._add_counts(self._no_positive_batches, 1.0 - tf.cast(tf.reduce_any(positive), tf.float32),
                         global_batch)

    def reset_metrics(self):
        """Keras' metrics, and the count of batches without a positive pair (per epoch)."""
        super().reset_metrics()
        if getattr(self, "_no_positive_batches", None) is not None:
            with self.distribute_strategy.scope():
                self._no_positive_batches.assign(0.0)

    def report_batches_without_positive_pairs(self, logs):
        """``logs`` with :data:`NO_POSITIVES_LOG` when the epoch so far had training batches
        without a positive pair (and a warning, once per ``fit``): the loss scored nothing on
        them. Called after every train function call of ``fit``."""
        if self._no_positive_batches is None:
            return logs
        with self.distribute_strategy.scope():
            count = int(self._no_positive_batches.read_value().numpy())
        if not count:
            return logs
        if not self._warned_no_positives:
            object.__setattr__(self, "_warned_no_positives", True)
            owner = type(self._metric_loss).__name__
            warnings.warn(
                f"{owner}: {count} training batch{'' if count == 1 else 'es'} had no positive pair (no "
                f"two examples of one class), on which {owner} scores nothing (loss 0, no gradient); "
                f"the logs count them per epoch as {NO_POSITIVES_LOG!r}. Feed batches with several "
                "examples of each class, e.g. the batches of a design of pipelines.designs "
                "(MPerClassDesign, GroupDesign).", stacklevel=2)
        return {**logs, NO_POSITIVES_LOG: count}

    def reset_invalid_input_counts(self):
        """Zero the counters of :meth:`raise_for_invalid_inputs` (done when ``fit`` and
        ``evaluate`` start: rows counted by other calls of :meth:`compute_loss` are not theirs)."""
        if self._invalid_input_counts is not None:
            with self.distribute_strategy.scope():
                self._invalid_input_counts.assign(tf.zeros_like(self._invalid_input_counts))

    def raise_for_invalid_inputs(self, where="of the last training batch"):
        """Raise :class:`tfdml.errors.InvalidInputError` when the steps since the last call
        counted rows that break an input check of the loss (and reset the counters).
        Called after every train and test function call of ``fit`` / ``evaluate``, and by
        :func:`tfdml.distributed.train_loop` after every step."""
        if self._invalid_input_counts is None:
            return
        with self.distribute_strategy.scope():
            counts = self._invalid_input_counts.read_value().numpy()
        if not counts.any():
            return
        self.reset_invalid_input_counts()
        owner = type(self._metric_loss).__name__
        messages = [str(check.error(owner, count, where))
                    for check, count in zip(self._input_checks, counts) if count > 0]
        raise errors.InvalidInputError(" ".join(messages))

    def _checked(self, function, where, training=False):
        """``function`` (Keras' train or test function) followed by :meth:`raise_for_invalid_inputs`
        (and, in training, :meth:`report_batches_without_positive_pairs`)."""
        if function is None or getattr(function, "_raises_for_invalid_inputs", False):
            return function

        def checked(iterator):
            logs = function(iterator)
            self.raise_for_invalid_inputs(where)
            return self.report_batches_without_positive_pairs(logs) if training else logs

        checked._raises_for_invalid_inputs = True
        return checked
