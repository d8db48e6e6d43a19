"""Benchmark: Recall@{1,10,100,1000} + MAP@R + R-Precision on random embeddings.

    python benchmarks/bench_eval.py                       # 20k and 60k, all methods
    python benchmarks/bench_eval.py --sizes 20000 --methods tfdml faiss

Random 128-d Gaussian embeddings, uniform random labels (20,000 examples in
2,000 classes; 60,000 in 11,000 classes, the size of the SOP test split),
leave-one-out retrieval with euclidean distance. Methods:

* ``tfdml`` — :func:`tfdml.metrics.retrieval_metrics` (chunked matmul, ranks
  of the positives; time independent of k);
* ``sklearn`` — ``NearestNeighbors(algorithm="brute").kneighbors`` with
  k = 1001, then the metrics from the neighbour labels in NumPy;
* ``faiss`` — ``faiss.IndexFlatL2`` search with k = 1001 (optional: skipped
  when ``import faiss`` fails; ``pip install faiss-cpu``), same NumPy metrics.

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

KS = (1, 10, 100, 1000)
CLASSES = {20_000: 2_000, 60_000: 11_000}


def _rss_mb():
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


def run_one(method, n, classes, dim, chunk_size):
    """Run in the child process; returns the result dict."""
    x, labels = _data(n, classes, dim)
    kmax = max(KS)
    if method == "tfdml":
        from tfdml.metrics import retrieval

        before = _rss_mb()
        t = time.perf_counter()
        res = retrieval.retrieval_metrics(x, labels, metrics=("recall", "map@r", "r_precision"),
                                          ks=KS, chunk_size=chunk_size)
        wall = time.perf_counter() - t
        res.pop("num_excluded_queries")
    elif method == "sklearn":
        from sklearn.neighbors import NearestNeighbors

        before = _rss_mb()
        t = time.perf_counter()
        nn = NearestNeighbors(n_neighbors=kmax + 1, algorithm="brute").fit(x)
        idx = nn.kneighbors(x, return_distance=False)
        res = _metrics_from_neighbours(_drop_self(idx, kmax), labels, KS)
        wall = time.perf_counter() - t
    elif method == "faiss":
        import faiss

        before = _rss_mb()
        t = time.perf_counter()
        index = faiss.IndexFlatL2(dim)
        index.add(x)
        _, idx = index.search(x, kmax + 1)
        res = _metrics_from_neighbours(_drop_self(idx, kmax), labels, KS)
        wall = time.perf_counter() - t
    else:
        raise ValueError(method)
    return {"method": method, "n": n, "classes": classes, "wall_s": wall,
            "peak_rss_mb": _rss_mb(), "rss_before_mb": before, "metrics": res}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[20_000, 60_000])
    p.add_argument("--methods", nargs="+", default=["tfdml", "faiss", "sklearn"])
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--chunk-size", type=int, default=None)
    p.add_argument("--child", nargs=2, metavar=("METHOD", "N"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        method, n = args.child[0], int(args.child[1])
        print(json.dumps(run_one(method, n, CLASSES.get(n, max(2, n // 10)), args.dim,
                                 args.chunk_size)))
        return 0
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    rows = []
    for n in args.sizes:
        for method in args.methods:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", method, str(n),
                   "--dim", str(args.dim)]
            if args.chunk_size:
                cmd += ["--chunk-size", str(args.chunk_size)]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["?"])[-1]
                print(f"{method:8s} n={n}: skipped ({last})", flush=True)
                continue
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            rows.append(row)
            m = row["metrics"]
            grew = row["peak_rss_mb"] - row["rss_before_mb"]
            print(f"{method:8s} n={n:6d} classes={row['classes']:6d}  {row['wall_s']:7.2f} s  "
                  f"peak RSS {row['peak_rss_mb']:7.0f} MB (+{grew:.0f} MB)  " + " ".join(f"{k}={v:.5f}" for k, v in m.items()
                                      if k != "num_queries") + f" queries={m['num_queries']}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
