"""Benchmark: the k-means of NMI (``tfdml.metrics.kmeans``) against scikit-learn's KMeans with free BLAS threads.

    python benchmarks/bench_kmeans.py                                  # the reproduction's sizes
    python benchmarks/bench_kmeans.py --sizes 24201:500 --rounds 5

``tfdml.metrics.kmeans`` is scikit-learn's KMeans (k-means++, one init, a fixed
seed) run with one BLAS thread; the reference is the same call with the BLAS
threads the process has. Embeddings: 128-d, L2-normalised, ``classes`` Gaussian
clusters around random centres (noise 1.2 × the centres' scale: clusters that
overlap, as a trained embedding's do). The sizes are the reproduction study's
test sample (24,201 images of 500 classes) and the validation split of its
``wu_scratch`` budget (4,861 images, 100 classes). Calls are interleaved round by
round (``timing.interleaved_ms``); printed: the median seconds of each, their
ratio, whether the two give the same clusters, the machine and its load.
"""

import argparse
import os
import sys

import numpy as np

sys.path[:0] = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.path.dirname(os.path.abspath(__file__))]

import machine  # noqa: E402
import timing  # noqa: E402

SIZES = ("24201:500", "4861:100")


def embeddings(examples, classes, dim=128, noise=1.2, seed=0):
    """``examples`` L2-normalised ``dim``-d embeddings of ``classes`` overlapping Gaussian clusters."""
    rng = np.random.default_rng(seed)
    labels = np.arange(examples) % classes
    x = rng.standard_normal((classes, dim))[labels] + noise * rng.standard_normal((examples, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), labels


def reference_kmeans(x, classes, seed=0):
    """scikit-learn's KMeans as ``tfdml.metrics.kmeans`` calls it, with the process's BLAS threads."""
    from sklearn.cluster import KMeans

    return KMeans(n_clusters=classes, n_init=1, random_state=seed).fit_predict(x)


def compare(examples, classes, rounds):
    """(reference s, tfdml s, same clusters) of one size."""
    from tfdml.metrics import clustering

    x, _ = embeddings(examples, classes)
    same = np.array_equal(reference_kmeans(x, classes), clustering.kmeans(x, classes))
    ref_ms, ours_ms = timing.interleaved_ms([reference_kmeans, clustering.kmeans], (x, classes), rounds, warmup=0)
    return ref_ms / 1000, ours_ms / 1000, same


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", nargs="+", default=list(SIZES), help="examples:classes pairs")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    from threadpoolctl import threadpool_info

    blas = sorted({(i["internal_api"], i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"})
    print(machine.describe())
    print(f"BLAS: {', '.join(f'{name} {threads} threads' for name, threads in blas)}; "
          f"median of {args.rounds} interleaved rounds")
    print("| examples | clusters | scikit-learn, free BLAS threads, s | tfdml.metrics.kmeans, s | ratio | same clusters |")
    print("|---:|---:|---:|---:|---:|---|")
    for size in args.sizes:
        examples, classes = (int(v) for v in size.split(":"))
        ref, ours, same = compare(examples, classes, args.rounds)
        print(f"| {examples:,} | {classes:,} | {ref:.2f} | {ours:.2f} | {ref / ours:.1f}× | {'yes' if same else 'no'} |",
              flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    import results_tables  # benchmarks/results_tables.py: --record writes this run's tables

    sys.exit(results_tables.run(main, "bench_kmeans"))
