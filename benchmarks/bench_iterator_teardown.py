"""The teardown of ``fit()``'s input iterator: how long ``fit`` takes to return after its last
step, and how long a garbage collection takes after a ``fit`` that raised, with tf.data's
autotuning on (TensorFlow's default) and off, for a plain ``keras.Model`` and for tfdml's
``EmbeddingModel``.

    python benchmarks/bench_iterator_teardown.py                      # 12 fits of ~8 s per setting
    python benchmarks/bench_iterator_teardown.py --fits 20 --seconds 16 --idle 20

Each ``fit`` trains a one-layer model on ``Dataset.from_tensors(...).repeat()`` for
``--seconds`` (a callback sleeps 50 ms per step, so the figures hardly depend on the CPU or its
load); the settings alternate, fit by fit, in one process. "end of fit": seconds from
``on_train_end`` to ``fit`` returning, which is when Keras drops its data iterator (plain
Keras model). "gc after a failed fit": a callback raises after ``--seconds``, the exception is
dropped at once, the garbage is left ``--idle`` seconds with the automatic collection off (as
it is left until the next full collection, which may come minutes later), then
``gc.collect()`` is timed. Keras leaves its epoch iterator of a failed fit in a reference
cycle, so for a plain Keras model that collection destroys the data iterator; tfdml's
``EmbeddingModel.fit`` resets it as the exception passes.
"""

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # machine.py

STEP_SLEEP = 0.05  # seconds a callback sleeps per step


def arguments(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fits", type=int, default=12, help="fits per setting for 'end of fit'")
    p.add_argument("--failed", type=int, default=3, help="failed fits per setting")
    p.add_argument("--seconds", type=float, default=8.0, help="length of each fit")
    p.add_argument("--idle", type=float, default=20.0, help="seconds a failed fit's garbage is left before the timed collection")
    args = p.parse_args(argv)
    if min(args.fits, args.failed) < 0 or args.seconds <= 0 or args.idle < 0:
        p.error("--fits and --failed must be >= 0, --seconds > 0 and --idle >= 0.")
    return args


def _dataset(autotune):
    import numpy as np
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensors((np.zeros((8, 4), "float32"), np.arange(8) % 4)).repeat()
    options = tf.data.Options()
    options.autotune.enabled = autotune
    return ds.with_options(options)


def _model(kind="keras"):
    """A one-layer model: a plain ``keras.Model`` (cross-entropy on the labels as classes) or
    a tfdml ``EmbeddingModel`` (contrastive loss)."""
    import keras

    layers = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
    if kind == "keras":
        layers.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return layers
    from tfdml import losses, models

    model = models.EmbeddingModel(layers)
    model.compile(optimizer="sgd", loss=losses.ContrastiveLoss(), jit_compile=False)
    return model


def _callback(raise_at=None):
    import keras

    class Steps(keras.callbacks.Callback):
        ended = None

        def on_train_batch_end(self, batch, logs=None):
            time.sleep(STEP_SLEEP)
            if raise_at is not None and batch + 1 >= raise_at:
                raise RuntimeError("the failed fit of bench_iterator_teardown")

        def on_train_end(self, logs=None):
            self.ended = time.perf_counter()

    return Steps()


def end_of_fit(model, autotune, steps):
    """Seconds from on_train_end to fit returning."""
    callback = _callback()
    model.fit(_dataset(autotune), steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[callback])
    return time.perf_counter() - callback.ended


def after_failed_fit(model, autotune, steps, idle):
    """Seconds of the garbage collection run ``idle`` seconds after a failed fit (the
    automatic collection off meanwhile)."""
    import gc

    gc.collect()
    gc.disable()
    try:
        try:
            model.fit(_dataset(autotune), steps_per_epoch=steps + 10, epochs=1, verbose=0,
                      callbacks=[_callback(raise_at=steps)])
        except RuntimeError:
            pass
        time.sleep(idle)
        start = time.perf_counter()
        gc.collect()
        return time.perf_counter() - start
    finally:
        gc.enable()


def summary(times):
    waits = [t for t in times if t > 0.5]
    return (f"median {statistics.median(times):.3f} s, max {max(times):.2f} s, "
            f"{len(waits)} of {len(times)} over 0.5 s")


def main(argv=None):
    args = arguments(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import gc

    import machine

    print(f"Machine: {machine.describe()}")
    steps = max(1, round(args.seconds / STEP_SLEEP))
    print(f"fit() of {steps} steps (~{args.seconds:g} s; {1000 * STEP_SLEEP:g} ms of sleep per step), "
          f"tf.data autotuning on / off alternating in one process.\n")
    models = {kind: _model(kind) for kind in ("keras", "tfdml")}
    gc.collect()
    results = {}
    failed = f"gc {args.idle:g} s after a failed fit"
    for name, runs, kinds, measure in (
            ("end of fit", args.fits, ("keras",), lambda kind, on: end_of_fit(models[kind], on, steps)),
            (failed, args.failed, ("keras", "tfdml"),
             lambda kind, on: after_failed_fit(models[kind], on, steps, args.idle))):
        settings = [(kind, autotune) for kind in kinds for autotune in (True, False)]
        times = {setting: [] for setting in settings}
        for _ in range(runs):
            for setting in settings:
                times[setting].append(measure(*setting))
        for kind, autotune in settings:
            if times[kind, autotune]:
                results[name, kind, autotune] = times[kind, autotune]
                model_name = "keras.Model" if kind == "keras" else "tfdml EmbeddingModel"
                print(f"| {name} | {model_name} | autotune {'on' if autotune else 'off'} | "
                      f"{summary(times[kind, autotune])} |")
    return results


if __name__ == "__main__":
    import results_tables  # benchmarks/results_tables.py: --record writes this run's tables

    sys.exit(results_tables.run(main, "bench_iterator_teardown"))
