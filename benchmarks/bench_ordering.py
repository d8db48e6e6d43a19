"""Speed of the stable row order, with and without XLA (not a test; nothing here asserts).

``tfdml.kernels.chosen.stable_order`` (semi-hard's and top-k's sort path) on an
R × N float32 matrix (uniform keys, every 7th column tied with column 0,
70 % of the columns ``first``), against ``tf.argsort(stable=True)`` in the
same mode. Columns, all in one process, calls interleaved round by round
(``timing.interleaved_ms``), median ms:

* graph: ``stable_order`` without XLA (stable partition + TensorFlow's sort);
* XLA network: ``stable_order`` under ``jit_compile`` (the bitonic network,
  unrolled: N known while tracing);
* XLA network, N unknown: the same traced with an unknown width (the stages
  in a ``tf.while_loop``);
* XLA argsort: ``tf.argsort`` under ``jit_compile`` (XLA's own CPU sort), the
  sort the network replaces.

Every column's order is checked equal to the graph form's first. Pin the
process to one core (``taskset -c 0``) to see the figures without the other
core's load: XLA's parallel loops wait for both cores at each of the
network's stages.

Usage::

    python benchmarks/bench_ordering.py [--sizes 256,1024,2048] [--runs 9] [--warmup 2]
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import machine  # noqa: E402  (benchmarks/machine.py)
import timing  # noqa: E402  (benchmarks/timing.py)

from tfdml.kernels import chosen  # noqa: E402


def matrix(size, seed=0):
    """Keys [size, size] with ties, and the ``first`` mask."""
    rng = np.random.default_rng(seed)
    keys = rng.random((size, size), dtype=np.float32)
    keys[:, ::7] = keys[:, :1]
    return tf.constant(keys), tf.constant(rng.random((size, size)) < 0.7)


def contenders():
    """(name, function of (keys, first)) in column order."""
    unknown = [tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None, None], tf.bool)]
    return [
        ("graph", tf.function(chosen.stable_order)),
        ("XLA network", tf.function(chosen.stable_order, jit_compile=True)),
        ("XLA network, N unknown", tf.function(chosen.stable_order, jit_compile=True, input_signature=unknown)),
        ("XLA argsort", tf.function(lambda keys, first: tf.argsort(keys, axis=1, stable=True), jit_compile=True)),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="256,1024,2048")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    print(f"Machine: {machine.describe()}")
    print(f"Stable row order of an N × N matrix; median of {args.runs} interleaved rounds after "
          f"{args.warmup} warm-up calls, ms.")
    named = contenders()
    print("| N | " + " | ".join(name for name, _ in named) + " | network / graph |")
    print("|---:|" + "---:|" * (len(named) + 1))
    for size in (int(s) for s in args.sizes.split(",")):
        keys, first = matrix(size)
        expected = named[0][1](keys, first).numpy()
        for name, fn in named[1:3]:  # the network's forms must give the graph form's order
            if not np.array_equal(fn(keys, first).numpy(), expected):
                raise SystemExit(f"{name} disagrees with the graph form at N = {size}")
        times = timing.interleaved_ms([fn for _, fn in named], (keys, first), args.runs, args.warmup)
        cells = " | ".join(f"{t:.2f}" for t in times)
        print(f"| {size} | {cells} | {times[1] / times[0]:.2f} |", flush=True)
    print(f"Load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    import results_tables  # benchmarks/results_tables.py: --record writes this run's tables

    sys.exit(results_tables.run(main, "bench_ordering"))
