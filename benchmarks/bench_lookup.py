"""Benchmark: exact search as a server calls it, a few queries a call: the exported lookup
(``tfdml.search.export_lookup``) and ``Index.search`` (TensorFlow backend).

    python benchmarks/bench_lookup.py                      # 100,000 × 128 gallery, batches 1 and 32
    python benchmarks/bench_lookup.py --size 1000000 --batches 1 8 64 --runs 50

The gallery is ``--size`` random 128-d standard-normal vectors, the model an
identity (so the figure is the search, not a network). The lookup is written as
a SavedModel to a temporary folder and loaded back with
``tf.saved_model.load``, as serving does; then ``lookup(queries)`` and
``index.search(queries, k)`` are timed for each batch size, all of them
interleaved round by round (``benchmarks/timing.py``), median milliseconds
per call, results on the host.

To compare two commits, run this script from each checkout (it puts its own
checkout first on ``sys.path``, so a ``git worktree`` measures its own tfdml),
alternating, and record both in RESULTS.md.
"""

import argparse
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# This checkout's tfdml first, not an installed one.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import machine  # noqa: E402  (benchmarks/machine.py)
import timing  # noqa: E402  (benchmarks/timing.py)


def lookup_times(size, batches, k, runs, warmup, dim=128, seed=0):
    """``{(method, batch): median ms}`` over a random gallery of ``size`` rows, method
    ``"lookup"`` (the loaded SavedModel) or ``"Index.search"``."""
    import keras
    import numpy as np
    import tensorflow as tf

    from tfdml import search

    rng = np.random.default_rng(seed)
    index = search.Index().add(rng.standard_normal((size, dim)).astype(np.float32), np.arange(size))
    model = keras.Sequential([keras.Input((dim,)), keras.layers.Identity()])
    with tempfile.TemporaryDirectory() as folder:
        path = search.export_lookup(model, index, os.path.join(folder, "lookup"), k=k,
                                    input_signature=[tf.TensorSpec([None, dim], tf.float32)])
        loaded = tf.saved_model.load(str(path))
        queries = [tf.constant(rng.standard_normal((b, dim)).astype(np.float32)) for b in batches]
        cases = [(("lookup", b), lambda q=q: loaded.lookup(q)) for b, q in zip(batches, queries)]
        cases += [(("Index.search", b), lambda q=q: index.search(q.numpy(), k)) for b, q in zip(batches, queries)]
        times = timing.interleaved_ms([call for _, call in cases], (), runs, warmup)
        return {key: ms for (key, _), ms in zip(cases, times)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=100_000, help="gallery rows")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32], help="queries per call")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args(argv)
    print(f"Machine: {machine.describe()}")
    times = lookup_times(args.size, args.batches, args.k, args.runs, args.warmup)
    for (method, batch), ms in times.items():
        print(f"{method:<13} gallery={args.size:>9,}  batch={batch:>5}  k={args.k}  {ms:8.2f} ms"
              f"  ({1000.0 * batch / ms:,.0f} queries/s)")
    return times


if __name__ == "__main__":
    import results_tables  # benchmarks/results_tables.py: --record writes this run's tables

    sys.exit(results_tables.run(main, "bench_lookup"))
