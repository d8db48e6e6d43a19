"""Training under ``tf.distribute`` strategies with a custom loop.

``model.fit`` works under MirroredStrategy (see :class:`tfdml.models.EmbeddingModel`),
but Keras 3's ``fit`` under ``MultiWorkerMirroredStrategy`` has an open bug
(keras-team/keras#20585). :func:`train_loop` is the path that works for both:
``strategy.run`` of a step that calls the model's own ``compute_loss`` (which
all-gathers embeddings and target columns across replicas and scales the
loss by 1/replicas), then the optimizer's all-reduced update.

Data: every worker builds the *same* global batch (same design, same seed)
and each replica keeps its slice ``[r·b, (r+1)·b)`` of it, with ``b`` the
global batch size over the number of replicas. The all-gather before the loss
puts the slices back in order, so the loss and its gradients equal those of
one device on the same global batch.
"""

import tensorflow as tf


def replica_slice(global_batch_size, num_replicas, replica_id):
    """``(start, size)`` of one replica's slice of a global batch."""
    if global_batch_size % num_replicas:
        raise ValueError(
            f"The global batch size {global_batch_size} is not divisible by the "
            f"{num_replicas} replicas; choose a batch design whose batch size is a multiple of it."
        )
    size = global_batch_size // num_replicas
    return replica_id * size, size


def distribute_global_batches(strategy, dataset, global_batch_size):
    """A distributed dataset whose replica r sees slice r of each global batch."""
    num_replicas = strategy.num_replicas_in_sync

    def dataset_fn(input_context):
        replica_offset = input_context.input_pipeline_id * (
            num_replicas // input_context.num_input_pipelines
        )
        # One input pipeline per worker; its local replicas take consecutive slices.
        local = num_replicas // input_context.num_input_pipelines
        start, size = replica_slice(global_batch_size, num_replicas, replica_offset)

        def take_local(x, y):
            cut = lambda t: t[start : start + size * local]  # noqa: E731
            return tf.nest.map_structure(cut, x), tf.nest.map_structure(cut, y)

        ds = dataset.map(take_local)
        # Split the worker's part evenly over its local replicas.
        return ds.rebatch(size) if local > 1 else ds

    options = tf.distribute.InputOptions(experimental_fetch_to_device=True)
    return strategy.distribute_datasets_from_function(dataset_fn, options)


def train_loop(model, strategy, dataset, global_batch_size, epochs, steps_per_epoch,
               initial_epoch=0, on_epoch_end=None, verbose=1):
    """Train a compiled :class:`~tfdml.models.EmbeddingModel` with ``strategy.run``.

    Args:
      model: compiled inside ``strategy.scope()``.
      dataset: infinite ``tf.data`` of global batches ``(x, y)``, identical on
        every worker.
      on_epoch_end: ``callable(epoch, logs)`` run after each epoch on every
        worker (e.g. checkpointing on the chief).
    Returns the list of mean losses per epoch.
    """
    iterator = iter(distribute_global_batches(strategy, dataset, global_batch_size))
    optimizer = model.optimizer
    with strategy.scope():
        # Create the optimizer's slots as distributed variables now, not
        # lazily inside the replica function.
        optimizer.build(model.trainable_variables)

    def step_fn(x, y):
        with tf.GradientTape() as tape:
            embeddings = model(x, training=True)
            loss = model.compute_loss(x=x, y=y, y_pred=embeddings, training=True)
        variables = model.trainable_variables
        gradients = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(gradients, variables))
        return loss

    @tf.function
    def train_step(it):
        per_replica = strategy.run(step_fn, args=next(it))
        # compute_loss scaled by 1/replicas: the sum is the global-batch loss.
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    model.reset_invalid_input_counts()
    progbar_cls = None
    if verbose:
        import keras

        progbar_cls = keras.utils.Progbar
    history = []
    for epoch in range(initial_epoch, epochs):
        bar = progbar_cls(steps_per_epoch, stateful_metrics=["loss"]) if progbar_cls else None
        total = 0.0
        for step in range(steps_per_epoch):
            loss = float(train_step(iterator))
            model.raise_for_invalid_inputs(f"of the batch of epoch {epoch + 1}, step {step + 1}")
            model.report_batches_without_positive_pairs({})  # warns once
            if not tf.math.is_finite(loss):
                raise FloatingPointError(f"the loss became {loss} at epoch {epoch + 1}, step {step + 1}")
            total += loss
            if bar is not None:
                bar.update(step + 1, [("loss", total / (step + 1))])
        history.append(total / steps_per_epoch)
        if on_epoch_end is not None:
            on_epoch_end(epoch, {"loss": history[-1]})
    return history
