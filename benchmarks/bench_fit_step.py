"""End-to-end training step: ``model.fit`` steps per second by XLA mode.

    python benchmarks/bench_fit_step.py                       # margin + DW, B = 128, the three modes
    python benchmarks/bench_fit_step.py --loss triplet --sampler semi_hard --batch 64 256
    python benchmarks/bench_fit_step.py --rounds 5 --steps 40
    python benchmarks/bench_fit_step.py --fit-startup --fit-calls 6 --fit-call-steps 5   # fixed cost per fit()

The reference glyph CNN: 4 × [conv 3×3 – BN – ReLU – max-pool 2×2]
with 32, 64, 128, 256 filters, global average pooling, Dense 128, L2
normalisation, on 32×32×1 inputs, trained by ``EmbeddingModel.fit`` with
Adam on m-per-class batches (m = 4, or `--per-class`) held in memory. Modes: ``graph``
(``jit_compile=False``), ``xla`` (``True``: the whole step, convolutions
included) and ``loss`` (only the loss and its sampler, with their gradient);
each also as ``MODE:mixed_bfloat16`` (``--modes loss loss:mixed_bfloat16``): the
convolutional part computes in bfloat16, the head in float32, as a config's
``model.dtype_policy`` builds the encoder.

Each round runs every mode once, in turn (so a change of the machine's load
hits all modes alike): a fresh model, ``--warmup`` steps (tracing and XLA
compilation), then ``--steps`` timed steps, each step timed by a callback.
A mode's figure is the median step time over all its timed steps of all
rounds; the table gives steps/s and the ratio to graph mode.

``--fit-startup``: the fixed cost of one ``fit()`` call. Each round gives
every mode a fresh compiled model and calls ``fit(steps_per_epoch=
--fit-call-steps, epochs=1)`` on it ``--fit-calls`` times in a row, timing each
call (wall, ``fit`` in to ``fit`` out) and each step. The step time is the
median step of the calls after the first; a call's fixed cost is its wall time
minus its steps × that step time (the first call's includes tracing and
compilation, the later ones what every ``fit()`` adds to its steps).
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
#: Every mode name: a mode of MODES, alone (float32) or with ":" and another dtype policy of
#: tfdml.models.DTYPE_POLICIES, e.g. "loss:mixed_bfloat16" (the network computes in bfloat16).
MODE_NAMES = list(MODES) + [f"{m}:{p}" for p in models.DTYPE_POLICIES if p != "float32" for m in MODES]


def parse_mode(name):
    """``(jit_compile, dtype policy)`` of a mode name of :data:`MODE_NAMES`."""
    mode, _, policy = name.partition(":")
    if name not in MODE_NAMES:
        raise ValueError(f"unknown mode {name!r}; choose from {', '.join(MODE_NAMES)}")
    return MODES[mode], policy or "float32"


def network(embedding_dim=128, widths=(32, 64, 128, 256), dtype_policy="float32"):
    """The glyph CNN; its convolutional part computes under ``dtype_policy``
    (:func:`tfdml.models.dtype_policy_scope`), the embedding head in float32 (as
    :func:`tfdml.models.build_encoder` builds it)."""
    with models.dtype_policy_scope(dtype_policy):
        inputs = keras.Input((32, 32, 1))
        x = inputs
        for width in widths:
            x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(x)
            x = keras.layers.BatchNormalization()(x)
            x = keras.layers.ReLU()(x)
            x = keras.layers.MaxPooling2D()(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(embedding_dim, dtype="float32")(x)
    x = keras.layers.UnitNormalization(dtype="float32")(x)
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
        if batch == 0:
            self.first_begin = self._start

    def on_train_batch_end(self, batch, logs=None):
        self.last_end = time.perf_counter()
        if batch >= self.skip:
            self.times.append(self.last_end - self._start)


def make_loss(name, sampler, num_classes):
    options = {"num_classes": num_classes} if name == "margin" else {}
    if sampler:
        options.update(sampler=sampler, seed=1)
    return losses.get(name, **options)


def network_targets(batch_size, embedding_dim=128, seed=0):
    """Fixed random unit vectors [B, d]: the targets of :func:`time_network`'s squared error."""
    targets = np.random.default_rng(seed).normal(size=(batch_size, embedding_dim)).astype(np.float32)
    return targets / np.linalg.norm(targets, axis=1, keepdims=True)


def time_network(mode, batch_size, warmup, steps, per_class=4):
    """Step times of the network alone: the CNN of :func:`time_mode` with Adam, trained by a plain
    Keras ``model.fit`` on the mean squared error to fixed targets (:func:`network_targets`): its
    forward, backward and update without a metric loss or sampler. ``mode`` "loss" (there is no
    loss to compile) runs as graph mode."""
    keras.utils.set_random_seed(0)
    jit_compile, policy = parse_mode(mode)
    model = network(dtype_policy=policy)
    model.compile(optimizer="adam", loss="mean_squared_error", jit_compile=jit_compile is True)
    images, _ = batch_arrays(batch_size, per_class)
    data = tf.data.Dataset.from_tensors((images, network_targets(batch_size))).repeat()
    timer = StepTimer(warmup)
    model.fit(data, steps_per_epoch=warmup + steps, epochs=1, verbose=0, callbacks=[timer], shuffle=False)
    return timer.times


def time_mode(mode, loss_name, sampler, batch_size, warmup, steps, per_class=4):
    keras.utils.set_random_seed(0)
    jit_compile, policy = parse_mode(mode)
    model = models.EmbeddingModel(network(dtype_policy=policy))
    model.compile(optimizer="adam", loss=make_loss(loss_name, sampler, batch_size // per_class),
                  jit_compile=jit_compile)
    timer = StepTimer(warmup)
    model.fit(batches(batch_size, per_class), steps_per_epoch=warmup + steps, epochs=1, verbose=0,
              callbacks=[timer], shuffle=False)
    return timer.times


def fit_calls(mode, loss_name, sampler, batch_size, calls, steps, per_class=4):
    """[(wall seconds, [step seconds], before, after)] of ``calls`` consecutive
    ``model.fit(steps_per_epoch=steps, epochs=1)`` calls on one fresh compiled model: each call's
    wall time (``fit`` in, ``fit`` out), the times of its steps (the first call's include tracing
    and compilation), the seconds from ``fit`` in to its first step and from its last step to
    ``fit`` out (the iterator's teardown is there)."""
    keras.utils.set_random_seed(0)
    jit_compile, policy = parse_mode(mode)
    model = models.EmbeddingModel(network(dtype_policy=policy))
    model.compile(optimizer="adam", loss=make_loss(loss_name, sampler, batch_size // per_class),
                  jit_compile=jit_compile)
    data = batches(batch_size, per_class)
    out = []
    for _ in range(calls):
        timer = StepTimer(0)
        start = time.perf_counter()
        model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[timer], shuffle=False)
        end = time.perf_counter()
        out.append((end - start, timer.times, timer.first_begin - start, end - timer.last_end))
    return out


def fixed_costs(calls):
    """(median step seconds, [fixed seconds per call]) of :func:`fit_calls`' answers of one or more
    rounds (a list of rounds): the step time is the median over the steps of every call but each
    round's first (whose first step traces and compiles); a call's fixed cost is its wall time minus
    its steps × that step time: what ``fit`` costs on top of its steps (data iterator, callbacks,
    the train function's setup), the first call's compilation included."""
    steady = [t for rounds in calls for call in rounds[1:] for t in call[1]]
    step = statistics.median(steady)
    return step, [[call[0] - len(call[1]) * step for call in rounds] for rounds in calls]


def main_fit_startup(args):
    print(f"Machine: {machine.describe()}")
    print(f"Fixed cost of a fit() call: {args.loss} + {args.sampler}, the glyph CNN, 32x32x1, m = {args.per_class}. "
          f"{args.rounds} rounds, each a fresh model per mode in turn, then {args.fit_calls} consecutive "
          f"fit(steps_per_epoch={args.fit_call_steps}, epochs=1) calls on it. Step: the median step time of the "
          "calls after the first; fixed = the call's wall time − steps × step (medians over rounds); "
          "before / after: fit in → first step / last step → fit out (median, and the largest), ms.")
    later = "calls 2+" if args.fit_calls > 2 else "call 2"
    print(f"| B | mode | median step | first call wall | first call fixed | {later}: median wall "
          f"| {later}: median fixed | fixed / step | {later}: before | {later}: after |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for batch_size in args.batch:
        runs = {mode: [] for mode in args.modes}
        for _ in range(args.rounds):
            for mode in args.modes:
                runs[mode].append(fit_calls(mode, args.loss, args.sampler, batch_size, args.fit_calls,
                                            args.fit_call_steps, args.per_class))
        for mode in args.modes:
            step, fixed = fixed_costs(runs[mode])
            first_wall = statistics.median(r[0][0] for r in runs[mode])
            first_fixed = statistics.median(f[0] for f in fixed)
            walls = [call[0] for r in runs[mode] for call in r[1:]]
            rest = [x for f in fixed for x in f[1:]]
            before = [call[2] for r in runs[mode] for call in r[1:]]
            after = [call[3] for r in runs[mode] for call in r[1:]]
            print(f"| {batch_size} | {mode} | {1000 * step:.1f} | {1000 * first_wall:.0f} | {1000 * first_fixed:.0f} "
                  f"| {1000 * statistics.median(walls):.1f} | {1000 * statistics.median(rest):.1f} "
                  f"| {statistics.median(rest) / step:.1f} | {_median_and_max(before)} | {_median_and_max(after)} |",
                  flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


def _median_and_max(seconds):
    return f"{1000 * statistics.median(seconds):.1f} (≤ {1000 * max(seconds):.0f})"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loss", default="margin")
    parser.add_argument("--sampler", default="distance_weighted")
    parser.add_argument("--batch", type=int, nargs="+", default=[128])
    parser.add_argument("--per-class", type=int, default=4, help="m, examples per class in a batch")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODE_NAMES,
                        help="graph, xla, loss; with ':mixed_bfloat16' the network computes in bfloat16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--fit-startup", action="store_true",
                        help="time consecutive short fit() calls instead: the fixed cost of a call")
    parser.add_argument("--fit-calls", type=int, default=6, help="--fit-startup: fit() calls per model (>= 2)")
    parser.add_argument("--fit-call-steps", type=int, default=5, help="--fit-startup: steps per fit() call")
    args = parser.parse_args(argv)
    if args.fit_startup:
        if args.fit_calls < 2 or args.fit_call_steps < 1:
            parser.error("--fit-startup needs --fit-calls >= 2 (the first call compiles) and --fit-call-steps >= 1.")
        main_fit_startup(args)
        return

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
    import results_tables  # benchmarks/results_tables.py: --record writes this run's tables

    sys.exit(results_tables.run(main, "bench_fit_step"))
