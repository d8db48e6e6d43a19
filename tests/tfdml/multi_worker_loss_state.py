"""One worker of tests/tfdml/test_multi_worker_loss_state.py, run as a script with
TF_CONFIG set: ``python multi_worker_loss_state.py OUT_DIR``.

Under MultiWorkerMirroredStrategy, for each loss of :data:`LOSSES`, it trains a tiny
EmbeddingModel one epoch through :func:`tfdml.distributed.train_loop`, saves it with
``tf.train.CheckpointManager`` and ``save_weights`` (the chief into ``OUT_DIR/<loss>/``,
the other worker into a directory of its own), writes the loss's state as
``state<worker>.npz`` in its directory, then restores the chief's checkpoint and weights
into fresh models under the same strategy and writes what differs from the trained state
to ``OUT_DIR/<loss>/restored<worker>.json`` (nothing: ``[]``). The test imports
:func:`build` and :func:`loss_state` to restore the same files on one device.
"""

import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf

from tfdml import distributed, losses, models

D, CLASSES, N, BATCH = 4, 5, 20, 10

#: Learned margins, a sampler's seed stream and a memory built without embedding_dim
#: (margin_memory); proxies (proxy_anchor).
LOSSES = {
    "margin_memory": lambda: losses.MarginLoss(num_classes=CLASSES, seed=3, memory={"size": 12}),
    "proxy_anchor": lambda: losses.ProxyAnchorLoss(num_classes=CLASSES, embedding_dim=D, seed=3),
}


def build(loss, strategy, seed=1):
    """A compiled EmbeddingModel with the loss ``loss`` (a name of :data:`LOSSES`) under ``strategy``."""
    with strategy.scope():
        keras.utils.set_random_seed(seed)
        encoder = keras.Sequential([keras.Input((6,)), keras.layers.Dense(D, name="embedding"),
                                    keras.layers.UnitNormalization()])
        model = models.EmbeddingModel(encoder)
        model.compile(optimizer="sgd", loss=LOSSES[loss](), jit_compile=False)
    return model


def loss_state(model):
    """The loss's variables in order, as NumPy arrays (a replicated variable: its first copy)."""
    return [v.numpy().copy() for layer in model.loss_parameters for v in layer.weights]


def differences(model, state, strategy):
    """The loss variables of ``model`` whose copy on some replica differs from ``state``."""
    found = []
    variables = [v for layer in model.loss_parameters for v in layer.weights]
    if len(variables) != len(state):
        return [f"{len(variables)} loss variables, {len(state)} saved"]
    for variable, want in zip(variables, state):
        for copy in strategy.experimental_local_results(variable.value):
            if copy.dtype != want.dtype or not np.array_equal(copy.numpy(), want):
                found.append(variable.path)
    return found


def _data():
    r = np.random.default_rng(3)
    x = r.normal(size=(N, 6)).astype(np.float32)
    y = {"label": (np.arange(N) // 2 % CLASSES).astype(np.int64), "example_id": np.arange(N, dtype=np.int64)}
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).repeat()


def _barrier(strategy):
    """Every worker waits here for the others (an all-reduce across them)."""
    strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)


def main(out_dir):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    worker = strategy.cluster_resolver.task_id
    chief = worker == 0
    for name in LOSSES:
        folder = os.path.join(out_dir, name)
        own = folder if chief else os.path.join(folder, f"worker{worker}")  # only the chief's files are kept
        model = build(name, strategy)
        distributed.train_loop(model, strategy, _data(), BATCH, epochs=1, steps_per_epoch=2, verbose=0)
        state = loss_state(model)
        os.makedirs(own, exist_ok=True)
        np.savez(os.path.join(own, f"state{worker}.npz"), *state)
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), os.path.join(own, "ckpt"),
                                             max_to_keep=1)
        manager.save()
        model.save_weights(os.path.join(own, "model.weights.h5"))
        _barrier(strategy)  # the chief's files are whole before anyone reads them
        restored = build(name, strategy, seed=2)
        checkpoint = tf.train.latest_checkpoint(os.path.join(folder, "ckpt"))
        tf.train.Checkpoint(model=restored).restore(checkpoint).assert_existing_objects_matched()
        loaded = build(name, strategy, seed=2)
        loaded.build((None, 6))
        loaded.load_weights(os.path.join(folder, "model.weights.h5"))
        report = {"checkpoint": differences(restored, state, strategy),
                  "load_weights": differences(loaded, state, strategy)}
        with open(os.path.join(folder, f"restored{worker}.json"), "w") as fh:
            json.dump(report, fh)
        _barrier(strategy)


if __name__ == "__main__":
    main(sys.argv[1])
