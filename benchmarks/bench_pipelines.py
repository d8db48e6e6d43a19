"""Throughput of the batch designs on a synthetic Stanford-Online-Products-sized label set.

    python benchmarks/bench_pipelines.py [--repeats 5] [--batches 3000] [--image-size 32]

Label set: 11,318 classes of 2–12 examples (sizes drawn from a truncated
exponential whose mean matches SOP's 59,551 / 11,318 ≈ 5.26), batch 120.
For each design it times

* index-only batches (``design.index_batches``: the column dicts, no images),
* batches with an in-memory image gather (``design.batches`` on an ``arrays``
  split of uint8-like float images [N, S, S, 3]),

consuming the dataset in-graph (``Dataset.reduce``, no Python per batch) and,
for reference, with a Python ``for`` loop. Each figure is the median of
``--repeats`` runs after a warm-up. Not a test: nothing is asserted.
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


import machine  # noqa: E402  (benchmarks/machine.py)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pipelines import designs, sources  # noqa: E402

SOP_CLASSES = 11318
SOP_TRAIN_IMAGES = 59551


def sop_like_labels(seed=0):
    """11,318 classes, 2–12 examples each, about 59.5k examples in all."""
    sizes = np.arange(2, 13)
    target = SOP_TRAIN_IMAGES / SOP_CLASSES
    lo, hi = 0.05, 50.0
    for _ in range(100):  # bisection on the decay scale tau of p(k) ∝ exp(-k / tau)
        tau = 0.5 * (lo + hi)
        p = np.exp(-sizes / tau)
        p /= p.sum()
        lo, hi = (tau, hi) if (p * sizes).sum() < target else (lo, tau)
    counts = np.random.default_rng(seed).choice(sizes, size=SOP_CLASSES, p=p)
    return np.repeat(np.arange(SOP_CLASSES), counts).astype(np.int32)


def rate_reduce(ds, count):
    start = time.perf_counter()
    ds.take(count).reduce(np.int64(0), lambda acc, _: acc + 1).numpy()
    return count / (time.perf_counter() - start)


def rate_python(ds, count):
    it = iter(ds)
    start = time.perf_counter()
    for _ in range(count):
        next(it)
    return count / (time.perf_counter() - start)


def median_rate(make, count, repeats, how):
    rates = []
    for _ in range(repeats):
        ds = make()
        how(ds.take(50), 50)  # warm-up: tracing, thread pools
        rates.append(how(ds, count))
    return statistics.median(rates), min(rates), max(rates)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", type=int, default=3000, help="batches per index-only run")
    parser.add_argument("--gather-batches", type=int, default=600, help="batches per gather run")
    parser.add_argument("--image-size", type=int, default=32, help="side of the in-memory images")
    args = parser.parse_args(argv)

    print("machine:", machine.describe())
    labels = sop_like_labels()
    sizes = np.bincount(labels)
    print(
        f"label set: {labels.size} examples, {sizes.size} classes, sizes {sizes.min()}-{sizes.max()} "
        f"(mean {sizes.mean():.2f}); batch 120; median of {args.repeats} runs"
    )
    side = args.image_size
    pixels = np.random.default_rng(1).integers(0, 256, size=(labels.size, side, side, 3), dtype=np.uint8)
    split = sources.get_source("arrays", features=pixels, labels=labels, train_classes=SOP_CLASSES).split("train")
    print(f"in-memory images: {pixels.shape} ({pixels.nbytes / 2**20:.0f} MiB, uint8, gathered and cast to float32 per batch)")

    cases = [
        designs.GroupDesign(2, 60),
        designs.GroupDesign(4, 30),
        designs.PRandomDesign(0.5, pairs=60),
        designs.MPerClassDesign(2, classes_per_batch=60),
    ]
    header = f"{'design':<44} {'mode':<12} {'reduce b/s (min-max)':>26} {'python-loop b/s':>16}"
    print(header)
    print("-" * len(header))
    for design in cases:
        for mode, count in (("index-only", args.batches), ("gather", args.gather_batches)):
            if mode == "index-only":
                def make(d=design):
                    return d.index_batches(labels, seed=0)
            else:
                def make(d=design):
                    return d.batches(split, seed=0)
            med, lo, hi = median_rate(make, count, args.repeats, rate_reduce)
            py, _, _ = median_rate(make, count, max(1, args.repeats // 2), rate_python)
            print(f"{repr(design):<44} {mode:<12} {med:>10.0f} ({lo:>6.0f}-{hi:<6.0f}) {py:>16.0f}")
            sys.stdout.flush()


if __name__ == "__main__":
    import results_tables  # benchmarks/results_tables.py: --record writes this run's tables

    sys.exit(results_tables.run(main, "bench_pipelines"))
