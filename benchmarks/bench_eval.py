"""Benchmark: Recall@{1,10,100,1000} + MAP@R + R-Precision on random embeddings.

    python benchmarks/bench_eval.py                       # 20k and 60k, all methods
    python benchmarks/bench_eval.py --sizes 20000 --methods tfdml faiss
    python benchmarks/bench_eval.py --methods tfdml matmul faiss --repeat 4   # warm medians, ratios
    python benchmarks/bench_eval.py --sizes 20000 --methods tfdml faiss pml --ks 1   # P@1, MAP@R, R-Precision
    python benchmarks/bench_eval.py --sizes 8000 --classes 98 --methods tfdml_count tfdml_sort --repeat 3   # both paths, P ≈ 100

Random 128-d Gaussian embeddings, uniform random labels (20,000 examples in
2,000 classes; 60,000 in 11,000 classes, the size of the SOP test split),
leave-one-out retrieval with euclidean distance. Methods:

* ``tfdml`` — :func:`tfdml.metrics.retrieval_metrics` (chunked matmul, ranks
  of the positives; time independent of k);
* ``tfdml_count`` / ``tfdml_sort`` — the same with every chunk counted by
  comparisons / every score row sorted, whatever the class sizes (the two
  forms ``count_or_sort`` chooses between, tfdml.kernels.retrieval; with
  ``--classes`` to set P);
* ``sklearn`` — ``NearestNeighbors(algorithm="brute").kneighbors`` with
  k = 1001, then the metrics from the neighbour labels in NumPy;
* ``faiss`` — ``faiss.IndexFlatL2`` search with k = 1001 (optional: skipped
  when ``import faiss`` fails; ``pip install faiss-cpu``), same NumPy metrics;
* ``faiss_search`` — the same faiss search without the metrics: what faiss
  itself costs on this machine, next to ``matmul``;
* ``matmul`` — the distance matrix alone, float32 BLAS by blocks of rows (the
  floor the evaluation is measured against): the last lines print each
  method's time over it;
* ``pml`` — pytorch-metric-learning's ``AccuracyCalculator`` with
  ``k="max_bin_count"`` (the k its MAP@R and R-Precision need; its default,
  every other example, would not fit in memory at 60k), which searches with
  faiss when faiss is installed (optional: ``pip install -e ".[bench]"``).

faiss and scikit-learn search k = max(max(``--ks``), largest R) neighbours,
so that MAP@R and R-Precision are exact whatever ``--ks`` asks for.

Each (method, size) runs in a fresh Python process. Reported: wall time of
the metric computation, *cold* (one call, TF tracing / XLA compilation
included), peak resident memory of the process (ru_maxrss) and its increase
over the process just before the call (imports and data already in memory).
The printed metric values let the methods be compared with each other.
"""

import argparse
import json
import os
import subprocess
import sys
import time
import unittest.mock

# This checkout's tfdml first (also in the child processes), not an installed one.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

KS = (1, 10, 100, 1000)
CLASSES = {20_000: 2_000, 60_000: 11_000}


def _rss_mb():
    """Peak resident memory of this process, MB: VmHWM where /proc has it, else ru_maxrss.

    On Linux ru_maxrss survives fork + exec: a child started by a large parent
    (scaling.py, after the sampler part) reports the parent's peak. VmHWM
    belongs to the new address space only.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _data(n, classes, dim, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, dim)).astype(np.float32), rng.integers(0, classes, n)


def _metrics_from_neighbours(idx, labels, ks):
    """Recall@k, MAP@R, R-Precision (Musgrave et al.) from neighbour lists, self removed."""
    import numpy as np

    counts = np.bincount(labels)
    R = counts[labels] - 1
    keep = R > 0
    rel = labels[idx[keep]] == labels[keep][:, None]
    R = R[keep]
    out = {f"recall@{k}": float(np.mean(rel[:, :k].any(axis=1))) for k in ks}
    if R.max() > rel.shape[1]:
        raise RuntimeError("k is smaller than the largest R: MAP@R needs more neighbours")
    pos = np.arange(1, rel.shape[1] + 1)[None, :]
    in_r = pos <= R[:, None]
    prec = np.cumsum(rel, axis=1) / pos
    out["map@r"] = float(np.mean(np.sum(prec * rel * in_r, axis=1) / R))
    out["r_precision"] = float(np.mean(np.sum(rel * in_r, axis=1) / R))
    out["num_queries"] = int(keep.sum())
    return out


def _drop_self(idx, k):
    """Remove each query's own index from its neighbour row (or the last column)."""
    import numpy as np

    n = idx.shape[0]
    is_self = idx == np.arange(n)[:, None]
    missing = ~is_self.any(axis=1)
    is_self[missing, -1] = True  # self not found: drop the farthest instead
    return idx[~is_self].reshape(n, idx.shape[1] - 1)[:, :k]


def _blocked_distance_matrix(x, chunk_size=None):
    """The cost floor of an exact evaluation: every squared distance, a float32
    matmul by blocks of rows (the chunk tfdml uses, the last block padded so
    that XLA compiles once), each block reduced to its row minimum so that
    nothing is skipped. Returns the minima."""
    import numpy as np
    import tensorflow as tf

    from tfdml.metrics import knn

    global _block_min
    chunk = min(knn.chunk_size_for(x.shape[0], chunk_size), x.shape[0])
    gallery = tf.constant(x)
    norms = tf.reduce_sum(gallery * gallery, axis=1)

    if _block_min is None:  # one function for the process: a warm call is not compiled again
        @tf.function(jit_compile=True)
        def _block_min(block, block_norms, gallery, norms):
            d = block_norms[:, None] + norms[None, :] - 2.0 * tf.matmul(block, gallery, transpose_b=True)
            return tf.reduce_min(d, axis=1)

    out = []
    for start in range(0, x.shape[0], chunk):
        block = x[start:start + chunk]
        size = len(block)
        if size < chunk:
            block = np.concatenate([block, np.zeros((chunk - size, x.shape[1]), x.dtype)])
        out.append(_block_min(tf.constant(block), tf.reduce_sum(block * block, axis=1),
                              gallery, norms).numpy()[:size])
    return np.concatenate(out)


_block_min = None


def _neighbours_needed(labels, ks):
    """k for a neighbour search that gives Recall@ks and exact MAP@R / R-Precision."""
    import numpy as np

    return max(max(ks), int(np.bincount(labels).max()) - 1)


def _compute(method, x, labels, dim, chunk_size, ks=KS):
    kmax = _neighbours_needed(labels, ks)
    if method in ("tfdml", "tfdml_count", "tfdml_sort"):
        from tfdml import kernels
        from tfdml.metrics import retrieval

        table = {}
        if method != "tfdml":  # one form of the chunk counts on CPU, for this call
            form = kernels.Choice("sorting" if method == "tfdml_sort" else "counting")
            table = {"positive_counts": {mode: form for mode in kernels.MODES}}
        with unittest.mock.patch.dict(kernels.CHOICES["CPU"], table):
            res = retrieval.retrieval_metrics(x, labels, metrics=("recall", "map@r", "r_precision"),
                                              ks=ks, chunk_size=chunk_size)
        res.pop("num_excluded_queries")
        return res
    if method == "pml":
        import torch
        from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

        calc = AccuracyCalculator(include=("precision_at_1", "mean_average_precision_at_r", "r_precision"),
                                  k="max_bin_count", device=torch.device("cpu"))
        res = calc.get_accuracy(x, labels)  # query = reference: leave-one-out
        import numpy as np

        return {"recall@1": float(res["precision_at_1"]), "map@r": float(res["mean_average_precision_at_r"]),
                "r_precision": float(res["r_precision"]),
                "num_queries": int(np.sum(np.bincount(labels)[labels] > 1))}
    if method == "matmul":
        _blocked_distance_matrix(x, chunk_size)
        return {}
    if method == "sklearn":
        from sklearn.neighbors import NearestNeighbors

        nn = NearestNeighbors(n_neighbors=kmax + 1, algorithm="brute").fit(x)
        idx = nn.kneighbors(x, return_distance=False)
        return _metrics_from_neighbours(_drop_self(idx, kmax), labels, ks)
    if method in ("faiss", "faiss_search"):
        import faiss

        index = faiss.IndexFlatL2(dim)
        index.add(x)
        _, idx = index.search(x, kmax + 1)
        if method == "faiss_search":
            return {}
        return _metrics_from_neighbours(_drop_self(idx, kmax), labels, ks)
    raise ValueError(method)


def run_one(method, n, classes, dim, chunk_size, repeat=1, ks=KS):
    """Run in the child process; returns the result dict: the first (cold) call's
    time and, with ``repeat`` > 1, the median of the warm calls after it."""
    import statistics

    x, labels = _data(n, classes, dim)
    # Imports outside the timed calls.
    if method in ("faiss", "faiss_search"):
        import faiss  # noqa: F401
    elif method == "pml":
        import torch
        import pytorch_metric_learning.utils.accuracy_calculator  # noqa: F401

        torch.set_num_threads(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    elif method == "sklearn":
        import sklearn.neighbors  # noqa: F401
    else:
        import tfdml.metrics.retrieval  # noqa: F401
    before = _rss_mb()
    times, cpu = [], []
    for _ in range(max(1, repeat)):
        t, c = time.perf_counter(), time.process_time()
        res = _compute(method, x, labels, dim, chunk_size, ks)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    warm = statistics.median(times[1:]) if len(times) > 1 else None
    warm_cpu = statistics.median(cpu[1:]) if len(cpu) > 1 else None
    # cpu_s: CPU time of all the process's threads, less sensitive than wall time to other
    # work on a shared machine.
    return {"method": method, "n": n, "classes": classes, "wall_s": times[0], "warm_s": warm,
            "cpu_s": cpu[0], "warm_cpu_s": warm_cpu,
            "peak_rss_mb": _rss_mb(), "rss_before_mb": before, "metrics": res}


def default_classes(n):
    """Classes for ``n`` examples: the two sizes of the docstring, else n / 10."""
    return CLASSES.get(n, max(2, n // 10))


class ChildFailed(RuntimeError):
    """A child process exited with an error (the message is its last stderr line), e.g.
    an optional library that is not installed."""


def run_in_child(method, n, classes=None, dim=128, repeat=1, chunk_size=None, ks=KS):
    """:func:`run_one` in a fresh Python process (so that the peak memory is this
    call's); returns its result dict or raises :class:`ChildFailed`."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", method, str(n),
           "--dim", str(dim), "--repeat", str(repeat), "--ks", *map(str, ks)]
    if classes:
        cmd += ["--classes", str(classes)]
    if chunk_size:
        cmd += ["--chunk-size", str(chunk_size)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise ChildFailed((proc.stderr.strip().splitlines() or ["?"])[-1])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[20_000, 60_000])
    p.add_argument("--methods", nargs="+", default=["tfdml", "faiss", "sklearn"])
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--chunk-size", type=int, default=None)
    p.add_argument("--repeat", type=int, default=1,
                   help="calls per process: the first is reported cold, the median of the rest warm")
    p.add_argument("--ks", type=int, nargs="+", default=list(KS), help="the k of Recall@k")
    p.add_argument("--child", nargs=2, metavar=("METHOD", "N"), help=argparse.SUPPRESS)
    p.add_argument("--classes", type=int, default=None,
                   help="classes for every size (default: 2,000 at 20k, 11,000 at 60k, else n / 10)")
    args = p.parse_args(argv)
    if args.child:
        method, n = args.child[0], int(args.child[1])
        classes = args.classes or default_classes(n)
        print(json.dumps(run_one(method, n, classes, args.dim, args.chunk_size, args.repeat, tuple(args.ks))))
        return 0
    rows = []
    for n in args.sizes:
        for method in args.methods:
            try:
                row = run_in_child(method, n, classes=args.classes, dim=args.dim, repeat=args.repeat,
                                   chunk_size=args.chunk_size, ks=tuple(args.ks))
            except ChildFailed as err:
                print(f"{method:8s} n={n}: skipped ({err})", flush=True)
                continue
            rows.append(row)
            m = row["metrics"]
            grew = row["peak_rss_mb"] - row["rss_before_mb"]
            warm = f" (warm {row['warm_s']:.2f} s)" if row.get("warm_s") is not None else ""
            print(f"{method:8s} n={n:6d} classes={row['classes']:6d}  {row['wall_s']:7.2f} s{warm}  "
                  f"peak RSS {row['peak_rss_mb']:7.0f} MB (+{grew:.0f} MB)  " + " ".join(f"{k}={v:.5f}" for k, v in m.items()
                                      if k != "num_queries") + (f" queries={m['num_queries']}" if m else ""),
                  flush=True)
    for n in args.sizes:
        by = {r["method"]: r for r in rows if r["n"] == n}
        if "matmul" in by:
            base = by["matmul"]["warm_s"] or by["matmul"]["wall_s"]
            for method, r in by.items():
                t = r["warm_s"] or r["wall_s"]
                print(f"n={n}: {method} / distance matrix = {t / base:.2f}")
    return 0


if __name__ == "__main__":
    import results_tables  # benchmarks/results_tables.py: --record writes this run's tables

    sys.exit(results_tables.run(main, "bench_eval"))
