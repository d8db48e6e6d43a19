"""End-to-end training step: ``model.fit`` steps per second by XLA mode.

    python benchmarks/bench_fit_step.py                       # margin + DW, B = 128, the three modes
    python benchmarks/bench_fit_step.py --loss triplet --sampler semi_hard --batch 64 256
    python benchmarks/bench_fit_step.py --rounds 5 --steps 40

The reference glyph CNN: 4 × [conv 3×3 – BN – ReLU – max-pool 2×2]
with 32, 64, 128, 256 filters, global average pooling, Dense 128, L2
normalisation, on 32×32×1 inputs, trained by ``EmbeddingModel.fit`` with
Adam on m-per-class batches (m = 4, or `--per-class`) held in memory. Modes: ``graph``
(``jit_compile=False``), ``xla`` (``True``: the whole step, convolutions
included) and ``loss`` (only the loss and its sampler, with their gradient).

Each round runs every mode once, in turn (so a change of the machine's load
hits all modes alike): a fresh model, ``--warmup`` steps (tracing and XLA
compilation), then ``--steps`` timed steps, each step timed by a callback.
A mode's figure is the median step time over all its timed steps of all
rounds; the table gives steps/s and the ratio to graph mode.
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import machine  # noqa: E402
from tfdml import losses, models  # noqa: E402

MODES = {"graph": False, "xla": True, "loss": models.LOSS_ONLY}


def network(embedding_dim=128, widths=(32, 64, 128, 256)):
    inputs = keras.Input((32, 32, 1))
    x = inputs
    for width in widths:
        x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(embedding_dim)(x)
    x = keras.layers.UnitNormalization()(x)
    return keras.Model(inputs, x)


def batch_arrays(batch_size, per_class=4, seed=0):
    """One m-per-class batch of random 32×32×1 images, NHWC, and its int32 labels."""
    rng = np.random.default_rng(seed)
    classes = batch_size // per_class
    labels = np.repeat(np.arange(classes), per_class).astype(np.int32)
    images = rng.random((batch_size, 32, 32, 1)).astype(np.float32)
    return images, labels


def batches(batch_size, per_class=4, seed=0):
    """m-per-class batches of random 32×32×1 images (the step time does not depend on the pixels)."""
    images, labels = batch_arrays(batch_size, per_class, seed)
    return tf.data.Dataset.from_tensors((images, {"label": labels})).repeat()


class StepTimer(keras.callbacks.Callback):
    def __init__(self, skip):
        super().__init__()
        self.skip, self.times, self._start = skip, [], None

    def on_train_batch_begin(self, batch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if batch >= self.skip:
            self.times.append(time.perf_counter() - self._start)


def make_loss(name, sampler, num_classes):
    options = {"num_classes": num_classes} if name == "margin" else {}
    if sampler:
        options.update(sampler=sampler, seed=1)
    return losses.get(name, **options)


def time_mode(mode, loss_name, sampler, batch_size, warmup, steps, per_class=4):
    keras.utils.set_random_seed(0)
    model = models.EmbeddingModel(network())
    model.compile(optimizer="adam", loss=make_loss(loss_name, sampler, batch_size // per_class),
                  jit_compile=MODES[mode])
    timer = StepTimer(warmup)
    model.fit(batches(batch_size, per_class), steps_per_epoch=warmup + steps, epochs=1, verbose=0,
              callbacks=[timer], shuffle=False)
    return timer.times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loss", default="margin")
    parser.add_argument("--sampler", default="distance_weighted")
    parser.add_argument("--batch", type=int, nargs="+", default=[128])
    parser.add_argument("--per-class", type=int, default=4, help="m, examples per class in a batch")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()

    print(f"Machine: {machine.describe()}")
    print(f"{args.loss} + {args.sampler}, 4 x [conv-BN-ReLU-pool] 32-64-128-256, GAP, Dense 128, L2; "
          f"32x32x1, m = {args.per_class}; {args.rounds} rounds x {args.steps} timed steps after {args.warmup}")
    print("| B | mode | median step (ms) | steps/s | vs graph |")
    print("|---:|---|---:|---:|---:|")
    for batch_size in args.batch:
        times = {mode: [] for mode in args.modes}
        for _ in range(args.rounds):
            for mode in args.modes:
                times[mode] += time_mode(mode, args.loss, args.sampler, batch_size, args.warmup, args.steps,
                                         args.per_class)
        graph = statistics.median(times["graph"]) if "graph" in times else None
        for mode in args.modes:
            median = statistics.median(times[mode])
            ratio = f"{graph / median:.2f}×" if graph else "–"
            print(f"| {batch_size} | {mode} | {1000 * median:.1f} | {1 / median:.1f} | {ratio} |", flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
