"""Exact and approximate search of tfdml.search.Index: recall@10 and queries/s (not a test).

Gallery: N random float32 vectors, 128-d, standard normal (the hard case for
approximate search: no clusters); queries: other random vectors of the same
distribution; euclidean distance. For every N in ``--sizes``:

* **exact, faiss flat** (``Index(backend="faiss")``): the reference; its top 10
  is the ground truth of recall@10 (``|approx top 10 ∩ exact top 10| / 10``,
  averaged over the queries);
* **exact, TensorFlow** (``Index(backend="tensorflow")``, the metrics' chunked
  search): on the first ``--tf-queries`` queries only (slow at 1M), its
  queries/s measured on that subset;
* **HNSW** (``approximate="hnsw"``, ``--hnsw-m``, ``--ef-construction``) at each
  ``--ef-search``, and **IVF** (``approximate="ivf"``, default ``nlist =
  round(sqrt(N))``) at each ``--nprobe``; the structure is built once per N
  (build time reported) and widened with ``Index.set_search_width``.

queries/s: all the method's queries in one ``Index.search`` call (faiss uses
all its OpenMP threads), median of ``--runs`` calls after one warm-up call.

Duration: about 19 minutes on 2 shared cores (load 1-4), 14 of them building
the HNSW graph at 1M (``--hnsw-m 16 --ef-construction 40`` builds faster and
less well); ``--sizes 100000`` takes about a minute.

Usage::

    python benchmarks/bench_search.py [--sizes 100000 1000000] [--queries 1000]
        [--tf-queries 200 20] [--runs 3]
"""

import argparse
import os
import sys
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import machine  # noqa: E402  (benchmarks/machine.py)

from tfdml.search import Index  # noqa: E402


def timed(fn, runs):
    fn()  # warm-up (builds the faiss structure on the first call)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def recall_at(got, want, k=10):
    return float(np.mean([len(set(a[:k]) & set(b[:k])) / k for a, b in zip(got, want)]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--tf-queries", type=int, nargs="+", default=[200, 20],
                        help="queries for the TensorFlow backend, one per size (last repeats)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hnsw-m", type=int, default=32)
    parser.add_argument("--ef-construction", type=int, default=80)
    parser.add_argument("--ef-search", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--nprobe", type=int, nargs="+", default=[1, 16, 64])
    args = parser.parse_args()

    import faiss

    print(machine.describe())
    print(f"faiss {faiss.__version__}, {faiss.omp_get_max_threads()} OpenMP threads; "
          f"dim {args.dim}, k = 10, {args.queries} queries, median of {args.runs} runs")
    rng = np.random.default_rng(0)
    rows = []
    for i, n in enumerate(args.sizes):
        gallery = rng.standard_normal((n, args.dim), dtype=np.float32)
        queries = rng.standard_normal((args.queries, args.dim), dtype=np.float32)
        ids = np.arange(n, dtype=np.int64)
        nq_tf = args.tf_queries[min(i, len(args.tf_queries) - 1)]

        flat = Index(backend="faiss").add(gallery, ids)
        t, (truth, _) = timed(lambda flat=flat: flat.search(queries, k=10), args.runs)
        rows.append((n, "exact, faiss flat", "", "-", 1.0, args.queries / t, args.queries))
        print(rows[-1], flush=True)

        tf_index = Index(backend="tensorflow").add(gallery, ids)
        t, (got, _) = timed(lambda tf_index=tf_index: tf_index.search(queries[:nq_tf], k=10), args.runs)
        rows.append((n, "exact, TensorFlow", "", "-", recall_at(got, truth[:nq_tf]),
                     nq_tf / t, nq_tf))
        print(rows[-1], flush=True)
        del tf_index

        for kind, widths, key, extra in (
                ("hnsw", args.ef_search, "ef_search",
                 {"hnsw_m": args.hnsw_m, "ef_construction": args.ef_construction}),
                ("ivf", args.nprobe, "nprobe", {})):
            index = Index(backend="faiss", approximate=kind, **extra).add(gallery, ids)
            start = time.perf_counter()
            index.search(queries[:1], k=10)  # builds (and trains) the structure
            build = time.perf_counter() - start
            if kind == "hnsw":
                setting = f"M={args.hnsw_m}, efC={args.ef_construction}"
            else:
                setting = f"nlist={index._backend.structure.nlist}"
            for width in widths:
                index.set_search_width(**{key: width})
                t, (got, _) = timed(lambda index=index: index.search(queries, k=10), args.runs)
                rows.append((n, kind.upper(), f"{setting}, {key}={width}", f"{build:.1f}",
                             recall_at(got, truth), args.queries / t, args.queries))
                print(rows[-1], flush=True)
            del index
        del flat, gallery

    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")
    print("\n| N | method | parameters | build s | recall@10 | queries/s | queries timed |")
    print("|---|---|---|---|---|---|---|")
    for n, method, params, build, recall, qps, nq in rows:
        print(f"| {n:,} | {method} | {params} | {build} | {recall:.3f} | {qps:,.0f} | {nq} |")


if __name__ == "__main__":
    import results_tables  # benchmarks/results_tables.py: --record writes this run's tables

    sys.exit(results_tables.run(main, "bench_search"))
