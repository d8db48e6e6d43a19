"""The one timer of the benchmark scripts: calls interleaved round by round.

The machine is shared, so a load that comes and goes must hit every
contender alike: each round calls every function once, in turn, and the
figure is the median over rounds. Two functions timed one after the other
(all runs of the first, then all of the second) can differ by 2-4x on the
same code when the load changes in between.
"""

import statistics
import time


def materialise(out):
    """Wait for the results: every tensor in ``out`` copied to NumPy."""
    import tensorflow as tf

    return tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, out)


def interleaved_ms(fns, args, runs, warmup):
    """Median milliseconds per call of each of ``fns`` on ``args`` (a tuple).

    Each function gets ``warmup`` untimed calls (tracing, compilation), then
    ``runs`` rounds of one call each, in turn; a call ends when its outputs
    are on the host."""
    for fn in fns:
        for _ in range(warmup):
            materialise(fn(*args))
    times = [[] for _ in fns]
    for _ in range(runs):
        for fn, out in zip(fns, times):
            start = time.perf_counter()
            materialise(fn(*args))
            out.append(time.perf_counter() - start)
    return [1000.0 * statistics.median(t) for t in times]
