"""The global batch under ``tf.distribute``: each replica's slice of the embeddings and
target columns, exchanged so that every replica sees all of them (mining on a slice would
change the objective). :func:`gather_across_replicas` is what
:meth:`tfdml.models.EmbeddingModel.compute_loss` calls; :data:`GATHER_METHOD` picks how."""

import tensorflow as tf


def _gather_all_gather(value, context):
    gathered = context.all_gather(value, axis=0)
    # all_gather forgets the static shape; samplers need the embedding size.
    gathered.set_shape([None] + value.shape[1:].as_list())
    return gathered


def _gather_by_sum(value, context):
    """All-gather as a sum: each replica pads its slice to the global batch at
    its own offset, then one all-reduce adds them up. Differentiable like
    all_gather (the gradient of a SUM all-reduce is the SUM all-reduce of the
    gradient). Integer columns (labels, ids: any int64) travel as their high
    and low 32-bit halves in float64, each exact, so no id changes on the way.
    Needs equal slices, which tfdml.distributed.distribute_global_batches gives."""
    replicas = context.num_replicas_in_sync
    replica = tf.cast(context.replica_id_in_sync_group, tf.int32)
    size = tf.shape(value)[0]
    paddings = [[replica * size, (replicas - 1 - replica) * size]] + [[0, 0]] * (value.shape.rank - 1)

    def summed(carried):
        return context.all_reduce(tf.distribute.ReduceOp.SUM, tf.pad(carried, paddings))

    if value.dtype.is_floating:
        total = summed(value)
    else:
        wide = tf.cast(value, tf.int64)
        high = tf.bitwise.right_shift(wide, 32)  # arithmetic: keeps the sign
        low = tf.bitwise.bitwise_and(wide, 0xFFFFFFFF)
        high, low = summed(tf.cast(high, tf.float64)), summed(tf.cast(low, tf.float64))
        total = tf.bitwise.bitwise_or(
            tf.bitwise.left_shift(tf.cast(high, tf.int64), 32), tf.cast(low, tf.int64)
        )
    total = tf.cast(total, value.dtype)
    total.set_shape([None] + value.shape[1:].as_list())
    return total


#: How replicas exchange their slices: "auto" uses all_gather, except under
#: MultiWorkerMirroredStrategy, whose replica-context all_gather fails inside
#: tf.function in TF 2.21 ("destinations can not be empty"); "sum" forces
#: the all-reduce form everywhere.
GATHER_METHOD = "auto"


def _gather(value, context):
    method = GATHER_METHOD
    if method == "auto":
        strategy = tf.distribute.get_strategy()
        method = "sum" if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) else "all_gather"
    if method == "sum":
        return _gather_by_sum(value, context)
    return _gather_all_gather(value, context)


def gather_across_replicas(y, y_pred):
    """All-gather ``y`` (any structure, None leaves kept) and ``y_pred`` along the batch axis.

    Returns ``(y, y_pred, num_replicas)``; outside a multi-replica context the
    inputs come back unchanged with ``num_replicas = 1``.
    """
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync <= 1:
        return y, y_pred, 1
    y_pred = _gather(y_pred, context)
    if isinstance(y, dict):
        y = {k: (None if v is None else _gather(v, context)) for k, v in y.items()}
    elif y is not None:
        y = _gather(y, context)
    return y, y_pred, context.num_replicas_in_sync
